"""A partition's segments and the steps that change them (Kafka's ``LocalLog``), under :class:`~storage_engine.log.log.Log`.

:class:`LocalLog` owns what is on disk and the shared state that describes it: the folder, the ordered segments,
the log start offset, the recovery point, the log end offset, the producer state, the partition lock and this
process's view of the state other processes share (:mod:`storage_engine.log.view`). Its public methods are the
steps every operation on the log is made of: take the lock with an up-to-date view (:meth:`LocalLog.locked`),
publish a change (:meth:`LocalLog.publish`), roll (:meth:`LocalLog.roll_locked`), flush
(:meth:`LocalLog.flush_locked`), remove a segment's files (:meth:`LocalLog.delete_segment_files`), park and reopen
its files. :class:`~storage_engine.log.log.Log` adds the operations (appends, reads, truncation, the cleaner's swap),
whose work lives in :mod:`storage_engine.log.appends`, :mod:`storage_engine.log.reads`,
:mod:`storage_engine.log.truncation` and :mod:`storage_engine.log.replace`; those modules take a ``LocalLog`` and
use only these public steps.

Locking rule (Kafka's ``UnifiedLog`` lock, plus a file lock for other processes):

* every method whose name ends in ``_locked`` (and :meth:`~LocalLog.publish`, :meth:`~LocalLog.maybe_roll`,
  :meth:`~LocalLog.delete_segment_files`) must be called with the partition lock held, taken through
  :meth:`LocalLog.locked` (which syncs the view first: a process never acts on a segment list another process
  changed) and held until the change is published;
* a change that renames or shrinks files (a roll, a deletion, a swap, a truncation) publishes with ``bump=True``
  before its first rename, so every other process reloads instead of trusting a list half changed;
* reads take no lock: :meth:`LocalLog.unpark_for_read` and :meth:`LocalLog.refresh` bring the view up to date,
  reloading under the lock only when another process changed the set of segments;
* threads: any number of threads may share one ``Log`` (and the ``LogManager`` that holds it). Every change takes
  the log's :attr:`LocalLog.mutex` (Kafka's ``UnifiedLog`` lock) before the partition lock, which is re-entrant
  for the thread that holds it; every step of a read (locating a segment, reading its bytes) runs under the same
  mutex, and a read that spans steps (``read_records``) or a cleaning round pins the log
  (:meth:`LocalLog.pinned`): a segment another thread removes meanwhile is renamed at once but closed only when
  the last pin ends, as another process would keep reading a file it has open. Parking a log's files
  (:mod:`storage_engine.log.open_logs`) skips a log another thread is using. A read that fails because another
  thread or process changed the segments since it began is retried on the fresh view;
* several processes, each with its own ``Log``, are safe together through the partition lock's ``flock``.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from storage_engine import crashpoints, layout
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.durable import fsync_dir
from storage_engine.errors import LogLockedError, PartitionDeletedError, PartitionMovedError, StorageError
from storage_engine.log import manifest, view
from storage_engine.log.failure import LogDirFailureChannel
from storage_engine.log.locks import LIVE, PartitionLock, lock_path
from storage_engine.log.open_logs import OpenLogs
from storage_engine.log.producer_state_manager import ProducerStateManager
from storage_engine.log.segments import LogSegments
from storage_engine.log.view import PartitionView
from storage_engine.segment.leader_epoch import LeaderEpochFileCache
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.slice_read import WouldBlock, is_nonblocking

logger = logging.getLogger(__name__)

# The view generation of a parked log: never one the shared state holds (>= 0), so the next sync reloads.
PARKED_GENERATION = -2

F = TypeVar("F", bound=Callable[..., Any])


def guarded(method: F) -> F:
    """Run a log operation under the log's failure channel: refused while its log dir is offline; an I/O error
    takes the dir offline (see :mod:`storage_engine.log.failure`)."""
    @functools.wraps(method)
    def run(self: LocalLog, *args: Any, **kwargs: Any) -> Any:
        if self.failures is None:
            return method(self, *args, **kwargs)
        with self.failures.guard(self):
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


class LocalLog:
    """The segments of one partition in ``<log_dir>/<topic>-<partition>`` and the steps that change them (module
    docstring: the locking rule)."""

    MAX_FOLLOWED_MOVES = 8  # a partition moved again and again while one lock was awaited

    def __init__(self, log_dir: str, topic: str, partition: int, config: LogConfig, lock: PartitionLock,
                 segments: LogSegments, *, log_start_offset: int, recovery_point: int, next_offset: int,
                 generation: int, clock: Clock, last_flush_ms: int, folder: str | None = None,
                 producer_state: ProducerStateManager | None = None):
        self.log_dir = log_dir
        self.topic = topic
        self.partition = partition
        self.name = layout.partition_dir_name(topic, partition)
        # The folder: the partition's name, or the -future folder of a copy being made for a move.
        self.folder = folder or self.name
        self.dir = os.path.join(log_dir, self.folder)
        # () -> (log dir, folder) where the partition lives now; None: a moved partition is not followed.
        self.relocate: Callable[[], tuple[str, str]] | None = None
        self.failures: LogDirFailureChannel | None = None
        self.deleted = False    # closed because this process deleted the partition
        self.config = config
        self.lock = lock
        self.segment_list = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.log_end_offset = next_offset
        self.last_flush_ms = last_flush_ms
        self.clock = clock
        self.view = PartitionView(generation, segments.active.size if len(segments) else 0)
        self.producer_state = producer_state if producer_state is not None else ProducerStateManager(self.dir,
                                                                                                      self.name)
        self.files: OpenLogs | None = None   # the manager's bound on logs with open files (None: unbounded)
        # Kafka's leader epoch cache over the partition's leader-epoch-checkpoint (read when first needed).
        self.leader_epochs = LeaderEpochFileCache(os.path.join(self.dir, layout.LEADER_EPOCH_CHECKPOINT))
        self._parked = False
        # The threads of this process: one lock per log (Kafka's UnifiedLog lock), taken before the partition
        # lock by every change and around every step of a read; pins keep removed segments' files open.
        self.mutex = threading.RLock()
        self._pins = 0
        self._retired: list[LogSegment] = []

    # -- open files -------------------------------------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self._parked

    def park(self) -> bool:
        """Close every file of this idle log (segments, lock file); False if its lock is held. The next use
        reopens them through a reload of the segment list, as after another process changed it, so nothing a
        parked log missed meanwhile is lost (see :mod:`storage_engine.log.open_logs`). False too while another
        thread is using the log (reading, changing or cleaning it)."""
        if not self.mutex.acquire(blocking=False):
            return False
        try:
            if self.lock.busy or self._pins:
                return False
            for seg in self.segment_list:
                try:
                    seg.release()   # lazy again: an attribute read before the reload reopens what it needs
                except OSError:     # the segment went meanwhile (another process): the reload finds out
                    seg.close_quietly()
            self.lock.park()
            self.view.generation = PARKED_GENERATION   # never a real generation: the next sync reloads
            self._parked = True
            return True
        finally:
            self.mutex.release()

    def release_sealed(self) -> None:
        """Close the files of the sealed segments a read or a cleaning round opened (they reopen on their next
        use); not while the lock is held (a change to the segments may be using them), nor while another thread
        reads or cleans the log."""
        if not self.mutex.acquire(blocking=False):
            return
        try:
            if self.lock.busy or self._pins:
                return
            for seg in self.segment_list.as_list()[:-1]:
                if seg.is_open:
                    try:
                        seg.release()
                    except OSError:    # the segment went meanwhile (another process): the next reload finds out
                        seg.close_quietly()
        finally:
            self.mutex.release()

    def retire_segments(self, segments: list[LogSegment]) -> None:
        """Close segments this log no longer lists (deleted, swapped out, or replaced by a reload); while the log
        is pinned, only once the last pin ends (a pinned reader or cleaner may still be reading them)."""
        if self._pins:
            self._retired.extend(segments)
        else:
            for seg in segments:
                seg.close(trim=False)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[LocalLog]:
        """Keep the files of every segment of this log open while the block runs, as another process keeps a file
        it has open after a rename: a segment another thread removes meanwhile (retention, a swap, truncation) is
        renamed ``.deleted`` at once but closed only when the last pin ends. A reader iterating over segments and
        the cleaner copying sealed ones pin the log; neither holds its lock meanwhile."""
        with self.mutex:
            self._pins += 1
        try:
            yield self
        finally:
            with self.mutex:
                self._pins -= 1
                retired, self._retired = (self._retired, []) if not self._pins else ([], self._retired)
            for seg in retired:
                seg.close_quietly()

    def _used(self) -> None:
        if self.files is not None:
            self.files.used(self)

    def _used_now(self) -> bool:
        """:meth:`_used` without waiting or touching a file (``OpenLogs.used_now``); False if that cannot be."""
        return self.files is None or self.files.used_now(self)

    def unpark_for_read(self) -> None:
        """Before a read without the lock: count this log as used, and reopen a parked log's files. Inside
        :func:`~storage_engine.segment.slice_read.nonblocking` (the broker's event loop) a parked log, or a count
        that would wait or close files, raises :class:`WouldBlock` instead."""
        with self.mutex:
            if is_nonblocking():
                if self._parked or not self._used_now():
                    raise WouldBlock(f"{self.name}: parked, or the open-logs list is busy or must change files")
                return
            self._used()
            if self._parked:
                self.refresh()

    @property
    def is_future(self) -> bool:
        return self.folder != self.name

    @contextlib.contextmanager
    def locked(self) -> Iterator[LocalLog]:
        """Hold the partition lock with an up-to-date view (following the partition if it moved). Re-entrant: an
        inner ``locked()`` of the same log neither waits nor syncs again. Other threads wait on the log's
        :attr:`mutex`, other processes on the partition lock's ``flock``."""
        guard = self.failures.guard(self) if self.failures is not None else contextlib.nullcontext()
        with guard, self.mutex:
            self._acquire_synced()
            try:
                yield self
            finally:
                self.lock.release()

    @contextlib.contextmanager
    def locked_now(self) -> Iterator[LocalLog]:
        """:meth:`locked` without waiting, for a caller that must not (the broker's event loop): raises
        :class:`~storage_engine.segment.slice_read.WouldBlock`, having changed nothing, unless the log's dir is
        online, its mutex free, the log and its lock file open (not parked), counted as used without waiting or
        closing another log's files (``OpenLogs.used_now``), the partition lock free of other processes, and this
        process's view current (:func:`storage_engine.log.view.check_current`: no reload, no bytes of another
        process to validate, no index to grow). Not re-entrant. Inside, as under
        :meth:`locked`, an I/O error takes the dir offline."""
        failures = self.failures
        if failures is not None and failures.is_offline(self.log_dir):
            raise WouldBlock(f"{self.name}: its log dir is offline")
        if not self.mutex.acquire(blocking=False):
            raise WouldBlock(f"{self.name} is busy in another thread")
        try:
            lock = self.lock
            if self._parked or lock.parked or not lock.is_open or lock.held:
                raise WouldBlock(f"{self.name} is parked, closed or already locked")
            if not self._used_now():
                raise WouldBlock(f"{self.name}: the open-logs list is busy or must change files")
            try:
                lock.acquire(blocking=False)
            except LogLockedError:
                raise WouldBlock(f"{self.name} is locked by another process") from None
            try:
                guard = failures.guard(self) if failures is not None else contextlib.nullcontext()
                with guard:
                    view.check_current(self)
                    yield self
            finally:
                lock.release()
        finally:
            self.mutex.release()

    def _check_open(self) -> None:
        if not self.lock.is_open:
            if self.deleted:
                raise PartitionDeletedError(f"partition {self.name} was deleted (it was in {self.dir})")
            raise StorageError(f"the log of {self.name} in {self.dir} is closed")

    def _acquire_synced(self) -> None:
        self._check_open()
        if not self.lock.held:
            self._used()
            self._parked = False   # the sync below reloads a parked log
        for _ in range(self.MAX_FOLLOWED_MOVES):
            try:
                self.lock.acquire()
            except PartitionMovedError:   # parked while the partition moved or was deleted: look it up again
                if self.relocate is None:
                    raise
                self._follow_move()
                continue
            if self.lock.depth > 1:
                return
            try:
                view.sync(self, self.clock.milliseconds())
                return
            except PartitionMovedError:
                self.lock.release()
                if self.relocate is None:
                    raise
                self._follow_move()
            except BaseException:
                self.lock.release()
                raise
        raise StorageError(f"partition {self.name} kept moving between log dirs while this process waited")

    def _follow_move(self) -> None:
        """Re-point this log at the partition's new home (the lock is not held); the next sync reloads it."""
        assert self.relocate is not None
        log_dir, folder = self.relocate()
        logger.info("%s moved from %s to %s", self.name, self.dir, os.path.join(log_dir, folder))
        new_lock = PartitionLock(lock_path(log_dir, folder))
        self.retire_segments(self.segment_list.as_list())
        self.lock.close()
        self.lock = new_lock
        self.log_dir, self.folder = log_dir, folder
        self.dir = os.path.join(log_dir, folder)
        # The state is rebuilt from the new folder's snapshots by the reload the next sync does.
        self.producer_state = ProducerStateManager(self.dir, self.name)
        self.leader_epochs = LeaderEpochFileCache(os.path.join(self.dir, layout.LEADER_EPOCH_CHECKPOINT))
        self.view.generation = -1  # never a real generation: the next sync reloads from the new folder

    def publish(self, *, bump: bool) -> None:
        """Write this process's view of the shared state to the lock file (lock held); ``bump`` moves the
        generation, so every other process reloads the segment list before it acts (:func:`storage_engine.log.view.publish`)."""
        view.publish(self, bump=bump)

    @guarded
    def refresh(self) -> None:
        """Bring a reader's view up to date: without the lock while only the active segment grew, under it when
        another process changed the set of segments (see :mod:`storage_engine.log.view`)."""
        with self.mutex:
            self._check_open()
            self._used()
            if not self._parked and view.refresh_unlocked(self):
                return
            if self.lock.held:
                view.sync(self, self.clock.milliseconds())
            else:
                with self.locked():
                    pass

    # -- segment access ---------------------------------------------------------------------------------------
    @property
    def segments(self) -> list[LogSegment]:
        return self.segment_list.as_list()

    @property
    def active_segment(self) -> LogSegment:
        return self.segment_list.active

    @property
    def generation(self) -> int:
        return self.view.generation

    def view_holds(self, *, now: bool = False) -> bool:
        """Whether no change by another process has begun since this process's view of the partition was loaded
        (the shared generation, bumped before any file is renamed or cut, is still the view's, and the partition
        live): checked last by a read that went on to look files up by path (a ``read_committed`` fetch's
        ``.txnindex`` files). ``now``: without opening the lock file (the event loop): False while it is parked."""
        state = self.lock.read_state_open() if now else self.lock.read_state()
        return state is not None and state.status == LIVE and state.generation == self.view.generation

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def remote_log_enabled(self) -> bool:
        """Whether the topic keeps remote copies of its sealed segments (``remote.storage.enable``): its log start
        offset may then lie below its first local segment, the offsets in between being read from the remote copy."""
        return self.config.remote_storage_enable

    @property
    def local_log_start_offset(self) -> int:
        """Kafka's ``localLogStartOffset``: the first offset a local segment holds, the first segment's base (or the
        log start offset when above it). Below it and at or above the log start offset, a tiered topic's records
        are only in remote storage; elsewhere it equals the log start offset (unless offsets were lost below the
        first segment, :mod:`storage_engine.log.losses`)."""
        first = self.segment_list[0].base_offset if len(self.segment_list) else self.log_start_offset
        return max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction, else the high watermark."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def floor_segment(self, offset: int) -> LogSegment | None:
        return self.segment_list.floor(offset)

    def size_in_bytes(self) -> int:
        return self.segment_list.size_in_bytes()

    # -- rolling ----------------------------------------------------------------------------------------------
    def max_segment_ms(self) -> int:
        cfg = self.config
        if cfg.compact and cfg.max_compaction_lag_ms > 0:
            return min(cfg.max_compaction_lag_ms, cfg.segment_ms)
        return cfg.segment_ms

    def roll_reason(self, size: int, max_ts: int, last_offset: int, now: int) -> str | None:
        """Why an append of ``size`` bytes up to ``last_offset`` must roll first (Kafka's ``shouldRoll``), or None."""
        return self.active_segment.should_roll(segment_bytes=self.config.segment_bytes,
                                               max_segment_ms=self.max_segment_ms(), messages_size=size,
                                               max_timestamp=max_ts, max_offset=last_offset, now_ms=now)

    def maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> bool:
        reason = self.roll_reason(size, max_ts, last_offset, now)
        if reason is None:
            return False
        logger.info("rolling %s at offset %d (%s)", self.name, self.log_end_offset, reason)
        self.roll_locked(now)
        return True

    def roll_locked(self, now: int, base: int | None = None) -> LogSegment:
        # A copy rolls at the next batch's base when its offsets would not fit a segment at the log end.
        new_base = self.log_end_offset if base is None else max(base, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # KAFKA-6388: rolling an empty active segment keeps it
            raise StorageError(f"cannot roll {self.name}: a segment with base offset {new_base} already exists")
        if new_base < active.base_offset:
            raise StorageError(f"cannot roll {self.name} to offset {new_base}, below the active segment base "
                               f"{active.base_offset}")
        # Bump the generation before the old segment is trimmed and the new one's files exist: every later lock
        # holder then reloads from disk, even if this process dies mid-roll. Otherwise a holder with the old
        # view would go on appending to the old segment (through index maps longer than the trimmed files)
        # behind an empty newer one, and a later view would hand out those offsets again.
        self.publish(bump=True)
        crashpoints.reached("roll.published")
        active.on_become_inactive_segment()
        crashpoints.reached("roll.sealed")
        seg = LogSegment.open(self.dir, new_base, self.config, now_ms=now)
        self.segment_list.add(seg)
        self.view.known_active_size = 0
        crashpoints.reached("roll.created")
        # The producer state as of the new segment's base: what a load rebuilds from (Kafka's snapshot at roll).
        self.producer_state.map_end_offset = new_base
        self.producer_state.take_snapshot()
        # Kafka flushes everything below the new segment right after a roll (async); do it now.
        self.flush_locked(new_base, now, bump=True)
        crashpoints.reached("roll.flushed")
        # Once the new segment's files are durable: the segment manifest names it (storage_engine.log.manifest).
        manifest.grown(self)
        crashpoints.reached("roll.manifest")
        # The sealed segment's files are opened again only when it is read: a long-running appender holds
        # descriptors for the active segment only, however many segments it rolls.
        active.release()
        return seg

    # -- flushing ---------------------------------------------------------------------------------------------
    def flush_locked(self, offset: int, now: int, bump: bool = False) -> None:
        if offset > self.recovery_point:
            new_segment = False
            # Segments overlapping [recovery point, offset): start at the one holding the recovery point.
            for seg in self.segment_list.from_offset(self.recovery_point):
                if seg.base_offset >= offset:
                    break
                seg.flush()
                new_segment = new_segment or seg.base_offset >= self.recovery_point
            if new_segment:
                fsync_dir(self.dir)
            crashpoints.reached("flush.synced")
            self.recovery_point = offset
        self.last_flush_ms = now
        self.publish(bump=bump)

    def flush_due(self, now_ms: int) -> bool:
        """flush.ms: whether a time-based flush is due (and there is something unflushed)."""
        return (now_ms - self.last_flush_ms >= self.config.flush_ms
                and self.recovery_point < self.log_end_offset)

    # -- removing a segment -----------------------------------------------------------------------------------
    def delete_segment_files(self, seg: LogSegment, now: int, sync: bool = True, *, after_log: str | None = None,
                             snapshot: bool = False) -> None:
        """Remove a segment from the log (lock held): rename its files to ``.deleted`` (purged after
        ``file.delete.delay.ms``; the rename's mtime is the "scheduled at" time), with ``snapshot`` also the
        producer snapshot named by its base offset, right after them."""
        self.segment_list.remove(seg)
        seg.change_file_suffixes("", layout.DELETED_SUFFIX, after_log=after_log)
        self.retire_segments([seg])
        for p in seg.file_paths:
            try:
                os.utime(p, (now / 1000.0, now / 1000.0))
            except FileNotFoundError:
                pass
        if snapshot:
            self.producer_state.delete_snapshot(seg.base_offset, deleted_at_ms=now)
        if sync:
            fsync_dir(self.dir)
