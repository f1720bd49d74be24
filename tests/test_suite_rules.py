"""Rules of the test suite itself: every test carries a marker (tests/conftest.py refuses to collect one without),
``make test-fast`` runs no test whose processes die by a signal (tests/kill_audit.py finds them), and every fixture
wider than a test serves one test file, so ``make test``'s two workers (``--dist loadfile``) build it once."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import CATEGORY_MARKERS
from tests.file_weights import DEFAULT_WEIGHTS, WEIGHTS_FILE, load_weights, weights_from_junit
from tests.paths import REPO


def run_pytest(*args: str, cwd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=600)


@pytest.mark.unit
def test_a_test_without_a_marker_fails_collection_naming_it(tmp_path):
    """The suite's own conftest, loaded as a plugin, on a scratch folder: a module holding an unmarked test is a
    collection error that names the test; the same module with every test marked collects."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n"
                                         + "".join(f"    {name}\n" for name in CATEGORY_MARKERS))
    (tmp_path / "test_scratch.py").write_text(textwrap.dedent("""\
        import pytest

        @pytest.mark.unit
        def test_marked():
            pass

        def test_forgot_its_marker():
            pass

        class TestGroup:
            @pytest.mark.parametrize("n", [1, 2])
            def test_unmarked_method(self, n):
                pass
        """))
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    args = ("--collect-only", "-q", "-p", "tests.conftest", "--rootdir", str(tmp_path), "test_scratch.py")
    proc = run_pytest(*args, cwd=str(tmp_path), env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "ERROR collecting test_scratch.py" in out, out
    assert "unmarked: test_scratch.py::test_forgot_its_marker" in out, out
    assert "unmarked: test_scratch.py::TestGroup::test_unmarked_method[1]" in out, out
    assert "unmarked: test_scratch.py::test_marked" not in out, out

    (tmp_path / "test_scratch.py").write_text("import pytest\n\npytestmark = pytest.mark.slow\n\n\n"
                                              "def test_marked_by_its_module():\n    pass\n")
    proc = run_pytest(*args, cwd=str(tmp_path), env=env)
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout + proc.stderr
    assert "test_scratch.py::test_marked_by_its_module" in proc.stdout


def fast_selection() -> str:
    """The ``-m`` expression of ``make test-fast``."""
    with open(REPO / "Makefile") as f:
        found = re.search(r'^test-fast:.*\n\t.*pytest.* -m "([^"]+)"', f.read(), re.M)
    assert found, "make test-fast selects its tests with -m"
    return found.group(1)


@pytest.fixture(scope="module")
def suite_audit(tmp_path_factory) -> dict:
    """One collection of the whole suite, in a second process, as ``make test-fast`` selects it, with the plugins
    tests/kill_audit.py and tests/fixture_audit.py: {"kills": their audit, "fixtures": theirs}."""
    out = tmp_path_factory.mktemp("audit")
    proc = run_pytest("--collect-only", "-q", "-p", "tests.kill_audit", "-p", "tests.fixture_audit", "-m",
                      fast_selection(), cwd=str(REPO),
                      env={"KILL_AUDIT_OUT": str(out / "kills.json"), "FIXTURE_AUDIT_OUT": str(out / "fixtures.json")})
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"kills": json.loads((out / "kills.json").read_text()),
            "fixtures": json.loads((out / "fixtures.json").read_text())}


@pytest.mark.slow   # collects the whole suite in a second process (about 10 s, once for the module)
def test_make_test_fast_runs_no_test_whose_processes_die_by_a_signal(suite_audit):
    """Collect what ``make test-fast`` would run and look into each test, its fixtures and the suite's helpers and
    scripts they name for a kill, a signal or an armed crash point: there must be none. Such a test is marked
    ``kills`` (or ``slow``). The tests left out must include some that kill, or the look finds nothing anywhere."""
    audit = suite_audit["kills"]
    offenders = [f"{nodeid}: {'; '.join(evidence[:2])}" for nodeid, evidence in sorted(audit["selected"].items())]
    assert not offenders, ("make test-fast would run tests whose processes die by a signal; mark them "
                           "@pytest.mark.kills:\n" + "\n".join(offenders))
    left_out = {nodeid.split("::")[0] for nodeid in audit["deselected"]}
    assert {"tests/storage_engine/log/test_log_rules.py", "tests/storage_engine/log/test_txn_processes.py",
            "tests/torture/test_torture.py"} <= left_out, sorted(left_out)


@pytest.mark.slow   # the collection of the whole suite above
def test_every_fixture_wider_than_a_test_serves_one_test_file(suite_audit):
    """``make test`` runs on two workers with ``--dist loadfile``: a worker runs whole files, so a module or session
    fixture (an api-server, a broker, a Spark session) is built once only if one file uses it. One used by two
    files would be built on each worker that runs one of them: share it within a file, or list it in
    ``PER_WORKER_FIXTURES`` if building it twice is cheap."""
    files = suite_audit["fixtures"]
    assert "tests/airflow/test_storage_view.py::server" in files, "the api-server of the Storage view is one"
    shared = {fixture: paths for fixture, paths in files.items() if len(paths) > 1}
    assert not shared, f"fixtures wider than a test used by several files: {shared}"


