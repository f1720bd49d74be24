"""One partition's log: ordered segments, appends, rolls, reads, flushes, truncation (Kafka's ``UnifiedLog``).

The :class:`Log` holds the partition's state, its lock and view, rolls, flushes and closing; the work of its other
operations lives beside it, each in a module of functions that take the log: :mod:`storage_engine.log.appends`,
:mod:`storage_engine.log.reads` and :mod:`storage_engine.log.truncation`.

Offsets: the log start offset (first readable offset, raised by delete-records and retention), the recovery
point (everything below it is fsynced), the log end offset (LEO, the next offset to assign). This engine is a
single node with no replicas, so the **high watermark is the log end offset**: every appended record is
"committed" as soon as it is written, and retention may delete up to the active segment.

Processes: every mutating operation runs under the partition lock (:mod:`storage_engine.log.locks`) and starts
by bringing this process's view up to date (:mod:`storage_engine.log.view`): a changed generation reloads the
segment list, an unchanged one only re-validates bytes another process appended to the active segment (and
truncates a torn tail left by a writer that died mid-append). Every change that renames or shrinks files (a roll,
retention, the cleaner's swap, truncation) bumps the generation before its first rename, so no process derives a
segment list or a log start offset from a change half done: a swap is moreover recorded as a pending change that
whoever finds it after its cleaner died completes or rolls back (:mod:`storage_engine.log.swap`).

Reads are checked (Kafka's consumer ``check.crcs`` and offset order, :mod:`storage_engine.segment.segment`): a
damaged or misplaced batch raises :class:`CorruptRecordError` naming the file and position, never returns data. A
read that fails because another process changed the partition under it (a segment renamed away, a torn tail cut)
retries on a fresh view: the change moved the generation before its first rename, so the refresh waits for the
lock of the process making it and then reloads. What an append may contain is decided by
:mod:`storage_engine.log.validator` before any byte is written. A ``Log`` is opened by
:func:`storage_engine.log.loader.open_log`.

Producers and transactions (:mod:`storage_engine.log.producer_state`): an append carrying a producer id is checked
against the producer state under the lock; a retried batch returns its first offsets (``AppendInfo.duplicate``)
and writes nothing. :meth:`Log.append_end_txn` writes a COMMIT/ABORT marker as the transaction coordinator
would; an ABORT of a non-empty transaction adds an entry to its segment's ``.txnindex``. The last stable offset
(LSO) is the first offset of the earliest open transaction (else the high watermark); ``read_committed`` reads
stop there and skip aborted records; no read ever returns a control record. A roll and a clean close write a
producer snapshot; truncation and retention delete the snapshots they make obsolete.

Lifecycle: a partition deleted by another process fails this process's next locked operation or refresh with
:class:`PartitionDeletedError`; a partition moved to another log dir is followed (``relocate``, given by the
``LogManager``, says where it lives now, finishing a move a crashed process left half done). With a
``failures`` channel (Kafka's ``LogDirFailureChannel``), an I/O error marks the log dir offline and every later
operation on a log of that dir raises :class:`LogDirOfflineError`.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence

from storage_engine import crashpoints, layout
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.durable import fsync_dir
from storage_engine.errors import PartitionDeletedError, PartitionMovedError, PartitionNotFoundError, StorageError
from storage_engine.log import appends, reads, swap, truncation, view
from storage_engine.log.appends import AppendInfo
from storage_engine.log.failure import LogDirFailureChannel
from storage_engine.log.locks import PartitionLock, lock_path
from storage_engine.log.open_logs import OpenLogs
from storage_engine.log.producer_state_manager import ProducerStateManager
from storage_engine.log.segments import LogSegments
from storage_engine.log.view import PartitionView
from storage_engine.record import codecs
from storage_engine.record.records import Record, SimpleRecord
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

# The view generation of a parked log: never one the shared state holds (>= 0), so the next sync reloads.
PARKED_GENERATION = -2


def _guarded(method):
    """Run a log operation under the log's failure channel: refused while its log dir is offline; an I/O error
    takes the dir offline (see :mod:`storage_engine.log.failure`)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if self.failures is None:
            return method(self, *args, **kwargs)
        with self.failures.guard(self):
            return method(self, *args, **kwargs)
    return run


