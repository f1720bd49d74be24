"""Opening partitions read-only: what ``describe``, ``consume``, ``status``, ``verify`` and every ``--dry-run``
see, without changing a byte of the log dirs.

A read-only open (``LogManager.open(config, read_only=True)``) creates no file, writes none, renames and deletes
none, and takes no lock: no lock file is created or written (the dir's ``.lock`` and the partitions' lock files
are only read, and only if they exist), the clean-shutdown marker is neither consumed nor written, no checkpoint
is written, no index is rebuilt or trimmed, no producer snapshot or ``leader-epoch-checkpoint`` is written, and no
recovery runs. Each partition is read as the next writable open would find it, in memory only:

* a swap a dead cleaner left half done, and ``.swap``/``.cleaned`` files without a record, are resolved as the
  loader would (:func:`storage_engine.log.swap.pending_plan`, :func:`storage_engine.log.swap.plan_orphans`), by
  applying the plan to the file names: each segment is read from the file that will bear its name (a ``.swap``,
  or a ``.deleted`` file a rollback gives its name back); ``.deleted`` files are otherwise ignored, never removed;
* an index file that is missing, fails Kafka's sanity checks, or points past the data is replaced, in memory, by
  an empty index (the index is sparse: a lookup then scans the segment from its start);
* the bytes at the end of the active segment that do not parse (a writer killed mid-append) are not read; the
  next writable open truncates them;
* the log start offset is the shared state's (else the checkpoint's), raised to the first segment's base except
  over offsets recorded lost (:func:`storage_engine.log.losses.kept_log_start`), and kept as is for a tiered
  topic (``remote.storage.enable``: the offsets below the first local segment are in remote storage), as the
  loader does; the
  producer state is rebuilt from the snapshots and the batches after them without writing a snapshot.

A read-only log refreshes itself as a reader does (:mod:`storage_engine.log.view`): growth of the active segment
is validated without the lock; when another process changed the set of segments (its generation moved) the
partition is read again, from scratch, as above. So read-only opens are safe while other processes write:
nothing they rely on changes. Every operation that would change the partition raises :class:`ReadOnlyError`.

Whether a dir was shut down cleanly is read, never consumed (:func:`dir_condition`): without the marker and with
no process holding the dir's lock (``/proc/locks``), the dir crashed and the next writable open recovers it; a
read-only open says so (``recovery_pending``) and answers from the files as they are.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, NoReturn

from storage_engine import layout
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.errors import (CorruptIndexError, PartitionDeletedError, PartitionMovedError, PartitionNotFoundError,
                                   StorageError, StorageIOError)
from storage_engine.log import losses, view
from storage_engine.log.locks import DELETED, LIVE, UNKNOWN, PartitionState, lock_path
from storage_engine.log.log import Log
from storage_engine.log.producer_state_manager import ProducerStateManager, rebuild
from storage_engine.log.read_only_files import (ClaimProbe, NoSegmentError, ReadOnlyDirLock, ReadOnlyError,
                                                ReadOnlyPartitionLock, ReadOnlySegment, condition_message,
                                                dir_condition, effective_segments, read_dir_checkpoints, refuse)
from storage_engine.log.segments import LogSegments
from storage_engine.segment.segment import LogSegment

# A partition whose generation moves while it is read is read again, at most this many times.
READ_ATTEMPTS = 5


class Snapshot:
    """What a read-only read of a partition found: segments, offsets, producer state, messages."""

    def __init__(self, segments: list[LogSegment], log_start_offset: int, log_end_offset: int, recovery_point: int,
                 generation: int, producer_state: ProducerStateManager, messages: list[str], last_flush_ms: int,
                 unrecorded_losses: list[losses.LostRange]):
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.generation = generation
        self.producer_state = producer_state
        self.messages = messages
        self.last_flush_ms = last_flush_ms
        self.unrecorded_losses = unrecorded_losses


def read_partition(log_dir: str, folder: str, name: str, config: LogConfig, lock: ReadOnlyPartitionLock, *,
                   recovery_point_checkpoint: int, log_start_offset_checkpoint: int, now_ms: int) -> Snapshot:
    """Read a partition as the next writable open would find it, changing nothing (module docstring). Read again
    while its generation moves under the read."""
    for _ in range(READ_ATTEMPTS):
        before = lock.read_state()
        _check_live(name, os.path.join(log_dir, folder), before)
        try:
            snap = _read_once(log_dir, folder, name, config, before, recovery_point_checkpoint,
                              log_start_offset_checkpoint, now_ms)
        except (FileNotFoundError, StorageIOError, CorruptIndexError):
            if lock.read_state().generation == before.generation:
                raise
            continue
        if lock.read_state().generation == before.generation:
            return snap
        for seg in snap.segments:
            seg.close(trim=False)
    raise StorageError(f"partition {name} kept changing while it was read ({READ_ATTEMPTS} attempts)")


def _check_live(name: str, dir_path: str, state: PartitionState) -> None:
    if state.status == LIVE:
        return
    if state.status == DELETED:
        raise PartitionDeletedError(f"partition {name} was deleted (it was in {dir_path})")
    raise PartitionMovedError(f"partition {name} moved away from {dir_path}")


def _read_once(log_dir: str, folder: str, name: str, config: LogConfig, state: PartitionState,
               rp_cp: int, lso_cp: int, now_ms: int) -> Snapshot:
    dir_path = os.path.join(log_dir, folder)
    if not os.path.isdir(dir_path):
        raise PartitionNotFoundError(f"partition {folder} does not exist in {log_dir}")
    messages: list[str] = []
    names: list[str] = []
    found = effective_segments(log_dir, folder, config, messages, names)
    segments: list[LogSegment] = list(found)
    known = state.generation != 0
    if known and state.log_start_offset != UNKNOWN:
        lso_cp = max(lso_cp, state.log_start_offset)
    # Offsets lost: those recorded, and those the next writable open will find and record (as verify finds them).
    recorded, unrecorded, _err = losses.audit(log_dir, folder, config, names,
                                              [(s.base_offset, s.size) for s in found],
                                              lso_cp if known and state.log_start_offset != UNKNOWN else None, now_ms)
    messages.extend(f"{losses.describe(r)}: found, not recorded (the next writable open records it); reads of "
                    "those offsets fail" for r in unrecorded)
    if known and state.recovery_point != UNKNOWN:
        rp_cp = min(rp_cp, state.recovery_point)
    if not segments:
        return Snapshot([], lso_cp, lso_cp, lso_cp, state.generation, ProducerStateManager(dir_path, name),
                        messages + ["no segment: the next writable open creates one"], now_ms, unrecorded)
    active = found[-1]
    if active.index_past_data():
        active.drop_indexes()    # they outran the data: read it without them
    for seg in found[:-1]:
        if seg.is_open:
            seg.release()
    # As the loader: a tiered topic keeps the recorded log start offset as is (below it, remote storage).
    log_start = (lso_cp if config.remote_storage_enable else
                 losses.kept_log_start(max(lso_cp, segments[0].base_offset), lso_cp, recorded + unrecorded))
    psm = ProducerStateManager(dir_path, name)
    # The end: the last whole batch of the active segment (a torn tail is not read).
    holder = _TailReader(name, dir_path, config, segments, psm)
    view.validate_active_tail(holder, 0, replay=False)   # type: ignore[arg-type]
    end = holder.log_end_offset
    if holder.torn_bytes:
        messages.append(f"{os.path.basename(active.path)}: {holder.torn_bytes} bytes at the end do not parse: not "
                        "read (a write in progress, or one cut short by a writer that died, which the next writable "
                        "open truncates)")
    for seg in found:
        if seg.empty & {layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX}:
            messages.append(f"{os.path.basename(seg.path)}: index missing or damaged: read without it (the next "
                            "writable open rebuilds it)")
    log_start = min(log_start, end)
    rebuild(psm, segments, log_start, end, exclusive=False)
    last_flush = state.last_flush_ms if known and state.last_flush_ms != UNKNOWN else now_ms
    return Snapshot(segments, log_start, end, min(rp_cp, end), state.generation, psm, messages, last_flush,
                    unrecorded)


class _TailReader:
    """The attributes :func:`storage_engine.log.view.validate_active_tail` reads and sets, for a reader that
    holds no lock (it never truncates: it stops short of bytes that do not parse)."""

    def __init__(self, name: str, dir_path: str, config: LogConfig, segments: list[LogSegment],
                 psm: ProducerStateManager):
        self.name, self.dir, self.config = name, dir_path, config
        self.segment_list = LogSegments(segments)
        self.producer_state = psm
        self.lock = _NoLock()
        self.view = view.PartitionView(0, 0)
        self.log_end_offset = segments[-1].base_offset
        self.recovery_point = 0
        active = segments[-1]
        self.file_size = os.stat(active.path).st_size

    @property
    def torn_bytes(self) -> int:
        active = self.segment_list.active
        return 0 if view.at_zero_tail(active, active.size) else max(0, self.file_size - active.size)


class _NoLock:
    held = False


# -- the log ---------------------------------------------------------------------------------------------------

class ReadOnlyLog(Log):
    """A :class:`Log` opened read-only (module docstring): reads, describes and plans work; every change raises
    :class:`ReadOnlyError`."""

    read_only = True

    def __init__(self, log_dir: str, topic: str, partition: int, config: LogConfig, lock: ReadOnlyPartitionLock,
                 snap: Snapshot, *, clock: Clock, folder: str | None = None, rp_cp: int = 0, lso_cp: int = 0):
        super().__init__(log_dir, topic, partition, config, lock, LogSegments(snap.segments),
                         log_start_offset=snap.log_start_offset, recovery_point=snap.recovery_point,
                         next_offset=snap.log_end_offset, generation=snap.generation, clock=clock,
                         last_flush_ms=snap.last_flush_ms, folder=folder, producer_state=snap.producer_state)
        self.load_messages = list(snap.messages)
        self._checkpoints = (rp_cp, lso_cp)
        self._adopt(snap)

    def _adopt(self, snap: Snapshot) -> None:
        self.segment_list = LogSegments(snap.segments)
        self.log_start_offset = snap.log_start_offset
        self.recovery_point = snap.recovery_point
        self.log_end_offset = snap.log_end_offset
        self.producer_state = snap.producer_state
        self.last_flush_ms = snap.last_flush_ms
        # Read by losses.ranges_of: reads of these offsets fail as reads of recorded losses do.
        self.unrecorded_losses = snap.unrecorded_losses
        self.view = view.PartitionView(snap.generation, snap.segments[-1].size if snap.segments else 0)

    def _reread(self) -> None:
        assert isinstance(self.lock, ReadOnlyPartitionLock)
        old = self.segment_list.as_list()
        snap = read_partition(self.log_dir, self.folder, self.name, self.config, self.lock,
                              recovery_point_checkpoint=self._checkpoints[0],
                              log_start_offset_checkpoint=self._checkpoints[1], now_ms=self.clock.milliseconds())
        self.retire_segments(old)
        self._adopt(snap)
        self._parked = False

    def _refresh_read_only(self) -> None:
        self._check_open()
        self._used()
        if not self.segment_list.as_list():
            view.check_live(self, self.lock.read_state())
            return
        if not self._parked and view.refresh_unlocked(self):
            return
        view.check_live(self, self.lock.read_state())
        self._reread()

    def refresh(self) -> None:
        with self.mutex:
            self._refresh_read_only()

    @contextlib.contextmanager
    def locked(self) -> Iterator[Log]:
        """No lock is taken: the view is brought up to date (without the lock, as a reader's) and held still by
        the log's mutex while the block reads it. Any change inside raises :class:`ReadOnlyError`."""
        with self.mutex:
            self._refresh_read_only()
            yield self

    def close(self, *, clean: bool = False) -> None:
        with self.mutex:
            files, self.files = self.files, None
            if files is not None:
                files.forget(self)
            for seg in self.segment_list:
                seg.close(trim=False)
            self.lock.close()

    def expire_producers(self, now_ms: int, expiration_ms: int, *, dry_run: bool = False) -> list[int]:
        if not dry_run:
            refuse("expiring producers", self.name)
        return super().expire_producers(now_ms, expiration_ms, dry_run=True)

    def _refused(self, what: str) -> NoReturn:
        refuse(what, self.name)

    def append_records(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("appending")

    def append_batches(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("appending")

    def append_end_txn(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("writing a transaction marker")

    def append_as_follower(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("appending")

    def roll(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("rolling")

    def flush(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("flushing")

    def truncate_to(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("truncating")

    def truncate_fully_and_start_at(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("truncating")

    def delete_segments_locked(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("deleting segments")

    def replace_segments(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("replacing segments")

    def delete_records(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("deleting records")

    def set_log_start_offset_from_remote(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("raising the log start offset")

    def publish(self, *, bump: bool) -> None:
        self._refused("publishing the shared state")

    def roll_locked(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("rolling")

    def flush_locked(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("flushing")

    def delete_segment_files(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("deleting segment files")

    def maybe_roll(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("rolling")


def open_read_only(log_dir: str, topic: str, partition: int, config: LogConfig, *, clock: Clock,
                   recovery_point_checkpoint: int = 0, log_start_offset_checkpoint: int = 0,
                   folder: str | None = None) -> ReadOnlyLog:
    """Open a partition's log read-only (module docstring). Raises :class:`PartitionNotFoundError` when its
    folder is not there, :class:`PartitionDeletedError`/:class:`PartitionMovedError` when its lock says so."""
    folder = folder or layout.partition_dir_name(topic, partition)
    lock = ReadOnlyPartitionLock(lock_path(log_dir, folder))
    name = layout.partition_dir_name(topic, partition)
    snap = read_partition(log_dir, folder, name, config, lock, recovery_point_checkpoint=recovery_point_checkpoint,
                          log_start_offset_checkpoint=log_start_offset_checkpoint, now_ms=clock.milliseconds())
    if not snap.segments:
        raise NoSegmentError("no segment, nothing to read (the next writable open creates one)")
    return ReadOnlyLog(log_dir, topic, partition, config, lock, snap, clock=clock,
                       folder=None if folder == name else folder, rp_cp=recovery_point_checkpoint,
                       lso_cp=log_start_offset_checkpoint)


def find_and_open(log_dirs: list[str], topic: str, partition: int, config: LogConfig,
                  clock: Clock) -> ReadOnlyLog | None:
    """The partition's log, read-only, from the first of ``log_dirs`` holding its folder; None if none does (a
    move another process left half done is not finished here: the live copy is read)."""
    name = layout.partition_dir_name(topic, partition)
    for d in log_dirs:
        if not os.path.isdir(os.path.join(d, name)):
            continue
        rp_cp, lso_cp, _ = read_dir_checkpoints(d)
        try:
            return open_read_only(d, topic, partition, config, clock=clock,
                                  recovery_point_checkpoint=rp_cp.get((topic, partition), 0),
                                  log_start_offset_checkpoint=lso_cp.get((topic, partition), 0))
        except (PartitionDeletedError, PartitionMovedError, PartitionNotFoundError, NoSegmentError):
            continue
    return None


# What the read-only open is made of, for its callers (the manager, dir loading, status, the cleaner's dry run).
__all__ = ["ClaimProbe", "NoSegmentError", "ReadOnlyDirLock", "ReadOnlyError", "ReadOnlyLog", "ReadOnlyPartitionLock",
           "ReadOnlySegment", "condition_message", "dir_condition", "effective_segments", "find_and_open", "open_read_only",
           "read_dir_checkpoints", "read_partition", "refuse"]
