"""The order in which ``make test``'s workers take the test files: longest first.

``make test`` runs the suite on three workers with ``--dist loadfile``: a worker takes a whole file, the next file
when it is almost done with the last. The files are handed out in the order the workers collect them
(``--no-loadscope-reorder``), and tests/conftest.py sorts that collection by each file's weight, its seconds in a
recent full run, heaviest first (longest processing time first: the long files, a cluster, a torture run, the
README walkthrough, start while the other workers have plenty of short ones to run beside them, and the short
files fill the end, so no worker runs a long file alone at the end).

The weights are :data:`WEIGHTS_FILE` (``{"tests/...py": seconds}``), written from a run's JUnit XML by::

    python -m pytest -n 3 --dist loadfile --no-loadscope-reorder --junitxml=var/junit.xml
    python -m tests.file_weights var/junit.xml

A file not in the table (a new one) gets the weight of its kind (:data:`DEFAULT_WEIGHTS`). Only the order depends
on the weights, never what runs: a stale table makes the run longer, not different.
"""
from __future__ import annotations

import json
import pathlib
import sys
import xml.etree.ElementTree as ET

WEIGHTS_FILE = pathlib.Path("tests") / "file_weights.json"   # under the rootdir

# Seconds assumed for a file the table does not name, by its kind (tests/conftest.py's worker_order): 0, a fixture
# wider than a test (a server, a cluster, sample logs); 1, a test of a category that starts processes; 2, in-process
# ``unit`` tests only. About the medians of each kind in the table.
DEFAULT_WEIGHTS = {0: 30.0, 1: 8.0, 2: 1.0}


def load_weights(rootdir: pathlib.Path) -> dict[str, float]:
    """{test file relative to ``rootdir``: seconds} from ``rootdir``'s :data:`WEIGHTS_FILE` ({} without one)."""
    path = rootdir / WEIGHTS_FILE
    if not path.exists():
        return {}
    table = json.loads(path.read_text())
    if not isinstance(table, dict) or not all(isinstance(v, (int, float)) for v in table.values()):
        raise ValueError(f"{path}: expected an object of test file -> seconds")
    return {str(k): float(v) for k, v in table.items()}


def file_of(classname: str, rootdir: pathlib.Path) -> str | None:
    """The test file of a JUnit ``classname`` (``tests.airflow.test_console`` or ``tests.x.test_y.TestZ``)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (rootdir / candidate).is_file():
            return candidate
    return None


def weights_from_junit(paths: list[pathlib.Path], rootdir: pathlib.Path) -> dict[str, float]:
    """{test file: the sum of its test cases' seconds (set-up, call and teardown)} over the JUnit XML ``paths``."""
    weights: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            file = file_of(case.get("classname", ""), rootdir)
            if file is None:
                raise ValueError(f"{path}: no test file for classname {case.get('classname')!r}")
            weights[file] = weights.get(file, 0.0) + float(case.get("time") or 0.0)
    return {file: round(seconds, 1) for file, seconds in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))}


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.file_weights JUNIT.xml [...]  (writes tests/file_weights.json)", file=sys.stderr)
        return 2
    rootdir = pathlib.Path(__file__).resolve().parent.parent
    weights = weights_from_junit([pathlib.Path(p) for p in argv], rootdir)
    (rootdir / WEIGHTS_FILE).write_text(json.dumps(weights, indent=0) + "\n")
    print(f"{len(weights)} files, {sum(weights.values()):.0f} s in all -> {WEIGHTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
