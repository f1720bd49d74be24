"""One partition opened alone for a job: a manager holding only it, and its log."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from storage_engine.clock import Clock
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError
from storage_engine.log import health as log_health
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager


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
