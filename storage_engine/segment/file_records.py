"""The ``.log`` file: a plain concatenation of log entries (Kafka's ``FileRecords``/``FileLogInputStream``).

Every entry, whatever its magic, starts with ``offset int64 | size int32 | ... | magic int8 at byte 16``;
the entry is ``12 + size`` bytes. Reading entries from a file follows Kafka's rules:

* fewer than 17 bytes left: no more entries (a torn tail, not an error, when reading);
* size < 14: corrupt (:class:`CorruptRecordError` naming the file and position);
* the entry runs past the end of the file: no more entries (a partial trailing batch);
* magic 0/1: a legacy message; 2: a record batch; anything else: corrupt.

``strict=True`` (used by recovery, ``verify`` and ``dump-log``) turns the two silent stops into errors, so a
torn tail is reported with its position. Recovery walks the valid magic-2 batches in compiled code
(:func:`walk_valid_batches`: size, magic and hardware CRC-32C checks plus the index entries, no Python object per
batch) and falls back to these rules for any batch it does not take.

Reading: entries are parsed from windows of the file read with ``pread`` (:data:`READ_WINDOW_BYTES` at a time,
more for a larger entry). Another process may shrink a ``.log`` at any time (a torn tail cut away, a preallocated
file trimmed on roll, a truncation), and touching a memory-mapped page past the end of a file kills the reader
with ``SIGBUS``; a window read cannot fault, and a short read is just an earlier end. Only recovery maps the file
(:meth:`FileRecords.view`), under the partition lock, which no other process can hold to shrink it meanwhile.

The logical size of the file is tracked separately from its physical size, because a preallocated segment
(``preallocate=true``) is created ``segment.bytes`` long and trimmed to its logical size when it is rolled.
"""
from __future__ import annotations

import mmap
import os
import struct
from typing import TYPE_CHECKING, Iterator

from storage_engine import crashpoints
from storage_engine.durable import durable_rename
from storage_engine.errors import CorruptRecordError, StorageIOError
from storage_engine.record import kernels as _kernels
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_ENTRY_SIZE_FIELD, RecordBatch

if TYPE_CHECKING:
    from storage_engine.record.record_batch import BatchBuffer
    from storage_engine.segment.offset_index import OffsetIndex
    from storage_engine.segment.time_index import TimeIndex

_OFFSET_SIZE = struct.Struct(">qi")
MAX_FILE_SIZE = 2**31 - 1
READ_WINDOW_BYTES = 1024 * 1024


def read_entry_header(buf: BatchBuffer, pos: int) -> tuple[int, int, int]:
    """(offset, size field, magic) of the entry at ``pos``; the caller checks 17 bytes are present."""
    offset, size = _OFFSET_SIZE.unpack_from(buf, pos)
    return offset, size, buf[pos + 16]


def batch_at(buf: BatchBuffer, pos: int, end: int, path: object = None, *, strict: bool = False,
             file_offset: int = 0) -> RecordBatch | LegacyBatch | None:
    """Parse the entry starting at ``pos``; None when the buffer ends before a whole entry (non-strict)."""
    remaining = end - pos
    where = pos + file_offset
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        if strict and remaining > 0:
            raise CorruptRecordError(f"truncated entry: only {remaining} bytes left, fewer than the "
                                     f"{HEADER_SIZE_UP_TO_MAGIC}-byte entry header", path, where)
        return None
    offset, size, magic = read_entry_header(buf, pos)
    if size < MIN_ENTRY_SIZE_FIELD:
        raise CorruptRecordError(f"record size {size} is smaller than the minimum record overhead "
                                 f"({MIN_ENTRY_SIZE_FIELD})", path, where)
    if LOG_OVERHEAD + size > remaining:
        if strict:
            raise CorruptRecordError(f"truncated batch at offset {offset}: it declares {size} bytes but only "
                                     f"{remaining - LOG_OVERHEAD} follow", path, where)
        return None
    if magic == 2:
        return RecordBatch(buf, pos, path, where)
    if magic in (0, 1):
        return LegacyBatch(buf, pos, path, where)
    raise CorruptRecordError(f"unknown magic {magic} in entry at offset {offset}", path, where)


