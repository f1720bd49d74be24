"""Which kernels the engine runs: the compiled ones of the optional C extension ``storage_engine.record._speedups``
(``_speedups.c`` and the kernels listed in ``_speedups.h``, built by setup.py when a compiler is present) or their
pure-Python twins. This module is the one place that decides; every caller asks it.

* ``COMPILED``: the extension module, or None when it was not built.
* ``IMPLEMENTATION``: ``"c"`` when the compiled kernels run, ``"python"`` when the extension is missing or the
  environment variable ``STORAGE_ENGINE_PURE_PYTHON`` is set to anything but ``""`` or ``"0"``.
* ``KERNELS``: ``COMPILED`` when ``IMPLEMENTATION`` is ``"c"``, else None. The batch-level kernels (compaction's
  record filter and key map, the recovery walk, the key columns and key-map stages of the Spark jobs) read
  ``kernels.KERNELS`` at call time and take their Python twin when it is None; tests switch it to run both.
  The per-record loops of :mod:`storage_engine.record.records` (``decode_records``, ``encode_records``) are bound
  once, at import, by the same choice.

tests/storage_engine/record/test_speedups.py and the differential tests of the kernels hold both implementations to
identical results.
"""
from __future__ import annotations

import os
from types import ModuleType

try:
    from storage_engine.record import _speedups  # type: ignore[attr-defined]
except ImportError:  # built without a compiler: pure Python only
    _speedups = None

COMPILED: ModuleType | None = _speedups

IMPLEMENTATION = ("c" if COMPILED is not None and os.environ.get("STORAGE_ENGINE_PURE_PYTHON", "") in ("", "0")
                  else "python")

KERNELS: ModuleType | None = COMPILED if IMPLEMENTATION == "c" else None
