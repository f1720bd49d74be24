"""The partition's ``leader-epoch-checkpoint`` and Kafka's ``LeaderEpochFileCache`` rules over it.

The file (Kafka's ``LeaderEpochCheckpointFile``) is the checkpoint container of :mod:`.checkpoint`, version 0, one
``<epoch> <start offset>`` line per leader epoch, oldest first::

    0        version
    2        number of entries
    0 0      epoch 0 starts at offset 0
    3 1500   epoch 3 starts at offset 1500

written as every checkpoint is (:func:`storage_engine.durable.atomic_write`: ``<file>.tmp``, fsync, rename, fsync
dir). Kafka creates it empty (0 bytes) with the log (:meth:`LeaderEpochCheckpointFile.create_empty`) and reads an
empty file as no entries. On read, as Kafka: entry lines split on whitespace into exactly two fields, a Java int
epoch and a Java long offset, both >= 0 (Kafka's ``assign`` refuses negatives); entries are then taken in order
through the assign rule below, so a file whose epochs or offsets go backwards reads as Kafka's cache would hold
it. Stricter than Kafka, as for the offset checkpoints: the last line must end with ``\\n``.

The cache (:class:`LeaderEpochFileCache`, Kafka's rules):

* ``assign(epoch, start)``: a no-op when ``epoch`` is the latest epoch and ``start`` is not below its start
  offset; otherwise every entry from the end whose epoch is >= ``epoch`` or whose start offset is >= ``start`` is
  removed, then ``(epoch, start)`` is added. So a new epoch at the latest entry's start offset replaces it;
* the append and recovery rule (:meth:`LeaderEpochFileCache.maybe_assign`, Kafka's ``UnifiedLog.append`` and
  ``LogSegment.recover``): a v2 batch assigns ``(its partition leader epoch, its base offset)`` only if that epoch
  is >= 0 and greater than the latest epoch;
* ``truncate_from_end(end)``: entries with start offset >= ``end`` go (``end`` < 0: nothing);
* ``truncate_from_start(start)``: entries with start offset <= ``start`` go and the last of them comes back
  starting at ``start`` (the epoch the new log start offset belongs to);
* ``clear()``: no entries (``truncateFullyAndStartAt``), written ``0\\n0\\n``.

A change is written at once (Kafka writes ``assign`` synchronously, truncations in the background), and only if
the entries changed: an append of an epoch already known costs two comparisons and no I/O.

Several processes: the file is the truth and each process's cache a copy; every change is made under the
partition lock. A process re-reads the file under the lock before it changes it (:meth:`LeaderEpochFileCache.sync`,
:meth:`LeaderEpochFileCache.maybe_assign_at`), except for the append's common case, decided without I/O: a copy
read or written at the partition's current generation whose latest epoch is not below the batch's needs no
change, because between two generations only appends change the file, and they only add newer epochs; every
change that can lower the latest epoch or move start offsets (truncation, retention, delete-records, a load)
moves the generation. A newer epoch another process assigned is thus never regressed by this process's next
append (the re-read sees it), and truncations are made on the file as it is.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import NamedTuple

from storage_engine.durable import atomic_write
from storage_engine.errors import CorruptCheckpointError, StorageIOError
from storage_engine.segment.checkpoint import format_checkpoint, parse_checkpoint, parse_java_int, \
    read_checkpoint_bytes

_log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
UNDEFINED_EPOCH = -1           # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1    # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET
NOT_READ = -3                  # the generation of a cache whose file was never read (no real generation)


class EpochEntry(NamedTuple):
    """One line of the file: ``epoch`` leads from ``start_offset``."""
    epoch: int
    start_offset: int


def parse_leader_epoch_checkpoint(data: bytes, path: str | None = None) -> list[EpochEntry]:
    """The entries of a ``leader-epoch-checkpoint``, as written (not yet passed through the assign rule). Raises
    :class:`CorruptCheckpointError` with the line and byte position."""
    def entry(parts: list[str], number: int) -> EpochEntry:
        if len(parts) != 2:
            raise ValueError("malformed line, expected '<epoch> <start offset>'")
        epoch = parse_java_int(parts[0], 0, INT_MAX)
        if epoch is None:
            raise ValueError("malformed epoch, expected an integer in [0, 2147483647]")
        offset = parse_java_int(parts[1], 0, LONG_MAX)
        if offset is None:
            raise ValueError("malformed start offset, expected an integer in [0, 2^63 - 1]")
        return EpochEntry(epoch, offset)

    return parse_checkpoint(data, path, entry)


def format_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """The bytes Kafka writes for ``entries`` (``0\\n<count>\\n<epoch> <start offset>\\n...``)."""
    return format_checkpoint([f"{e.epoch} {e.start_offset}" for e in entries])


class LeaderEpochCheckpointFile:
    """The file itself. ``write`` is safe against crashes of the writer; writers are serialised by the partition
    lock."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)

    def __repr__(self) -> str:
        return f"LeaderEpochCheckpointFile({self.path!r})"

    def read(self) -> list[EpochEntry] | None:
        """The entries as written; None if the file is missing (empty file: no entries). Raises
        :class:`CorruptCheckpointError`, :class:`StorageIOError`."""
        data = read_checkpoint_bytes(self.path)
        return None if data is None else parse_leader_epoch_checkpoint(data, self.path)

    def write(self, entries: Iterable[EpochEntry], *, sync: bool = True) -> None:
        atomic_write(self.path, format_leader_epoch_checkpoint(entries), sync=sync)

    def create_empty(self) -> None:
        """Create the file empty if it is missing (Kafka's ``CheckpointFile`` constructor, run when a log is
        created)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        except OSError as exc:
            raise StorageIOError("cannot create leader epoch checkpoint", self.path, exc) from exc
        os.close(fd)


def _assign(entries: list[EpochEntry], epoch: int, start_offset: int) -> bool:
    """Kafka's ``assign(EpochEntry)`` on a list sorted by epoch: whether it changed."""
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"invalid partition leader epoch entry (epoch {epoch}, start offset {start_offset})")
    if entries:
        latest = entries[-1]
        if latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
    # maybeTruncateNonMonotonicEntries: drop from the end while the entry is not below the new one.
    while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
        entries.pop()
    entries.append(EpochEntry(epoch, start_offset))
    return True


