"""``make mutation`` keeps working: a smoke run goes through every step of a real one (copy, mutate, clean pass,
forced failure, the mutants, results, table) on the few mutants of one small function."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.slow

HANG_GUARD_S = 900   # not a speed limit: a run that never ends must fail the suite rather than hang it


def test_smoke_run_judges_every_mutant_with_tests_that_ran(tmp_path):
    out = tmp_path / "smoke.json"
    proc = subprocess.run([sys.executable, "-m", "mutation", "--smoke", "--max-children", "2",
                           "--out", str(out), "--scratch", str(tmp_path / "scratch")],
                          cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    [group] = doc["groups"]
    mutants = group["mutants"]
    assert len(mutants) >= 5
    assert all(m["module"] == "storage_engine.segment.checkpoint" and m["function"] == "_java_int"
               for m in mutants)
    # Each mutant was judged by its tests: none without tests, none whose session ran no test
    # ("suspicious", see mutation/pytest_plugin.py), none left unchecked.
    assert {m["status"] for m in mutants} <= {"killed", "survived"}, mutants
    assert any(m["status"] == "killed" for m in mutants)
    [row] = doc["modules"]
    assert row["mutants"] == len(mutants) and row["killed"] + row["survived"] == len(mutants)
    assert "| storage_engine.segment.checkpoint " in proc.stdout
    assert doc["meta"]["mutmut"] == "3.8.1"

