"""Keeping one process's view of a partition current while other processes change it.

Several processes append to, roll, retain and clean the same partition. They share, through the partition's
lock file (:mod:`storage_engine.log.locks`), a small state: a *generation* bumped whenever the set of segments
or the log start offset changes, the log start offset, the recovery point and the last flush time. Each process
keeps a :class:`PartitionView` of it: the generation it last saw and how many bytes of the active segment it has
validated.

Before acting, a lock holder syncs (:func:`sync`): an unchanged generation means at most the active segment grew,
so only the new bytes are validated (and a torn tail left by a writer that died mid-append is truncated, since
its writer no longer holds the lock, and the generation bumped: the file shrank); a changed generation reloads
the segment list from the folder. A reader without the lock (:func:`refresh_unlocked`) validates growth but never
truncates, and reloads under the lock, so it never sees a roll half done. After changing the partition, the holder
publishes its view (:func:`publish`). The functions take the ``Log`` whose view they keep and touch only its state
(segment list, offsets, lock, producer state).

A reload first resolves a change another process left half done (:func:`storage_engine.log.swap.resolve`: the
process that recorded it held the lock until done, so if the record is still there, it died), and never derives
the log start offset from the files: it is the shared state's, which only retention, ``delete-records``, remote
retention and a load's checkpoint (within the log's range) move (a tiered log's start lies below its files).

The producer state travels the same way: the batches another process appended are replayed into this process's
copy as they are validated (under the lock, an ABORT marker whose ``.txnindex`` entry its writer did not live to
add gets it added), and a reload rebuilds the state from the producer snapshots
(:func:`storage_engine.log.producer_state_manager.rebuild`). So two processes appending for one producer see one state.
"""
from __future__ import annotations

import logging
from typing import Protocol

from storage_engine import crashpoints
from storage_engine.config import LogConfig
from storage_engine.errors import CorruptRecordError, PartitionDeletedError, PartitionMovedError, StorageError
from storage_engine.log import producer_state_manager as producers
from storage_engine.log import swap
from storage_engine.log.locks import DELETED, LIVE, UNKNOWN, PartitionLock, PartitionState
from storage_engine.log.producer_state_manager import ProducerStateManager
from storage_engine.log.segments import LogSegments, open_segments
from storage_engine.record.record_batch import HEADER_SIZE_UP_TO_MAGIC
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.slice_read import WouldBlock
from storage_engine.segment.time_index import TimeIndex

logger = logging.getLogger(__name__)


class PartitionView:
    """What this process last saw of a partition: the shared state's generation, and the active segment's size
    up to which its bytes were validated."""

    __slots__ = ("generation", "known_active_size")

    def __init__(self, generation: int, known_active_size: int):
        self.generation = generation
        self.known_active_size = known_active_size

    def __repr__(self) -> str:
        return f"PartitionView(generation={self.generation}, known_active_size={self.known_active_size})"


class ViewedLog(Protocol):
    """What the view functions read and update of a log (``storage_engine.log.log.Log`` has all of it)."""
    name: str
    log_dir: str
    folder: str
    dir: str
    config: LogConfig
    lock: PartitionLock
    segment_list: LogSegments
    view: PartitionView
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    last_flush_ms: int
    producer_state: ProducerStateManager

    def retire_segments(self, segments: list[LogSegment]) -> None: ...


def check_live(log: ViewedLog, state: PartitionState) -> None:
    """Raise if the partition was deleted or moved away from the folder ``log`` was opened from."""
    if state.status == LIVE:
        return
    if state.status == DELETED:
        raise PartitionDeletedError(f"partition {log.name} was deleted (it was in {log.dir})")
    raise PartitionMovedError(f"partition {log.name} moved away from {log.dir}")


def sync(log: ViewedLog, now_ms: int) -> None:
    """Bring ``log`` up to date with the shared state (caller holds the partition lock). Raises
    :class:`PartitionDeletedError` or :class:`PartitionMovedError` when the partition is no longer there."""
    state = log.lock.read_state()
    check_live(log, state)
    if state.generation != log.view.generation:
        _reload(log, state, now_ms)
        _ensure_active_index_room(log)
        return
    _adopt_offsets(log, state)
    if _active_grew(log, log.segment_list.active):
        validate_active_tail(log, log.view.known_active_size)
    _ensure_active_index_room(log)


