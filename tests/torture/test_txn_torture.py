"""A short run of the transaction kill -9 torture (``python -m torture --txn``; RELIABILITY.md records 100 trials).

2 trials of confluent-kafka consume-transform-produce workers (a read_committed consumer in a group and a
transactional producer per worker slot, offsets sent to each transaction) while the broker dies by SIGKILL, at
random moments and at named steps of the engine, and restarts on the same port, and while workers are killed and
restarted in their slot or stopped and replaced (zombies fenced by the new epoch); see :mod:`torture.txn`. After
each, every input record must have exactly one committed output and nothing else, read_committed through the
engine and through a consumer, and ``verify`` must pass after a clean stop. A failing trial's dir is kept under the
test's temporary directory.
"""
from __future__ import annotations

import pytest

from torture import txn

pytestmark = [pytest.mark.slow, pytest.mark.kills]

TRIALS = 2


def test_two_txn_trials_commit_every_input_exactly_once(tmp_path):
    lines: list[str] = []
    totals = txn.run(TRIALS, seed=7, keep_root=tmp_path, out=lines.append)
    assert totals["trials"] == TRIALS
    assert totals["violations"] == 0, "\n".join(lines)
    assert totals["committed"] == totals["inputs"] >= TRIALS * 2000, txn.summary(totals)
    assert totals["kills"] + sum(totals["steps_reached"].values()) >= TRIALS, txn.summary(totals)
    assert totals["worker_kills"] + totals["zombies"] >= TRIALS, txn.summary(totals)
