"""A fetch's read of one segment as a file slice (:class:`~storage_engine.segment.file_slice.FileSlice`): the same
whole batches :meth:`LogSegment.read` returns, checked the same way, but left in the file to be sent from there.

The walk goes batch by batch from the offset index's position for the fetch offset (or a remembered verified
batch start: :mod:`storage_engine.segment.verified`). Inside the file's verified range it reads only batch headers
(27 bytes each, a 64 KiB window at a time while batches are small); anywhere else it reads the bytes in pieces of
at most :data:`PIECE_BYTES` (or one batch, if larger), checks every batch of the piece (CRC and offset order, as
:mod:`~storage_engine.segment.checked_read`) and marks the piece verified. So a huge fetch never becomes one huge
read, and bytes are checked once however often they are fetched. The cut is :meth:`LogSegment.read`'s (whole
batches, at most ``max_size`` bytes, the first batch whatever its size when ``min_one_message``), and stops at
the first batch whose entry offset reaches ``bound`` (the fetch's high watermark or last stable offset). A result
of at most :data:`INLINE_BYTES` is read into memory (verified bytes: one ``pread``, no check) rather than sent
from the file: a fetch of many partitions holds no descriptor per small one.

The partition's ``generation`` is read by the caller before this walk (the shared one, which every truncation
bumps first), and the file's identity and size are taken from the very descriptor the slice duplicates.

Inside :func:`nonblocking` (the broker's event loop, which must never wait for a disk) a read either is served
from verified bytes already in the page cache, or raises :class:`WouldBlock` at once: a segment whose files are
not open, a byte outside the verified range (it would have to be read and checked), a ``pread`` the page cache
cannot answer (``RWF_NOWAIT``), or any failure at all (the retry after another process's change refreshes under
the partition lock). The caller then does the same read in its thread pool, where all of that may happen.
"""
from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from storage_engine.errors import CorruptRecordError, StorageIOError
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import (HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_ENTRY_SIZE_FIELD,
                                                RecordBatch)
from storage_engine.segment.checked_read import OffsetOrder, ScannedSegment
from storage_engine.segment.file_slice import FileSlice
from storage_engine.segment.verified import MARKS, FileKey, Head, VerifiedRanges

PIECE_BYTES = 1024 * 1024       # unverified bytes read and checked at a time (or one batch, if larger)
INLINE_BYTES = 64 * 1024        # a read of at most this much is returned as bytes, not as a file slice
HEADER_WINDOW = 64 * 1024       # one read of batch headers while the batches are small
SMALL_BATCH = 16 * 1024         # below this a header walk reads a window, above it 27 bytes per batch
_HEAD = struct.Struct(">qiib")  # offset, size, partition leader epoch (or legacy CRC), magic
_LAST_DELTA = struct.Struct(">i")
HEAD_BYTES = 27                 # through a magic-2 batch's last offset delta


class WouldBlock(Exception):
    """A read inside :func:`nonblocking` that needs what the event loop must not wait for (see the module)."""


_mode = threading.local()


class _NonBlocking:
    """:func:`nonblocking`'s block (a class: a generator context manager cost each fetch on the event loop
    ~1.5 us more)."""

    __slots__ = ()

    def __enter__(self) -> None:
        _mode.nonblocking = True

    def __exit__(self, *exc: object) -> None:
        _mode.nonblocking = False


_NONBLOCKING = _NonBlocking()


def nonblocking() -> _NonBlocking:
    """Reads in this thread, until the block ends, raise :class:`WouldBlock` rather than wait for a disk or check
    bytes (see the module)."""
    return _NONBLOCKING


def _nonblocking() -> bool:
    return getattr(_mode, "nonblocking", False)


def is_nonblocking() -> bool:
    """Whether this thread is inside :func:`nonblocking`."""
    return _nonblocking()


def _pread(fd: int, size: int, pos: int) -> bytes | bytearray:
    """``os.pread``; inside :func:`nonblocking`, only what the page cache holds (``RWF_NOWAIT``), else
    :class:`WouldBlock`. A short answer is returned as it is (the caller takes it for the file's end, which inside
    :func:`nonblocking` is a failure, so :class:`WouldBlock` too)."""
    if not _nonblocking():
        return os.pread(fd, size, pos)
    buf = bytearray(size)
    try:
        got = os.preadv(fd, [buf], pos, os.RWF_NOWAIT)
    except BlockingIOError:
        raise WouldBlock(f"bytes at {pos} are not in the page cache") from None
    del buf[got:]
    return buf


class SlicedSegment(ScannedSegment, Protocol):
    @property
    def offset_index(self) -> "_Lookup": ...

    @property
    def is_open(self) -> bool: ...


class _Lookup(Protocol):
    def lookup(self, offset: int) -> tuple[int, int]: ...


@dataclass
class SliceData:
    """Whole batches of a segment from the one holding ``first_offset``: ``slice`` (None when no whole batch fits
    the size; bytes of at most :data:`INLINE_BYTES`), at ``position``; ``next_offset`` is one past the last batch's
    last offset."""
    slice: FileSlice | bytes | None
    position: int
    first_offset: int
    next_offset: int

    def __len__(self) -> int:
        return 0 if self.slice is None else len(self.slice)


