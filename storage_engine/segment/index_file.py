"""Mechanics shared by the ``.index`` and ``.timeindex`` files (Kafka's ``AbstractIndex``).

Both files are flat arrays of fixed-size, big-endian entries with no header, no checksum and no
trailer. This module owns everything that does not depend on what an entry means; the two index
modules only define the entry layout, how to search it and what "sane" means for it.

Life cycle of the file
----------------------
* **New file**: created and preallocated with zeros to ``floor(max_index_size / ENTRY_SIZE) *
  ENTRY_SIZE`` bytes (``segment.index.bytes``, default 10 MiB). ``max_index_size`` smaller than one
  entry is a :class:`~storage_engine.errors.ConfigError` and no file is left behind.
* **Existing file**: opened as it is (never truncated). ``max_entries`` is ``file length //
  ENTRY_SIZE``; a trimmed file is therefore full until :meth:`IndexFile.resize` or
  :meth:`IndexFile.reset` grows it again, as in Kafka.
* **Entry count on open** (a deliberate difference from Kafka, which takes ``length // ENTRY_SIZE``
  and relies on files being trimmed on roll/close): ``entries`` is the number of leading entries
  before the first all-zero slot. If the last slot is non-zero, every slot counts, which is exactly
  Kafka's rule for trimmed files (a closed or rolled segment). Otherwise a binary search finds the
  boundary between the non-zero valid prefix and the zero preallocated tail. This lets a process open
  the index of a segment another process is still appending to, and makes an untrimmed index left by
  a crash hold only what was really written. An all-zero entry therefore cannot be recognised when it
  is the last entry of an untrimmed file; each index module says why that never loses a real entry.
  :meth:`IndexFile.refresh` repeats the count (and re-reads the last known entry and every new one)
  so a reader in another process sees entries appended since it opened the file.
* **Entries in memory**: the valid entries are read with ``pread`` into process memory and searched
  there; the file is never memory-mapped. Another process may shrink an index (a roll trims it, a
  recovery rebuilds it), and touching a mapped page past the end of a file kills the process with
  ``SIGBUS``; a copy in memory cannot fault. Only the valid entries are held, never the zero tail.
* **Append**: an entry is written with ``pwrite`` (other processes see it in the page cache without a
  flush) and into the in-memory copy, and only then counted (see Concurrency below for the order).
* **Truncate** drops entries from the end and zeroes their slots, so that "the valid prefix is
  non-zero, everything after it is zero" stays true for readers that count entries from the file.
* **Resize / trim**: :meth:`~IndexFile.resize` rounds down to a multiple of the entry size and sets the
  file length; :meth:`~IndexFile.trim_to_valid_size` resizes to ``entries *
  ENTRY_SIZE`` and runs on close, so closed segments carry no zero tail.
  :meth:`~IndexFile.reset` drops every entry and grows the file back to ``max_index_size``.
* **Crash**: indexes are derived data. After an unclean shutdown the loader rebuilds the indexes of
  every segment from the recovery point on (and of any segment whose index fails
  :meth:`~IndexFile.sanity_check`), so nothing here is fsynced except on :meth:`~IndexFile.flush`.

Concurrency: one writer (the owner of the segment, under the partition lock) and any number of
readers, in this process or in others. A reader in another process that refreshes while an append is
under way may see that one entry partly written:

* an offset-index entry is 8 bytes at an 8-aligned position, written by one ``pwrite``;
* a time-index entry is 12 bytes: the timestamp is written before the relative offset, so a torn
  entry reads as (timestamp, base_offset). A floor lookup only returns an entry whose timestamp is
  <= the target, so the answer can only point earlier, which costs a longer scan, never a skipped
  record.

The next :meth:`~IndexFile.refresh` re-reads the last entry it had, so it sees the whole entry. A
refresh only reads entries past the ones it holds: entries are removed (truncation) only by a holder
of the partition lock, which then bumps the partition's generation, and every other process reloads
its segments when the generation moves (:mod:`storage_engine.log.view`).

Errors: ``OSError`` becomes :class:`~storage_engine.errors.StorageIOError` naming the file; bad
bytes are reported by :meth:`~IndexFile.sanity_check` as
:class:`~storage_engine.errors.CorruptIndexError`. No method lets ``struct.error``/``IndexError``
escape, whatever the file holds.
"""
from __future__ import annotations

import os
from typing import Callable, Self

from storage_engine.durable import durable_rename
from storage_engine.errors import (
    ConfigError,
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    StorageIOError,
)

# segment.index.bytes (Kafka's LogConfig default), the preallocated size of a new index file.
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
INT32_MAX = 2**31 - 1