def check_current(log: ViewedLog) -> None:
    """What :func:`sync` needs no file for (caller holds the lock without having waited for it): raise
    :class:`WouldBlock` if it would reload (the generation moved, or the partition is no longer live), validate
    bytes another process appended to the active segment (the file's length is not the validated one; a
    preallocated file always differs), open a file of the active segment, read its first batch, or grow one of
    its indexes; else adopt the shared offsets, as :func:`sync` does, and change nothing else."""
    state = log.lock.read_state()
    if state.status != LIVE or state.generation != log.view.generation:
        raise WouldBlock(f"{log.name}: the view must be reloaded")
    active = log.segment_list.active
    if not active.appendable_now:
        raise WouldBlock(f"{log.name}: the active segment's files are not open")
    known = log.view.known_active_size
    if active.log.size != known or active.log.physical_size() != known:
        raise WouldBlock(f"{log.name}: the active segment has bytes to validate")
    if _short_indexes(log):
        raise WouldBlock(f"{log.name}: an index of the active segment must grow")
    _adopt_offsets(log, state)


def refresh_unlocked(log: ViewedLog) -> bool:
    """Bring a reader's view up to date without the lock, while only the active segment grew. Returns False when
    the set of segments changed: the caller must then :func:`sync` under the lock, so a roll is never seen half
    done (the generation moves before its files exist) and a view never creates a missing index file under its
    writer."""
    state = log.lock.read_state()
    if state.generation != log.view.generation or state.status != LIVE:
        return False
    if _active_grew(log, log.segment_list.active):
        validate_active_tail(log, log.view.known_active_size)
    _adopt_offsets(log, state)
    return True


def publish(log: ViewedLog, *, bump: bool) -> None:
    """Write this process's view of the shared state (caller holds the lock); ``bump`` after a change to the set
    of segments or the log start offset."""
    if bump:
        log.view.generation += 1
    log.lock.write_state(PartitionState(log.view.generation, log.log_start_offset, log.recovery_point,
                                        log.last_flush_ms, log.lock.read_state().loaded_epoch, status=LIVE))


def _adopt_offsets(log: ViewedLog, state: PartitionState) -> None:
    if state.log_start_offset != UNKNOWN:
        log.log_start_offset = max(log.log_start_offset, state.log_start_offset)
    if state.recovery_point != UNKNOWN:
        log.recovery_point = state.recovery_point
    if state.last_flush_ms != UNKNOWN:
        log.last_flush_ms = state.last_flush_ms


def _reload(log: ViewedLog, state: PartitionState, now_ms: int) -> None:
    log.retire_segments(log.segment_list.as_list())
    resolved = bool(swap.resolve(log.log_dir, log.folder, log.dir, now_ms, orphans=False))
    segments, _ = open_segments(log.dir, log.config, now_ms, repair=False)
    if not segments:
        raise StorageError(f"partition {log.name} has no segments in {log.dir}")
    log.segment_list = LogSegments(segments)
    log.view.generation = state.generation
    # The shared state's log start offset, never the first file's base (a view that derived it from a folder a
    # dead cleaner had half renamed once published a start past 500 live keys). Only a state written by an
    # earlier version of the engine lacks it: then Kafka's load rule.
    log.log_start_offset = (state.log_start_offset if state.log_start_offset != UNKNOWN
                            else segments[0].base_offset)
    log.recovery_point = state.recovery_point if state.recovery_point != UNKNOWN else 0
    if state.last_flush_ms != UNKNOWN:
        log.last_flush_ms = state.last_flush_ms
    log.view.known_active_size = 0
    validate_active_tail(log, 0, replay=False)
    if log.log_start_offset > log.log_end_offset:
        logger.warning("%s: the shared log start offset %d is past the log end offset %d: clamped", log.name,
                       log.log_start_offset, log.log_end_offset)
        log.log_start_offset = log.log_end_offset
        resolved = True
    producers.rebuild(log.producer_state, log.segment_list.as_list(), log.log_start_offset, log.log_end_offset,
                   exclusive=False)
    if resolved:
        publish(log, bump=True)  # every other process reloads what the resolution changed