@pytest.mark.slow   # a pytest run on make test's workers in a scratch folder (about 5 s)
def test_on_make_tests_workers_the_heaviest_files_run_first_and_each_fixture_is_built_once(tmp_path):
    """The suite's conftest, loaded as a plugin, on a scratch folder run as ``make test`` runs the suite (its worker
    count and distribution): each worker takes the files heaviest first, by the folder's tests/file_weights.json (a
    unit file it names as the longest goes first though collected first among equals) and, for the files it does
    not name, by their kind (the file whose tests share a module fixture, collected last, before the e2e file, the
    unit file last); the module fixture is built once, on one worker. The run's JUnit XML gives back a weight for
    every file."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n"
                                         + "".join(f"    {name}\n" for name in CATEGORY_MARKERS))
    log = tmp_path / "ran.txt"
    note = (f"def note(what):\n    with open({str(log)!r}, 'a') as f:\n"
            "        f.write(what + ' ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    for name, marker in (("a", "unit"), ("b", "unit"), ("c", "e2e")):
        (tmp_path / f"test_{name}.py").write_text(
            f"import os\nimport pytest\n\npytestmark = pytest.mark.{marker}\n\n{note}\n\n"
            f"@pytest.mark.parametrize('n', range(10))\ndef test_{name}(n):\n    note('{name}')\n")
    (tmp_path / "tests").mkdir()            # the suite's fixtures are those defined under tests/
    (tmp_path / "tests" / "test_z.py").write_text(
        f"import os\nimport pytest\n\npytestmark = pytest.mark.e2e\n\n{note}\n\n"
        "@pytest.fixture(scope='module')\ndef server():\n    note('built')\n    yield\n\n\n"
        "@pytest.mark.parametrize('n', range(6))\ndef test_z(server, n):\n    note('z')\n")
    (tmp_path / WEIGHTS_FILE).write_text(json.dumps({"test_b.py": DEFAULT_WEIGHTS[0] * 10}))
    with open(REPO / "Makefile") as f:
        found = re.search(r"^test:.*\n(?:\t.*\n)*?\t.*pytest -q (.*)$", f.read(), re.M)
    assert found, "make test runs pytest"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    junit = tmp_path / "junit.xml"
    proc = run_pytest("-q", "-p", "tests.conftest", *found.group(1).split(), "--rootdir", str(tmp_path),
                      f"--junitxml={junit}", cwd=str(tmp_path), env=env)
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [line.split() for line in log.read_text().splitlines()]
    assert [what for what, _ in ran].count("built") == 1, ran
    assert len({worker for what, worker in ran if what in ("built", "z")}) == 1, ran
    assert len(ran) == 1 + 6 + 30, ran
    by_worker: dict[str, list[str]] = {}
    for what, worker in ran:
        by_worker.setdefault(worker, []).append(what)
    workers = re.search(r"-n (\d+)", found.group(1))
    assert workers, "make test names its worker count"
    assert len(by_worker) >= 2 and set(by_worker) <= {f"gw{i}" for i in range(int(workers.group(1)))}, \
        f"more than one of make test's workers ran tests: {by_worker}"
    rank = {"b": 0, "built": 1, "z": 1, "c": 2, "a": 3}
    for whats in by_worker.values():
        order = [rank[what] for what in whats]
        assert order == sorted(order), by_worker     # b (the heaviest), the server's file, the e2e one, a
    assert "b" in [whats[0] for whats in by_worker.values()], by_worker    # among the first two files handed out
    weights = weights_from_junit([junit], tmp_path)
    assert sorted(weights) == ["test_a.py", "test_b.py", "test_c.py", "tests/test_z.py"], weights


@pytest.mark.unit
def test_the_weight_table_names_test_files_of_the_suite():
    """tests/file_weights.json (the order of ``make test``'s files) names only test files that exist, each with a
    weight in seconds, and most of the suite's files: a file renamed or removed must leave it too, and new files
    (their kind's default weight) call for a fresh table (``python -m tests.file_weights``) before they are many."""
    weights = load_weights(REPO)
    files = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")}
    assert weights and all(seconds >= 0 for seconds in weights.values()), weights
    assert sorted(set(weights) - files) == [], "tests/file_weights.json names files that are gone"
    assert len(weights) >= 0.9 * len(files), sorted(files - set(weights))


@pytest.mark.unit
def test_scripts_run_by_path_import_nothing_from_the_tests_package():
    """The processes the tests start by a file's path (``python tests/server/txn_worker.py``, the scripts of
    tests/storage_engine/procs/) have their own folder as sys.path[0], not the repository: an import of the
    ``tests`` package works where PYTHONPATH happens to name the repository and fails on a fresh clone."""
    import ast

    scripts = [REPO / "tests" / "server" / "txn_worker.py", *sorted((REPO / "tests" / "storage_engine" / "procs")
                                                                    .glob("*.py"))]
    offending = []
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            offending += [f"{path.relative_to(REPO)}:{node.lineno} imports {n}" for n in names
                          if n == "tests" or n.startswith("tests.")]
    assert len(scripts) > 5 and offending == [], offending


@pytest.mark.unit
def test_the_console_browser_tests_launch_chromium_and_log_in_through_one_helper():
    """tests/airflow/browser.py launches Debian's chromium and logs a browser context in to an api-server (the UI's
    token cookie); a test file of tests/airflow doing either again repeats set-up that was once copied nine times
    and had drifted (tests/cluster logs in to the cluster's api-server with its own token: its own harness)."""
    launch, cookie = ".chromium" + ".launch(", '"_' + 'token"'
    helper = REPO / "tests" / "airflow" / "browser.py"
    assert launch in helper.read_text() and cookie in helper.read_text()
    offenders = [str(path.relative_to(REPO)) for path in sorted((REPO / "tests" / "airflow").glob("*.py"))
                 if path != helper and (launch in path.read_text() or cookie in path.read_text())]
    assert offenders == [], f"launch chromium and log in with tests/airflow/browser.py: {offenders}"
