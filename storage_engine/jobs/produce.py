"""Appending records to an existing partition as a whole job (the console's "produce a record"), the way
``python -m storage_engine produce`` appends them: the topic's checks first (a keyless record on a compacted topic,
a batch over max.message.bytes or segment.bytes), then one batch under the partition's lock. Safe while other
processes, the broker among them, use the same log dirs: the broker serves what another process appended.

Unlike the command, it never creates a partition: a record for a partition that does not exist is refused
(:class:`PartitionNotFoundError`), so a typo cannot make a new partition of a topic behind the broker's catalog.
"""
from __future__ import annotations

from collections.abc import Sequence

from storage_engine import layout
from storage_engine.clock import SYSTEM_CLOCK
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError

Header = tuple[str, bytes]


def produce(config: StorageConfig, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes | None,
                                                                                     Sequence[Header]]],
            now_ms: int | None = None) -> dict:
    """Append ``records`` ((key, value, headers); a None key or value is none) timestamped ``now_ms`` (default:
    the wall clock) as one batch to ``topic``-``partition``; returns the offsets of the first and the last."""
    from storage_engine.log.manager import LogManager
    from storage_engine.log.validator import check_records
    from storage_engine.record.records import SimpleRecord

    layout.partition_dir_name(topic, partition)
    now = SYSTEM_CLOCK.milliseconds() if now_ms is None else now_ms
    batch = [SimpleRecord(key, value, now, tuple(headers)) for key, value, headers in records]
    if not batch:
        raise ValueError("no record to produce")
    check_records(topic, config.log_config(topic), batch, now_ms=now)
    with LogManager.open(config, partitions=[(topic, partition)]) as mgr:
        log = mgr.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"no partition {partition} of topic {topic!r} in the log dirs")
        info = log.append_records(batch)
    return {"topic": topic, "partition": partition, "offset": info.first_offset, "last_offset": info.last_offset}
