"""A pytest plugin loaded into every pytest session of a mutation run (``-p``), for two things mutmut relies on.

1. Same test ids in every session of one process. mutmut runs pytest several times in one process (a clean
   pass that records which test calls which function, then one forked session per mutant, naming the tests
   by node id). pytest caches the ids it generated for ``parametrize(..., ids=[...])`` on the mark, and the
   next session of the process escapes that cached text again: an id holding a backslash (``b'0\\n'``) comes
   back as ``b'0\\\\n'``, and the node id recorded in the first session is "not found" in the next.
   Clearing the cache before pytest's own ``pytest_generate_tests`` makes every session compute the ids afresh.

2. A session that ran no test is never counted as a kill. mutmut counts any exit status but 0 as a killed
   mutant, including pytest's "usage error" (a node id not found) and "no tests collected". In a mutant's
   session those now end the process with :data:`NOT_RUN_EXIT`, which mutmut reports as "suspicious", so
   the report shows them instead of a score that is too high.
"""
from __future__ import annotations

import os

import pytest

NOT_RUN_EXIT = 97
_NOT_RUN = (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for marker in metafunc.definition.iter_markers(name="parametrize"):
        source = getattr(marker, "_param_ids_from", None)
        if source is not None and getattr(source, "_param_ids_generated", None) is not None:
            object.__setattr__(source, "_param_ids_generated", None)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "") and exitstatus in _NOT_RUN:
        os._exit(NOT_RUN_EXIT)
