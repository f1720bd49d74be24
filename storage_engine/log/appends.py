"""Appending to a log, under its partition lock (Kafka's ``UnifiedLog.append`` and ``appendAsFollower``).

Three ways in, one way to the segment:

* :func:`append_records`: the producer path; one batch built from records at the log end offset;
* :func:`append_batches`: client-encoded batches (Kafka's leader append), validated and given offsets;
* :func:`append_end_txn`: a COMMIT/ABORT control batch, as the transaction coordinator writes it;

each decided by :mod:`storage_engine.log.validator` before any byte is written, checked against the producer
state (a retried batch returns its first offsets and writes nothing), then written by :func:`append_validated`
(roll if due, a new leader epoch into the ``leader-epoch-checkpoint``, append, producer state, flush every
``flush.messages``). :func:`append_as_follower` writes batches
that already have their offsets (the copy of a partition being moved) byte for byte.

:class:`storage_engine.log.log.Log` exposes these as its methods; the functions take the log.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from storage_engine.errors import InvalidRecordError
from storage_engine.log import producer_state as pstate
from storage_engine.log import producer_state_manager as producers
from storage_engine.log import validator
from storage_engine.log.local_log import LocalLog
from storage_engine.record import codecs
from storage_engine.record.record_batch import RecordBatch, build_control_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.file_records import iter_batches
from storage_engine.segment.slice_read import WouldBlock

logger = logging.getLogger(__name__)


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    bytes: int
    rolled: bool = False
    duplicate: bool = False     # a retried batch: the offsets it got the first time, nothing written


def append_records(log: LocalLog, records: Sequence[SimpleRecord], *, codec: int = codecs.NONE,
                   producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   is_transactional: bool = False, coordinator: bool = False) -> AppendInfo:
    """Build one batch from ``records`` at the log end offset and append it (the producer path). With a producer
    id the batch is idempotent (and ``is_transactional``, part of the producer's open transaction). A
    ``coordinator`` append (the group coordinator's transactional offset commits, as Kafka's) has its producer's
    epoch checked but not its sequence, and is never taken for a retried batch."""
    if not records:
        raise InvalidRecordError("cannot append an empty list of records")
    now = log.clock.milliseconds()
    recs = validator.normalize_records(records, now)
    with log.locked():
        data, max_ts = validator.records_batch(log.topic, log.config, recs, base_offset=log.log_end_offset,
                                               codec=codec, now_ms=now, producer_id=producer_id,
                                               producer_epoch=producer_epoch, base_sequence=base_sequence,
                                               is_transactional=is_transactional)
        first = log.log_end_offset
        last = first + len(recs) - 1
        analysis = None
        if producer_id >= 0:
            analysis = producers.analyze(log.producer_state, [RecordBatch(data)],
                                         pstate.COORDINATOR if coordinator else pstate.CLIENT)
            if analysis.duplicate is not None:
                return _duplicate(log, analysis.duplicate, len(recs))
        # The time index names the batch holding the max timestamp by its last offset ("shallow").
        return append_validated(log, data, first, last, max_ts, last, len(recs), now, analysis)


def append_batches(log: LocalLog, data: bytes | bytearray | memoryview, *, in_place: bool = False,
                   now_only: bool = False) -> AppendInfo:
    """Append client-encoded magic-2 batches (Kafka's leader append): validate every batch and record, assign
    offsets from the log end offset, then write them as one append. Offsets are assigned in a copy of ``data``
    (which is what gets written), or with ``in_place`` in ``data`` itself: a writable buffer the caller gives up
    (the broker's request frame), so the batches are never copied before their write.

    ``now_only``: only if nothing in the append can wait (the broker's event loop). The lock is taken without
    waiting and with a view that needs no file (:meth:`LocalLog.locked_now`), and once the batches are validated
    and checked against the producer state, :func:`_check_now` raises
    :class:`~storage_engine.segment.slice_read.WouldBlock` if the write would roll, assign a new leader epoch,
    index an aborted transaction or flush. A give-up changes no state and no file; with ``in_place`` the offsets
    (and a ``LogAppendTime`` stamp and its CRC) may have been written into ``data``, and the next append of the
    same ``data`` writes every one of those fields again, as if they had not been."""
    now = log.clock.milliseconds()
    buf, batches = validator.parse_client_batches(log.name, log.topic, log.config, data, in_place=in_place)
    with log.locked_now() if now_only else log.locked():
        first = log.log_end_offset
        nxt, max_ts, max_ts_offset, count = validator.assign_offsets(log.name, log.topic, log.config, buf,
                                                                     batches, first_offset=first, now_ms=now)
        analysis = None
        if any(b.producer_id >= 0 for b in batches):
            analysis = producers.analyze(log.producer_state, batches, pstate.CLIENT)
            if analysis.duplicate is not None:
                return _duplicate(log, analysis.duplicate, count)
        if now_only:
            _check_now(log, len(buf), first, nxt - 1, max_ts, now, analysis)
        return append_validated(log, memoryview(buf), first, nxt - 1, max_ts, max_ts_offset, count, now,
                                analysis)


def _check_now(log: LocalLog, size: int, first: int, last: int, max_ts: int, now: int,
               analysis: producers.AppendAnalysis | None) -> None:
    """Raise :class:`WouldBlock` unless :func:`append_validated` of this append (same arguments) would touch no
    file but by ``pwrite``: no roll, no new leader epoch (a checkpoint write), no aborted transaction to index, no
    flush (``flush.messages``). Called before anything is written or changed."""
    reason = log.roll_reason(size, max_ts, last, now)
    if reason is not None:
        raise WouldBlock(f"{log.name}: the append must roll the segment ({reason})")
    if not log.leader_epochs.assigns_nothing_at(log.config.partition_leader_epoch, log.view.generation):
        raise WouldBlock(f"{log.name}: the append assigns a leader epoch")
    if analysis is not None and analysis.completed:
        raise WouldBlock(f"{log.name}: the append completes a transaction")
    if _flush_due(log, last + 1):
        raise WouldBlock(f"{log.name}: the append must be flushed")


def _flush_due(log: LocalLog, end: int) -> bool:
    """Whether an append ending at ``end`` leaves ``flush.messages`` records or more unflushed."""
    return end - log.recovery_point >= log.config.flush_messages


def append_end_txn(log: LocalLog, producer_id: int, producer_epoch: int, *, commit: bool,
                   coordinator_epoch: int = 0) -> AppendInfo:
    """Write a transaction marker (COMMIT or ABORT control batch) for ``producer_id`` at the log end, as the
    transaction coordinator does: the epoch must not be older than the producer's (``INVALID_PRODUCER_EPOCH``)
    nor the coordinator epoch older than the last marker's (``TRANSACTION_COORDINATOR_FENCED``). Ending a
    producer's open transaction moves the LSO; an ABORT also indexes it in the ``.txnindex``."""
    validator.check_producer_arguments(producer_id, producer_epoch, 0)
    validator.check_producer_fields(log.topic, producer_id, producer_epoch, 0, True)
    if isinstance(coordinator_epoch, bool) or not isinstance(coordinator_epoch, int) or \
            not 0 <= coordinator_epoch <= 2**31 - 1:
        raise InvalidRecordError(f"coordinator epoch must be an integer in [0, 2147483647], got "
                                 f"{coordinator_epoch!r}")
    now = log.clock.milliseconds()
    with log.locked():
        first = log.log_end_offset
        data = build_control_batch(pstate.COMMIT if commit else pstate.ABORT, base_offset=first, timestamp=now,
                                   producer_id=producer_id, producer_epoch=producer_epoch,
                                   coordinator_epoch=coordinator_epoch,
                                   partition_leader_epoch=log.config.partition_leader_epoch)
        analysis = producers.analyze(log.producer_state, [RecordBatch(data)], pstate.COORDINATOR)
        return append_validated(log, data, first, first, now, first, 1, now, analysis)


def _duplicate(log: LocalLog, meta: pstate.BatchMetadata, count: int) -> AppendInfo:
    logger.info("%s: retried batch of sequences [%d, %d] already at offsets [%d, %d]", log.name,
                meta.first_seq, meta.last_seq, meta.first_offset, meta.last_offset)
    return AppendInfo(meta.first_offset, meta.last_offset, count, meta.timestamp, 0, duplicate=True)


def append_as_follower(log: LocalLog, data: bytes) -> AppendInfo:
    """Append whole batches that already have their offsets (Kafka's ``appendAsFollower``: the copy of a
    partition being moved). Each batch must pass its size and CRC checks and start at or after the log end
    offset, offsets increasing; they are written byte for byte, rolling as the log would."""
    now = log.clock.milliseconds()
    batches = list(iter_batches(data, 0, len(data), log.name, strict=True))
    for b in batches:
        b.ensure_valid()
    with log.locked():
        first, expected, count, max_ts, pos = None, log.log_end_offset, 0, -1, 0
        for b in batches:
            base = b.base_offset
            if base < expected or b.last_offset < base:
                raise InvalidRecordError(f"out of order offsets appending to {log.name}: batch "
                                         f"{base}..{b.last_offset} at or after offset {expected} expected")
            raw = data[pos:pos + b.size_in_bytes]
            pos += b.size_in_bytes
            active = log.active_segment
            if active.should_roll(segment_bytes=log.config.segment_bytes, max_segment_ms=log.max_segment_ms(),
                                  messages_size=len(raw), max_timestamp=b.max_timestamp,
                                  max_offset=b.last_offset, now_ms=now) is not None:
                # Kafka's maybeRoll: the new segment starts at max(the append's first offset, LEO), so a copy
                # of data with offset gaps (a compacted source) names its segments as the source's replica would.
                log.roll_locked(now, base=base)
            # Producer state as a replica keeps it (Kafka's REPLICATION origin: no client checks), so the copy
            # gets its own .txnindex entries and, at its rolls, snapshots of the same state.
            analysis = (producers.analyze(log.producer_state, [b], pstate.REPLICATION)
                        if b.magic >= 2 and b.producer_id >= 0 else None)
            if b.magic >= 2:   # Kafka: the epoch is assigned before the batch is written
                log.leader_epochs.maybe_assign_at(b.partition_leader_epoch, base, log.view.generation)
            log.active_segment.append(b.last_offset, b.max_timestamp, b.last_offset, raw)
            if analysis is not None:
                producers.apply(log.producer_state, analysis, log.active_segment, b.last_offset)
            else:
                log.producer_state.map_end_offset = b.last_offset + 1
            log.log_end_offset = expected = b.last_offset + 1
            first = base if first is None else first
            count += b.records_count
            max_ts = max(max_ts, b.max_timestamp)
        log.view.known_active_size = log.active_segment.size
        return AppendInfo(log.log_end_offset if first is None else first, log.log_end_offset - 1, count,
                          max_ts, len(data))


def append_validated(log: LocalLog, data: bytes | memoryview, first: int, last: int, max_ts: int, max_ts_offset: int,
                     count: int, now: int, analysis: producers.AppendAnalysis | None = None) -> AppendInfo:
    """Write validated batches at the log end (the lock is held): roll first if due, assign a new leader epoch,
    then append, update the producer state, and flush once ``flush.messages`` records are unflushed."""
    rolled = log.maybe_roll(len(data), max_ts, last, now)
    # Every batch of the append carries the configured partition leader epoch: a newer one starts at ``first``
    # in the leader-epoch-checkpoint, written before the data (Kafka's order). No I/O for a known epoch.
    log.leader_epochs.maybe_assign_at(log.config.partition_leader_epoch, first, log.view.generation)
    log.active_segment.append(last, max_ts, max_ts_offset, data)
    log.log_end_offset = last + 1
    log.view.known_active_size = log.active_segment.size
    if analysis is not None:
        producers.apply(log.producer_state, analysis, log.active_segment, last)
    else:
        log.producer_state.map_end_offset = last + 1
    if _flush_due(log, log.log_end_offset):
        log.flush_locked(log.log_end_offset, now)
    return AppendInfo(first, last, count, max_ts, len(data), rolled)
