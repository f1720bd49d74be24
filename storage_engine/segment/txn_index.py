"""The ``.txnindex`` file: the aborted transactions of one segment (Kafka's ``TransactionIndex``/``AbortedTxn``).

A flat sequence of fixed 34-byte entries, big-endian, no header, no checksum, no preallocation::

    offset size field
       0    2   version              int16 = 0 (the reader looks at the FIRST BYTE only: Kafka's quirk)
       2    8   producer_id          int64
      10    8   first_offset         int64  first offset of the aborted transaction (may lie in an earlier segment)
      18    8   last_offset          int64  offset of the ABORT marker (always inside this segment)
      26    8   last_stable_offset   int64  the LSO when the marker was written: the first offset of the earliest
                                            transaction of ANOTHER producer still open then, else last_offset + 1

One entry per ABORT marker of a non-empty transaction, in marker order, so ``last_offset`` strictly increases
(an append that breaks this is refused). The file is created by the first append (a segment without aborted
transactions has none); reading takes whole entries while at least 34 bytes remain, so a torn tail is ignored.
Recovery rebuilds the file from the segment's batches (:func:`storage_engine.segment.recovery.recover_segment`),
so it is fsynced only with its segment.

Searching (``collect_aborted_txns``): a read of [fetch offset, upper bound) needs the transactions with
``last_offset >= fetch offset`` and ``first_offset < upper bound``; an entry whose ``last_stable_offset`` is
>= the upper bound proves no later segment can hold another one that matters (the search is "complete").

Concurrency: appended only by the writer of the partition (under its lock), by ``pwrite`` at the end of the
file; readers in any process ``pread`` the file and take whole entries only.

A search (``collect_aborted_txns``, what a ``read_committed`` fetch asks) keeps the entries it read in memory, with
the file's identity then (device, inode, size, modification and change times): a search whose ``stat`` finds the
same identity takes them without opening the file, and one on the broker's event loop
(:func:`storage_engine.segment.slice_read.nonblocking`) raises :class:`~storage_engine.segment.slice_read.WouldBlock`
instead of reading. Any write in any process changes the size or the change time (which no user can set), unless
it lands within the file system's timestamp granularity of the read (a truncation and an append of the same size in
one clock tick): so entries are kept only when the file was last changed at least :data:`SETTLED_NS` before they
were read ("racy" files, as git treats them: read again until they settle), and not after the clock stepped back
behind that read. This needs a local file system (a network one's times come from another clock). Files over
:data:`KEPT_BYTES` are not kept; the other reads (``all_aborted_txns``: the loader's check, the cleaner, the
inspection tools) read the file and keep nothing.
"""
from __future__ import annotations

import os
import struct
import time
from typing import NamedTuple

from storage_engine.durable import durable_rename
from storage_engine.errors import CorruptIndexError, InvalidOffsetError, StorageIOError
from storage_engine.segment.slice_read import WouldBlock, is_nonblocking

VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
SETTLED_NS = 1_000_000_000   # entries are kept once the file has not changed for this long before the read
KEPT_BYTES = 64 * 1024       # a larger file's entries are not kept (read each time, never on the event loop)
_Identity = tuple[int, int, int, int, int]    # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = VERSION

    def encode(self) -> bytes:
        return ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset,
                          self.last_stable_offset)

    def __str__(self) -> str:
        return (f"AbortedTxn(version={self.version}, producerId={self.producer_id}, firstOffset={self.first_offset}, "
                f"lastOffset={self.last_offset}, lastStableOffset={self.last_stable_offset})")


def decode_entries(data: bytes, path: object = None) -> list[AbortedTxn]:
    """Every whole entry of ``data``; a version above 0 (read from the first byte) is a CorruptIndexError."""
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version = data[pos]
        if version > VERSION:
            raise CorruptIndexError(f"unexpected aborted transaction version {version}, current version is "
                                    f"{VERSION}", path, pos)
        _v, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        out.append(AbortedTxn(pid, first, last, lso, version))
    return out


class TxnIndexSearchResult(NamedTuple):
    aborted: list
    complete: bool


