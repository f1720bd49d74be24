"""Recovery of one log segment (Kafka's ``LogSegment.recover``): rebuilding its indexes from its ``.log``.

Recovery (:func:`recover_segment`) validates every batch (size, magic, CRC), rebuilds the indexes and
truncates the file at the first invalid byte, returning how many bytes it removed. Given the producer state as of
the segment's base offset it also replays the segment into it and rebuilds the ``.txnindex``; given the partition's
leader epoch cache it assigns the epochs of the valid v2 batches to it, as Kafka's ``LogSegment.recover`` does.

The indexes come from one of two walks that build the same entries: the compiled walk over the whole file
(:func:`_recover_compiled`, each index file written once), or, when the kernels are not loaded or that walk stops
early, batch by batch with compiled bulk steps where the kernels take them (:func:`_recover_walk`).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from storage_engine import layout
from storage_engine.errors import CorruptRecordError, StorageIOError
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import BATCH_HEADER, LOG_OVERHEAD, NO_PRODUCER_ID, RecordBatch
from storage_engine.segment.file_records import batch_at, read_entry_header, walk_batches, walk_valid_batches
from storage_engine.segment.leader_epoch import UNDEFINED_EPOCH, LeaderEpochFileCache
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex
from storage_engine.segment.txn_index import TransactionIndex

if TYPE_CHECKING:
    from storage_engine.segment.segment import LogSegment

_TIME_ENTRY = struct.Struct(">qi")
# Fields of record_batch.BATCH_HEADER the replay reads.
_LEADER_EPOCH, _LAST_OFFSET_DELTA, _PRODUCER_ID = 2, 6, 9
_NO_EPOCH_CHECK = 2**31   # above every epoch: no leader epoch cache to assign to
_READ_NOT_MAP_BYTES = 1 << 20


@dataclass
class RecoveryResult:
    bytes_truncated: int
    valid_bytes: int
    batches: int
    error: str | None = None


class ReplayTarget(Protocol):
    """What :func:`recover_segment` replays the batches into (the log layer's ``ProducerStateManager``, which this
    layer does not import)."""
    map_end_offset: int

    def replay_batch(self, batch: RecordBatch | LegacyBatch, txn_index: TransactionIndex | None = None) -> object: ...


def recover_segment(seg: LogSegment, producer_state: ReplayTarget | None = None,
                    leader_epochs: LeaderEpochFileCache | None = None) -> RecoveryResult:
    """Validate every batch, rebuild the indexes, truncate at the first invalid byte. With
    ``producer_state`` (a :class:`~storage_engine.log.producer_state_manager.ProducerStateManager` as of the base
    offset) replay each valid batch into it and rebuild the ``.txnindex``. With ``leader_epochs``, each valid v2
    batch assigns its partition leader epoch at its base offset if newer than the latest (Kafka's
    ``LogSegment.recover``), unwritten: the caller flushes the cache."""
    compiled = _recover_compiled(seg)
    result, data = compiled if compiled is not None else (_recover_walk(seg), None)
    txn_index = seg.txn_index
    txn_index.reset()
    if producer_state is not None or leader_epochs is not None:
        if data is not None:
            _replay_read(seg, data, result.valid_bytes, producer_state, txn_index, leader_epochs)
        else:
            for batch in seg.log.batches(0):
                if batch.file_position >= result.valid_bytes:
                    break
                if batch.magic >= 2:
                    if leader_epochs is not None:
                        leader_epochs.maybe_assign(batch.partition_leader_epoch, batch.base_offset, write=False)
                    if producer_state is not None:
                        producer_state.replay_batch(batch, txn_index)
    return result


def _replay_read(seg: LogSegment, data: bytes, valid_bytes: int, producer_state: ReplayTarget | None,
                 txn_index: TransactionIndex, leader_epochs: LeaderEpochFileCache | None = None) -> None:
    """The replay of :func:`recover_segment` over the segment's bytes already read (all valid up to
    ``valid_bytes``): a v2 batch without a producer id only moves the map end (all ``replay_batch`` does with
    it), so only batches with one are parsed; an epoch newer than the cache's latest is assigned."""
    latest = _NO_EPOCH_CHECK if leader_epochs is None else leader_epochs.latest_epoch
    latest = UNDEFINED_EPOCH if latest is None else latest
    pos = 0
    while pos < valid_bytes:
        base, length, magic = read_entry_header(data, pos)
        if magic >= 2:
            header = BATCH_HEADER.unpack_from(data, pos)
            if header[_LEADER_EPOCH] > latest and leader_epochs is not None:
                leader_epochs.maybe_assign(header[_LEADER_EPOCH], base, write=False)
                latest = header[_LEADER_EPOCH]
            if producer_state is None:
                pass
            elif header[_PRODUCER_ID] > NO_PRODUCER_ID:
                batch = batch_at(data, pos, valid_bytes, seg.path)
                if batch is not None:   # always: every batch below valid_bytes is whole
                    producer_state.replay_batch(batch, txn_index)
            else:
                producer_state.map_end_offset = base + header[_LAST_OFFSET_DELTA] + 1
        pos += LOG_OVERHEAD + length


