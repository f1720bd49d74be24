"""The ``.timeindex`` file: Kafka's time index, mapping timestamps to offsets of a segment.

Byte layout
-----------
A flat array of 12-byte entries, no header, no checksum, all integers big-endian::

    byte 0..7    int64  timestamp (ms)
    byte 8..11   int32  relative offset = offset - base_offset, in [0, 2**31 - 1]

Timestamps strictly increase from entry to entry; offsets never decrease (two entries may share an
offset when the later one only raised the timestamp, e.g. the entry added on roll/close).

Meaning
-------
An entry (T, O) says: the largest timestamp in the segment up to and including the batch ending at
offset O is T, so any record with a timestamp > T lies after O. The segment decides when to add an
entry (together with an offset-index entry, and once more on roll/close with ``skip_full_check``);
it passes its max timestamp so far and the offset of the batch holding it. :meth:`TimeIndex.maybe_append`
only writes strictly larger timestamps, so equal timestamps and the ``-1`` (no timestamp) of message
format v0 never produce entries: a v0-only segment has an empty time index. The last slot of the file
is reserved for the roll/close entry (``is_full`` = ``entries >= max_entries - 1``).
:meth:`TimeIndex.lookup` returns the entry with the largest timestamp <= target, or
``(-1, base_offset)``.

File life cycle (shared with ``.index``, see :mod:`storage_engine.segment.index_file`)
-------------------------------------------------------------------------------
* A new file is preallocated with zeros to ``floor(max_index_size / 12) * 12`` bytes (default
  10,485,756 bytes = 873,813 entries), written with ``pwrite``, and trimmed to ``entries * 12`` on roll
  and close.
* On open, ``entries`` is the number of leading non-zero slots (== ``length / 12`` for a trimmed
  file). An entry (timestamp 0, relative offset 0) is indistinguishable from an empty slot: in an
  untrimmed file the count may stop there (in a trimmed file it counts unless it is the only entry).
  Only a segment whose first batch carries timestamp 0 (1970-01-01T00:00:00Z) as its maximum could
  write one; losing it only makes time lookups start earlier, never skip data.
* After a crash the time index is rebuilt from the ``.log`` like the offset index.
"""
from __future__ import annotations

import os
import struct

from storage_engine.segment.index_file import DEFAULT_MAX_INDEX_SIZE, Column, IndexFile
from storage_engine.errors import CorruptIndexError, InvalidOffsetError

# RecordBatch.NO_TIMESTAMP: the timestamp of message format v0 and of an empty index's last entry.
NO_TIMESTAMP = -1
_INT64_MAX = 2**63 - 1

_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_TIMESTAMP_FIELD = 0
_OFFSET_FIELD = 8


