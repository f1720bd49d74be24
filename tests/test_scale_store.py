"""include/scale_store.py: the many-partition store used for the scale measurements, at a small size."""
from __future__ import annotations

import pytest

from include import scale_store
from storage_engine import LogManager, ManualClock, load_config
from storage_engine.jobs import batches

pytestmark = pytest.mark.e2e
NOW_MS = 1_795_305_600_000


def test_generated_store_loads_and_retention_deletes_two_thirds(tmp_path):
    summary = scale_store.generate(tmp_path / "scale", partitions=30, segments=3, now_ms=NOW_MS)
    assert summary["partitions"] == 30 and summary["segments_per_partition"] == 4
    config = load_config(summary["config"])
    with LogManager.open(config, clock=ManualClock(NOW_MS)) as mgr:
        assert len(mgr.logs) == 30
        assert {len(log.segments) for log in mgr.logs.values()} == {4}
        records = sum(sum(1 for _ in log.read_records()) for log in mgr.logs.values())
    assert records == summary["records"]
    plan = batches.plan_batches(config, batch_size=20)
    result = batches.retention_batch(config, [p for b in plan for p in b["partitions"]], NOW_MS)
    assert not result["failures"]
    deleted = sum(r["segments_deleted"] for r in result["results"])
    assert 30 * 2 <= deleted <= 30 * 3, deleted  # records span three days, retention.ms is one
