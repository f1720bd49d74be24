"""Suite-wide fixtures and rules. Airflow-specific set-up lives in tests/airflow/conftest.py.

Every test carries at least one of the markers that say what it needs and how long it takes (``unit``, ``slow``,
``spark``, ``airflow``, ``e2e``; see ``[tool.pytest.ini_options]`` in pyproject.toml): a test without one fails
the collection of its module, so ``make test-fast`` and the other selections by marker never run it by accident.

``make test`` runs the suite on two workers (pytest-xdist, ``-n 2 --dist loadgroup``). A fixture wider than a test
(module, package or session scope: an api-server, a broker, a Spark session, sample logs) is built once per worker
that uses it, so :func:`pytest_collection_modifyitems` puts every test that uses one in one ``xdist_group`` with the
other tests of that fixture: each is built once, and the tests sharing it never run on two workers at once. Tests
that share no such fixture are spread over the workers one by one.
"""
from __future__ import annotations

import pytest

# Session fixtures that each worker builds for itself, cheap enough that grouping their tests (every Airflow test)
# would cost more than building them twice: the Airflow metadata DB of tests/airflow/conftest.py.
PER_WORKER_FIXTURES = frozenset({"airflow_db"})

# The markers that classify a test; ``kills`` (a test whose processes die by a signal) is said on top of one.
CATEGORY_MARKERS = ("unit", "slow", "spark", "airflow", "e2e")


def unmarked(nodes: list, *, into_classes: bool = False) -> list[str]:
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


def xdist_groups(items: list[pytest.Item]) -> dict[str, str]:
    """{nodeid: group} for the items that use a shared fixture (:func:`shared_fixtures`) or carry an explicit
    ``xdist_group`` mark: tests linked by a fixture or a group name, directly or through other tests, get one group,
    named after its first fixture or name in sorted order."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keys = {}
    for item in items:
        own = shared_fixtures(item) + [f"group:{mark.args[0] if mark.args else mark.kwargs.get('name', 'default')}"
                                       for mark in item.iter_markers("xdist_group")]
        if own:
            keys[item.nodeid] = own
            for key in own[1:]:
                a, b = root(own[0]), root(key)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {nodeid: root(own[0]) for nodeid, own in keys.items()}


@pytest.hookimpl(tryfirst=True)     # before xdist's worker reads the marks (it suffixes node ids with the group)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One ``xdist_group`` mark per test that shares a fixture (:func:`xdist_groups`); only under pytest-xdist."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = xdist_groups(items)
    for item in items:
        node: pytest.Node | None = item
        while node is not None:                             # explicit marks are replaced by the joined group
            node.own_markers[:] = [m for m in node.own_markers if m.name != "xdist_group"]
            node = node.parent
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))


@pytest.fixture
def log_dir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d