# A search reads one column of the entry array: (``Struct.unpack_from`` of the column, byte offset
# of the column inside an entry).
Column = tuple[Callable[..., tuple], int]


class IndexFile:
    """An ``ENTRY_SIZE``-byte-entry index file; its valid entries are held in ``_buf``. Subclasses define
    the entries."""

    ENTRY_SIZE: int = 0
    # Human name used in error messages ("offset index", "time index").
    KIND: str = "index"

    def __init__(self, path: str, base_offset: int, max_index_size: int, writable: bool):
        self.path = os.fspath(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self.entries = 0
        self.max_entries = 0
        self._length = 0
        self._fd = -1
        self._buf = bytearray()  # the valid entries, entries * ENTRY_SIZE bytes
        self._closed = False
        self._open()
        try:
            self._read_entries(0, self._count_valid_entries())
        except StorageIOError:
            self._release()
            raise
        self._entries_changed()

    # ---------------------------------------------------------------- subclass hooks

    def _entries_changed(self) -> None:
        """Recompute what the subclass caches about the last entry; called whenever ``entries`` changes."""

    def _offset_column(self) -> Column:
        """The column holding relative offsets (searched by :meth:`truncate_to`)."""
        raise NotImplementedError

    def _check_entries(self, n: int) -> None:
        """Raise CorruptIndexError if the first ``n`` entries break the subclass's invariants."""
        raise NotImplementedError

    # ---------------------------------------------------------------- properties

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    @property
    def length(self) -> int:
        """Current file length in bytes, including any preallocated tail."""
        return self._length

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(path={self.path!r}, base_offset={self.base_offset}, "
                f"entries={self.entries}, max_entries={self.max_entries})")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- opening

    def _open(self) -> None:
        entry_size = self.ENTRY_SIZE
        flags = os.O_RDWR if self.writable else os.O_RDONLY
        created = False
        try:
            if self.writable:
                try:
                    self._fd = os.open(self.path, flags)   # the usual case: one open call
                except FileNotFoundError:
                    try:
                        self._fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                        created = True
                    except FileExistsError:
                        self._fd = os.open(self.path, flags)
            else:
                # A reader never creates files: a missing index is the owner's business.
                self._fd = os.open(self.path, flags)
            if created:
                if self.max_index_size < entry_size:
                    os.close(self._fd)
                    self._fd = -1
                    os.unlink(self.path)
                    raise ConfigError(
                        f"invalid max index size {self.max_index_size} for {self.path}: "
                        f"segment.index.bytes must be at least the entry size {entry_size}")
                os.ftruncate(self._fd, self.max_index_size - self.max_index_size % entry_size)
            self._set_length(os.fstat(self._fd).st_size)
        except OSError as exc:
            self._release()
            raise StorageIOError(f"cannot open {self.KIND}", self.path, exc) from exc

    def _set_length(self, length: int) -> None:
        self._length = length
        self.max_entries = length // self.ENTRY_SIZE

    def _read_entries(self, keep: int, count: int) -> None:
        """Hold entries [0, count): keep the first ``keep`` held ones (callers pass ``keep <= entries``), read the
        rest from the file. A short read (the owner shrank the file meanwhile) keeps what was read."""
        keep = max(0, min(keep, count))
        size = self.ENTRY_SIZE
        del self._buf[keep * size:]
        if count > keep:
            try:
                data = os.pread(self._fd, (count - keep) * size, keep * size)
            except OSError as exc:
                raise StorageIOError(f"cannot read {self.KIND}", self.path, exc) from exc
            self._buf += data[:len(data) - len(data) % size]
        self.entries = len(self._buf) // size

    def _release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _check_open(self) -> None:
        if self._closed:
            raise StorageIOError(f"{self.KIND} is closed", self.path)

    def _check_writable(self, action: str) -> None:
        self._check_open()
        if not self.writable:
            raise StorageIOError(f"cannot {action}: {self.KIND} was opened read-only", self.path)

    # ---------------------------------------------------------------- entry count

    def _slot_is_empty(self, slot: int) -> bool:
        size = self.ENTRY_SIZE
        try:
            data = os.pread(self._fd, size, slot * size)
        except OSError as exc:
            raise StorageIOError(f"cannot read {self.KIND}", self.path, exc) from exc
        # A short read means the owner shrank the file meanwhile: nothing valid there.
        return len(data) < size or not any(data)

    def _count_valid_entries(self) -> int:
        """Number of leading non-zero slots, assuming a non-zero prefix and a zero tail."""
        slots = self._length // self.ENTRY_SIZE
        if slots == 0 or not self._slot_is_empty(slots - 1):
            return slots  # trimmed (or completely filled) file: Kafka's length / entry size
        lo, hi = 0, slots - 1  # the first empty slot is in [lo, hi]; hi is known to be empty
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._slot_is_empty(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def refresh(self) -> None:
        """Re-read the file's length and entry count, the last entry held (it may have been read half
        written) and every new one; a reader calls this to see another process's appends."""
        self._check_open()
        try:
            self._set_length(os.fstat(self._fd).st_size)
        except OSError as exc:
            raise StorageIOError(f"cannot refresh {self.KIND}", self.path, exc) from exc
        self._read_entries(self.entries - 1, self._count_valid_entries())
        self._entries_changed()

    # ---------------------------------------------------------------- writing

    def _relative_offset(self, offset: int) -> int:
        relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit the {self.KIND} of base offset {self.base_offset}: "
                f"relative offset {relative} is outside [0, {INT32_MAX}] ({self.path})")
        return relative

    def _full_error(self) -> IndexFullError:
        return IndexFullError(
            f"attempt to append to a full {self.KIND} (size = {self.entries}) ({self.path})")

    def _append_entry(self, packed: bytes, head_size: int = 0) -> None:
        """Write one packed entry at slot ``entries`` and count it. The caller has validated it.

        With ``head_size`` the first ``head_size`` bytes are stored before the rest (see the
        module docstring on readers racing an append); otherwise the entry is one copy.
        """
        if self.entries >= self.max_entries:
            raise self._full_error()
        self._check_writable("append")
        start = self.entries * self.ENTRY_SIZE
        # Written before it is counted, so this process never counts a slot not yet written.
        try:
            if head_size:
                os.pwrite(self._fd, packed[:head_size], start)
                os.pwrite(self._fd, packed[head_size:], start + head_size)
            else:
                os.pwrite(self._fd, packed, start)
        except OSError as exc:
            raise StorageIOError(f"cannot append to {self.KIND}", self.path, exc) from exc
        self._buf += packed
        self.entries += 1

    def append_packed(self, data: bytes) -> None:
        """Write entries already packed as the file stores them (recovery's compiled walk built and checked them
        against the same rules as the subclass's append) after the last one, in one copy, and count them."""
        n = len(data) // self.ENTRY_SIZE
        if n == 0:
            return
        if self.entries + n > self.max_entries:
            raise self._full_error()
        self._check_writable("append")
        start = self.entries * self.ENTRY_SIZE
        packed = bytes(data[:n * self.ENTRY_SIZE])
        try:  # written with pwrite, as one entry is: the file is never mapped (module docstring)
            os.pwrite(self._fd, packed, start)
        except OSError as exc:
            raise StorageIOError(f"cannot append to {self.KIND}", self.path, exc) from exc
        self._buf += packed
        self.entries += n
        self._entries_changed()

    def rewrite(self, data: bytes) -> None:
        """Make the file exactly these packed entries (trimmed), in one write: recovery of a segment no other
        process has open, whose entries the compiled walk built and checked."""
        self._check_writable("rewrite")
        n = len(data) // self.ENTRY_SIZE
        packed = bytes(data[:n * self.ENTRY_SIZE])
        try:
            os.ftruncate(self._fd, n * self.ENTRY_SIZE)
            if n:
                os.pwrite(self._fd, packed, 0)
        except OSError as exc:
            raise StorageIOError(f"cannot rewrite {self.KIND}", self.path, exc) from exc
        self._set_length(n * self.ENTRY_SIZE)
        self._buf[:] = packed
        self.entries = n
        self._entries_changed()

    def _truncate_to_entries(self, n: int) -> None:
        if n >= self.entries:
            return
        self._check_writable("truncate")
        start, end = n * self.ENTRY_SIZE, self.entries * self.ENTRY_SIZE
        # Zero the dropped slots so a reader counting the non-zero prefix does not resurrect them.
        try:
            os.pwrite(self._fd, bytes(end - start), start)   # entries <= max_entries: the slots are in the file
        except OSError as exc:
            raise StorageIOError(f"cannot truncate {self.KIND}", self.path, exc) from exc
        del self._buf[start:]
        self.entries = n
        self._entries_changed()

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; a no-op when ``offset`` is past the last entry.

        Kafka's three cases: no entry <= offset -> all removed; an entry == offset -> it and all later
        ones removed; otherwise everything after the largest entry < offset removed.
        """
        self._check_open()
        unpack, field = self._offset_column()
        self._truncate_to_entries(self._lower_bound(unpack, field, offset - self.base_offset))

    def packed_entries_below(self, offset: int) -> bytes:
        """The entries :meth:`truncate_to` (``offset``) keeps, packed as the file stores them (a truncation by
        rewrite writes them into the new segment's index)."""
        self._check_open()
        unpack, field = self._offset_column()
        return bytes(self._buf[:self._lower_bound(unpack, field, offset - self.base_offset) * self.ENTRY_SIZE])

    def reset(self) -> None:
        """Drop every entry and grow the file back to ``max_index_size`` (Kafka's ``reset``)."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def rounded(self, size: int) -> int:
        """``size`` rounded down to whole entries: the length :meth:`resize` gives the file."""
        return size - size % self.ENTRY_SIZE

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to whole entries and remap.

        Returns False if the length is unchanged. Entries that no longer fit are dropped (Kafka
        would fail instead; nothing in the engine shrinks an index below its entries).
        """
        if new_size < 0:
            raise ConfigError(f"invalid index size {new_size} for {self.path}: must be >= 0")
        rounded = self.rounded(new_size)
        self._check_open()
        if rounded == self._length:
            return False
        self._check_writable("resize")
        try:
            os.ftruncate(self._fd, rounded)
        except OSError as exc:
            raise StorageIOError(f"cannot resize {self.KIND} to {rounded} bytes", self.path, exc) from exc
        self._set_length(rounded)
        if self.entries > self.max_entries:
            self._read_entries(self.max_entries, self.max_entries)
            self._entries_changed()
        return True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated zero tail: the file keeps exactly ``entries`` entries."""
        self.resize(self.entries * self.ENTRY_SIZE)

    def flush(self) -> None:
        """Write the entries and the file length to disk (fsync)."""
        self._check_open()
        if not self.writable:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageIOError(f"cannot flush {self.KIND}", self.path, exc) from exc

    def close(self, trim: bool = True) -> None:
        """Trim to the valid size (if writable and ``trim``) and unmap. Closing twice is a no-op.

        ``trim=False`` is Kafka's ``closeHandler``: for a process that must leave the preallocated tail
        to another process still appending through its own mapping.
        """
        if self._closed:
            return
        try:
            if trim and self.writable:
                self.trim_to_valid_size()
        finally:
            self._release()
            self._closed = True

    def rename_to(self, new_path: str) -> None:
        """Rename the file (e.g. adding ``.deleted``); a missing file is tolerated, as for a lazy index."""
        new_path = os.fspath(new_path)
        durable_rename(self.path, new_path, sync=False, missing_ok=True)
        self.path = new_path

    def delete_if_exists(self) -> bool:
        """Close and remove the file; returns False if it did not exist. The index is closed afterwards."""
        self._release()
        self._closed = True
        try:
            os.remove(self.path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageIOError(f"cannot delete {self.KIND}", self.path, exc) from exc
        return True

    # ---------------------------------------------------------------- checks

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` naming the file if it breaks the index invariants.

        Kafka's checks (last entry not below the base offset, time index last timestamp not below the
        first, length a whole number of entries) plus an ordering scan of every entry, so that
        entries going backwards anywhere are caught, not only at the end.
        """
        self._check_open()
        self._check_entries(self.entries)
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"corrupt {self.KIND}: file length {self._length} is not a multiple of the entry "
                f"size {self.ENTRY_SIZE}", self.path, self._length)

    def _corrupt(self, slot: int, what: str) -> CorruptIndexError:
        return CorruptIndexError(f"corrupt {self.KIND}: entry {slot} {what}", self.path,
                                 slot * self.ENTRY_SIZE)

    # ---------------------------------------------------------------- search

    def _check_slot(self, n: int) -> None:
        self._check_open()
        if n < 0 or n >= self.entries:
            raise InvalidOffsetError(
                f"attempt to fetch entry {n} from {self.KIND} {self.path} which has size {self.entries}")

    def _floor_slot(self, unpack: Callable[..., tuple], field: int, target: int) -> int:
        """Largest slot whose column value is <= ``target``, or -1. Column values must not decrease."""
        mm, size = self._buf, self.ENTRY_SIZE
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack(mm, mid * size + field)[0] <= target:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _lower_bound(self, unpack: Callable[..., tuple], field: int, target: int) -> int:
        """Smallest slot whose column value is >= ``target``, or ``entries`` if there is none."""
        mm, size = self._buf, self.ENTRY_SIZE
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack(mm, mid * size + field)[0] < target:
                lo = mid + 1
            else:
                hi = mid
        return lo