def _recover_walk(seg: LogSegment) -> RecoveryResult:
    """:func:`recover_segment`'s indexes, batch by batch (compiled bulk steps where the kernels take them)."""
    seg.offset_index.reset()
    seg.time_index.reset()
    seg.bytes_since_last_index_entry = 0
    valid_bytes = 0
    last_index_entry = 0
    max_ts, max_ts_offset = -1, -1
    count = 0
    error = None
    view = seg.log.view()
    size = min(len(view), seg.log.size)  # less than known if the file is now shorter (FileRecords.view)
    try:
        while True:
            fast = walk_valid_batches(view, valid_bytes, size, seg.base_offset, seg.index_interval_bytes,
                                      last_index_entry, max_ts, max_ts_offset, seg.offset_index,
                                      seg.time_index)
            if fast is not None:
                valid_bytes, walked, last_index_entry, max_ts, max_ts_offset = fast
                count += walked
            batch = batch_at(view, valid_bytes, size, seg.path, strict=True)
            if batch is None:
                break
            batch.ensure_valid()
            last = batch.last_offset
            seg.ensure_offset_in_range(last)
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, last
            if valid_bytes - last_index_entry > seg.index_interval_bytes:
                seg.offset_index.append(last, valid_bytes)
                seg.time_index.maybe_append(max_ts, max_ts_offset)
                last_index_entry = valid_bytes
            valid_bytes += batch.size_in_bytes
            count += 1
    except CorruptRecordError as exc:
        error = str(exc)
    seg.set_recovered(max_ts, max_ts_offset)
    del view
    truncated = size - valid_bytes
    if truncated > 0:
        seg.log.truncate_to(valid_bytes)
    seg.offset_index.trim_to_valid_size()
    if max_ts >= 0:
        seg.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
    seg.time_index.trim_to_valid_size()
    seg.log.drop_view()
    return RecoveryResult(truncated, valid_bytes, count, error)


def _recover_compiled(seg: LogSegment) -> tuple[RecoveryResult, bytes | None] | None:
    """:func:`recover_segment` when the compiled walk takes every batch of the segment (the usual case): both index
    files are written once, already trimmed, instead of reset, appended to and trimmed. None (nothing changed)
    when the kernels are not loaded or the walk stops before the end; :func:`recover_segment` then does it all.
    With the result come the segment's bytes if they were read (a small segment), else None."""
    # A small segment is read (one pread), a large one mapped (no copy; recovery holds the partition lock, and
    # the map never covers more than the file has: see FileRecords.view). The size is taken from the buffer.
    view = seg.log.read(0, seg.log.size) if seg.log.size <= _READ_NOT_MAP_BYTES else seg.log.view()
    size = min(len(view), seg.log.size)
    walked = walk_batches(view, 0, size, seg.base_offset, seg.index_interval_bytes,
                          seg.max_index_size // OffsetIndex.ENTRY_SIZE,
                          seg.max_index_size // TimeIndex.ENTRY_SIZE - 1)
    data = view if isinstance(view, bytes) else None   # read, not mapped: kept for the replay
    del view
    seg.log.drop_view()
    if walked is None or walked[0] != size:
        return None
    _, count, max_ts, max_ts_offset, offset_entries, time_entries = walked
    if max_ts >= 0:
        last_ts = _TIME_ENTRY.unpack_from(time_entries, len(time_entries) - 12)[0] if time_entries else -1
        if max_ts > last_ts:   # the entry recover_segment() adds last (TimeIndex.maybe_append, skip_full_check)
            time_entries += _TIME_ENTRY.pack(max_ts, max_ts_offset - seg.base_offset)
    seg.bytes_since_last_index_entry = 0
    _rewrite_index(seg, layout.INDEX_SUFFIX, offset_entries)
    _rewrite_index(seg, layout.TIME_INDEX_SUFFIX, time_entries)
    seg.set_recovered(max_ts, max_ts_offset)
    return RecoveryResult(0, size, count, None), data


def _rewrite_index(seg: LogSegment, suffix: str, data: bytes) -> None:
    """Make an index file exactly ``data`` (packed entries): through the open index, or, for an index not
    opened yet, by writing the file directly (it is opened, and mapped, only when used) unless it holds exactly
    that already."""
    index = seg.open_index(suffix)
    if index is not None:
        index.rewrite(data)
        return
    path = seg.file_path(suffix)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.pread(fd, len(data) + 1, 0) != data:   # a recovery after a crash mostly finds them right
                os.ftruncate(fd, len(data))
                if data:
                    os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageIOError("cannot rewrite index", path, exc) from exc

