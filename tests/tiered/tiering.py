"""Test helper: tier one partition now with the tiering job itself (:func:`storage_engine.jobs.tiering.tier`, what
the ``tier`` command and the ``log_tiering`` DAG's tasks run: copy with verified uploads and the metadata records
around them, then local retention), from the calling process; returns the partition's local log start after."""
from __future__ import annotations

from storage_engine.config import StorageConfig
from storage_engine.jobs.tiering import tier
from storage_engine.log.manager import LogManager


def tier_partition(config: StorageConfig, topic: str, partition: int, now_ms: int | None = None) -> int:
    summary = tier(config, now_ms, topics=[topic], partition=partition)
    assert not summary["failures"] and not summary["errors"], summary
    with LogManager.open(config, partitions=[(topic, partition)], read_only=True) as mgr:
        log = mgr.get_log(topic, partition)
        assert log is not None, f"{topic}-{partition} does not exist"
        return log.local_log_start_offset
