"""Partitions opened for a job: one alone (:func:`open_partition`), or many with each one that cannot be loaded
set apart and reported (:func:`open_isolating`), so the others are still maintained."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from storage_engine.clock import Clock
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError
from storage_engine.jobs.summaries import PartitionFailure, partition_failure
from storage_engine.log import health as log_health
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.log.open_logs import OpenLogs

TopicPartition = tuple[str, int]


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
