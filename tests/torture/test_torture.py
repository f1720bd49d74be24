"""A short run of the kill -9 torture harness (``make torture`` runs 1,000 trials; RELIABILITY.md records them).

30 trials (and 8 in threads mode) of real processes (a writer, a cleaner, a maintenance loop, a reader) on one log dir, killed with
SIGKILL at random moments and at named steps of every protocol; after each, a reopen, ``verify`` and a check of
every acknowledged record (see :mod:`torture.harness`). Any violation fails the test and keeps the trial's log dir
under the test's temporary directory.
"""
from __future__ import annotations

import pytest

from torture import harness

pytestmark = pytest.mark.slow

TRIALS = 30


def test_thirty_torture_trials_lose_no_acknowledged_record(tmp_path):
    lines: list[str] = []
    totals = harness.run(TRIALS, seed=10, keep_root=tmp_path, out=lines.append)
    assert totals["trials"] == TRIALS
    assert totals["violations"] == 0, "\n".join(lines)
    assert totals["acknowledged"] > TRIALS * 9000, "every trial checks its prefill and what the writer added"
    assert sum(totals["kills"].values()) >= TRIALS, totals["kills"]
    assert sum(totals["steps_reached"].values()) >= TRIALS // 2, totals["steps_reached"]


def test_threads_mode_trials_lose_no_acknowledged_record(tmp_path):
    """``make torture THREADS=3``: the writer process runs three writer threads, two reader threads, a cleaner and a
    maintenance thread on one manager, beside the cleaner, maintenance and reader processes; kills as above."""
    lines: list[str] = []
    totals = harness.run(8, seed=11, keep_root=tmp_path, out=lines.append, threads=3)
    assert totals["trials"] == 8
    assert totals["violations"] == 0, "\n".join(lines)
    assert totals["acknowledged"] > 8 * 9000
    assert sum(totals["kills"].values()) >= 8, totals["kills"]