@dataclass
class _Batch:
    position: int
    size: int
    entry_offset: int       # the offset field of the entry header (a legacy wrapper's is its last offset)
    last_offset: int
    unchecked: RecordBatch | LegacyBatch | None = None    # read, not yet checked: checked when taken


class _Walk:
    """Batches of one segment file from a position (see the module docstring). Inside the verified range the
    headers are trusted once the position is *proven* a batch start (a remembered start, or the end of a batch
    that passed the checks or was walked so); elsewhere batches are read in pieces and offset-checked as they
    are scanned, and CRC-checked (then marked verified) when the read takes them (:meth:`take`)."""

    def __init__(self, seg: ScannedSegment, fd: int, key: FileKey, generation: int, limit: int,
                 upper_bound: int | None, marks: VerifiedRanges, verified: tuple[int, int] | None,
                 known: tuple[int, Head] | None = None):
        self.seg, self.fd, self.key, self.generation = seg, fd, key, generation
        self.known = known          # (position, header) of a batch an earlier walk read: not read again
        self.limit = limit
        self.order = OffsetOrder(seg, upper_bound)
        self.marks = marks
        self.verified = verified
        self.horizon = limit
        self._head: bytes | bytearray = b""
        self._head_at = 0
        self._last_size = 0

    def _in_verified(self, pos: int) -> bool:
        return self.verified is not None and self.verified[0] <= pos < self.verified[1]

    def _header(self, pos: int) -> _Batch:
        """The batch starting at verified ``pos`` (a proven batch start)."""
        assert self.verified is not None
        known = self.known
        if known is not None and known[0] == pos and pos + known[1][0] <= self.verified[1]:
            size, offset, last = known[1]
            self._last_size = size
            return _Batch(pos, size, offset, last)
        rel = pos - self._head_at
        if rel < 0 or rel + HEAD_BYTES > len(self._head):
            want = HEADER_WINDOW if self._last_size < SMALL_BATCH else HEAD_BYTES
            try:
                # never past the verified end: a legacy entry may be shorter than a magic-2 header
                self._head = _pread(self.fd, min(want, self.verified[1] - pos), pos)
            except OSError as exc:
                raise StorageIOError("cannot read log file", self.seg.path, exc) from exc
            self._head_at, rel = pos, 0
        have = len(self._head) - rel
        if have < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptRecordError(f"the file ended at {pos + have} inside its verified bytes (it was cut under "
                                     f"the read)", self.seg.path, pos)
        offset, size, _, magic = _HEAD.unpack_from(self._head, rel)
        if magic >= 2 and have < HEAD_BYTES:
            raise CorruptRecordError(f"the file ended at {pos + have} inside its verified bytes (it was cut under "
                                     f"the read)", self.seg.path, pos)
        last = offset + _LAST_DELTA.unpack_from(self._head, rel + 23)[0] if magic >= 2 else offset
        if size < MIN_ENTRY_SIZE_FIELD or pos + LOG_OVERHEAD + size > self.verified[1]:
            raise CorruptRecordError(f"a batch of size {size} does not fit the verified bytes", self.seg.path, pos)
        self._last_size = LOG_OVERHEAD + size
        return _Batch(pos, LOG_OVERHEAD + size, offset, last)

    def batches(self, pos: int, proven: bool) -> Iterator[_Batch]:
        """Every batch from ``pos`` (``proven``: known to start a batch) to the end of the file."""
        while pos < self.limit:
            if proven and self._in_verified(pos):
                b = self._header(pos)
                self.order.next_offset = b.last_offset + 1
                yield b
                pos += b.size
                continue
            if _nonblocking():
                raise WouldBlock(f"bytes at {pos} of {self.seg.path} are not verified yet")
            window = min(PIECE_BYTES, max(self.horizon - pos, 4096))
            switched = False
            for batch in self.seg.log.read_batches(pos, self.limit, strict=True, window=window):
                self.order.check(batch)
                b = _Batch(batch.file_position, batch.size_in_bytes, _entry_offset(batch), batch.last_offset,
                           batch)
                del batch
                yield b
                pos = b.position + b.size
                proven = b.unchecked is None        # taken (so checked) by the reader meanwhile
                del b                               # the window goes with its last batch
                if proven and self._in_verified(pos):
                    switched = True
                    break
            if not switched:
                return

    def take(self, b: _Batch) -> None:
        """``b`` is part of the read: check it if it was not verified, and mark it verified."""
        if b.unchecked is None:
            return
        b.unchecked.ensure_valid()
        b.unchecked = None
        self.marks.add(self.key, self.generation, b.position, b.position + b.size)
        if self.verified is not None and self.verified[0] <= b.position + b.size and b.position <= self.verified[1]:
            self.verified = (min(b.position, self.verified[0]), max(b.position + b.size, self.verified[1]))
        else:
            self.verified = (b.position, b.position + b.size)


