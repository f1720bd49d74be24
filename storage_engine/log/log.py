"""One partition's log: appends, reads, rolls, flushes, truncation, the cleaner's swap (Kafka's ``UnifiedLog``).

:class:`Log` is the public face of a partition. Under it, :class:`~storage_engine.log.local_log.LocalLog` (Kafka's
``LocalLog``) holds the state, the lock and view and the steps that change the segments (roll, flush, publish,
removing files), with the locking rule in its docstring. The work of each operation lives beside it, in a module of
functions that take the ``LocalLog``: :mod:`storage_engine.log.appends`, :mod:`storage_engine.log.reads`,
:mod:`storage_engine.log.truncation` and :mod:`storage_engine.log.replace`.

Offsets: the log start offset (first readable offset, raised by delete-records and retention; for a tiered topic,
by remote retention, while local retention raises only the local log start offset, the first offset a local
segment holds: the offsets in between are read from remote storage), the recovery
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
import logging
from collections.abc import Iterator, Sequence

from storage_engine.errors import (PartitionDeletedError, PartitionMovedError, PartitionNotFoundError, StorageError,
                                   StorageIOError)
from storage_engine.log import appends, reads, replace, truncation
from storage_engine.log.appends import AppendInfo
from storage_engine.log.failure import is_dir_failure
from storage_engine.log.local_log import LocalLog, guarded
from storage_engine.record import codecs
from storage_engine.record.records import Record, SimpleRecord
from storage_engine.segment.checked_read import FetchData
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.slice_read import SliceData
from storage_engine.segment.txn_index import AbortedTxn

logger = logging.getLogger(__name__)


class Log(LocalLog):
    """One partition's log in ``<log_dir>/<topic>-<partition>``. Safe to use from several processes at once (each
    with its own ``Log``) and from any number of threads sharing one ``Log`` (the locking rule:
    :mod:`storage_engine.log.local_log`)."""

    # -- appending (storage_engine.log.appends) -----------------------------------------------------------------
    @guarded
    def append_records(self, records: Sequence[SimpleRecord], *, codec: int = codecs.NONE, producer_id: int = -1,
                       producer_epoch: int = -1, base_sequence: int = -1,
                       is_transactional: bool = False, coordinator: bool = False) -> AppendInfo:
        """Build one batch from ``records`` at the log end offset and append it (the producer path). With a
        producer id the batch is idempotent (and ``is_transactional``, part of the producer's open transaction);
        ``coordinator``: written by a coordinator, its sequence unchecked (see :mod:`storage_engine.log.appends`)."""
        return appends.append_records(self, records, codec=codec, producer_id=producer_id,
                                      producer_epoch=producer_epoch, base_sequence=base_sequence,
                                      is_transactional=is_transactional, coordinator=coordinator)

    @guarded
    def append_batches(self, data: bytes | bytearray | memoryview, *, in_place: bool = False) -> AppendInfo:
        """Append client-encoded magic-2 batches (Kafka's leader append): validate every batch and record,
        assign offsets from the log end offset, then write them as one append (``in_place``: in ``data`` itself,
        a writable buffer the caller gives up; see :func:`storage_engine.log.appends.append_batches`)."""
        return appends.append_batches(self, data, in_place=in_place)

    def try_append_batches(self, data: bytes | bytearray | memoryview, *, in_place: bool = False) -> AppendInfo:
        """:meth:`append_batches` if nothing in it can wait (no lock held elsewhere, no reload, roll, epoch
        checkpoint, new index room or flush: the broker's event loop); else
        :class:`~storage_engine.segment.slice_read.WouldBlock`, nothing changed, and :meth:`append_batches` of
        the same ``data`` appends it (``in_place``: see :func:`storage_engine.log.appends.append_batches`)."""
        return appends.append_batches(self, data, in_place=in_place, now_only=True)

    def append_end_txn(self, producer_id: int, producer_epoch: int, *, commit: bool,
                       coordinator_epoch: int = 0) -> AppendInfo:
        """Write a transaction marker (COMMIT or ABORT control batch) for ``producer_id`` at the log end, as the
        transaction coordinator does (:func:`storage_engine.log.appends.append_end_txn`)."""
        return appends.append_end_txn(self, producer_id, producer_epoch, commit=commit,
                                      coordinator_epoch=coordinator_epoch)

    @guarded
    def append_as_follower(self, data: bytes) -> AppendInfo:
        """Append whole batches that already have their offsets (Kafka's ``appendAsFollower``: the copy of a
        partition being moved), byte for byte, rolling as the log would."""
        return appends.append_as_follower(self, data)

    # -- rolling and flushing -------------------------------------------------------------------------------
    @guarded
    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset."""
        now = self.clock.milliseconds()
        with self.locked():
            return self.roll_locked(now)

    @guarded
    def flush(self, offset: int | None = None) -> int:
        """fsync every segment holding offsets below ``offset`` (default: the log end) and advance the
        recovery point. Returns the new recovery point."""
        now = self.clock.milliseconds()
        with self.locked():
            self.flush_locked(self.log_end_offset if offset is None else min(offset, self.log_end_offset), now)
            return self.recovery_point

    # -- reading (storage_engine.log.reads) ----------------------------------------------------------------------
    @guarded
    def read(self, start_offset: int, max_bytes: int = 1048576, *, min_one_message: bool = True) -> FetchData | None:
        """Whole, checked batches from the one holding ``start_offset``; None at the log end.
        OffsetOutOfRangeError outside [log start, log end]; CorruptRecordError for damage."""
        with self.mutex:
            return reads.read(self, start_offset, max_bytes, min_one_message)

    def read_slice(self, start_offset: int, max_bytes: int, *, min_one_message: bool = True,
                   bound: int | None = None, generation: int | None = None) -> SliceData | None:
        """:meth:`read` as a slice of the segment file (for a fetch, sent from the file), cut before the first
        batch whose entry offset is ``bound`` or more (default: none). ``generation``: the partition's shared
        generation as the caller read it just before (the fetch's check of the partition's state), so it is not
        read again; default: read here. Under the log's failure channel, as :func:`guarded` methods are (inline:
        the generator context manager cost a fetch ~2 us)."""
        failures = self.failures
        if failures is not None:
            failures.check(self.log_dir, f"partition {self.name}")
        try:
            with self.mutex:
                return reads.read_slice(self, start_offset, max_bytes, min_one_message,
                                        (1 << 63) if bound is None else bound, generation)
        except (StorageIOError, OSError) as exc:
            if failures is not None and is_dir_failure(exc):
                failures.mark_offline(self.log_dir, f"{type(exc).__name__}: {exc}")
            raise

    def read_records(self, start_offset: int | None = None, max_records: int | None = None, *,
                     isolation_level: str = reads.READ_UNCOMMITTED) -> Iterator[Record]:
        """Data records from ``start_offset`` (default: log start) in offset order, every batch checked, as a Kafka
        consumer sees them: control records (transaction markers) are never returned. ``read_committed`` stops at
        the last stable offset and skips the records of aborted transactions (found in the ``.txnindex`` files),
        exactly as Kafka's consumer filters a fetch. Each step runs under the log's mutex, and the log stays pinned
        until the iteration ends, so other threads may append, roll, retain and clean meanwhile."""
        guard = self.failures.guard(self) if self.failures is not None else contextlib.nullcontext()
        with guard, self.pinned():
            records = reads.read_records(self, start_offset, max_records, isolation_level)
            while True:
                with self.mutex:
                    record = next(records, None)
                if record is None:
                    return
                yield record

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound) (Kafka's ``collectAbortedTransactions``)."""
        with self.mutex:
            return reads.aborted_transactions(self, start_offset, upper_bound_offset)

    @guarded
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= ``timestamp``, or None."""
        with self.mutex:
            return reads.offset_for_timestamp(self, timestamp)

    # -- truncation and log start (storage_engine.log.truncation) ------------------------------------------------
    @guarded
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (batch granular). Returns False if nothing changed."""
        return truncation.truncate_to(self, offset)

    @guarded
    def truncate_fully_and_start_at(self, offset: int, log_start_offset: int | None = None) -> None:
        """Delete every segment and start the log empty at ``offset``; the log start offset becomes
        ``log_start_offset`` (at most ``offset``; default ``offset``)."""
        now = self.clock.milliseconds()
        with self.locked():
            truncation.truncate_fully_locked(self, offset, now, log_start_offset)

    def delete_segments_locked(self, segments: list[LogSegment], now: int, *,
                               move_log_start: bool = True) -> list[LogSegment]:
        """Delete a prefix of segments (retention; caller holds the lock with a fresh view), rolling first if
        every segment would go (:func:`storage_engine.log.truncation.delete_segments_locked`); ``move_log_start``
        False: a tiered topic's local retention, which moves only the local log start offset. Returns the
        segments actually deleted."""
        return truncation.delete_segments_locked(self, segments, now, move_log_start=move_log_start)

    def replace_segments(self, new_segment: LogSegment | None, old_segments: list[LogSegment],
                         identity: list[tuple[int, int]], now_ms: int, *, delete_after: bool = False) -> bool:
        """Swap a cleaned segment (still named ``.cleaned``, complete and flushed) in for ``old_segments``,
        crash-safely and visibly to every process (:func:`storage_engine.log.replace.replace_segments`). The new
        segment reaches into the last old segment that holds data; ``delete_after`` (a group whose records all
        went, swapped for a segment holding one empty batch) then deletes it; ``new_segment`` None (old segments
        without any data) only deletes the old ones. ``identity`` ((base offset, inode of the .log) of each old
        segment when cleaning started) must still match, else the swap is abandoned (False). Cleaning never moves
        the log start offset."""
        return replace.replace_segments(self, new_segment, old_segments, identity, now_ms, delete_after=delete_after)

    @guarded
    def delete_records(self, offset: int) -> int:
        """Raise the log start offset (DeleteRecords). ``-1`` means the high watermark. Segments below it go
        at the next retention pass. Returns the new log start offset."""
        return truncation.delete_records(self, offset)

    @guarded
    def set_log_start_offset_from_remote(self, offset: int) -> int:
        """Raise a tiered log's start offset after remote retention deleted the remote segments below ``offset``
        (Kafka's ``updateLogStartOffsetFromRemoteTier``), durably; never lowers it
        (:func:`storage_engine.log.truncation.set_log_start_offset_from_remote`). Returns the log start offset."""
        return truncation.set_log_start_offset_from_remote(self, offset)

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
            self.publish(bump=True)
            return expired

    # -- closing ----------------------------------------------------------------------------------------------
    def close(self, *, clean: bool) -> None:
        """Release files. ``clean`` (the last user of the log dir) flushes and trims like Kafka's close; a log
        that was deleted meanwhile, or whose dir went offline, is closed without. Waits for the
        other threads using the log."""
        with self.mutex:
            files, self.files = self.files, None
            if files is not None:
                files.forget(self)
            if clean:
                try:
                    with self.locked():
                        self.producer_state.map_end_offset = self.log_end_offset
                        # Kafka's snapshot at close: the next load replays nothing
                        self.producer_state.take_snapshot()
                        self.flush_locked(self.log_end_offset, self.clock.milliseconds())
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
        with self.mutex:
            return self._describe()

    def _describe(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "dir": self.dir, "future": self.is_future,
            "log_start_offset": self.log_start_offset, "local_log_start_offset": self.local_log_start_offset,
            "remote_storage_enable": self.remote_log_enabled, "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark, "last_stable_offset": self.last_stable_offset,
            "recovery_point": self.recovery_point, "producers": len(self.producer_state.producers),
            "open_transactions": len(self.producer_state.ongoing_txns),
            "size_bytes": self.size_in_bytes(),
            "segments": [{"base_offset": s.base_offset, "size_bytes": s.size,
                          "largest_timestamp": s.max_timestamp_so_far,
                          "index_entries": s.offset_index.entries,
                          "time_index_entries": s.time_index.entries} for s in self.segment_list],
        }
