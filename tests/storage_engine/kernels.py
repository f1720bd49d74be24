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


def split_by_process_fixture():
    """For a module whose tests do their work in child processes (writers, movers, cleaners killed by signals): an
    autouse ``kernels`` that runs each test once, with this process on the pure-Python twins. The children run the
    default kernels (the compiled ones when built: they are separate interpreters, which the parameter of
    :func:`kernels_fixture` never reached), so a second run per implementation only repeated the same child
    processes; in this one run the compiled kernels write, recover and read in the children and the Python twins
    reopen, recover and read back the same files here."""
    @pytest.fixture(autouse=True)
    def kernels(monkeypatch):
        use(monkeypatch, "python")
        return "python"
    return kernels


# The same single run (this process on the Python twins, the children on the default kernels) for one test of a
# module whose other tests run once per implementation: its work is in child processes.
child_processes_once = pytest.mark.parametrize("kernels", ["python"], indirect=True)
