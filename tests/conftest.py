"""Suite-wide fixtures and rules. Airflow-specific set-up lives in tests/airflow/conftest.py.

Every test carries at least one of the markers that say what it needs and how long it takes (``unit``, ``slow``,
``spark``, ``airflow``, ``e2e``; see ``[tool.pytest.ini_options]`` in pyproject.toml): a test without one fails
the collection of its module, so ``make test-fast`` and the other selections by marker never run it by accident.

``make test`` runs the suite on three workers (pytest-xdist, ``-n 3 --dist loadfile --no-loadscope-reorder``): a
worker runs a whole test file, so a fixture wider than a test (module or session scope: an api-server, a broker, a
Spark session, sample logs) is built once, and the tests sharing it never run on two workers at once.
tests/test_suite_rules.py checks that each such fixture serves one file (a session fixture shared by two files would
be built on each worker that runs one), but for :data:`PER_WORKER_FIXTURES`. The workers take the files heaviest
first, by tests/file_weights.json (see tests/file_weights.py): the long files start early and the short ones fill
the end.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from tests.file_weights import DEFAULT_WEIGHTS, load_weights

# Session fixtures that each worker builds for itself, cheap enough that keeping their tests on one worker (every
# Airflow test, every tiered test) would cost more than building them twice: the Airflow metadata DB of
# tests/airflow/conftest.py and the SeaweedFS of tests/tiered/conftest.py (a few seconds to start); and the console
# files' sample store (tests/airflow/console_sample.py), built once per worker instead of once per file, each file
# getting it back as built.
PER_WORKER_FIXTURES = frozenset({"airflow_db", "weed", "console_sample"})

# The markers that classify a test; ``kills`` (a test whose processes die by a signal) is said on top of one.
CATEGORY_MARKERS = ("unit", "slow", "spark", "airflow", "e2e", "tiered")


def unmarked(nodes: Iterable[Any], *, into_classes: bool = False) -> list[str]:
    """The node ids of the test items among ``nodes`` (and, ``into_classes``, in the classes among them) that
    carry none of :data:`CATEGORY_MARKERS`."""
    out = []
    for node in nodes:
        if isinstance(node, pytest.Item):
            if not any(mark.name in CATEGORY_MARKERS for mark in node.iter_markers()):
                out.append(node.nodeid)
        elif into_classes and isinstance(node, pytest.Class):
            out += unmarked(node.collect(), into_classes=True)
    return out


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A module (or class) holding a test without a category marker fails to collect, naming each such test
    (those of the module's classes too: a module that fails to collect is not looked into further)."""
    report = yield
    if report.passed and isinstance(collector, (pytest.Module, pytest.Class)):
        missing = unmarked(report.result or [])
        if missing:
            missing += unmarked([n for n in report.result if isinstance(n, pytest.Class)], into_classes=True)
            report.outcome = "failed"
            report.longrepr = "\n".join(
                [f"{len(missing)} test(s) without a marker saying what they need: each test must carry one of "
                 f"{', '.join(CATEGORY_MARKERS)} (module level: pytestmark = pytest.mark.unit; see the markers in "
                 "pyproject.toml)"] + [f"  unmarked: {nodeid}" for nodeid in missing])
            report.result = []
    return report


def shared_fixtures(item: pytest.Item) -> list[str]:
    """``"<where it is defined>::<name>"`` of each fixture of the suite wider than one test that ``item`` uses
    (pytest's own and plugins' fixtures, and :data:`PER_WORKER_FIXTURES`, left out)."""
    out = []
    for name, defs in getattr(item, "_fixtureinfo").name2fixturedefs.items():
        fixture = defs[-1]                                  # the definition this item gets (the closest one)
        if (fixture.scope != "function" and name not in PER_WORKER_FIXTURES
                and fixture.baseid.split("/", 1)[0] == "tests"):
            out.append(f"{fixture.baseid}::{name}")
    return out


def file_kind(item: pytest.Item) -> int:
    """0 for a test using a fixture wider than a test (a server, a cluster, sample logs), 1 for a test of a category
    that starts processes or servers, 2 for an in-process ``unit`` test."""
    if shared_fixtures(item):
        return 0
    return 1 if any(item.get_closest_marker(name) for name in CATEGORY_MARKERS if name != "unit") else 2


def worker_order(items: list[pytest.Item], weights: dict[str, float]) -> dict[str, float]:
    """{test file: its weight}: its seconds in ``weights`` (tests/file_weights.json), or for a file not there the
    default of its kind (:data:`tests.file_weights.DEFAULT_WEIGHTS`, the kind of its heaviest test)."""
    kinds: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        kinds[path] = min(kinds.get(path, 2), file_kind(item))
    return {path: weights.get(path, DEFAULT_WEIGHTS[kind]) for path, kind in kinds.items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker (the workers collect, the controller does not): the test files heaviest first
    (:func:`worker_order`; a stable sort: collection order among equal weights, a file's tests together), so the
    long files start early and the short ones fill the end of the run (tests/file_weights.py says why). The
    controller keeps that order with ``--no-loadscope-reorder``; by default it would send the files with the most
    tests first, and a long file of a few tests (a cluster, a torture run) last."""
    if hasattr(config, "workerinput"):
        order = worker_order(items, load_weights(config.rootpath))
        items.sort(key=lambda item: -order[item.nodeid.split("::", 1)[0]])


@pytest.fixture
def log_dir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d
