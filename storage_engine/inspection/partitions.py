"""Read-only facts about a partition, for programs that must not take part in log-dir locking or recovery
(the Spark key-map job runs on other processes, possibly other machines sharing the log dirs).

Nothing here opens a file for writing, takes a lock, or repairs anything.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from storage_engine import layout
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.config import StorageConfig
from storage_engine.errors import OffsetOutOfRangeError, PartitionNotFoundError
from storage_engine.segment.file_records import FileRecords


@dataclass
class SegmentInfo:
    base_offset: int
    path: str
    size: int
    inode: int


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    log_dir: str
    dir: str
    segments: list
    log_start_offset: int
    log_end_offset: int


def find_partition_dir(config: StorageConfig, topic: str, partition: int) -> tuple[str, str]:
    """(log dir, partition folder) of a partition; the name is validated, so it cannot escape a log dir."""
    name = layout.partition_dir_name(topic, partition)
    for d in config.log_dirs:
        p = os.path.join(d, name)
        if os.path.isdir(p):
            return d, p
    raise PartitionNotFoundError(f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


def partition_info(config: StorageConfig, topic: str, partition: int) -> PartitionInfo:
    log_dir, pdir = find_partition_dir(config, topic, partition)
    segs = []
    for name in sorted(os.listdir(pdir)):
        if name.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(name):
            path = os.path.join(pdir, name)
            st = os.stat(path)
            segs.append(SegmentInfo(layout.offset_from_filename(name), path, st.st_size, st.st_ino))
    if not segs:
        raise PartitionNotFoundError(f"partition {topic}-{partition} in {log_dir} has no segments")
    fr = FileRecords(segs[-1].path, writable=False)
    try:
        end = segs[-1].base_offset
        for batch in fr.batches(0):
            end = batch.next_offset
    finally:
        fr.close()
    lso_cp, _ = OffsetCheckpointFile(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT)).read_or_empty()
    start = max(lso_cp.get((topic, partition), 0), segs[0].base_offset)
    return PartitionInfo(topic, partition, log_dir, pdir, segs, start, end)


def check_offset_range(info: PartitionInfo, start: int, end: int) -> None:
    if start < 0 or end <= start:
        raise OffsetOutOfRangeError(f"offset range [{start}, {end}) of {info.topic}-{info.partition} is empty "
                                    "or negative")
    if start < info.log_start_offset or end > info.log_end_offset:
        raise OffsetOutOfRangeError(
            f"offset range [{start}, {end}) is outside the log of {info.topic}-{info.partition}: log start "
            f"offset {info.log_start_offset}, log end offset {info.log_end_offset}")
