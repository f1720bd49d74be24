"""Small builders shared by the engine tests: records, batches, segments and logs in a temp dir.

Everything writes real files; nothing is mocked. Time comes from a ``ManualClock`` the test sets, never the wall clock.
"""
from __future__ import annotations

import os
from typing import cast

from storage_engine.clock import ManualClock
from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.log.loader import open_log as load_log
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.segment import LogSegment
from tests.typed import present as present   # shared by the engine tests through this module

TOPIC = "topic"
PARTITION = 0


def recs(*values, timestamp: int = -1, keys=None) -> list[SimpleRecord]:
    """SimpleRecords with the given values (str or bytes); ``keys`` defaults to none."""
    out = []
    for i, v in enumerate(values):
        v = v.encode() if isinstance(v, str) else v
        k = None if keys is None else keys[i]
        k = k.encode() if isinstance(k, str) else k
        out.append(SimpleRecord(k, v, timestamp))
    return out


def batch(base_offset: int, *values, timestamp: int = -1, keys=None) -> bytes:
    """One uncompressed magic-2 batch holding ``values`` at ``base_offset``, ``base_offset + 1``, ..."""
    return build_batch(recs(*values, timestamp=timestamp, keys=keys), base_offset=base_offset)


def open_segment(dir_path, base_offset: int, *, index_interval_bytes: int = 10, max_index_size: int = 1000,
                 now_ms: int = 0, preallocate_bytes: int = 0, **kw) -> LogSegment:
    """A new segment (as Kafka's LogSegmentTest.createSegment: interval 10 bytes, 1000-byte indexes); with
    ``preallocate_bytes`` its ``.log`` is preallocated to that size (``preallocate=true``, ``segment.bytes``)."""
    cfg = LogConfig(index_interval_bytes=index_interval_bytes, segment_index_bytes=max_index_size)
    if preallocate_bytes:
        cfg = LogConfig(index_interval_bytes=index_interval_bytes, segment_index_bytes=max_index_size,
                        segment_bytes=preallocate_bytes, preallocate=True)
    return LogSegment.open(str(dir_path), base_offset, cfg, now_ms=now_ms, **kw)


def append_batch(seg: LogSegment, base_offset: int, *values, timestamp: int = -1) -> bytes:
    """Append one batch to ``seg`` the way the log does (largest offset, max timestamp, shallow offset)."""
    data = batch(base_offset, *values, timestamp=timestamp)
    last = base_offset + len(values) - 1
    seg.append(last, timestamp, last, data)
    return data


def config(**overrides) -> LogConfig:
    """``LogConfig()`` with topic-key overrides given as keyword args: ``config(segment_bytes=1024)``."""
    return LogConfig().with_overrides({k.replace("_", "."): v for k, v in overrides.items()})


def open_log(log_dir, cfg: LogConfig | None = None, *, topic: str = TOPIC, partition: int = PARTITION,
             now_ms: int = 0, exclusive: bool = True, create: bool = True, **kw):
    """``Log.open`` with test defaults; returns (log, load_result)."""
    return load_log(str(log_dir), topic, partition, cfg or LogConfig(), clock=ManualClock(now_ms), exclusive=exclusive,
                    create=create, **kw)


def manual_clock(log: Log) -> ManualClock:
    """The ``ManualClock`` the test opened ``log`` with (the engine types a log's clock as any ``Clock``)."""
    return cast(ManualClock, log.clock)


def get_log(mgr: LogManager, topic: str = TOPIC, partition: int = PARTITION) -> Log:
    """``mgr.get_log`` of a partition the test has written: a missing one fails the test here, by name."""
    log = mgr.get_log(topic, partition)
    assert log is not None, f"{topic}-{partition} is not in the store"
    return log


def partition_dir(log_dir, topic: str = TOPIC, partition: int = PARTITION) -> str:
    return os.path.join(str(log_dir), layout.partition_dir_name(topic, partition))


def segment_path(dir_path, base_offset: int, suffix: str = layout.LOG_SUFFIX, extra: str = "") -> str:
    return layout.segment_file(str(dir_path), base_offset, suffix, extra)


def read_all(log: Log) -> list[tuple[int, bytes | None]]:
    """Every (offset, value) from the log start."""
    return [(r.offset, r.value) for r in log.read_records()]


def files(dir_path) -> list[str]:
    return sorted(os.listdir(str(dir_path)))


# Another process truncates the partition to an offset, then appends batches until the active segment is at least a
# size (the truncation rewrote the segment: a new file, other batches where the old ones were). argv: log dir,
# topic, offset, size to reach. Used by the truncation-by-rewrite and the zero-copy fetch tests.
TRUNCATE_AND_REFILL = """
import sys
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
log_dir, topic, offset, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}}), partitions=[(topic, 0)]) as mgr:
    log = mgr.get_log(topic, 0)
    assert log.truncate_to(offset)
    i = 0
    while log.active_segment.size < size:
        log.append_batches(build_batch([(None, b"refill-%d-" % i + b"r" * 700, 1700000000000, ())] * 3))
        i += 1
    log.flush()
"""
