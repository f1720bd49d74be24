"""The ordered segments of one log (Kafka's ``LogSegments``) and how a partition folder's files become them.

A log's segments are kept sorted by base offset; the last one is the active segment, the only one appended to.
Lookups are by offset: the floor segment of an offset holds it (if any segment does).

:func:`open_segments` is step 3 of a load (see :mod:`storage_engine.log.loader`): every ``<offset>.log`` of the
folder becomes a segment. Sealed segments whose two indexes exist stay unopened until used, so a log of 10,000
segments holds descriptors only for the active one. With ``repair`` (an exclusive load) index files without a
``.log`` are deleted and a segment whose ``.index`` is missing is reported for recovery; without it (a view of a
log another process has open) nothing on disk is deleted or rebuilt.
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.errors import StorageIOError
from storage_engine.segment.segment import LogSegment


class LogSegments:
    """Segments sorted by base offset. Not thread-safe; the owning log's lock serialises changes."""

    def __init__(self, segments: list[LogSegment] | None = None):
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        for seg in segments or ():
            self.add(seg)

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, index: int) -> LogSegment:
        return self._segments[index]

    def as_list(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def bases(self) -> list[int]:
        return list(self._bases)

    def add(self, seg: LogSegment) -> None:
        """Insert ``seg``, replacing a segment with the same base offset."""
        i = bisect.bisect_left(self._bases, seg.base_offset)
        if i < len(self._bases) and self._bases[i] == seg.base_offset:
            self._segments[i] = seg
        else:
            self._bases.insert(i, seg.base_offset)
            self._segments.insert(i, seg)

    def remove(self, seg: LogSegment) -> None:
        i = self._segments.index(seg)
        del self._segments[i]
        del self._bases[i]

    def floor_index(self, offset: int) -> int:
        """Index of the segment with the largest base offset <= ``offset`` (-1 if none)."""
        return bisect.bisect_right(self._bases, offset) - 1

    def floor(self, offset: int) -> LogSegment | None:
        i = self.floor_index(offset)
        return self._segments[i] if i >= 0 else None

    def base_after(self, seg: LogSegment) -> int | None:
        """Base offset of the segment following ``seg`` (None for the active segment)."""
        i = bisect.bisect_right(self._bases, seg.base_offset)
        return self._bases[i] if i < len(self._bases) else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segments that may hold offsets >= ``offset``: from its floor segment on."""
        return self._segments[max(0, self.floor_index(offset)):]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def close(self, *, trim: bool) -> None:
        for seg in self._segments:
            seg.close(trim=trim)


def _listing(dir_path: str) -> list[str]:
    try:
        return sorted(os.listdir(dir_path))
    except OSError as exc:
        raise StorageIOError("cannot list partition folder", dir_path, exc) from exc


def open_segments(dir_path: str, cfg: LogConfig, now_ms: int, *, repair: bool,
                  remove: Callable[[str], None] | None = None,
                  listing: list[str] | None = None) -> tuple[list[LogSegment], list[LogSegment]]:
    """(segments, segments needing recovery) of a partition folder (whose names are ``listing``, if the caller
    just listed it). ``remove(path)`` deletes a file during a repairing load (index files without a ``.log``);
    without ``repair`` nothing on disk is deleted."""
    names = _listing(dir_path) if listing is None else listing
    logs = {o for n in names if n.endswith(layout.LOG_SUFFIX) and (o := layout.named_offset(n)) is not None}
    segments, needs_recovery = [], []
    if repair and remove is not None:
        for name in names:
            if name.endswith(layout.INDEX_SUFFIXES):
                offset = layout.named_offset(name)
                if offset is not None and offset not in logs:
                    remove(os.path.join(dir_path, name))
    active_base = max(logs) if logs else None
    present = set(names)   # the listing answers "is the index there?" (no stat per file)
    for base in sorted(logs):
        prefix = layout.filename_prefix(base)
        index_missing = prefix + layout.INDEX_SUFFIX not in present
        tindex_missing = prefix + layout.TIME_INDEX_SUFFIX not in present
        # A view opens sealed segments read-only; a missing index file has to be created either way.
        writable = repair or base == active_base or index_missing or tindex_missing
        # Sealed segments with both indexes stay unopened until used (file descriptors: 10,000 segments).
        seg = LogSegment.open(dir_path, base, cfg, now_ms=now_ms, file_already_exists=True, writable=writable,
                              lazy=base != active_base and not index_missing and not tindex_missing)
        if tindex_missing:
            seg.time_index.resize(0)
        if index_missing:
            if repair:
                needs_recovery.append(seg)
            else:
                seg.offset_index.resize(0)
        segments.append(seg)
    return segments, needs_recovery
