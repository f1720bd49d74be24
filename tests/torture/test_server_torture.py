"""A short run of the broker's kill -9 torture (``python -m torture --server``; RELIABILITY.md records 100 trials).

3 trials of idempotent librdkafka producers in their own processes while the broker dies by SIGKILL, at random
moments and at named steps of the engine (see :mod:`torture.server`), and restarts on the same port; after each,
every acknowledged record must be in the log exactly once at its acknowledged offset, in its producer's order,
and ``verify`` must pass after a clean stop. Beside them a topic admin creates, extends and deletes topics while the
broker dies (at random, or at a ``topic.*`` step): every topic must be whole and every acknowledged topic change
durable. And (torture.server_fetch) a bare Fetch client re-reads the topics through the dying broker while another
process compacts, truncates and deletes one of them: every response must be whole, CRC-valid batches in order. A
failing trial's dir is kept under the test's temporary directory.
"""
from __future__ import annotations

import pytest

from torture import server, server_fetch

pytestmark = [pytest.mark.slow, pytest.mark.kills]

TRIALS = 3


def test_three_server_trials_lose_and_duplicate_no_acknowledged_record(tmp_path):
    lines: list[str] = []
    totals = server.run(TRIALS, seed=12, keep_root=tmp_path, out=lines.append)
    assert totals["trials"] == TRIALS
    assert totals["violations"] == 0, "\n".join(lines)
    assert totals["acknowledged"] == totals["produced"] >= TRIALS * 2 * 3000, "every record was delivered"
    assert totals["kills"] + sum(totals["steps_reached"].values()) >= TRIALS, server.summary(totals)
    assert totals["topic_ops"] >= TRIALS * 4, "every trial's admin had its topic operations answered"
    checks = server_fetch.TOTALS
    assert checks["trials with"] == 0 or checks["responses checked"] > 0, server_fetch.summary()