class TransactionIndex:
    """One segment's ``.txnindex``; the file is opened per operation and created by the first append."""

    def __init__(self, path: str, base_offset: int, *, writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        # the entries last read, settled: the file's identity then, when the read began, the entries
        self._kept: tuple[_Identity, int, tuple[AbortedTxn, ...]] | None = None

    # -- reading ----------------------------------------------------------------------------------------------
    def _read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise StorageIOError("cannot read transaction index", self.path, exc) from exc

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry (read from the file)."""
        return decode_entries(self._read(), self.path)

    def _entries(self) -> tuple[AbortedTxn, ...]:
        """Every entry: the ones kept from the last read while the file's identity is the same (see the module),
        else read from the file (inside ``nonblocking()``: :class:`WouldBlock` instead) and kept if settled."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise StorageIOError("cannot read transaction index", self.path, exc) from exc
        kept = self._kept
        if kept is not None and kept[0] == _identity(st) and time.time_ns() >= kept[1]:
            return kept[2]                  # (a clock stepped back before the read began: read again)
        if is_nonblocking():
            raise WouldBlock(f"{self.path} changed since it was last read, or is not kept")
        started = time.time_ns()
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read(st.st_size)       # no more than the size the identity names
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise StorageIOError("cannot read transaction index", self.path, exc) from exc
        entries = tuple(decode_entries(data, self.path))
        if (max(st.st_mtime_ns, st.st_ctime_ns) <= started - SETTLED_NS and len(data) == st.st_size
                and st.st_size <= KEPT_BYTES):
            self._kept = (_identity(st), started, entries)
        return entries

    def _forget(self) -> None:
        self._kept = None

    @property
    def entries(self) -> int:
        try:
            return os.stat(self.path).st_size // ENTRY_SIZE
        except FileNotFoundError:
            return 0

    @property
    def exists(self) -> bool:
        return os.path.exists(self.path)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns``: entries overlapping [fetch offset, upper bound); complete when one
        entry's last stable offset reaches the upper bound."""
        out = []
        for txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(out, True)
        return TxnIndexSearchResult(out, False)

    def last_offset_or_none(self) -> int | None:
        """The last entry's last offset (None when there is none)."""
        size = _size(self.path)
        if size < ENTRY_SIZE:
            return None
        try:
            with open(self.path, "rb") as f:
                f.seek(size - size % ENTRY_SIZE - ENTRY_SIZE)
                data = f.read(ENTRY_SIZE)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageIOError("cannot read transaction index", self.path, exc) from exc
        return decode_entries(data, self.path)[0].last_offset if len(data) == ENTRY_SIZE else None

    def sanity_check(self) -> None:
        """CorruptIndexError if an entry's last offset lies below the segment's base offset."""
        for n, txn in enumerate(self.all_aborted_txns()):
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} in index {self.path} is less than start offset "
                    f"{self.base_offset}", self.path, n * ENTRY_SIZE)

    # -- writing ----------------------------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Append one entry; its last offset must be above the last entry's (InvalidOffsetError)."""
        if not self.writable:
            raise StorageIOError("transaction index opened read-only", self.path)
        last = self.last_offset_or_none()
        if last is not None and txn.last_offset <= last:
            raise InvalidOffsetError(f"the last offset of appended transactions must increase sequentially, but "
                                     f"{txn.last_offset} is not greater than current last offset {last} of index "
                                     f"{self.path}")
        self._forget()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                os.pwrite(fd, txn.encode(), size - size % ENTRY_SIZE)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageIOError("cannot append to transaction index", self.path, exc) from exc

    def truncate_to(self, offset: int) -> None:
        """Drop the entries from the first one whose last offset >= ``offset`` on."""
        txns = self.all_aborted_txns()
        keep = next((i for i, t in enumerate(txns) if t.last_offset >= offset), len(txns))
        if keep == len(txns) and self.entries * ENTRY_SIZE == _size(self.path):
            return
        self._truncate_bytes(keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds them)."""
        if self.exists:
            self._truncate_bytes(0)

    def _truncate_bytes(self, size: int) -> None:
        self._forget()
        try:
            os.truncate(self.path, size)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageIOError("cannot truncate transaction index", self.path, exc) from exc

    def flush(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageIOError("cannot open transaction index", self.path, exc) from exc
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename_to(self, new_path: str) -> None:
        """Rename the file (a missing file is fine: the index is created lazily)."""
        self._forget()
        durable_rename(self.path, new_path, sync=False, missing_ok=True)
        self.path = new_path

    def delete_if_exists(self) -> None:
        self._forget()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageIOError("cannot delete transaction index", self.path, exc) from exc


def _identity(st: os.stat_result) -> _Identity:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