def iter_batches(buf: BatchBuffer, start: int = 0, end: int | None = None, path: object = None, *,
                 strict: bool = False, file_offset: int = 0) -> Iterator[RecordBatch | LegacyBatch]:
    """Yield the batches in ``buf[start:end]`` in order (see the module docstring for the stop rules)."""
    end = len(buf) if end is None else end
    pos = start
    while True:
        batch = batch_at(buf, pos, end, path, strict=strict, file_offset=file_offset)
        if batch is None:
            return
        yield batch
        pos += batch.size_in_bytes


def walk_valid_batches(buf: BatchBuffer, pos: int, end: int, base_offset: int, index_interval_bytes: int,
                       last_index_entry: int, max_ts: int, max_ts_offset: int, offset_index: OffsetIndex,
                       time_index: TimeIndex) -> tuple[int, int, int, int, int] | None:
    """Recovery's fast path, compiled: walk the plain magic-2 batches from ``pos`` that are whole, CRC-valid and
    whose last offset fits the segment, adding the sparse index entries recovery adds (see
    ``recover_segment``), and stop before the first batch that is anything else (the caller then handles that
    one batch the Python way, which raises the exact error). Returns (position, batches walked, last index entry
    position, max timestamp, its offset), or None when the compiled kernels are not loaded."""
    kernels = _kernels.KERNELS
    if kernels is None:
        return None
    time_ts, time_offset = time_index.last_entry
    (pos, batches, last_index_entry, max_ts, max_ts_offset, offset_entries, time_entries) = kernels.walk_batches(
        buf, pos, end, (base_offset, index_interval_bytes, last_index_entry, max_ts, max_ts_offset),
        (offset_index.last_offset if offset_index.entries else -1, offset_index.max_entries - offset_index.entries),
        (time_ts, time_offset, 1 if time_index.entries else 0, time_index.max_entries - 1 - time_index.entries))
    offset_index.append_packed(offset_entries)
    time_index.append_packed(time_entries)
    return pos, batches, last_index_entry, max_ts, max_ts_offset


def walk_batches(buf: BatchBuffer, pos: int, end: int, base_offset: int, index_interval_bytes: int,
                 offset_index_room: int, time_index_room: int) -> tuple[int, int, int, int, bytes, bytes] | None:
    """:func:`walk_valid_batches` of a whole segment into empty indexes, without touching them: (position
    reached, batches, max timestamp, its offset, packed offset-index entries, packed time-index entries), or None
    without the compiled kernels."""
    kernels = _kernels.KERNELS
    if kernels is None:
        return None
    pos, batches, _last_entry, max_ts, max_ts_offset, offset_entries, time_entries = kernels.walk_batches(
        buf, pos, end, (base_offset, index_interval_bytes, 0, -1, -1), (-1, offset_index_room),
        (-1, base_offset, 0, time_index_room))
    return pos, batches, max_ts, max_ts_offset, offset_entries, time_entries


