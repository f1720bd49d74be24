"""The ``.index`` file: Kafka's offset index, mapping offsets to byte positions in the segment's ``.log``.

Byte layout
-----------
A flat array of 8-byte entries, no header, no checksum, all integers big-endian (Java's
``ByteBuffer`` default)::

    byte 0..3   int32  relative offset = offset - base_offset, in [0, 2**31 - 1]
    byte 4..7   int32  position: byte position in the .log file where the indexed batch starts

Relative offsets strictly increase from entry to entry; positions increase with them.

Meaning and the sparse rule
---------------------------
An entry (O, P) says: the append (or, when rebuilt by recovery, the batch) whose *last* offset is O
starts at byte P. The index is sparse; *when* to add an entry is the segment's decision
(``index.interval.bytes`` of data since the previous entry, never on a segment's first append), not
this module's. :meth:`OffsetIndex.lookup` returns the largest entry with offset <= target, or
``(base_offset, 0)``; the segment then scans the ``.log`` from that position.

Because the first append of a segment is never indexed, a real entry has relative offset >= 1 and
position > 0, so it is never all zero; an all-zero slot is the preallocated tail (see below).

File life cycle (shared with ``.timeindex``, see :mod:`storage_engine.segment.index_file`)
-----------------------------------------------------------------------------------
* A new file is preallocated with zeros to ``floor(max_index_size / 8) * 8`` bytes
  (``segment.index.bytes``, default 10 MiB = 1,310,720 entries); entries are written with ``pwrite``.
* On roll and close it is trimmed to ``entries * 8`` bytes, so a closed segment's index is exactly
  its entries and ``entries = length / 8`` as Kafka assumes.
* On open, ``entries`` is the number of leading non-zero slots (== ``length / 8`` for a trimmed
  file), so the index of a segment still being appended to (zero tail) can be opened by readers in
  other processes; :meth:`~OffsetIndex.refresh` re-counts after more appends.
* After a crash the index is not trusted: the loader rebuilds it from the ``.log`` for every segment
  from the recovery point on, and for any segment whose index fails :meth:`~OffsetIndex.sanity_check`.
"""
from __future__ import annotations

import struct

from storage_engine.segment.index_file import DEFAULT_MAX_INDEX_SIZE, INT32_MAX, Column, IndexFile
from storage_engine.errors import CorruptIndexError, InvalidOffsetError

_ENTRY = struct.Struct(">ii")  # relative offset, position
_INT32 = struct.Struct(">i")
_OFFSET_FIELD = 0
_POSITION_FIELD = 4


class OffsetIndex(IndexFile):
    """The ``.index`` file of the segment starting at ``base_offset``."""

    ENTRY_SIZE = _ENTRY.size
    KIND = "offset index"

    def __init__(self, path: str, base_offset: int, max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
                 writable: bool = True):
        self._last_relative = 0
        super().__init__(path, base_offset, max_index_size, writable)

    def _entries_changed(self) -> None:
        self._last_relative = (
            _INT32.unpack_from(self._buf, (self.entries - 1) * _ENTRY.size)[0] if self.entries else 0)

    def _offset_column(self) -> Column:
        return _INT32.unpack_from, _OFFSET_FIELD

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or ``base_offset`` when the index is empty."""
        return self.base_offset + self._last_relative

    def append(self, offset: int, position: int) -> None:
        """Add an entry for absolute ``offset`` starting at ``position`` of the ``.log`` file.

        Raises IndexFullError if full, InvalidOffsetError unless ``offset`` is above the last entry,
        IndexOffsetOverflowError if ``offset - base_offset`` does not fit an int32.
        """
        self._check_open()
        if self.entries >= self.max_entries:
            raise self._full_error()
        if self.entries and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset {offset} to position {self.entries} no larger than the "
                f"last offset appended ({self.last_offset}) to {self.path}")
        relative = self._relative_offset(offset)
        if position < 0 or position > INT32_MAX:
            raise InvalidOffsetError(
                f"position {position} of offset {offset} is outside [0, {INT32_MAX}] ({self.path})")
        self._append_entry(_ENTRY.pack(relative, position))
        self._last_relative = relative

    def entry(self, n: int) -> tuple[int, int]:
        """The ``n``-th entry as (absolute offset, position); InvalidOffsetError if out of range."""
        self._check_slot(n)
        relative, position = _ENTRY.unpack_from(self._buf, n * _ENTRY.size)
        return self.base_offset + relative, position

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= ``target_offset``, else ``(base_offset, 0)``."""
        self._check_open()
        slot = self._floor_slot(_INT32.unpack_from, _OFFSET_FIELD, target_offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        relative, position = _ENTRY.unpack_from(self._buf, slot * _ENTRY.size)
        return self.base_offset + relative, position

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> tuple[int, int] | None:
        """The first entry whose position is >= ``start_position + fetch_size``, or None.

        A fetch starting at ``start_position`` with ``fetch_size`` bytes cannot reach past this entry.
        """
        self._check_open()
        slot = self._lower_bound(_INT32.unpack_from, _POSITION_FIELD, start_position + fetch_size)
        if slot >= self.entries:
            return None
        relative, position = _ENTRY.unpack_from(self._buf, slot * _ENTRY.size)
        return self.base_offset + relative, position

    def _check_entries(self, n: int) -> None:
        if n == 0:
            return
        base = self.base_offset
        if self._last_relative < 0:
            raise CorruptIndexError(
                f"corrupt offset index: it has non-zero size but the last offset is {self.last_offset} "
                f"which is less than the base offset {base}", self.path, (n - 1) * _ENTRY.size)
        previous_relative, previous_position = -1, 0
        for slot, (relative, position) in enumerate(_ENTRY.iter_unpack(self._buf[:n * _ENTRY.size])):
            if relative <= previous_relative:
                raise self._corrupt(slot, (
                    f"has offset {base + relative}, not above the previous entry's {base + previous_relative}"
                    if slot else f"has offset {base + relative} below the base offset {base}"))
            if position < previous_position:
                raise self._corrupt(slot, (
                    f"has position {position}, below the previous entry's {previous_position}"
                    if slot else f"has negative position {position}"))
            previous_relative, previous_position = relative, position