def validate_active_tail(log: ViewedLog, from_position: int, *, replay: bool = True) -> None:
    """Validate bytes of the active segment from ``from_position`` (another process appended them) and, with
    ``replay``, apply their batches to the producer state.

    Under the lock a torn or corrupt tail is truncated: its writer died, since it no longer holds the
    lock. A reader (no lock) only stops short of it."""
    active = log.segment_list.active
    # Indexes before the size: a writer indexes a batch only after writing all of it, so every entry read
    # here points at a batch inside the size read next. The other order lets a reader without the lock
    # stop in front of a batch that an entry names, and read_next_offset would find nothing after it.
    active.offset_index.refresh()
    active.time_index.refresh()
    active.log.refresh_size()
    if from_position <= 0 or from_position > active.size:
        from_position = active.last_index_position()
    pos, nxt, error = from_position, None, None
    psm = log.producer_state
    txn_index = active.txn_index if log.lock.held else None
    try:
        for batch in active.log.batches(from_position, strict=True):
            batch.ensure_valid()
            nxt = batch.next_offset
            pos += batch.size_in_bytes
            if replay and batch.magic >= 2 and batch.base_offset >= psm.map_end_offset:
                psm.replay_batch(batch, txn_index)
    except CorruptRecordError as exc:
        error = exc
    if error is not None and at_zero_tail(active, pos):
        active.log.size = pos  # the preallocated tail: keep the file as long as it is
        error = None
    held = log.lock.held
    if error is not None:
        if held:
            logger.warning("truncating %d bytes at the end of %s: %s", active.size - pos, active.path, error)
            active.log.truncate_to(pos)
            crashpoints.reached("view.truncated")
        else:
            active.log.size = pos
    if nxt is None or error is not None:
        nxt = active.read_next_offset()
    if error is not None and held:
        active.offset_index.truncate_to(nxt)
        active.time_index.truncate_to(nxt)
    if held:
        _drop_torn_time_index_entry(active)
    active.reload_tail_state()
    log.log_end_offset = nxt
    log.view.known_active_size = active.size
    if error is not None and held:
        log.recovery_point = min(log.recovery_point, nxt)
        publish(log, bump=True)  # the file shrank: every other process reloads before reading it again


def _ensure_active_index_room(log: ViewedLog) -> None:
    """Grow the active segment's indexes back to segment.index.bytes (caller holds the lock). A view opens
    a segment whose index file is missing (a writer died while creating it in a roll) or trimmed (one
    died after sealing it) with no free slot; as the active segment it must take entries, and a roll must
    be able to add the final time-index entry."""
    for index in _short_indexes(log):
        index.resize(log.config.segment_index_bytes)


def _short_indexes(log: ViewedLog) -> list[OffsetIndex | TimeIndex]:
    """The active segment's writable indexes shorter than segment.index.bytes (rounded down to whole entries)."""
    active = log.segment_list.active
    size = log.config.segment_index_bytes
    return [index for index in (active.offset_index, active.time_index)
            if index.writable and index.length < index.rounded(size)]


def _active_grew(log: ViewedLog, active: LogSegment) -> bool:
    """Whether the active segment holds bytes this view has not validated (another process appended).
    A preallocated file is longer than its data from the start: its zero tail is not growth."""
    known = log.view.known_active_size
    if active.log.refresh_size() == known:
        return False
    if at_zero_tail(active, known):
        active.log.size = known
        return False
    return True


def at_zero_tail(seg: LogSegment, position: int) -> bool:
    """Whether ``position`` starts the zero-filled tail of a preallocated ``.log`` (``preallocate=true``).
    No entry starts with a zero header, so nothing was appended there: it is neither growth nor a torn write."""
    head = seg.log.read(position, HEADER_SIZE_UP_TO_MAGIC)
    return len(head) == HEADER_SIZE_UP_TO_MAGIC and not any(head)


def _drop_torn_time_index_entry(seg: LogSegment) -> None:
    """Repair what a writer killed inside a time-index append leaves (caller holds the lock).

    An entry is stored timestamp first (see :mod:`storage_engine.segment.index_file`), so a kill between the
    two stores leaves (timestamp, base offset) as the last entry, which names no batch unless the first batch
    ends at the base offset. Entries never go back in offset, so every entry is then at the base offset: drop
    them all (the index is sparse; lookups scan from the start of the segment instead)."""
    index = seg.time_index
    if index.entries == 0 or index.last_entry[1] != seg.base_offset:
        return
    first = seg.log.batch_at(0) if seg.size else None
    if first is not None and first.last_offset == seg.base_offset:
        return
    logger.warning("dropping %d time index entries at the base offset of %s: left by a writer that died "
                   "while appending one", index.entries, index.path)
    index.truncate_to(seg.base_offset)
