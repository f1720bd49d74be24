"""A log segment: one ``.log`` file and its ``.index``, ``.timeindex`` and ``.txnindex`` (Kafka's ``LogSegment``).

Files: ``<base offset, 20 digits>.log|.index|.timeindex|.txnindex``; the ``.txnindex`` (aborted transactions whose
ABORT marker lies in this segment, :mod:`storage_engine.segment.txn_index`) exists only once one was written. Only
the last (active) segment of a log is appended to; every other segment is immutable.

Sparse indexing (``index.interval.bytes``): the segment counts bytes appended since the last index entry
(in memory only). On an append, if the count *before* this append exceeds the interval, it adds an offset
index entry (last offset of this append -> position where this append starts) and a time index entry (the
segment's largest timestamp so far -> the offset of the batch holding it), then resets the count. The first
append to a segment therefore never creates an entry. Recovery rebuilds the same kind of entries per batch.

Recovery (validate every batch, rebuild the indexes, truncate at the first invalid byte) is
:func:`storage_engine.segment.recovery.recover_segment`. Reads are checked (:mod:`storage_engine.segment.checked_read`):
every batch :meth:`LogSegment.read` returns or :meth:`LogSegment.checked_batches` yields passes its CRC and the offset
checks, so no damaged or misplaced record is ever returned.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Protocol

from storage_engine import crashpoints, layout
from storage_engine.config import LogConfig
from storage_engine.durable import durable_rename
from storage_engine.errors import (CorruptIndexError, CorruptRecordError, IndexFullError, SegmentOffsetOverflowError,
                                   StorageError, StorageIOError)
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch
from storage_engine.segment.checked_read import FetchData, checked_from, read_from
from storage_engine.segment.file_records import FileRecords
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex, peek_last_entry
from storage_engine.segment.txn_index import AbortedTxn, TransactionIndex

INT32_MAX = 2**31 - 1
logger = logging.getLogger(__name__)


_SUFFIXES = (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX)


class CompletedTxnLike(Protocol):
    """What :meth:`LogSegment.update_txn_index` reads of a completed transaction (the log layer's
    ``CompletedTxn``, which this layer does not import)."""
    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def is_aborted(self) -> bool: ...


class LogSegment:
    """One segment. Its three files are opened lazily (Kafka's ``LazyIndex``, applied to the ``.log`` too): a
    log with 10,000 sealed segments holds file descriptors only for those actually read, and ``size``,
    ``largest_timestamp()`` and ``mtime_ms()`` of an unopened segment come from ``stat``/one ``pread``.
    :meth:`release` closes what was opened and returns the segment to that state."""

    def __init__(self, dir_path: str, base_offset: int, log: FileRecords | None, offset_index: OffsetIndex | None,
                 time_index: TimeIndex | None, *, index_interval_bytes: int, roll_jitter_ms: int = 0,
                 created_ms: int = 0, max_index_size: int = 10485760, writable: bool = True, suffix: str = ""):
        self.dir = dir_path
        self.base_offset = base_offset
        self._log = log
        self._offset_index = offset_index
        self._time_index = time_index
        self._txn_index: TransactionIndex | None = None
        stem = layout.segment_file(dir_path, base_offset, "")
        self._paths = {s: stem + s + suffix for s in _SUFFIXES}
        self.max_index_size = max_index_size
        self.writable = writable
        self._stat_size: int | None = None
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        self.bytes_since_last_index_entry = 0
        self._max_ts_and_offset: tuple[int, int] | None = None
        self._rolling_based_timestamp: int | None = None

    # -- opening ----------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, dir_path: str, base_offset: int, config: LogConfig, *, now_ms: int,
             file_already_exists: bool = False, suffix: str = "", writable: bool = True,
             lazy: bool = False) -> "LogSegment":
        """Create a new segment (its files, the ``.log`` preallocated when the topic says so), or open an existing
        one; ``lazy`` defers opening its files. Sizes and the roll jitter come from the topic's ``config``."""
        index_interval_bytes, max_index_size = config.index_interval_bytes, config.segment_index_bytes
        preallocate_bytes = 0 if file_already_exists else config.initial_file_bytes
        roll_jitter_ms = config.random_segment_jitter_ms()
        log_path = layout.segment_file(dir_path, base_offset, layout.LOG_SUFFIX, suffix)
        if not file_already_exists:
            for p in (log_path, layout.segment_file(dir_path, base_offset, layout.INDEX_SUFFIX, suffix),
                      layout.segment_file(dir_path, base_offset, layout.TIME_INDEX_SUFFIX, suffix),
                      layout.segment_file(dir_path, base_offset, layout.TXN_INDEX_SUFFIX, suffix)):
                if os.path.exists(p):
                    os.remove(p)
        seg = cls(dir_path, base_offset, None, None, None, index_interval_bytes=index_interval_bytes,
                  roll_jitter_ms=roll_jitter_ms, created_ms=now_ms, max_index_size=max_index_size,
                  writable=writable, suffix=suffix)
        if not file_already_exists:
            seg._log = FileRecords(log_path, create=True, preallocate_bytes=preallocate_bytes, writable=writable)
        if file_already_exists and lazy:
            try:
                seg._stat_size = os.stat(log_path).st_size
            except OSError as exc:
                raise StorageIOError("cannot stat log file", log_path, exc) from exc
            return seg
        seg.log, seg.offset_index, seg.time_index  # open all three now
        return seg

    @property
    def log(self) -> FileRecords:
        if self._log is None:
            self._log = FileRecords(self._paths[layout.LOG_SUFFIX], writable=self.writable)
            self._stat_size = None
        return self._log

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self._paths[layout.INDEX_SUFFIX], self.base_offset,
                                             self.max_index_size, writable=self.writable)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(self._paths[layout.TIME_INDEX_SUFFIX], self.base_offset,
                                         self.max_index_size, writable=self.writable)
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        """The segment's ``.txnindex`` (path-bound: it holds no descriptor, the file is created by the first
        append); one object while the path stays, so the entries it keeps from its last read serve the next
        (:mod:`storage_engine.segment.txn_index`)."""
        path = self._paths[layout.TXN_INDEX_SUFFIX]
        index = self._txn_index
        if index is None or index.path != path:
            index = self._txn_index = TransactionIndex(path, self.base_offset, writable=self.writable)
        return index

    def update_txn_index(self, completed: CompletedTxnLike, last_stable_offset: int) -> None:
        """Kafka's ``updateTxnIndex``: an aborted transaction completed by a marker in this segment is indexed."""
        if completed.is_aborted:
            self.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                             last_stable_offset))

    @property
    def is_open(self) -> bool:
        return self._log is not None or self._offset_index is not None or self._time_index is not None

    def release(self) -> None:
        """Close whatever is open, without trimming, and go back to the lazy state (sealed segments only)."""
        self.close(trim=False)
        self._log = self._offset_index = self._time_index = None
        self._txn_index = None                  # and the aborted transactions it kept
        self._stat_size = os.stat(self._paths[layout.LOG_SUFFIX]).st_size

    # -- basic facts ------------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        if self._log is not None:
            return self._log.size
        assert self._stat_size is not None  # an unopened segment always has its stat size
        return self._stat_size

    @property
    def path(self) -> str:
        return self._paths[layout.LOG_SUFFIX]

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise SegmentOffsetOverflowError(
                f"offset {offset} cannot be stored in the segment with base offset {self.base_offset} "
                f"({self.path}): the relative offset must be in [0, {INT32_MAX}]")

    # -- what recovery (storage_engine.segment.recovery) sets ---------------------------------------------------
    def file_path(self, suffix: str) -> str:
        """The path of this segment's file with ``suffix`` (``.log``, ``.index``, ``.timeindex``, ``.txnindex``)."""
        return self._paths[suffix]

    def open_index(self, suffix: str) -> OffsetIndex | TimeIndex | None:
        """The offset (``.index``) or time (``.timeindex``) index if it is open, else None (not opened yet)."""
        return self._offset_index if suffix == layout.INDEX_SUFFIX else self._time_index

    def set_recovered(self, max_timestamp: int, offset_of_max_timestamp: int) -> None:
        """What a recovery found: the largest timestamp and its offset (``-1`` when the segment has none), and no
        rolling timestamp (Kafka's ``recover`` resets ``rollingBasedTimestamp``)."""
        self._max_ts_and_offset = ((max_timestamp, offset_of_max_timestamp) if max_timestamp >= 0
                                   else (-1, self.base_offset))
        self._rolling_based_timestamp = None

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts()[0]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts()[1]

    def _max_ts(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            last = None if self._time_index is not None else peek_last_entry(
                self._paths[layout.TIME_INDEX_SUFFIX], self.base_offset)
            self._max_ts_and_offset = last if last is not None else self.time_index.last_entry
        return self._max_ts_and_offset

    def largest_timestamp(self) -> int:
        """Largest record timestamp in the segment, or the file's mtime if it has none (v0 data)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.mtime_ms()

    # -- appending --------------------------------------------------------------------------------------------
    @property
    def appendable_now(self) -> bool:
        """Whether :meth:`append` and :meth:`should_roll` would open or read no file: the ``.log`` and both
        indexes are open, and the first batch's timestamp (the roll clock) is known or the segment is empty."""
        return (self._log is not None and self._offset_index is not None and self._time_index is not None
                and (self._rolling_based_timestamp is not None or self._log.size == 0))

    def append(self, largest_offset: int, largest_timestamp: int, shallow_offset_of_max_timestamp: int,
               data: bytes | memoryview) -> None:
        """Append whole batches (already validated, offsets assigned) and maintain the sparse indexes."""
        if not data:
            return
        position = self.log.size
        self.ensure_offset_in_range(largest_offset)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            # Checked before the write: a stale index must never turn a written batch into a failed append.
            self._check_index_room(largest_offset, position)
        self.log.append(data)
        crashpoints.reached("append.written")
        if self.log.size == len(data) and self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = largest_timestamp
        max_ts, _ = self._max_ts()
        if largest_timestamp > max_ts:
            self._max_ts_and_offset = (largest_timestamp, shallow_offset_of_max_timestamp)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(*self._max_ts())
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += len(data)

    def _check_index_room(self, offset: int, position: int) -> None:
        index = self.offset_index
        if index.is_full or self.time_index.is_full:
            raise IndexFullError(f"the indexes of {self.path} are full; the segment must roll first")
        if index.entries and (index.last_offset >= offset or index.entry(index.entries - 1)[1] > position):
            raise CorruptIndexError(f"the offset index's last entry {index.entry(index.entries - 1)} is not below "
                                    f"offset {offset} at position {position}: the index is stale",
                                    index.path, (index.entries - 1) * index.ENTRY_SIZE)
        if self.time_index.last_entry[1] > offset:
            raise CorruptIndexError(f"the time index's last entry {self.time_index.last_entry} is past offset "
                                    f"{offset}: the index is stale", self.time_index.path)

    # -- reading ----------------------------------------------------------------------------------------------
    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, int, int] | None:
        """(last offset, position, size) of the first batch whose last offset >= ``offset``, or None."""
        _, pos = self.offset_index.lookup(offset)
        return self.log.search_for_offset_with_size(offset, max(pos, starting_position))

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True, *, upper_bound: int | None = None) -> FetchData | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes (at least one batch
        when ``min_one_message``), each checked (see :mod:`~storage_engine.segment.checked_read`; ``upper_bound`` is
        the first offset past the segment). None if ``start_offset`` is beyond the segment. One ``pread`` in the usual case."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a log read from segment {self.path}")
        _, pos = self.offset_index.lookup(start_offset)
        try:
            return read_from(self, pos, start_offset, max_size, max_position, min_one_message, upper_bound)
        except CorruptRecordError as exc:
            if pos == 0:
                raise
            logger.warning("%s: scanning from offset index position %d failed (%s); scanning from the start",
                           self.path, pos, exc)
            return read_from(self, 0, start_offset, max_size, max_position, min_one_message, upper_bound)

    def checked_batches(self, start_offset: int, upper_bound: int | None = None,
                        end: int | None = None) -> Iterator[RecordBatch | LegacyBatch]:
        """Batches from the one holding ``start_offset`` to ``end`` (default: the segment's size), each checked
        (see :mod:`~storage_engine.segment.checked_read`); ``upper_bound`` is the first offset past the segment. A
        scan that fails from an index entry's position is repeated from the segment's start: a damaged index
        (derived data) must not read as damaged records."""
        _, pos = self.offset_index.lookup(start_offset)
        wanted = start_offset
        try:
            for batch in checked_from(self, pos, wanted, upper_bound, end):
                wanted = batch.next_offset
                yield batch
        except CorruptRecordError as exc:
            if pos == 0:
                raise
            logger.warning("%s: scanning from offset index position %d failed (%s); scanning from the start",
                           self.path, pos, exc)
            yield from checked_from(self, 0, wanted, upper_bound, end)

    def batches(self, start_position: int = 0, *, strict: bool = False) -> Iterator[RecordBatch | LegacyBatch]:
        return self.log.batches(start_position, strict=strict)

    def batches_from(self, offset: int) -> Iterator[RecordBatch | LegacyBatch]:
        """Batches from the one holding ``offset`` to the end of the segment."""
        _, pos = self.offset_index.lookup(offset)
        for batch in self.log.batches(pos):
            if batch.last_offset >= offset:
                yield batch

    def read_next_offset(self) -> int:
        """The offset after the last batch (base offset if empty), scanning from the last index entry."""
        _, pos = self.offset_index.lookup(self.offset_index.last_offset)
        nxt = self.base_offset
        for batch in self.log.batches(pos):
            nxt = batch.next_offset
        return nxt

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int | None = None) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= ``timestamp``, or None."""
        starting_offset = self.base_offset if starting_offset is None else starting_offset
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        return self.log.search_for_timestamp(timestamp, pos, starting_offset)

    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (Kafka's rolling-based timestamp); -1 if empty."""
        if self._rolling_based_timestamp is None:
            b = self.log.batch_at(0) if self.log.size else None
            if b is None:
                return -1  # not cached: the first append (here or in another process) sets it
            self._rolling_based_timestamp = b.max_timestamp
        return self._rolling_based_timestamp

    # -- roll decisions ---------------------------------------------------------------------------------------
    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        ts = self.first_batch_timestamp()
        if ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, *, segment_bytes: int, max_segment_ms: int, messages_size: int, max_timestamp: int,
                    max_offset: int, now_ms: int) -> str | None:
        """The reason to roll before appending ``messages_size`` bytes, or None (Kafka's ``shouldRoll``)."""
        if self.size > segment_bytes - messages_size:
            return "segment-bytes"
        if self.size > 0 and self.time_waited_for_roll(now_ms, max_timestamp) > max_segment_ms - self.roll_jitter_ms:
            return "segment-ms"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index-full"
        if not self.can_convert_to_relative_offset(max_offset):
            return "offset-overflow"
        return None

    # -- truncation -------------------------------------------------------------------------------------------
    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Remove every batch whose last offset >= ``offset`` (batch granular); returns bytes removed.

        A segment truncated to empty restarts its roll clock at ``now_ms`` (Kafka resets its create time)."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            # Nothing at or after ``offset``: only re-expand the indexes (and restart an empty segment's clock).
            self.offset_index.resize(self.offset_index.max_index_size)
            self.time_index.resize(self.time_index.max_index_size)
            if self.log.size == 0 and now_ms is not None:
                self.created_ms = now_ms
            return 0
        position = found[1]
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        removed = self.log.truncate_to(position)
        if self.log.size == 0 and now_ms is not None:
            self.created_ms = now_ms
        self.reload_tail_state()
        self._rolling_based_timestamp = None
        return removed

    def has_overflow(self) -> bool:
        nxt = self.read_next_offset()
        return nxt > self.base_offset and not self.can_convert_to_relative_offset(nxt - 1)

    # -- lifecycle --------------------------------------------------------------------------------------------
    def on_become_inactive_segment(self) -> None:
        """Called on roll: final time-index entry, then trim both indexes and the log file."""
        max_ts, off = self._max_ts()
        if max_ts >= 0:
            self.time_index.maybe_append(max_ts, off, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def flush(self) -> None:
        """fsync what is open (an unopened segment has nothing unwritten) and the ``.txnindex``."""
        for f in (self._log, self._offset_index, self._time_index):
            if f is not None:
                f.flush()
        if self.is_open:
            self.txn_index.flush()

    def close(self, trim: bool = True) -> None:
        """Close the files. ``trim`` (Kafka's close) also writes the final time-index entry and cuts the
        preallocated tails; a process that is not the last user of the partition must not, because another
        process may still be appending through its own mapping of these files."""
        try:
            if trim and self._log is not None and self.writable and self._log.writable:
                max_ts, off = self._max_ts()
                if max_ts >= 0:
                    try:
                        self.time_index.maybe_append(max_ts, off, skip_full_check=True)
                    except StorageError as exc:
                        # Kafka's close swallows this (Utils.swallow, at WARN) and closes the other files: a segment
                        # whose recovery stopped at an offset going backwards still closes.
                        logger.warning("%s: final time index entry not written: %s", self._log.path, exc)
                self.offset_index.close()
                self.time_index.close()
                self._log.trim()
            else:
                for idx in (self._offset_index, self._time_index):
                    if idx is not None:
                        idx.close(trim=False)
        finally:
            if self._log is not None:
                self._log.close()

    def last_index_position(self) -> int:
        """Start position of the last indexed batch (0 if the index is empty)."""
        if self.offset_index.entries == 0:
            return 0
        return self.offset_index.lookup(self.offset_index.last_offset)[1]

    def reload_tail_state(self) -> None:
        """Recompute in-memory state after another process appended or the tail was truncated: the bytes since
        the last index entry (Kafka's counter equals size minus the last indexed position) and the largest
        timestamp (the last time-index entry may lag behind the batches after it)."""
        pos = self.last_index_position()
        self.bytes_since_last_index_entry = self.size - pos
        ts, off = self.time_index.last_entry
        tail_ts, tail_off = self.log.largest_timestamp_after(pos)
        self._max_ts_and_offset = (tail_ts, tail_off) if tail_ts > ts else (ts, off)
        if self.size == 0:
            self._rolling_based_timestamp = None

    def change_file_suffixes(self, old_suffix: str, new_suffix: str, *, after_log: str | None = None) -> None:
        """Rename all files of the segment from ``<name><old>`` to ``<name><new>``, the ``.log`` first (a missing
        index is fine); ``after_log`` names the crash step reached once the ``.log`` is renamed."""
        for suffix, obj in ((layout.LOG_SUFFIX, self._log), (layout.INDEX_SUFFIX, self._offset_index),
                            (layout.TIME_INDEX_SUFFIX, self._time_index), (layout.TXN_INDEX_SUFFIX, None)):
            new_path = layout.segment_file(self.dir, self.base_offset, suffix, new_suffix)
            if obj is not None:
                obj.rename_to(new_path)
            else:
                durable_rename(self._paths[suffix], new_path, sync=False, missing_ok=suffix != layout.LOG_SUFFIX)
            self._paths[suffix] = new_path
            if after_log is not None and suffix == layout.LOG_SUFFIX:
                crashpoints.reached(after_log)

    @property
    def file_paths(self) -> list[str]:
        return list(self._paths.values())

    def delete_files(self) -> None:
        """Close and remove every file of the segment (missing files are fine)."""
        self.close_quietly()
        for p in self._paths.values():
            try:
                os.remove(p)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageIOError("cannot delete segment file", p, exc) from exc

    def close_quietly(self) -> None:
        self.close(trim=False)

    def mtime_ms(self) -> int:
        if self._log is not None:
            return self._log.mtime_ms()
        return int(os.stat(self._paths[layout.LOG_SUFFIX]).st_mtime * 1000)