class TimeIndex(IndexFile):
    """The ``.timeindex`` file of the segment starting at ``base_offset``."""

    ENTRY_SIZE = _ENTRY.size
    KIND = "time index"

    def __init__(self, path: str, base_offset: int, max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
                 writable: bool = True):
        self._last_entry = (NO_TIMESTAMP, base_offset)
        super().__init__(path, base_offset, max_index_size, writable)

    def _entries_changed(self) -> None:
        if self.entries:
            timestamp, relative = _ENTRY.unpack_from(self._buf, (self.entries - 1) * _ENTRY.size)
            self._last_entry = (timestamp, self.base_offset + relative)
        else:
            self._last_entry = (NO_TIMESTAMP, self.base_offset)

    def _offset_column(self) -> Column:
        return _INT32.unpack_from, _OFFSET_FIELD

    @property
    def is_full(self) -> bool:
        # The last slot is kept for the entry written on roll/close (maybe_append(skip_full_check=True)).
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or ``(-1, base_offset)`` when empty."""
        return self._last_entry

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if ``timestamp`` is above the last entry's; otherwise do nothing.

        Raises IndexFullError if full (the reserved last slot is usable with ``skip_full_check``),
        InvalidOffsetError if ``offset`` is below the last entry's, CorruptIndexError if ``timestamp``
        is below the last entry's (the index disagrees with the segment's max timestamp, which never
        decreases), IndexOffsetOverflowError if the offset does not fit an int32 relative offset.
        """
        self._check_open()
        if not skip_full_check and self.is_full:
            raise self._full_error()
        last_timestamp, last_offset = self._last_entry
        if self.entries and offset < last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) to slot {self.entries} no larger than the last "
                f"offset appended ({last_offset}) to {self.path}")
        if self.entries and timestamp < last_timestamp:
            raise CorruptIndexError(
                f"attempt to append a timestamp ({timestamp}) to slot {self.entries} no larger than the "
                f"last timestamp appended ({last_timestamp})", self.path, (self.entries - 1) * _ENTRY.size)
        # Equal timestamps (a roll/close re-offering the last entry) and -1 are not indexed.
        if timestamp > last_timestamp:
            relative = self._relative_offset(offset)
            if timestamp > _INT64_MAX:
                raise InvalidOffsetError(f"timestamp {timestamp} does not fit an int64 ({self.path})")
            # Timestamp first: a reader racing this append sees (timestamp, base_offset) at worst.
            self._append_entry(_ENTRY.pack(timestamp, relative), head_size=_OFFSET_FIELD)
            self._last_entry = (timestamp, offset)

    def entry(self, n: int) -> tuple[int, int]:
        """The ``n``-th entry as (timestamp, absolute offset); InvalidOffsetError if out of range."""
        self._check_slot(n)
        timestamp, relative = _ENTRY.unpack_from(self._buf, n * _ENTRY.size)
        return timestamp, self.base_offset + relative

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the entry with the largest timestamp <= target, else ``(-1, base_offset)``."""
        self._check_open()
        slot = self._floor_slot(_INT64.unpack_from, _TIMESTAMP_FIELD, target_timestamp)
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        timestamp, relative = _ENTRY.unpack_from(self._buf, slot * _ENTRY.size)
        return timestamp, self.base_offset + relative

    def _check_entries(self, n: int) -> None:
        if n == 0:
            return
        base = self.base_offset
        last_timestamp, last_offset = self._last_entry
        first_timestamp = _INT64.unpack_from(self._buf, 0)[0]
        last_position = (n - 1) * _ENTRY.size
        if last_timestamp < first_timestamp:
            raise CorruptIndexError(
                f"corrupt time index: it has non-zero size but the last timestamp is {last_timestamp} "
                f"which is less than the first timestamp {first_timestamp}", self.path, last_position)
        if last_offset < base:
            raise CorruptIndexError(
                f"corrupt time index: it has non-zero size but the last offset is {last_offset} "
                f"which is less than the base offset {base}", self.path, last_position)
        # Timestamps start above NO_TIMESTAMP (only larger timestamps are appended) and strictly rise.
        previous_timestamp, previous_relative = NO_TIMESTAMP, 0
        for slot, (timestamp, relative) in enumerate(_ENTRY.iter_unpack(self._buf[:n * _ENTRY.size])):
            if timestamp <= previous_timestamp:
                raise self._corrupt(slot, (
                    f"has timestamp {timestamp}, not above the previous entry's {previous_timestamp}"
                    if slot else f"has negative timestamp {timestamp}"))
            if relative < previous_relative:
                raise self._corrupt(slot, (
                    f"has offset {base + relative}, below the previous entry's {base + previous_relative}"
                    if slot else f"has offset {base + relative} below the base offset {base}"))
            previous_timestamp, previous_relative = timestamp, relative


def peek_last_entry(path: str, base_offset: int) -> tuple[int, int] | None:
    """(timestamp, absolute offset) of the last entry of a trimmed ``.timeindex``, read with one ``pread``
    without opening it as an index (a sealed segment's largest timestamp, for retention and cleaning decisions
    over thousands of unopened segments). ``(-1, base_offset)`` for an empty file; None when the file is
    missing, its length is not a whole number of entries, or it is untrimmed (its last slot is zero: a
    preallocated file), in which case the caller opens the index instead."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        length = os.fstat(fd).st_size
        if length == 0:
            return (-1, base_offset)
        if length % _ENTRY.size:
            return None
        ts, rel = _ENTRY.unpack(os.pread(fd, _ENTRY.size, length - _ENTRY.size))
    finally:
        os.close(fd)
    if ts == 0 and rel == 0:
        return None
    return ts, base_offset + rel