class FileRecords:
    """An open ``.log`` file with a logical size; appends go to the end of the logical size."""

    def __init__(self, path: str, *, create: bool = False, preallocate_bytes: int = 0, writable: bool = True):
        self.path = path
        self.writable = writable
        flags = os.O_RDWR if writable else os.O_RDONLY
        self._fd: int
        try:
            if create:
                self._fd = os.open(path, flags | os.O_CREAT, 0o644)
                if preallocate_bytes:
                    os.ftruncate(self._fd, preallocate_bytes)
                self.size = 0
            else:
                self._fd = os.open(path, flags)
                self.size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise StorageIOError("cannot open log file", path, exc) from exc
        if self.size > MAX_FILE_SIZE:
            raise CorruptRecordError(f"log file is larger than {MAX_FILE_SIZE} bytes", path, 0)
        self._map: mmap.mmap | None = None
        self._map_len = 0

    def fileno(self) -> int:
        """The open descriptor (for a :class:`~storage_engine.segment.file_slice.FileSlice`, which duplicates it)."""
        return self._fd

    # -- size -------------------------------------------------------------------------------------------------
    def physical_size(self) -> int:
        return os.fstat(self._fd).st_size

    def refresh_size(self) -> int:
        """Re-read the size from the file (another process may have appended). Only for read-only views."""
        self.size = os.fstat(self._fd).st_size
        return self.size

    # -- writing ----------------------------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the logical end; returns the number of bytes written."""
        n = len(data)
        if self.size + n > MAX_FILE_SIZE:
            raise CorruptRecordError(f"appending {n} bytes would make the log file larger than "
                                     f"{MAX_FILE_SIZE} bytes", self.path, self.size)
        if crashpoints.armed("append.torn"):
            os.pwrite(self._fd, memoryview(data)[:max(1, n // 2)], self.size)
            crashpoints.die("append.torn")
        try:
            written = os.pwrite(self._fd, data, self.size)
            while written < n:  # short writes are legal for pwrite
                written += os.pwrite(self._fd, memoryview(data)[written:], self.size + written)
        except OSError as exc:
            raise StorageIOError("cannot append to log file", self.path, exc) from exc
        self.size += n
        return n

    def flush(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageIOError("cannot fsync log file", self.path, exc) from exc

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns the number of bytes removed."""
        if size < 0 or size > self.size:
            raise ValueError(f"cannot truncate {self.path} of size {self.size} to {size}")
        removed = self.size - size
        if size < self.physical_size():
            self._drop_map()
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                raise StorageIOError("cannot truncate log file", self.path, exc) from exc
        self.size = size
        return removed

    def trim(self) -> None:
        """Drop the preallocated tail beyond the logical size."""
        if self.physical_size() > self.size:
            self.truncate_to(self.size)

    # -- reading ----------------------------------------------------------------------------------------------
    def read(self, position: int, size: int) -> bytes:
        size = max(0, min(size, self.size - position))
        try:
            return os.pread(self._fd, size, position)
        except OSError as exc:
            raise StorageIOError("cannot read log file", self.path, exc) from exc

    def read_view(self, position: int, size: int) -> BatchBuffer:
        """The bytes :meth:`read` returns, for a scan that only parses them: a subclass whose bytes are already in
        memory may return a view of them instead of a copy (the remote reader's cached chunks)."""
        return self.read(position, size)

    def read_batches(self, start: int = 0, end: int | None = None, *, strict: bool = False,
                     window: int = READ_WINDOW_BYTES) -> Iterator:
        """Yield the batches in [start, end) (default: to the logical size), read ``window`` bytes at a time with
        ``pread``. Each batch references the window it was read from. Stop rules as :func:`iter_batches`; a
        file that became shorter than ``end`` ends where it now ends."""
        end = self.size if end is None else min(end, self.size)
        pos = start
        while pos < end:
            buf = self.read_view(pos, min(end - pos, window))
            if pos + len(buf) < end and len(buf) < min(end - pos, window):
                end = pos + len(buf)  # the file shrank under us
            p = 0
            while True:
                remaining, left = len(buf) - p, end - pos - p
                if remaining < left:  # the window ends before the file: is the entry at p inside it?
                    if remaining < HEADER_SIZE_UP_TO_MAGIC:
                        need = HEADER_SIZE_UP_TO_MAGIC
                    else:
                        size = _OFFSET_SIZE.unpack_from(buf, p)[1]
                        need = LOG_OVERHEAD + size if size >= MIN_ENTRY_SIZE_FIELD else 0
                    if need > remaining:
                        if need <= left:  # read the next window from this entry on
                            window = max(window, need)
                            break
                        remaining = left  # it runs past the end of the file: a torn tail, as batch_at says
                batch = batch_at(buf, p, p + remaining, self.path, strict=strict, file_offset=pos)
                if batch is None:
                    return
                yield batch
                p += batch.size_in_bytes
            pos += p

    def view(self) -> mmap.mmap | bytes:
        """A read-only mmap (or bytes for an empty file) covering the logical size; re-mapped as the file grows.
        For recovery only, under the partition lock (see the module docstring); dropped by :meth:`drop_view`."""
        physical = self.physical_size()
        if physical < self.size:
            # Shorter than we knew (cut while this process held the file open, before it took the lock): the
            # logical end follows, since mapping past the end of a file and touching the page there is SIGBUS.
            self._drop_map()
            self.size = physical
        if self.size == 0:
            return b""
        if self._map is None or self._map_len < self.size:
            # Growing: batches parsed from the old mapping may still be in use; it closes when they are gone.
            # (Truncation, in contrast, closes it at once: touching pages past the new end would be SIGBUS.)
            self._map = None
            self._map_len = 0
            try:
                self._map = mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise StorageIOError("cannot map log file", self.path, exc) from exc
            self._map_len = self.size
        return self._map

    def batches(self, start: int = 0, *, strict: bool = False, end: int | None = None) -> Iterator:
        return self.read_batches(start, end, strict=strict)

    def batch_at(self, position: int, *, strict: bool = False) -> RecordBatch | LegacyBatch | None:
        """The entry at ``position`` (None past the end, or at a torn tail unless ``strict``)."""
        head = self.read(position, LOG_OVERHEAD)
        size = _OFFSET_SIZE.unpack_from(head)[1] if len(head) == LOG_OVERHEAD else 0
        want = LOG_OVERHEAD + size if size >= MIN_ENTRY_SIZE_FIELD else HEADER_SIZE_UP_TO_MAGIC
        buf = self.read(position, want)
        return batch_at(buf, 0, len(buf), self.path, strict=strict, file_offset=position)

    def search_for_offset_with_size(self, target_offset: int, start_position: int) -> tuple[int, int, int] | None:
        """First batch at/after ``start_position`` whose last offset >= target: (last offset, position, size)."""
        for batch in self.batches(start_position):
            if batch.last_offset >= target_offset:
                return batch.last_offset, batch.file_position, batch.size_in_bytes
        return None

    def search_for_timestamp(self, target_ts: int, start_position: int,
                             starting_offset: int) -> tuple[int, int] | None:
        """First record with timestamp >= target and offset >= starting_offset: (timestamp, offset) or None."""
        for batch in self.batches(start_position):
            if batch.max_timestamp >= target_ts:
                for rec in batch.records():
                    if rec.timestamp >= target_ts and rec.offset >= starting_offset:
                        return rec.timestamp, rec.offset
        return None

    def largest_timestamp_after(self, start_position: int) -> tuple[int, int]:
        """(max timestamp, last offset of the first batch holding it) over batches from ``start_position``."""
        max_ts, offset = -1, -1
        for batch in self.batches(start_position):
            if batch.max_timestamp > max_ts:
                max_ts, offset = batch.max_timestamp, batch.last_offset
        return max_ts, offset

    # -- lifecycle --------------------------------------------------------------------------------------------
    def drop_view(self) -> None:
        """Unmap what :meth:`view` mapped (recovery is done, the partition lock is about to be released)."""
        self._drop_map()

    def _drop_map(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # A batch still references the map: leave it to the garbage collector.
                pass
            self._map = None
            self._map_len = 0

    def rename_to(self, new_path: str) -> None:
        durable_rename(self.path, new_path, sync=False)
        self.path = new_path

    def close(self) -> None:
        self._drop_map()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def mtime_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def set_mtime_ms(self, mtime_ms: int) -> None:
        t = mtime_ms / 1000.0
        os.utime(self.path, (t, t))
