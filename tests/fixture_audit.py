"""A pytest plugin for tests/test_suite_rules.py: after collection, writes {fixture: [test files using it]} for
each fixture of the suite wider than one test (:func:`tests.conftest.shared_fixtures`) as JSON to
``$FIXTURE_AUDIT_OUT``. It looks at every test collected, those a ``-m`` selection leaves out too (it runs beside
tests/kill_audit.py, in the same collection of the suite)."""
from __future__ import annotations

import json
import os

import pytest

from tests.conftest import shared_fixtures


@pytest.hookimpl(tryfirst=True)     # before ``-m`` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    files: dict[str, set[str]] = {}
    for item in items:
        for fixture in shared_fixtures(item):
            files.setdefault(fixture, set()).add(item.nodeid.split("::", 1)[0])
    with open(os.environ["FIXTURE_AUDIT_OUT"], "w") as f:
        json.dump({fixture: sorted(paths) for fixture, paths in files.items()}, f, indent=1)
