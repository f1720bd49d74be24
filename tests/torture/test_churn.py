"""The server torture's churn (torture.churn): a truncation it arms to die at a rewrite step cuts at a batch's
start, so it always rewrites. A target in an offset gap the cleaner left at a segment's end, below the next
segment's base, drops whole segments without a rewrite: the armed process then exited 0 and the churn took it for a
harness failure (two of 30 trials of ``python -m torture --server --seed 48611``)."""
from __future__ import annotations

import pytest
import yaml

from storage_engine.config_file import load_config
from storage_engine.jobs import compaction
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from torture.churn import batch_start, killed_truncation

pytestmark = [pytest.mark.unit, pytest.mark.kills]
TOPIC = "gap"


def _compacted_with_a_gap_at_a_segment_end(tmp_path) -> str:
    """A compacted log whose first segment ends at offset 4 and whose second begins at 10 (5-9 cleaned away)."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "storage.yaml"
    path.write_text(yaml.safe_dump({"broker": {"log.dirs": [str(tmp_path / "logs")]},
                                    "topics": {TOPIC: {"cleanup.policy": "compact", "segment.bytes": 800,
                                                       "min.cleanable.dirty.ratio": 0.01}}}))
    config = load_config(str(path))
    ts = 1700000000000
    with LogManager.open(config) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for i in range(5):
            log.append_batches(build_batch([(b"k%d" % i, b"v", ts, ())]))
        for i in range(5):
            log.append_batches(build_batch([(b"dup", b"old%d" % i, ts, ())]))
        log.roll()
        for i in range(3):
            log.append_batches(build_batch([(b"dup", b"new%d" % i, ts, ())]))
        for i in range(12):
            log.append_batches(build_batch([(b"u%d" % i, b"x" * 20, ts, ())]))
        log.roll()
        log.append_batches(build_batch([(b"z", b"z", ts, ())]))
    compaction.compact(config, topics=[TOPIC])
    return str(path)


def test_an_armed_truncation_cuts_at_a_batch_start_and_dies_at_its_step(tmp_path):
    config = _compacted_with_a_gap_at_a_segment_end(tmp_path)
    with LogManager.open(load_config(config), partitions=[(TOPIC, 0)]) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        assert [(s.base_offset, [b.last_offset for b in s.batches()][-1]) for s in log.segments][:2] == [(0, 4),
                                                                                                          (10, 18)]
        assert batch_start(log, 7) == 12 and batch_start(log, 3) == 3 and batch_start(log, 13) == 13
    # at the batch start: it dies at the step (killed_truncation raises otherwise)
    killed_truncation(config, TOPIC, 12, "rewrite.copied")
    # the target itself, in the gap (a copy of the same log): no rewrite, so the armed process did not die
    with pytest.raises(RuntimeError, match="exited 0"):
        killed_truncation(_compacted_with_a_gap_at_a_segment_end(tmp_path / "again"), TOPIC, 7, "rewrite.copied")
