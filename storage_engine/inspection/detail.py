"""Everything about one partition, read-only: the figures of its page row plus its segments (sizes, timestamps,
the bytes their indexes hold) and the ``.deleted`` files awaiting purge; the Storage view's partition page."""
from __future__ import annotations

import os
import stat
from typing import TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError, StorageError
from storage_engine.inspection.listing import (PartitionStatus, add_figures, error_row, missing_partitions,
                                               offset_named_log, scan_partition)
from storage_engine.inspection.snapshot import LogSnapshot
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex


class SegmentStatus(TypedDict, total=False):
    base_offset: int
    size_bytes: int | None          # None: the .log is no regular file
    largest_timestamp: int | None   # ms; the file's mtime when the segment holds no timestamp
    index_bytes: int | None         # the entries written (entries x 8), not the file's preallocated length
    time_index_bytes: int | None    # the entries written (entries x 12)
    index_file_bytes: int | None    # the files' lengths (an active segment's indexes are preallocated)
    time_index_file_bytes: int | None
    active: bool
    problem: str | None             # why the segment cannot be read (its .log is a directory, ...)


class PartitionDetail(PartitionStatus, total=False):
    segment_list: list[SegmentStatus]
    deleted: list[dict]


def _find(config: StorageConfig, topic: str, partition: int) -> str:
    name = layout.partition_dir_name(topic, partition)
    for d in config.log_dirs:
        if os.path.isdir(os.path.join(d, name)):
            return d
    raise PartitionNotFoundError(f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


def partition_detail(config: StorageConfig, topic: str, partition: int,
                     now_ms: int | None = None) -> PartitionDetail:
    """Everything about one partition: the page figures plus its segments and the files awaiting purge. A
    partition whose folder is missing is described by its reason; a segment whose ``.log`` is no regular file
    is listed with the problem instead of a size."""
    name = layout.partition_dir_name(topic, partition)
    try:
        d = _find(config, topic, partition)
    except PartitionNotFoundError:
        gone = [m for m in missing_partitions(config, [topic]) if m["partition"] == partition]
        if not gone:
            raise
        m = gone[0]
        missing: PartitionDetail = {**error_row(config, m["log_dir"], topic, partition, m["reason"],
                                                 [{"kind": "missing", "message": m["reason"]}]),
                                    "segment_list": [], "deleted": []}
        return missing
    row: PartitionDetail = scan_partition(d, name, topic, partition, config)    # type: ignore[assignment]
    add_figures(config, [row], now_ms)
    segments: list[SegmentStatus] = []
    deleted = []
    pdir = os.path.join(d, name)
    if not row.get("error"):
        try:
            with LogSnapshot(config, d, topic, partition) as snap:
                last = len(snap.segments) - 1
                segments = [_segment_status(pdir, s.base_offset, s.size, s.largest_timestamp(), i == last)
                            for i, s in enumerate(snap.segments)]
        except (StorageError, OSError) as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
    if row.get("error"):
        segments = _segments_by_name(pdir, row.get("unreadable_files") or [])
    for n in sorted(os.listdir(pdir)):
        if n.endswith(layout.DELETED_SUFFIX):
            st = os.stat(os.path.join(pdir, n))
            deleted.append({"file": n, "size_bytes": st.st_size, "deleted_at_ms": int(st.st_mtime * 1000)})
    row["segment_list"] = segments
    row["deleted"] = deleted
    return row


def _segment_status(pdir: str, base: int, size: int | None, largest_timestamp: int | None,
                    active: bool) -> SegmentStatus:
    index = layout.segment_file(pdir, base, layout.INDEX_SUFFIX)
    time_index = layout.segment_file(pdir, base, layout.TIME_INDEX_SUFFIX)
    return {"base_offset": base, "size_bytes": size, "largest_timestamp": largest_timestamp,
            "index_bytes": index_used_bytes(index, OffsetIndex, base), "index_file_bytes": _file_size(index),
            "time_index_bytes": index_used_bytes(time_index, TimeIndex, base),
            "time_index_file_bytes": _file_size(time_index), "active": active, "problem": None}


def _segments_by_name(pdir: str, unreadable: list[str]) -> list[SegmentStatus]:
    """The segments of a partition that cannot be read as a log, from the names of its ``.log`` files: sizes of
    the regular ones, and the problem of each that is none (what :func:`storage_engine.log.health.unreadable_files`
    says of it)."""
    out: list[SegmentStatus] = []
    try:
        entries = sorted((e for e in os.scandir(pdir) if offset_named_log(e.name)), key=lambda e: e.name)
    except OSError:
        return out
    for i, e in enumerate(entries):
        base = layout.offset_from_filename(e.name)
        if e.is_file():
            out.append(_segment_status(pdir, base, _file_size(e.path), None, i == len(entries) - 1))
        else:
            problem = next((u[len(e.path):].strip(" ()") for u in unreadable if u.startswith(e.path + " ")),
                           "no regular file")
            out.append({"base_offset": base, "size_bytes": None, "largest_timestamp": None, "index_bytes": None,
                        "time_index_bytes": None, "index_file_bytes": None, "time_index_file_bytes": None,
                        "active": i == len(entries) - 1, "problem": f"{e.name} is {problem}"})
    return out


def index_used_bytes(path: str, index_class: type[OffsetIndex] | type[TimeIndex], base_offset: int) -> int | None:
    """The bytes of the entries written to an index file (entries x entry size), not its length: an active
    segment's ``.index``/``.timeindex`` is preallocated (``segment.index.bytes``, 10 MiB by default) and trimmed
    when the segment is rolled. None when there is no regular file. Read-only.

    A file whose last slot holds an entry is full (one ``pread``; a rolled segment's trimmed index); otherwise
    the index class counts its valid entries as every reader does (:mod:`storage_engine.segment.index_file`)."""
    entry = index_class.ENTRY_SIZE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        slots = st.st_size // entry
        if slots == 0:
            return 0
        last = os.pread(fd, entry, (slots - 1) * entry)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(last) == entry and any(last):
        return slots * entry
    try:
        with index_class(path, base_offset, writable=False) as index:
            return index.size_in_bytes
    except StorageError:
        return None


def _file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
