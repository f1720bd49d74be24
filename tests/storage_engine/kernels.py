"""Running engine tests under both implementations of the batch kernels (``kernels.KERNELS``): the compiled ones of
``storage_engine/record/_speedups`` and the pure-Python twins (``KERNELS = None``). A package's conftest turns
:func:`kernels_fixture` into an autouse fixture, so every test of that package runs once per implementation."""
from __future__ import annotations

import pytest

from storage_engine.record import kernels as record_kernels

NOT_BUILT = "storage_engine.record._speedups is not built (no C compiler when the package was installed)"
PARAMS = [pytest.param("python", id="python"),
          pytest.param("c", id="c", marks=pytest.mark.skipif(record_kernels.COMPILED is None, reason=NOT_BUILT))]


def use(monkeypatch, name: str) -> None:
    monkeypatch.setattr(record_kernels, "KERNELS", record_kernels.COMPILED if name == "c" else None)


def kernels_fixture():
    @pytest.fixture(autouse=True, params=PARAMS)
    def kernels(request, monkeypatch):
        use(monkeypatch, request.param)
        return request.param
    return kernels
