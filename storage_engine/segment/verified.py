"""Verified ranges of segment files: the bytes a checked read already passed, which a fetch may send again
straight from the file (``sendfile``) without reading and checking them a second time.

A range ``[lo, hi)`` of a ``.log`` file is *verified* once every batch in it passed the checked read's CRC and
offset-order checks (:mod:`storage_engine.segment.checked_read`). A file's checked bytes never change in place:
everything that replaces bytes writes a *new* file (the cleaner's swap, a split, a directory move, and a truncation,
which rewrites the segment it cuts: :mod:`storage_engine.log.rewrite`), and retention or ``delete-records`` only
unlink files; a file that was unlinked or replaced keeps its old bytes for whoever still holds it open. The only
cuts made in place: a torn tail cut by the next lock holder (bytes from the first batch that fails these same
checks on, so never verified), and a load's recovery, which runs only while no process has the partition open (no
send can be in flight from it) and bumps the generation.

So a mark is keyed by the open file's identity ``(st_dev, st_ino)`` (a swapped-in or rewritten file is a new inode:
no mark), and holds the partition's shared *generation* (:mod:`storage_engine.log.view`) it was made at: every
truncation, by this process or another one, bumps that generation under the partition lock before it changes a
file, so a mark made at another generation is dropped instead of used (an inode number the file system gives again
to a new file, once the old one is purged, cannot inherit a mark); and a file seen shorter than its mark drops the
mark too.

A fetch decides from a mark and sends from a duplicate of the same file descriptor it checked
(:class:`~storage_engine.segment.file_slice.FileSlice`), so a swap or a deletion between the decision and the
send cannot change which bytes go out.

A walk over verified bytes trusts their batch headers only from a position known to start a batch: the start of
the range, the end of a slice already served (remembered as the offset a consumer will ask for next: exactly
where a sequential consumer's next fetch begins) or a batch end reached by such a walk or a checked scan. A
position from the offset index (derived data, possibly damaged) is trusted only once the batch there passed the
checks.

The registry is per process (marks are never shared between processes) and bounded (:data:`CAPACITY` files,
least recently used first out); losing a mark only costs one more checked read.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

CAPACITY = 65536          # files with a mark; beyond, the least recently used mark is dropped

STARTS_PER_FILE = 64      # remembered batch starts per file (the next fetch's position of recent consumers)
FileKey = tuple[int, int]   # (st_dev, st_ino) of an open file
Head = tuple[int, int, int]   # a verified batch's (size with its entry header, entry offset, last offset)
Start = tuple[int, Head | None]   # a remembered batch start: its position, and its header when the walk read it


class VerifiedRanges:
    """One verified range per file, by file identity; safe to use from several threads."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._marks: OrderedDict[FileKey, tuple[int, int, int, dict[int, Start]]] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, key: FileKey, generation: int, file_size: int) -> tuple[int, int] | None:
        """The verified ``(lo, hi)`` of the file ``key`` as it is now (``file_size`` from ``fstat`` of the open
        file, the partition's shared ``generation`` read before it), or None. A mark made at another generation,
        or above the file's size, is dropped."""
        with self._lock:
            mark = self._marks.get(key)
            if mark is None:
                return None
            lo, hi, gen, _ = mark
            if gen != generation or file_size < hi:
                del self._marks[key]
                return None
            self._marks.move_to_end(key)
            return lo, hi

    def add(self, key: FileKey, generation: int, start: int, end: int) -> None:
        """Bytes ``[start, end)`` of ``key`` passed the checks at ``generation``: joined to the mark when they touch
        it (same generation), else they replace it."""
        if end <= start:
            return
        with self._lock:
            mark = self._marks.get(key)
            starts: dict[int, Start] = {}
            if mark is not None and mark[2] == generation and start <= mark[1] and mark[0] <= end:
                start, end, starts = min(start, mark[0]), max(end, mark[1]), mark[3]
            self._marks[key] = (start, end, generation, starts)
            self._marks.move_to_end(key)
            while len(self._marks) > self.capacity:
                self._marks.popitem(last=False)

    def remember(self, key: FileKey, generation: int, offset: int, position: int, head: Head | None = None) -> None:
        """The batch holding ``offset`` starts at verified ``position`` of ``key`` (at most
        :data:`STARTS_PER_FILE` remembered per file, the oldest out first); ``head``: that batch's header as a
        walk of the verified bytes read it (verified bytes never change, so the next walk need not read it)."""
        with self._lock:
            mark = self._marks.get(key)
            if mark is None or mark[2] != generation or not mark[0] <= position <= mark[1]:
                return
            starts = mark[3]
            starts.pop(offset, None)
            starts[offset] = (position, head)
            while len(starts) > STARTS_PER_FILE:
                del starts[next(iter(starts))]

    def start_of(self, key: FileKey, generation: int, offset: int) -> int | None:
        """The remembered verified position of the batch holding ``offset`` in ``key``, or None."""
        found = self.find(key, generation, None, offset)
        return None if found is None or found[1] is None else found[1][0]

    def find(self, key: FileKey, generation: int, file_size: int | None,
             offset: int) -> tuple[tuple[int, int], Start | None] | None:
        """:meth:`lookup` (skipped when ``file_size`` is None) and the remembered start of the batch holding
        ``offset`` (position and header, None if none) in one look; None when the file has no mark."""
        with self._lock:
            mark = self._marks.get(key)
            if mark is None or mark[2] != generation:
                if mark is not None and file_size is not None:
                    del self._marks[key]
                return None
            lo, hi = mark[0], mark[1]
            if file_size is not None:
                if file_size < hi:
                    del self._marks[key]
                    return None
                self._marks.move_to_end(key)
            start = mark[3].get(offset)
            return (lo, hi), (start if start is not None and lo <= start[0] <= hi else None)

    def forget(self, key: FileKey) -> None:
        with self._lock:
            self._marks.pop(key, None)

    def __len__(self) -> int:
        return len(self._marks)


MARKS = VerifiedRanges()   # this process's marks
