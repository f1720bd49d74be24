"""Partitions opened for a job: one alone (:func:`open_partition`), or many with each one that cannot be loaded
set apart and reported (:func:`open_isolating`), so the others are still maintained; and records appended to one
existing partition (:func:`produce`, the console's "produce a record").

:func:`produce` appends as ``python -m storage_engine produce`` does: the topic's checks first (a keyless record on
a compacted topic, a batch over max.message.bytes or segment.bytes), then one batch. Safe while other processes,
the broker among them, use the same log dirs (the broker serves what another process appended). Unlike the
command it never creates a partition, so a typo cannot make a new partition of a topic behind the broker's
catalog."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from storage_engine.clock import Clock
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError
from storage_engine.jobs.summaries import PartitionFailure, partition_failure
from storage_engine.log import health as log_health
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.log.open_logs import OpenLogs

TopicPartition = tuple[str, int]
Header = tuple[str, bytes]


@contextlib.contextmanager
def open_partition(config: StorageConfig, clock: Clock, topic: str, partition: int, *,
                   read_only: bool = False) -> Iterator[tuple[LogManager, Log]]:
    """A manager holding only ``topic``-``partition``, and its log; PartitionNotFoundError if there is none.
    ``read_only`` (a dry run): opened without changing anything (:mod:`storage_engine.log.read_only`)."""
    with LogManager.open(config, clock=clock, partitions=[(topic, partition)], read_only=read_only) as mgr:
        log = mgr.get_log(topic, partition)
        if log is None:
            raise log_health.why_missing(mgr.online_dirs(), (topic, partition)) or PartitionNotFoundError(
                f"partition {topic}-{partition} does not exist in {list(config.log_dirs)}")
        yield mgr, log


def open_isolating(config: StorageConfig, clock: Clock, tps: list[TopicPartition], failures: list[PartitionFailure],
                   files: OpenLogs | None = None, *,
                   read_only: bool = False) -> list[tuple[LogManager, list[TopicPartition]]]:
    """Managers covering ``tps``; partitions whose load fails are isolated by halving and reported. The managers
    share one bound on open files (``files``), so the halves opened so far cannot exhaust the descriptors and
    make healthy partitions fail to load."""
    files = files if files is not None else OpenLogs()
    try:
        return [(LogManager.open(config, clock=clock, partitions=tps, max_open_logs=files, read_only=read_only),
                 tps)]
    except Exception as exc:   # noqa: BLE001 - any load failure: isolated by halving
        if len(tps) == 1:
            failures.append(partition_failure(tps[0], exc))
            return []
    mid = len(tps) // 2
    return (open_isolating(config, clock, tps[:mid], failures, files, read_only=read_only)
            + open_isolating(config, clock, tps[mid:], failures, files, read_only=read_only))


def produce(config: StorageConfig, topic: str, partition: int,
            records: Sequence[tuple[bytes | None, bytes | None, Sequence[Header]]], now_ms: int | None = None) -> dict:
    """Append ``records`` ((key, value, headers); a None key or value is none) timestamped ``now_ms`` (default:
    the wall clock) as one batch to the existing ``topic``-``partition``; returns the offsets of the first and the
    last. PartitionNotFoundError when the partition does not exist; the topic's refusals before anything is
    written."""
    from storage_engine.clock import SYSTEM_CLOCK
    from storage_engine.log.validator import check_records
    from storage_engine.record.records import SimpleRecord

    now = SYSTEM_CLOCK.milliseconds() if now_ms is None else now_ms
    batch = [SimpleRecord(key, value, now, tuple(headers)) for key, value, headers in records]
    if not batch:
        raise ValueError("no record to produce")
    check_records(topic, config.log_config(topic), batch, now_ms=now)
    with open_partition(config, SYSTEM_CLOCK, topic, partition) as (_mgr, log):
        info = log.append_records(batch)
    return {"topic": topic, "partition": partition, "offset": info.first_offset, "last_offset": info.last_offset}
