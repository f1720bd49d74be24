"""Reading a log as Kafka's fetch and consumer do: whole checked batches, records in offset order, the
``read_committed`` filter, aborted transactions, the offset for a timestamp.

A tiered topic's offsets in ``[log start offset, local log start offset)`` are only in remote storage: a read of
them raises :class:`OffsetInRemoteStorageError` (an :class:`OffsetOutOfRangeError`), which the remote reader
catches. Reads take no lock. Every batch is checked (CRC and offset order, Kafka's consumer ``check.crcs``): damage is a
:class:`CorruptRecordError` naming file and position. A read that fails because another process changed the
partition under it (a segment renamed away, a torn tail cut) refreshes the view and retries, up to
:data:`READ_ATTEMPTS` times: the change moved the generation before its first rename, so the refresh waits for
the lock of the process making it and then reloads; a failure with no change behind it is damage, raised.

:class:`storage_engine.log.log.Log` exposes these as its methods; the functions take the log.
"""
from __future__ import annotations

from collections.abc import Iterator

from storage_engine.errors import (CorruptRecordError, InvalidRecordError, OffsetInRemoteStorageError,
                                   OffsetOutOfRangeError, StorageIOError)
from storage_engine.log import losses
from storage_engine.log.aborted_filter import AbortedFilter
from storage_engine.log.local_log import LocalLog
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch
from storage_engine.record.records import Record
from storage_engine.segment.checked_read import FetchData
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.slice_read import SliceData, WouldBlock, is_nonblocking, read_slice as read_segment_slice
from storage_engine.segment.txn_index import AbortedTxn

READ_ATTEMPTS = 5  # a read retried this often met that many changes by other processes in a row
NOW_TXN_INDEXES = 16  # inside nonblocking(): at most this many segments' aborted transactions searched
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def read(log: LocalLog, start_offset: int, max_bytes: int, min_one_message: bool) -> FetchData | None:
    """Whole, checked batches from the one holding ``start_offset``; None at the log end."""
    log.unpark_for_read()
    attempt = 0
    while True:
        generation = log.view.generation
        try:
            return _read_once(log, start_offset, max_bytes, min_one_message)
        except (StorageIOError, CorruptRecordError) as exc:
            _after_failed_read(log, exc, attempt, generation)
            attempt += 1


def read_slice(log: LocalLog, start_offset: int, max_bytes: int, min_one_message: bool,
               bound: int, shared: int | None = None) -> SliceData | None:
    """:func:`read` for a fetch: the same whole checked batches, cut before the first batch whose entry offset is
    ``bound`` or more, as a slice of the segment file to send from there (bytes already verified are not read
    again: :mod:`storage_engine.segment.slice_read`); None at the log end. Retried as :func:`read` is.
    ``shared``: the partition's shared generation, read by the caller before any file was looked at (used for
    the first attempt only; a retry reads it again, after its refresh)."""
    log.unpark_for_read()
    attempt = 0
    while True:
        generation = log.view.generation
        try:
            return _read_slice_once(log, start_offset, max_bytes, min_one_message, bound,
                                    shared if attempt == 0 else None)
        except (StorageIOError, CorruptRecordError) as exc:
            _after_failed_read(log, exc, attempt, generation)
            attempt += 1


def _read_slice_once(log: LocalLog, start_offset: int, max_bytes: int, min_one_message: bool,
                     bound: int, shared: int | None) -> SliceData | None:
    lost = losses.ranges_of(log)            # read once for both checks (mostly none)
    _check_range(log, start_offset, lost)
    if start_offset == log.log_end_offset:
        return None
    # the shared generation, read before any file is looked at: a truncation (here or in another process)
    # bumps it before it cuts, so a verified mark made before that cut is never used after it
    if shared is None:
        shared = log.lock.read_state().generation
    segments = log.segment_list.from_offset(start_offset)
    ahead = losses.next_loss(log, start_offset) if lost else None
    for i, seg in enumerate(segments):
        if ahead is not None and i > 0 and seg.base_offset >= ahead["start"]:
            raise losses.loss_error(log, ahead)    # the next data lies past offsets the log lost
        data = read_segment_slice(seg, start_offset, max_bytes, min_one_message, _upper_bound(log, segments, i),
                                  bound, shared)
        if data is not None and data.slice is not None:
            return data
    return None


def _after_failed_read(log: LocalLog, exc: Exception, attempt: int, read_generation: int) -> None:
    """Refresh the view after a failed read; re-raise ``exc`` unless the partition changed since the read began
    (``read_generation``; then the caller retries: the failure was another process's or another thread's change,
    not damage)."""
    if attempt + 1 < READ_ATTEMPTS:
        log.refresh()
        if log.view.generation != read_generation:
            return
    raise exc


