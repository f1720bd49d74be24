"""Checked reads of one log segment: the batch scans behind :meth:`LogSegment.read` and
:meth:`LogSegment.checked_batches`, with the offset checks each batch must pass.

Reads are checked (Kafka's consumer-side ``check.crcs``, plus the offset order Kafka's fetcher relies on): every
batch :meth:`LogSegment.read` returns or :meth:`LogSegment.checked_batches` yields passes its CRC, and every batch
scanned has offsets at or above the segment's base offset, above the previous batch's and below the segment's
upper bound (the next segment's base offset, or the log end). The base offset of a magic-2 batch lies outside its
CRC, so the order check is what catches a flipped bit there. Damage raises :class:`CorruptRecordError` naming the
file and the byte position; no damaged or misplaced record is ever returned.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from storage_engine.errors import CorruptRecordError
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch
from storage_engine.segment.file_records import FileRecords


class ScannedSegment(Protocol):
    """What a checked read uses of a :class:`~storage_engine.segment.segment.LogSegment`."""

    @property
    def log(self) -> FileRecords: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def path(self) -> str: ...

    @property
    def index_interval_bytes(self) -> int: ...


@dataclass
class FetchData:
    """Bytes of whole batches read from a segment, starting at ``position``."""
    data: bytes
    position: int
    first_offset: int


class OffsetOrder:
    """The offset checks of a checked read, batch by batch (see the module docstring)."""

    __slots__ = ("seg", "upper_bound", "next_offset")

    def __init__(self, seg: ScannedSegment, upper_bound: int | None):
        self.seg = seg
        self.upper_bound = upper_bound
        self.next_offset = seg.base_offset

    def check(self, batch: RecordBatch | LegacyBatch) -> None:
        last = batch.last_offset
        first = batch.base_offset if batch.magic >= 2 else last  # a legacy wrapper carries its last offset
        if first < self.next_offset or last < first:
            what = (f"below the segment's base offset {self.seg.base_offset}" if first < self.seg.base_offset
                    else f"not above the previous batch's last offset {self.next_offset - 1}")
            raise CorruptRecordError(f"batch with offsets [{first}, {last}] is out of order: {what}",
                                     self.seg.path, batch.file_position)
        if self.upper_bound is not None and last >= self.upper_bound:
            raise CorruptRecordError(f"batch with offsets [{first}, {last}] lies beyond the segment's end: "
                                     f"offsets from {self.upper_bound} on belong to the next segment or to no "
                                     f"one yet", self.seg.path, batch.file_position)
        self.next_offset = last + 1


def read_from(seg: ScannedSegment, pos: int, start_offset: int, max_size: int, max_position: int | None,
              min_one_message: bool, upper_bound: int | None) -> FetchData | None:
    """:meth:`LogSegment.read`'s scan from byte ``pos`` of ``seg``."""
    limit = seg.log.size if max_position is None else min(max_position, seg.log.size)
    order = OffsetOrder(seg, upper_bound)
    taken: list = []
    start_pos = stop = None
    window = max_size + max(seg.index_interval_bytes, 4096)  # the scan to the first batch, then the fetch
    for batch in seg.log.read_batches(pos, window=window, strict=True):
        order.check(batch)
        if start_pos is None:
            if batch.last_offset < start_offset:
                continue
            start_pos = batch.file_position
            stop = min(limit, start_pos + (max(max_size, batch.size_in_bytes) if min_one_message
                                           else max_size))
        if batch.file_position + batch.size_in_bytes > stop:
            break
        batch.ensure_valid()
        taken.append(batch)
    if start_pos is None:
        return None
    if not taken:
        return FetchData(b"", start_pos, start_offset)
    first, last = taken[0], taken[-1]
    if first.buf is last.buf:  # one window holds them all (the usual case): one copy
        data = bytes(first.buf[first.pos:last.pos + last.size_in_bytes])
    else:
        data = b"".join(b.raw() for b in taken)
    return FetchData(data, start_pos, start_offset)


def checked_from(seg: ScannedSegment, pos: int, start_offset: int, upper_bound: int | None,
                 end: int | None) -> Iterator[RecordBatch | LegacyBatch]:
    """:meth:`LogSegment.checked_batches`' scan from byte ``pos`` of ``seg``."""
    # A batch is yielded only once the next one's offsets were checked against it: a base offset flipped
    # upwards shows as the next batch going backwards, and its records must not be returned meanwhile.
    order = OffsetOrder(seg, upper_bound)
    held = None
    for batch in seg.log.read_batches(pos, end, strict=True):
        order.check(batch)
        if held is not None:
            yield held
            held = None
        if batch.last_offset >= start_offset:
            batch.ensure_valid()
            held = batch
    if held is not None:
        yield held