def _truncate_from_end(entries: list[EpochEntry], end_offset: int) -> bool:
    if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
        return False
    while entries and entries[-1].start_offset >= end_offset:
        entries.pop()
    return True


def _truncate_from_start(entries: list[EpochEntry], start_offset: int) -> bool:
    """Kafka's ``truncateFromStart``; returns whether the entries changed (Kafka's rewrite of an entry that
    already starts at ``start_offset`` changes nothing)."""
    removed = 0
    while removed < len(entries) and entries[removed].start_offset <= start_offset:
        removed += 1
    if removed == 0:
        return False
    last = entries[removed - 1]
    del entries[:removed]
    entries.insert(0, EpochEntry(last.epoch, start_offset))
    return removed > 1 or last.start_offset != start_offset


class LeaderEpochFileCache:
    """Kafka's ``LeaderEpochFileCache`` of one partition, over its ``leader-epoch-checkpoint`` (module docstring:
    the rules, and how several processes share the file). Every mutator is called with the partition lock held
    and writes the file when the entries change (``write=False``: later, by :meth:`flush`)."""

    __slots__ = ("checkpoint", "generation", "_entries", "_latest", "_dirty")

    def __init__(self, path: str | os.PathLike[str], entries: Iterable[EpochEntry] = (), *,
                 generation: int = NOT_READ):
        self.checkpoint = LeaderEpochCheckpointFile(path)
        # The partition generation at which the entries were last read from or written to the file.
        self.generation = generation
        self._entries: list[EpochEntry] = []
        for e in entries:
            _assign(self._entries, e.epoch, e.start_offset)
        self._latest = self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH
        self._dirty = False

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.checkpoint.path!r}, {self._entries!r})"

    @property
    def path(self) -> str:
        return self.checkpoint.path

    # -- reading ---------------------------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def dirty(self) -> bool:
        """Whether the entries differ from the file (changes made with ``write=False``, or a damaged file)."""
        return self._dirty

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset`` (Kafka's ``epochForOffset``); None below the first entry."""
        found = None
        for e in self._entries:
            if e.start_offset == offset:
                return e.epoch
            if e.start_offset > offset:
                return found
            found = e.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: (the largest epoch <= ``requested_epoch``, the start offset of the first
        epoch after it), the log end offset for the latest epoch, (-1, -1) when unknown."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e in self._entries:
            if e.epoch > requested_epoch:
                break
            floor = e
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    # -- the file --------------------------------------------------------------------------------------------
    def reload(self, generation: int) -> None:
        """Read the file again (lock held) as of partition ``generation``. A missing file has no entries; a
        damaged one is reported (WARNING), read as empty and replaced by the next write."""
        try:
            raw = self.checkpoint.read()
            damaged = False
        except CorruptCheckpointError as exc:
            _log.warning("leader epoch checkpoint %s is damaged, read as empty (the next change rewrites it): %s",
                         self.path, exc)
            raw, damaged = None, True
        entries: list[EpochEntry] = []
        for e in raw or ():
            _assign(entries, e.epoch, e.start_offset)
        self._entries = entries
        self._latest = entries[-1].epoch if entries else UNDEFINED_EPOCH
        self._dirty = damaged
        self.generation = generation

    def sync(self, generation: int) -> LeaderEpochFileCache:
        """Re-read the file unless it was read or written at ``generation`` (lock held); returns self."""
        if generation != self.generation:
            self.reload(generation)
        return self

    def flush(self) -> bool:
        """Write the entries if they differ from the file; returns whether it wrote."""
        if not self._dirty:
            return False
        self.checkpoint.write(self._entries)
        self._dirty = False
        return True

    def _changed(self, write: bool) -> bool:
        self._latest = self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH
        self._dirty = True
        if write:
            self.flush()
        return True

    # -- changes (lock held) ---------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """Kafka's ``assign`` (module docstring). Raises ValueError for a negative epoch or offset."""
        return _assign(self._entries, epoch, start_offset) and self._changed(write)

    def maybe_assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """The rule of an append and of recovery: assign only an epoch >= 0 newer than the latest."""
        if epoch < 0 or epoch <= self._latest:
            return False
        return self.assign(epoch, start_offset, write=write)

    def assigns_nothing_at(self, epoch: int, generation: int) -> bool:
        """Whether :meth:`maybe_assign_at` would neither read nor write the file: the epoch is none (< 0), or
        this copy is current at ``generation`` and knows an epoch at least as new."""
        return epoch < 0 or (epoch <= self._latest and generation == self.generation)

    def maybe_assign_at(self, epoch: int, start_offset: int, generation: int) -> bool:
        """:meth:`maybe_assign` for an append at partition ``generation`` by one of several processes (lock
        held): without I/O when the copy is current and knows an epoch as new; otherwise the file is re-read
        first, so an epoch another process assigned since is never regressed."""
        if self.assigns_nothing_at(epoch, generation):
            return False
        self.reload(generation)
        return self.maybe_assign(epoch, start_offset)

    def truncate_from_end(self, end_offset: int, *, write: bool = True) -> bool:
        """Remove the entries whose start offset is >= ``end_offset`` (a truncation of the log to it)."""
        return _truncate_from_end(self._entries, end_offset) and self._changed(write)

    def truncate_from_start(self, start_offset: int, *, write: bool = True) -> bool:
        """Remove the entries wholly below the new log start ``start_offset``; the latest of those epochs
        then starts at ``start_offset``."""
        return _truncate_from_start(self._entries, start_offset) and self._changed(write)

    def clear(self, *, write: bool = True) -> bool:
        """Remove every entry and write ``0\\n0\\n`` (Kafka's ``clearAndFlush``, on a full truncation)."""
        self._entries.clear()
        return self._changed(write)