def _check_range(log: LocalLog, offset: int, lost: list[losses.LostRange] | None = None) -> None:
    if offset < log.log_start_offset or offset > log.log_end_offset:
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for {log.name}: log start offset "
            f"{log.log_start_offset}, log end offset {log.log_end_offset}")
    if log.remote_log_enabled:
        local_start = log.local_log_start_offset
        if offset < local_start:
            # Kafka's local log refuses it the same way; the remote reader serves it from the object store.
            raise OffsetInRemoteStorageError(
                offset, local_start, f"offset {offset} of {log.name} is in remote storage: the log start offset is "
                                     f"{log.log_start_offset}, the first local offset {local_start}")
    if lost is None or lost:
        losses.check_read(log, offset)   # offsets the log lost are an error, never skipped


def _upper_bound(log: LocalLog, segments: list[LogSegment], i: int) -> int:
    return segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset


def _read_once(log: LocalLog, start_offset: int, max_bytes: int, min_one_message: bool) -> FetchData | None:
    _check_range(log, start_offset)
    if start_offset == log.log_end_offset:
        return None
    segments = log.segment_list.from_offset(start_offset)
    ahead = losses.next_loss(log, start_offset)
    for i, seg in enumerate(segments):
        if ahead is not None and i > 0 and seg.base_offset >= ahead["start"]:
            raise losses.loss_error(log, ahead)    # the next data lies past offsets the log lost
        data = seg.read(start_offset, max_bytes, min_one_message=min_one_message,
                        upper_bound=_upper_bound(log, segments, i))
        if data is not None and data.data:
            return data
    return None


def read_records(log: LocalLog, start_offset: int | None, max_records: int | None,
                 isolation_level: str) -> Iterator[Record]:
    """Data records from ``start_offset`` (default: log start) in offset order, control records never returned;
    ``read_committed`` stops at the last stable offset and skips the records of aborted transactions."""
    if isolation_level not in ISOLATION_LEVELS:
        raise InvalidRecordError(f"isolation level must be one of {ISOLATION_LEVELS}, got {isolation_level!r}")
    log.unpark_for_read()
    offset = log.log_start_offset if start_offset is None else start_offset
    _check_range(log, offset)
    committed = isolation_level == READ_COMMITTED
    produced, attempt = 0, 0
    while True:
        # Per attempt (a retry follows another process's change): every aborted transaction overlapping
        # [offset, end) is listed again, including one begun before ``offset`` whose marker is still ahead.
        end = log.last_stable_offset if committed else log.log_end_offset
        aborted = AbortedFilter(aborted_transactions(log, offset, end) if committed else ())
        generation = log.view.generation
        try:
            for batch in _checked_batches(log, offset):
                if batch.base_offset >= end:
                    return
                want = offset
                offset = max(offset, batch.next_offset)
                if aborted.is_aborted(batch):
                    # Kafka's consumer: transactions whose first offset is reached become aborted for their
                    # producer until that producer's ABORT marker.
                    continue
                if batch.is_control:
                    continue
                for rec in batch.records():
                    if rec.offset < want:
                        continue
                    if rec.offset >= end:
                        return
                    yield rec
                    produced += 1
                    if max_records is not None and produced >= max_records:
                        return
            return
        except (StorageIOError, CorruptRecordError) as exc:
            _after_failed_read(log, exc, attempt, generation)
            attempt += 1
            _check_range(log, offset)


def _checked_batches(log: LocalLog, offset: int) -> Iterator[RecordBatch | LegacyBatch]:
    """Every checked batch from the one holding ``offset`` to the log end, segment after segment."""
    segments = log.segment_list.from_offset(offset)
    ahead = losses.next_loss(log, offset)
    for i, seg in enumerate(segments):
        if ahead is not None and i > 0 and seg.base_offset >= ahead["start"]:
            raise losses.loss_error(log, ahead)    # the next data lies past offsets the log lost
        yield from seg.checked_batches(max(offset, seg.base_offset) if i == 0 else seg.base_offset,
                                       _upper_bound(log, segments, i))


def aborted_transactions(log: LocalLog, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start, upper bound), from the ``.txnindex`` of the segment holding
    ``start_offset`` on, until one proves the search complete (Kafka's ``collectAbortedTransactions``). On the
    broker's event loop (``nonblocking()``), :class:`WouldBlock` when an index must be read from its file or more
    than :data:`NOW_TXN_INDEXES` segments would be searched (a ``stat`` each)."""
    out: list[AbortedTxn] = []
    for i, seg in enumerate(log.segment_list.from_offset(start_offset)):
        if i == NOW_TXN_INDEXES and is_nonblocking():
            raise WouldBlock(f"over {NOW_TXN_INDEXES} transaction indexes to search from offset {start_offset}")
        # No stop at the upper bound's segment: a transaction aborted below the bound is indexed where its
        # marker went, which may be a later segment (the cleaner's dirty range ends at a segment base).
        result = seg.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
        out.extend(result.aborted)
        if result.complete:
            break
    return out


def offset_for_timestamp(log: LocalLog, timestamp: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record with timestamp >= ``timestamp``, or None."""
    for seg in log.segment_list:
        if seg.largest_timestamp() < timestamp and seg is not log.active_segment:
            continue
        found = seg.find_offset_by_timestamp(timestamp, max(seg.base_offset, log.log_start_offset))
        if found is not None:
            return found
    return None