class Log:
    """One partition's log in ``<log_dir>/<topic>-<partition>``. Safe to use from several processes at once (each
    with its own ``Log``); one ``Log`` object is not meant for concurrent use by several threads."""

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
        self._parked = False

    # -- open files -------------------------------------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self._parked

    def park(self) -> bool:
        """Close every file of this idle log (segments, lock file); False if its lock is held. The next use
        reopens them through a reload of the segment list, as after another process changed it, so nothing a
        parked log missed meanwhile is lost (see :mod:`storage_engine.log.open_logs`)."""
        if self.lock.held:
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

    def release_sealed(self) -> None:
        """Close the files of the sealed segments a read or a cleaning round opened (they reopen on their next
        use); not while the lock is held (a change to the segments may be using them)."""
        if self.lock.held:
            return
        for seg in self.segment_list.as_list()[:-1]:
            if seg.is_open:
                try:
                    seg.release()
                except OSError:    # the segment went meanwhile (another process): the next reload finds out
                    seg.close_quietly()

    def _used(self) -> None:
        if self.files is not None:
            self.files.used(self)

    def _unpark_for_read(self) -> None:
        self._used()
        if self._parked:
            self.refresh()

    @property
    def is_future(self) -> bool:
        return self.folder != self.name

    @contextlib.contextmanager
    def locked(self):
        """Hold the partition lock with an up-to-date view (following the partition if it moved)."""
        guard = self.failures.guard(self) if self.failures is not None else contextlib.nullcontext()
        with guard:
            self._acquire_synced()
            try:
                yield self
            finally:
                self.lock.release()

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
            if self.lock._depth > 1:
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
        self.segment_list.close(trim=False)
        self.lock.close()
        self.lock = new_lock
        self.log_dir, self.folder = log_dir, folder
        self.dir = os.path.join(log_dir, folder)
        # The state is rebuilt from the new folder's snapshots by the reload the next sync does.
        self.producer_state = ProducerStateManager(self.dir, self.name)
        self.view.generation = -1  # never a real generation: the next sync reloads from the new folder

    def _publish(self, *, bump: bool) -> None:
        view.publish(self, bump=bump)

    @_guarded
    def refresh(self) -> None:
        """Bring a reader's view up to date: without the lock while only the active segment grew, under it when
        another process changed the set of segments (see :mod:`storage_engine.log.view`)."""
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

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction, else the high watermark."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def floor_segment(self, offset: int) -> LogSegment | None:
        return self.segment_list.floor(offset)

    def size_in_bytes(self) -> int:
        return self.segment_list.size_in_bytes()

    # -- appending (storage_engine.log.appends) -----------------------------------------------------------------
    @_guarded
    def append_records(self, records: Sequence[SimpleRecord], *, codec: int = codecs.NONE, producer_id: int = -1,
                       producer_epoch: int = -1, base_sequence: int = -1,
                       is_transactional: bool = False) -> AppendInfo:
        """Build one batch from ``records`` at the log end offset and append it (the producer path). With a
        producer id the batch is idempotent (and ``is_transactional``, part of the producer's open transaction)."""
        return appends.append_records(self, records, codec=codec, producer_id=producer_id,
                                      producer_epoch=producer_epoch, base_sequence=base_sequence,
                                      is_transactional=is_transactional)

    @_guarded
    def append_batches(self, data: bytes) -> AppendInfo:
        """Append client-encoded magic-2 batches (Kafka's leader append): validate every batch and record,
        assign offsets from the log end offset, then write them as one append."""
        return appends.append_batches(self, data)

    def append_end_txn(self, producer_id: int, producer_epoch: int, *, commit: bool,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (COMMIT or ABORT control batch) for ``producer_id`` at the log end, as the
        transaction coordinator does (:func:`storage_engine.log.appends.append_end_txn`)."""
        return appends.append_end_txn(self, producer_id, producer_epoch, commit=commit,
                                      coordinator_epoch=coordinator_epoch)

    @_guarded
    def append_as_follower(self, data: bytes) -> AppendInfo:
        """Append whole batches that already have their offsets (Kafka's ``appendAsFollower``: the copy of a
        partition being moved), byte for byte, rolling as the log would."""
        return appends.append_as_follower(self, data)

    # -- rolling ----------------------------------------------------------------------------------------------
    def _max_segment_ms(self) -> int:
        cfg = self.config
        if cfg.compact and cfg.max_compaction_lag_ms > 0:
            return min(cfg.max_compaction_lag_ms, cfg.segment_ms)
        return cfg.segment_ms

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> bool:
        reason = self.active_segment.should_roll(segment_bytes=self.config.segment_bytes,
                                                 max_segment_ms=self._max_segment_ms(), messages_size=size,
                                                 max_timestamp=max_ts, max_offset=last_offset, now_ms=now)
        if reason is None:
            return False
        logger.info("rolling %s at offset %d (%s)", self.name, self.log_end_offset, reason)
        self._roll_locked(now)
        return True

    @_guarded
    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset."""
        now = self.clock.milliseconds()
        with self.locked():
            return self._roll_locked(now)

    def _roll_locked(self, now: int, base: int | None = None) -> LogSegment:
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
        self._publish(bump=True)
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
        self._flush_locked(new_base, now, bump=True)
        crashpoints.reached("roll.flushed")
        # The sealed segment's files are opened again only when it is read: a long-running appender holds
        # descriptors for the active segment only, however many segments it rolls.
        active.release()
        return seg

    # -- flushing ---------------------------------------------------------------------------------------------
    @_guarded
    def flush(self, offset: int | None = None) -> int:
        """fsync every segment holding offsets below ``offset`` (default: the log end) and advance the
        recovery point. Returns the new recovery point."""
        now = self.clock.milliseconds()
        with self.locked():
            self._flush_locked(self.log_end_offset if offset is None else min(offset, self.log_end_offset), now)
            return self.recovery_point

    def _flush_locked(self, offset: int, now: int, bump: bool = False) -> None:
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
        self._publish(bump=bump)

    def flush_due(self, now_ms: int) -> bool:
        """flush.ms: whether a time-based flush is due (and there is something unflushed)."""
        return (now_ms - self.last_flush_ms >= self.config.flush_ms
                and self.recovery_point < self.log_end_offset)

    # -- reading (storage_engine.log.reads) ----------------------------------------------------------------------
    @_guarded
    def read(self, start_offset: int, max_bytes: int = 1048576, *, min_one_message: bool = True):
        """Whole, checked batches from the one holding ``start_offset``; None at the log end.
        OffsetOutOfRangeError outside [log start, log end]; CorruptRecordError for damage."""
        return reads.read(self, start_offset, max_bytes, min_one_message)

    def read_records(self, start_offset: int | None = None, max_records: int | None = None, *,
                     isolation_level: str = reads.READ_UNCOMMITTED) -> Iterator[Record]:
        """Data records from ``start_offset`` (default: log start) in offset order, every batch checked, as a Kafka
        consumer sees them: control records (transaction markers) are never returned. ``read_committed`` stops at
        the last stable offset and skips the records of aborted transactions (found in the ``.txnindex`` files),
        exactly as Kafka's consumer filters a fetch."""
        guard = self.failures.guard(self) if self.failures is not None else contextlib.nullcontext()
        with guard:
            yield from reads.read_records(self, start_offset, max_records, isolation_level)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound) (Kafka's ``collectAbortedTransactions``)."""
        return reads.aborted_transactions(self, start_offset, upper_bound_offset)

    @_guarded
    def offset_for_timestamp(self, timestamp: int):
        """(timestamp, offset) of the first record with timestamp >= ``timestamp``, or None."""
        return reads.offset_for_timestamp(self, timestamp)

    # -- truncation and log start (storage_engine.log.truncation) ------------------------------------------------
    @_guarded
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (batch granular). Returns False if nothing changed."""
        return truncation.truncate_to(self, offset)

    @_guarded
    def truncate_fully_and_start_at(self, offset: int) -> None:
        now = self.clock.milliseconds()
        with self.locked():
            truncation.truncate_fully_locked(self, offset, now)

    def _delete_segment_files(self, seg: LogSegment, now: int, sync: bool = True, *, after_log: str | None = None,
                              snapshot: bool = False) -> None:
        """Rename a segment's files ``.deleted`` (the cleaner's swap uses it too)."""
        truncation.delete_segment_files(self, seg, now, sync, after_log=after_log, snapshot=snapshot)

    def delete_segments_locked(self, segments: list[LogSegment], now: int) -> list[LogSegment]:
        """Delete a prefix of segments (retention; caller holds the lock with a fresh view), rolling first if
        every segment would go (:func:`storage_engine.log.truncation.delete_segments_locked`). Returns the
        segments actually deleted."""
        return truncation.delete_segments_locked(self, segments, now)

    def replace_segments(self, new_segment: LogSegment | None, old_segments: list[LogSegment],
                         identity: list[tuple[int, int]], now_ms: int, *, delete_after: bool = False) -> bool:
        """Swap a cleaned segment (still named ``.cleaned``, complete and flushed) in for ``old_segments``,
        crash-safely and visibly to every process (:func:`storage_engine.log.swap.replace_segments`). The new
        segment reaches into the last old segment that holds data; ``delete_after`` (a group whose records all
        went, swapped for a segment holding one empty batch) then deletes it; ``new_segment`` None (old segments
        without any data) only deletes the old ones. ``identity`` ((base offset, inode of the .log) of each old
        segment when cleaning started) must still match, else the swap is abandoned (False). Cleaning never moves
        the log start offset."""
        return swap.replace_segments(self, new_segment, old_segments, identity, now_ms, delete_after=delete_after)

    @_guarded
    def delete_records(self, offset: int) -> int:
        """Raise the log start offset (DeleteRecords). ``-1`` means the high watermark. Segments below it go
        at the next retention pass. Returns the new log start offset."""
        return truncation.delete_records(self, offset)

    def expire_producers(self, now_ms: int, expiration_ms: int, *, dry_run: bool = False) -> list[int]:
        """Forget the producers without an open transaction whose last write is ``expiration_ms`` old (Kafka's
        ``removeExpiredProducers``, ``producer.id.expiration.ms``). The state is then written as a snapshot at the
        log end and the generation bumped, so every other process rebuilds the same state from it. Returns the
        producer ids expired (that would be, with ``dry_run``)."""
        with self.locked():
            psm = self.producer_state
            expired = sorted(pid for pid, e in psm.producers.items()
                             if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms)
            if dry_run or not expired:
                return expired
            psm.remove_expired_producers(now_ms, expiration_ms)
            psm.map_end_offset = self.log_end_offset
            psm.take_snapshot(force=True)
            self._publish(bump=True)
            return expired

    # -- closing ----------------------------------------------------------------------------------------------
    def close(self, *, clean: bool) -> None:
        """Release files. ``clean`` (the last user of the log dir) flushes and trims like Kafka's close; a log
        that was deleted meanwhile, or whose dir went offline, is closed without."""
        files, self.files = self.files, None
        if files is not None:
            files.forget(self)
        if clean:
            try:
                with self.locked():
                    self.producer_state.map_end_offset = self.log_end_offset
                    self.producer_state.take_snapshot()  # Kafka's snapshot at close: the next load replays nothing
                    self._flush_locked(self.log_end_offset, self.clock.milliseconds())
                    for seg in self.segment_list:
                        seg.close(trim=True)
            except (PartitionDeletedError, PartitionMovedError, PartitionNotFoundError) as exc:
                logger.info("closing %s without flushing: %s", self.name, exc)
                clean = False
            except StorageError as exc:
                if self.failures is None or not self.failures.is_offline(self.log_dir):
                    raise
                logger.warning("closing %s without flushing: %s", self.name, exc)
                clean = False
        if not clean:
            for seg in self.segment_list:
                seg.close(trim=False)
        self.lock.close()

    def describe(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "dir": self.dir, "future": self.is_future,
            "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark, "last_stable_offset": self.last_stable_offset,
            "recovery_point": self.recovery_point, "producers": len(self.producer_state.producers),
            "open_transactions": len(self.producer_state.ongoing_txns),
            "size_bytes": self.size_in_bytes(),
            "segments": [{"base_offset": s.base_offset, "size_bytes": s.size,
                          "largest_timestamp": s.max_timestamp_so_far,
                          "index_entries": s.offset_index.entries,
                          "time_index_entries": s.time_index.entries} for s in self.segment_list],
        }
