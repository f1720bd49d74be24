"""Splitting a legacy segment whose offsets overflow its base (Kafka's ``splitOverflowedSegment``, KAFKA-6264).

An index entry stores an offset relative to its segment's base offset as an int32, so a segment can hold offsets
up to ``base + 2^31 - 1``. Logs written by Kafka before 0.11 (message formats 0 and 1) could break that rule:
compaction grouped segments by size only, so one segment could hold offsets far beyond its base. Such a segment
cannot be indexed; the loader meets it as a :class:`SegmentOffsetOverflowError` while recovering, or sees it when
a segment's last offset lies more than ``2^31 - 1`` above its base, and splits it:

1. the batches are copied, in order and byte for byte, into new segments written as ``.cleaned``: the first new
   segment keeps the old segment's base offset, every later one starts at the base offset of its first batch; a
   segment takes batches while their last offsets fit its base, in chunks of at most 1 MiB (Kafka's
   ``appendFromFile``); each gets its indexes, is sealed, fsynced and given the old file's modification time;
2. their sizes must add up to the old segment's size, else nothing is replaced;
3. the crash-safe replacement (Kafka's ``replaceSegments``): the new segments are renamed ``.cleaned`` ->
   ``.swap`` in descending base order; the old segment's files are renamed ``.deleted``; the new segments are
   renamed ``.swap`` -> final name; the folder is fsynced.

A crash before the last ``.swap`` exists leaves a ``.cleaned`` below every ``.swap``: the loader discards them all
and splits again. A crash after it leaves only ``.swap`` files (and perhaps ``.deleted`` ones): the loader completes
the swap over [first new base, last new next offset), which covers the old segment. Either way the records, their
offsets and their order are those of the old segment. The old ``.txnindex`` entries go to the new segments holding
their markers; producer snapshots are at offsets, not per segment, and stay valid (the old base is still a base).
"""
from __future__ import annotations

import logging

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.durable import durable_rename, fsync_dir
from storage_engine.errors import StorageError
from storage_engine.segment.file_records import FileRecords
from storage_engine.segment.segment import INT32_MAX, LogSegment
from storage_engine.segment.txn_index import TransactionIndex

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024  # Kafka's appendFromFile reads at most 1 MiB at a time


def needs_split(base_offset: int, next_offset: int) -> bool:
    """Kafka's ``hasOverflow``: the segment holds data and its last offset does not fit its base."""
    return next_offset > base_offset and not 0 <= next_offset - 1 - base_offset <= INT32_MAX


def split_overflowed_segment(dir_path: str, base_offset: int, cfg: LogConfig, now_ms: int) -> list[int]:
    """Split the segment ``<base_offset>.log`` of ``dir_path`` (closed, no other process using the folder) into
    segments whose offsets fit; returns their base offsets."""
    old_log = layout.segment_file(dir_path, base_offset, layout.LOG_SUFFIX)
    source = FileRecords(old_log, writable=False)
    new_segments: list[LogSegment] = []
    try:
        old_size = source.size
        old_mtime_ms = source.mtime_ms()
        current: LogSegment | None = None
        chunk: list = []
        for batch in source.batches(0, strict=True):
            batch.ensure_valid()
            if current is None or not current.can_convert_to_relative_offset(batch.last_offset):
                _append_chunk(current, chunk)
                chunk = []
                base = base_offset if current is None else batch.base_offset
                if not 0 <= batch.last_offset - base <= INT32_MAX:
                    raise StorageError(f"cannot split {old_log}: the batch at position {batch.file_position} "
                                       f"spans offsets {batch.base_offset}..{batch.last_offset}, more than "
                                       f"2^31 - 1 apart")
                current = LogSegment.open(dir_path, base, cfg, now_ms=now_ms, suffix=layout.CLEANED_SUFFIX,
                                          file_already_exists=False)
                new_segments.append(current)
            if chunk and sum(b.size_in_bytes for b in chunk) + batch.size_in_bytes >= CHUNK_BYTES:
                _append_chunk(current, chunk)
                chunk = []
            chunk.append(batch)
        _append_chunk(current, chunk)
        _split_txn_index(dir_path, base_offset, new_segments)
        total = 0
        for seg in new_segments:
            seg.on_become_inactive_segment()
            seg.flush()
            total += seg.size
        if total != old_size:
            raise StorageError(f"inconsistent segment sizes after splitting {old_log}: {old_size} bytes before, "
                               f"{total} after")
        for seg in new_segments:
            seg.close(trim=False)
            seg.log.set_mtime_ms(old_mtime_ms)
    except BaseException:
        for seg in new_segments:
            seg.delete_files()
        raise
    finally:
        source.close()
    _replace(dir_path, base_offset, new_segments)
    bases = [s.base_offset for s in new_segments]
    logger.warning("split %s, whose offsets overflow its base, into %d segments at %s", old_log, len(bases), bases)
    return bases


def _split_txn_index(dir_path: str, base_offset: int, new_segments: list[LogSegment]) -> None:
    """Each aborted transaction of the old ``.txnindex`` goes to the new segment holding its ABORT marker (its
    last offset), where an append would have indexed it; the entries keep their order."""
    old = TransactionIndex(layout.segment_file(dir_path, base_offset, layout.TXN_INDEX_SUFFIX), base_offset,
                           writable=False)
    for txn in old.all_aborted_txns():
        home = new_segments[0]
        for seg in new_segments:
            if seg.base_offset <= txn.last_offset:
                home = seg
        home.txn_index.append(txn)


def _append_chunk(seg: LogSegment | None, chunk: list) -> None:
    """Append whole batches as one write, indexed as one append (the last offset, the chunk's position)."""
    if seg is None or not chunk:
        return
    data = b"".join(b.raw() for b in chunk)
    max_ts, max_ts_offset = -1, chunk[-1].last_offset
    for b in chunk:
        if b.max_timestamp > max_ts:
            max_ts, max_ts_offset = b.max_timestamp, b.last_offset
    seg.append(chunk[-1].last_offset, max_ts, max_ts_offset, data)


def _replace(dir_path: str, old_base: int, new_segments: list[LogSegment]) -> None:
    """Kafka's ``replaceSegments`` for one old segment (see the module docstring, step 3)."""
    suffixes = (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX)
    for seg in sorted(new_segments, key=lambda s: s.base_offset, reverse=True):
        seg.change_file_suffixes(layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)
    fsync_dir(dir_path)
    for suffix in suffixes:
        durable_rename(layout.segment_file(dir_path, old_base, suffix),
                       layout.segment_file(dir_path, old_base, suffix, layout.DELETED_SUFFIX),
                       sync=False, missing_ok=True)
    fsync_dir(dir_path)
    for seg in new_segments:
        # The index files first and the .log last, as in Log.replace_segments.
        for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX):
            durable_rename(layout.segment_file(dir_path, seg.base_offset, suffix, layout.SWAP_SUFFIX),
                           layout.segment_file(dir_path, seg.base_offset, suffix), sync=False, missing_ok=True)
        durable_rename(layout.segment_file(dir_path, seg.base_offset, layout.LOG_SUFFIX, layout.SWAP_SUFFIX),
                       layout.segment_file(dir_path, seg.base_offset, layout.LOG_SUFFIX), sync=False)
    fsync_dir(dir_path)
