"""The per-record work of a cleaning round, one batch at a time: filling the key map from a batch, and deciding
which records of a batch survive (Kafka's ``Cleaner.buildOffsetMapForSegment`` inner loop and
``MemoryRecords.filterTo`` with the cleaner's ``RecordFilter``).

Which batches get here at all, and whether one left without records stays as an empty batch, is the cleaner's
batch-level decision (:func:`.txn_cleaning.batch_retention`); this module only looks at records. Each function has two implementations:

* the compiled kernels (:data:`storage_engine.record.kernels.KERNELS`: ``map_batch`` and ``filter_batch`` of
  ``storage_engine/record/_keymap.c`` and ``_clean.c``), used for magic-2 batches when the map exposes a
  ``kernel_spec`` (the in-process map and the Spark-built sorted map; not a subclass that answers ``get``
  itself): read the batch header, decode, hash, probe or fill the map, decide and re-encode the retained records
  in C, a batch per call (handed over as :func:`kernel_batch`);
* the Python twin below, used for everything else (legacy batches, other maps, ``STORAGE_ENGINE_PURE_PYTHON=1``)
  and for any batch the kernels hand back (a records section the decoder rejects, a rebuild ``build_batch``
  would refuse): it decodes with ``RecordBatch.records()`` and raises the exact error the engine always raised.

Both produce the same map contents, the same statistics and byte-identical batches; the compaction tests run
under both (``tests/storage_engine/maintenance/conftest.py``) and ``test_record_filter.py`` compares them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, cast

from storage_engine.maintenance.offset_map import InProcessOffsetMap
from storage_engine.record import codecs, legacy_records
from storage_engine.record import kernels as _kernels
from storage_engine.record.record_batch import (COMPRESSION_CODEC_MASK, LOG_APPEND_TIME, BatchBuffer, RecordBatch,
                                                build_batch, build_empty_batch, finish_batch)
from storage_engine.record.records import Record, SimpleRecord

if TYPE_CHECKING:
    from storage_engine.maintenance.cleaner_stats import CleanerStats
    from storage_engine.maintenance.offset_map import OffsetMap
    from storage_engine.record.legacy_records import LegacyBatch


def kernel_batch(batch: RecordBatch) -> tuple[BatchBuffer, int, bytes | None]:
    """A magic-2 batch as the compiled kernels take it: (buffer, position of its header, records). The kernels read
    the header themselves; ``records`` is None when the records section lies in place after the header
    (uncompressed), else the decompressed section."""
    return batch.buf, batch.pos, batch.records_payload() if batch.attributes & COMPRESSION_CODEC_MASK else None


def new_delete_horizon(now_ms: int, delete_retention_ms: int) -> int:
    """``now + delete.retention.ms``, the delete horizon a batch gets when it first keeps a tombstone or a marker
    (KIP-534), capped at Long.MAX (a round run "at the end of time" must not overflow the field)."""
    return min(now_ms + delete_retention_ms, 2**63 - 1)


# -- filling the map -------------------------------------------------------------------------------------------

def map_batch(batch: RecordBatch | LegacyBatch, offset_map: InProcessOffsetMap, start: int,
              end: int) -> tuple[int, bool]:
    """Put every keyed record of a (non-control) batch with ``start <= offset < end`` into ``offset_map``, in order,
    until it holds ``max_entries`` keys. Returns (records read, whether the map filled up)."""
    kernels = _kernels.KERNELS
    if kernels is not None and batch.magic >= 2 and type(offset_map).put is InProcessOffsetMap.put:
        done = kernels.map_batch(offset_map.table, offset_map.slots, offset_map.entries, offset_map.max_entries,
                                 kernel_batch(cast(RecordBatch, batch)), start, end)
        if done is not None:
            read, offset_map.entries, latest, full = done
            if latest >= 0:
                offset_map.latest_offset = latest
            return read, full
    return _py_map_batch(batch, offset_map, start, end)


def _py_map_batch(batch: RecordBatch | LegacyBatch, offset_map: InProcessOffsetMap, start: int,
                  end: int) -> tuple[int, bool]:
    recs = batch.records()
    max_entries = offset_map.max_entries
    put = offset_map.put
    for i, (offset, _ts, key, _value, _headers) in enumerate(recs):
        if key is not None and start <= offset < end:
            if offset_map.size >= max_entries:
                return i, True
            put(key, offset)
    return len(recs), False


# -- filtering -------------------------------------------------------------------------------------------------

def filter_batch(batch: RecordBatch | LegacyBatch, offset_map: OffsetMap, now_ms: int, delete_retention_ms: int,
                 retain_legacy_deletes: bool, keep_empty: bool,
                 stats: CleanerStats) -> tuple[bytes | memoryview, int] | None:
    """What of a data batch survives: (bytes, max timestamp), or None when nothing does. A record survives if it
    is beyond the mapped range, or its offset is the latest for its key and it is not a tombstone past its delete
    horizon; keyless records go (counted as invalid). A batch whose records all survive (and that needs no new
    delete horizon) is returned byte for byte; otherwise it is rebuilt with the same magic, codec, timestamp
    type, producer fields, flags, leader epoch and last offset, and a batch that first retains a tombstone gets
    ``delete horizon = now + delete.retention.ms`` (KIP-534). A batch left without records is dropped, or kept as an
    empty batch if ``keep_empty`` (the round's last batch, KAFKA-17076, or a producer's last batch)."""
    v2 = batch.magic >= 2
    horizon = batch.delete_horizon_ms if v2 and batch.has_delete_horizon else None
    tombstones_kept = (horizon is None or now_ms < horizon) if v2 else retain_legacy_deletes
    kernels = _kernels.KERNELS
    if v2 and kernels is not None:
        spec = getattr(offset_map, "kernel_spec", None)
        if spec is not None:
            # The batch's header fields (and its delete horizon, ``horizon``) are read by the kernel itself.
            out = kernels.filter_batch(spec, kernel_batch(cast(RecordBatch, batch)), offset_map.latest_offset,
                                       tombstones_kept, new_delete_horizon(now_ms, delete_retention_ms))
            if out is not None:
                return _compiled_result(cast(RecordBatch, batch), out, keep_empty, stats)
    return _py_filter_batch(batch, offset_map, now_ms, delete_retention_ms, tombstones_kept, horizon, keep_empty,
                            stats)


def _compiled_result(batch: RecordBatch, out: tuple, keep_empty: bool,
                     stats: CleanerStats) -> tuple[bytes | memoryview, int] | None:
    kind, read, invalid, tombstones_removed = out[:4]
    stats.messages_read += read
    stats.invalid_messages_read += invalid
    stats.tombstones_removed += tombstones_removed
    if kind == 1:
        stats.messages_written += read
        # The batch's bytes in place (no copy): written out before the segment's mapping can go away.
        return memoryview(batch.buf)[batch.pos:batch.pos + batch.size_in_bytes], batch.max_timestamp
    if kind == 0:
        return (build_empty_batch(batch), batch.max_timestamp) if keep_empty else None
    if kind == 3:
        stats.messages_written += out[4]
        return out[5], out[6]
    kept, payload, attributes, base_ts, max_ts = out[4:]
    stats.messages_written += kept
    codec = batch.compression
    if codec != codecs.NONE:
        payload = codecs.compress(codec, payload, magic=2, level=None)
    return finish_batch(payload, batch.base_offset, batch.last_offset_delta, batch.partition_leader_epoch,
                        attributes, base_ts, max_ts, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                        kept), max_ts


def _py_filter_batch(batch: RecordBatch | LegacyBatch, offset_map: OffsetMap, now_ms: int, delete_retention_ms: int,
                     tombstones_kept: bool, horizon: int | None, keep_empty: bool,
                     stats: CleanerStats) -> tuple[bytes | memoryview, int] | None:
    recs = batch.records()
    stats.messages_read += len(recs)
    latest = offset_map.latest_offset
    v2 = batch.magic >= 2
    kept = []
    keeps_tombstone = False
    lookup = offset_map.get
    invalid = tombstones_removed = 0
    for rec in recs:
        offset, _ts, key, value, _headers = rec
        if offset > latest:
            keep = True
        elif key is None:
            invalid += 1
            keep = False
        else:
            newest = offset >= lookup(key)
            keep = newest and (value is not None or tombstones_kept)
            if newest and not keep:
                tombstones_removed += 1
        if keep:
            kept.append(rec)
            if value is None:
                keeps_tombstone = True
    stats.invalid_messages_read += invalid
    stats.tombstones_removed += tombstones_removed
    needs_horizon = v2 and horizon is None and keeps_tombstone
    stats.messages_written += len(kept)
    if kept and len(kept) == len(recs) and not needs_horizon:
        return batch.raw(), batch.max_timestamp
    if not kept:
        if v2 and keep_empty:
            return build_empty_batch(cast(RecordBatch, batch)), batch.max_timestamp
        return None
    new_horizon = new_delete_horizon(now_ms, delete_retention_ms) if needs_horizon else horizon
    if batch.timestamp_type == LOG_APPEND_TIME:
        max_ts = batch.max_timestamp
    else:
        max_ts = max(r.timestamp for r in kept)
    return rebuild(batch, kept, new_horizon), max_ts


def rebuild(batch: RecordBatch | LegacyBatch, kept: Sequence[Record], horizon: int | None) -> bytes:
    """``batch`` with only the ``kept`` records (``Record``s), in its own format."""
    simple = [SimpleRecord(r.key, r.value, r.timestamp, r.headers) for r in kept]
    offsets = [r.offset for r in kept]
    if batch.magic >= 2:
        log_append = batch.timestamp_type == LOG_APPEND_TIME
        return build_batch(simple, base_offset=batch.base_offset, codec=batch.compression,
                           timestamp_type=batch.timestamp_type, log_append_time_ms=batch.max_timestamp if log_append
                           else None, producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                           base_sequence=batch.base_sequence, is_transactional=batch.is_transactional,
                           is_control=batch.is_control, partition_leader_epoch=batch.partition_leader_epoch,
                           delete_horizon_ms=horizon, offsets=offsets, last_offset=batch.last_offset)
    return legacy_records.build_legacy_batch(simple, magic=batch.magic, base_offset=offsets[0],
                                             codec=batch.compression, timestamp_type=max(batch.timestamp_type, 0),
                                             log_append_time_ms=batch.max_timestamp, offsets=offsets)
