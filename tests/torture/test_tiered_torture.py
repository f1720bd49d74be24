"""A short run of the tiered kill -9 torture (``python -m torture --tiered``; RELIABILITY.md records its trials).

Two trials of an appender, a looping tier job, a consumer reading from offset 0 (local and remote), a ``serve``
broker and a Kafka client (librdkafka) reading from offset 0 through it, on a log dir whose topics are tiered into
a real SeaweedFS, while the tier process, the appender, the consumers, the broker or the object store itself die
by SIGKILL (at random moments and at named steps, see :mod:`torture.tiered`); after each, one more clean tier run,
then every acknowledged record must be readable with its bytes, locally or remotely, and the bucket must hold
exactly the objects of the finished remote segments. A failing trial's dir is kept under the test's temporary
directory.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from torture import tiered

pytestmark = [pytest.mark.tiered, pytest.mark.kills]

TRIALS = 2


def test_two_tiered_trials_lose_no_acknowledged_record_and_leave_no_untracked_object(tmp_path: Path) -> None:
    lines: list[str] = []
    totals = tiered.run(TRIALS, seed=39, keep_root=tmp_path / "kept", out=lines.append, weed_dir=tmp_path / "weed")
    assert totals["trials"] == TRIALS
    assert totals["violations"] == 0, "\n".join(lines)
    assert totals["acknowledged"] > TRIALS * 500, "every trial checks its prefill and what the appender added"
    assert totals["remote_read"] > 0, "records were read back from the object store"
    assert totals["broker"]["remote"] > 0, "the Kafka client read records of the remote part through the broker"
    assert sum(totals["kills"].values()) >= TRIALS, totals["kills"]