def _entry_offset(batch: object) -> int:
    buf, pos = getattr(batch, "buf"), getattr(batch, "pos")
    return int(_HEAD.unpack_from(buf, pos)[0])


def read_slice(seg: SlicedSegment, start_offset: int, max_size: int, min_one_message: bool,
               upper_bound: int | None, bound: int, generation: int,
               marks: VerifiedRanges = MARKS, inline: int = INLINE_BYTES) -> SliceData | None:
    """Whole verified batches of ``seg`` from the one holding ``start_offset``, as :meth:`LogSegment.read` cuts
    them, ending before the first batch whose entry offset is ``bound`` or more; None if ``start_offset`` lies
    beyond the segment. ``generation``: the partition's shared generation, read before this call; a result of at
    most ``inline`` bytes comes as bytes."""
    if _nonblocking():
        if not seg.is_open:
            raise WouldBlock(f"{seg.path} is not open")
        try:
            return _read_slice(seg, start_offset, max_size, min_one_message, upper_bound, bound, generation, marks,
                               inline)
        except (CorruptRecordError, StorageIOError) as exc:
            raise WouldBlock(f"a read of {seg.path} failed ({exc}): retried where it may wait") from None
    return _read_slice(seg, start_offset, max_size, min_one_message, upper_bound, bound, generation, marks, inline)


def _read_slice(seg: SlicedSegment, start_offset: int, max_size: int, min_one_message: bool,
                upper_bound: int | None, bound: int, generation: int, marks: VerifiedRanges,
                inline: int) -> SliceData | None:
    log = seg.log
    fd = log.fileno()
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise StorageIOError("cannot stat log file", seg.path, exc) from exc
    key = (st.st_dev, st.st_ino)
    limit = min(log.size, st.st_size)
    found = marks.find(key, generation, st.st_size, start_offset)
    verified, start = found if found is not None else (None, None)
    remembered, head = start if start is not None else (None, None)
    # a remembered start needs no index lookup (the position where the last read of this offset ended)
    index_pos = seg.offset_index.lookup(start_offset)[1] if remembered is None else 0
    try:
        return _read(seg, fd, key, generation, limit, upper_bound, marks, verified, remembered, index_pos,
                     start_offset, max_size, min_one_message, bound, inline,
                     (remembered, head) if remembered is not None and head is not None else None)
    except CorruptRecordError:
        if remembered is None and index_pos == 0:
            raise
        # a damaged offset index (derived data) must not read as damaged records: scan from the start
        return _read(seg, fd, key, generation, limit, upper_bound, marks, marks.lookup(key, generation, st.st_size),
                     None, 0, start_offset, max_size, min_one_message, bound, inline)


def _read(seg: ScannedSegment, fd: int, key: FileKey, generation: int, limit: int, upper_bound: int | None,
          marks: VerifiedRanges, verified: tuple[int, int] | None, remembered: int | None, index_pos: int,
          start_offset: int, max_size: int, min_one_message: bool, bound: int, inline: int,
          known: tuple[int, Head] | None = None) -> SliceData | None:
    walk = _Walk(seg, fd, key, generation, limit, upper_bound, marks, verified, known)
    pos = remembered if remembered is not None else index_pos
    walk.horizon = pos + max_size + max(seg.index_interval_bytes, 4096)
    start_pos: int | None = None
    stop = end = 0
    next_offset = start_offset
    after: _Batch | None = None     # the batch the read stopped at
    for b in walk.batches(pos, remembered is not None):
        if start_pos is None:
            if b.last_offset < start_offset:
                continue        # before the fetch offset: passed over unchecked, as the checked read does
            start_pos = end = b.position
            stop = min(limit, b.position + (max(max_size, b.size) if min_one_message else max_size))
            walk.horizon = stop
        if b.entry_offset >= bound or b.position + b.size > stop:
            after = b
            break
        walk.take(b)
        end = b.position + b.size
        next_offset = b.last_offset + 1
    if start_pos is None:
        return None
    if end > start_pos:
        # where this consumer's next fetch begins, with the header there if it was read from verified bytes
        head = ((after.size, after.entry_offset, after.last_offset)
                if after is not None and after.position == end and after.unchecked is None else None)
        marks.remember(key, generation, next_offset, end, head)
        if end - start_pos <= inline:
            # a small range is cheaper copied than sent apart (and holds no descriptor while the response waits)
            data = bytes(_pread(fd, end - start_pos, start_pos)) if _nonblocking() else seg.log.read(
                start_pos, end - start_pos)
            if len(data) != end - start_pos:
                raise CorruptRecordError(f"the file was cut under a read of [{start_pos}, {end})", seg.path,
                                         start_pos + len(data))
            return SliceData(data, start_pos, start_offset, next_offset)
        return SliceData(FileSlice.of(fd, start_pos, end - start_pos, seg.path), start_pos, start_offset,
                         next_offset)
    return SliceData(None, start_pos, start_offset, start_offset)
