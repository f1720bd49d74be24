"""A remote segment's offset and time indexes (Kafka's ``.index`` and ``.timeindex`` objects), parsed and checked
once: entries in order, inside the segment's offsets and bytes. Trailing zero slots (a preallocated index copied
untrimmed) end an index, as Kafka's index loading ends it. :mod:`storage_engine.tiered.reads` keeps the parsed
indexes of the segments it read last.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Protocol

from storage_engine.errors import CorruptIndexError

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class SegmentBounds(Protocol):
    """What the indexes use of a remote segment (offsets inclusive)."""

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...


class SegmentIndex:
    """A remote segment's offset index (``keys``: offsets, ``values``: positions) or time index (``keys``:
    timestamps, ``values``: offsets), parsed and checked once: entries in order, inside the segment's offsets and
    bytes. Trailing zero slots (a preallocated index copied untrimmed) end it, as Kafka's index loading ends it."""

    def __init__(self, base: int, keys: list[int], values: list[int]):
        self.base, self.keys, self.values = base, keys, values

    @classmethod
    def offsets_of(cls, seg: SegmentBounds, raw: bytes, where: str) -> SegmentIndex:
        base, offsets, positions = seg.start_offset, [], []
        prev_rel, prev_pos = -1, 0
        for slot, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 8])):
            if rel == 0 and pos == 0 and slot > 0:
                break
            if rel <= prev_rel or pos < prev_pos or pos >= seg.size_bytes or base + rel > seg.end_offset:
                raise CorruptIndexError(f"offset index entry {slot} (offset {base + rel}, position {pos}) is out of "
                                        f"order or outside the segment [{base}, {seg.end_offset}] of "
                                        f"{seg.size_bytes} bytes", where, slot * _OFFSET_ENTRY.size)
            offsets.append(base + rel)
            positions.append(pos)
            prev_rel, prev_pos = rel, pos
        return cls(base, offsets, positions)

    @classmethod
    def times_of(cls, seg: SegmentBounds, raw: bytes, where: str) -> SegmentIndex:
        base, times, offsets = seg.start_offset, [], []
        prev_ts, prev_off = -1, base
        for slot, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 12])):
            if ts == 0 and rel == 0 and slot > 0:
                break
            if ts < prev_ts or base + rel < prev_off or base + rel > seg.end_offset:
                raise CorruptIndexError(f"time index entry {slot} ({ts}, offset {base + rel}) is out of order or "
                                        f"outside the segment [{base}, {seg.end_offset}]", where,
                                        slot * _TIME_ENTRY.size)
            times.append(ts)
            offsets.append(base + rel)
            prev_ts, prev_off = ts, base + rel
        return cls(base, times, offsets)

    def position(self, offset: int) -> int:
        """(offset index) The position of the largest entry with offset <= ``offset``, 0 if none: where a scan
        for ``offset`` starts."""
        i = floor_index(self.keys, offset)
        return self.values[i] if i >= 0 else 0

    def offset_for_time(self, timestamp: int) -> int:
        """(time index) The offset of the entry with the largest timestamp <= ``timestamp``, the base if none."""
        i = floor_index(self.keys, timestamp)
        return self.values[i] if i >= 0 else self.base


def floor_index(values: Sequence[int], target: int) -> int:
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1
