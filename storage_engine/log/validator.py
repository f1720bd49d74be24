"""Validation of what a producer asks a log to append (Kafka's ``LogValidator``), before any byte is written.

Two paths, as in Kafka's leader append:

* records from the API (``Log.append_records``): each field is type-checked, a missing timestamp becomes
  "now", the topic's compression applies, and one magic-2 batch is built at the log end offset;
* client-encoded batches (``Log.append_batches``): every batch must be magic 2, pass its CRC, hold exactly the
  records its header declares at sequential offset deltas; offsets are then assigned from the log end offset
  and, on a ``LogAppendTime`` topic, the batch is stamped with the append time (its CRC redone).

On both paths a compacted topic refuses keyless records, and a batch larger than ``max.message.bytes`` or
``segment.bytes`` is refused; every batch is stamped with the partition leader epoch
(``log.partition.leader.epoch``, outside the CRC). A client may not write control batches, nor a batch with a
producer id but no sequence, nor a transactional batch without a producer id (Kafka's checks). Nothing here touches
a file or takes a lock; the producer-state checks come after, under the lock
(:mod:`storage_engine.log.producer_state`).
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from storage_engine.config import LogConfig
from storage_engine.errors import (CorruptRecordError, InvalidRecordError, InvalidRecordForTopicError,
                                   RecordBatchTooLargeError, RecordTooLargeError)
from storage_engine.record import codecs
from storage_engine.record.record_batch import (BATCH_HEADER, CRC_OFFSET, LOG_APPEND_TIME, MAGIC_V2,
                                                TIMESTAMP_TYPE_MASK, RecordBatch, build_batch, set_base_offset,
                                                set_partition_leader_epoch)
from storage_engine.record.records import Record, SimpleRecord
from storage_engine.segment.file_records import iter_batches


def check_records(topic: str, config: LogConfig, records: Sequence[SimpleRecord], *, codec: int = codecs.NONE,
                  now_ms: int) -> None:
    """Raise what :meth:`Log.append_records` would raise for ``records`` (a keyless record on a compacted
    topic, a batch over max.message.bytes or segment.bytes) without touching the log, so a caller can check a
    whole input before appending any of it (or creating its partition)."""
    if not records:
        raise InvalidRecordError("cannot append an empty list of records")
    records_batch(topic, config, normalize_records(records, now_ms), base_offset=0, codec=codec, now_ms=now_ms)


_BYTES_LIKE = (bytes, bytearray, memoryview)


def normalize_records(records: Iterable[SimpleRecord | tuple[Any, ...]], now_ms: int) -> list[SimpleRecord]:
    """``SimpleRecord``s with a timestamp (``now_ms`` where it is -1); a field of the wrong type is an
    InvalidRecordError naming the record and the field, never a TypeError from deep in the encoder."""
    recs = []
    for i, r in enumerate(records):
        if not isinstance(r, SimpleRecord):
            try:
                r = SimpleRecord(*r)
            except TypeError:
                raise InvalidRecordError(f"record {i} must be (key, value[, timestamp[, headers]]), got {r!r}") \
                    from None
        if r.key is not None and not isinstance(r.key, _BYTES_LIKE):
            raise InvalidRecordError(f"record {i}: key must be bytes or None, got {type(r.key).__name__}")
        if r.value is not None and not isinstance(r.value, _BYTES_LIKE):
            raise InvalidRecordError(f"record {i}: value must be bytes or None, got {type(r.value).__name__}")
        if isinstance(r.timestamp, bool) or not isinstance(r.timestamp, int) or r.timestamp < -1:
            raise InvalidRecordError(f"record {i}: timestamp must be an integer >= 0 (or -1 for now), "
                                     f"got {r.timestamp!r}")
        if r.headers:
            for h in r.headers:
                if (not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                        or not (h[1] is None or isinstance(h[1], _BYTES_LIKE))):
                    raise InvalidRecordError(f"record {i}: headers must be (str key, bytes or None value) pairs, "
                                             f"got {h!r}")
                try:
                    h[0].encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidRecordError(f"record {i}: header key {h[0]!r} is not valid Unicode text") from None
        if r.timestamp == -1:
            r = r._replace(timestamp=now_ms)
        recs.append(r)
    return recs


def effective_codec(config: LogConfig, requested: int) -> int:
    ctype = config.compression_type
    if ctype in ("producer",):
        return requested
    if ctype == "uncompressed":
        return codecs.NONE
    return codecs.CODEC_IDS[ctype]


def check_keys(topic: str, config: LogConfig, recs: Iterable[SimpleRecord | Record]) -> None:
    if config.compact:
        for i, r in enumerate(recs):
            if r.key is None:
                raise _keyless(topic, i)


def _keyless(topic: str, i: int) -> InvalidRecordForTopicError:
    return InvalidRecordForTopicError(
        f"compacted topic {topic} cannot accept a record without a key (record {i} of the batch)")


def check_size(topic: str, config: LogConfig, size: int) -> None:
    if size > config.max_message_bytes:
        raise RecordTooLargeError(f"the record batch is {size} bytes, larger than max.message.bytes "
                                  f"({config.max_message_bytes}) of topic {topic}")
    if size > config.segment_bytes:
        raise RecordBatchTooLargeError(f"the record batch is {size} bytes, larger than segment.bytes "
                                  f"({config.segment_bytes}) of topic {topic}")


def stamp_log_append_time(buf: bytearray | memoryview, pos: int, now_ms: int) -> None:
    """Kafka's ``setMaxTimestamp(LOG_APPEND_TIME, now)`` on the client batch at ``pos`` of a LogAppendTime
    topic: the timestamp-type bit and the max timestamp change, both under the CRC, so the CRC is redone."""
    fields = list(BATCH_HEADER.unpack_from(buf, pos))
    fields[5] |= TIMESTAMP_TYPE_MASK  # attributes
    fields[8] = now_ms                # max_timestamp
    BATCH_HEADER.pack_into(buf, pos, *fields)
    struct.pack_into(">I", buf, pos + CRC_OFFSET, RecordBatch(buf, pos).compute_crc())


def records_batch(topic: str, config: LogConfig, recs: list[SimpleRecord], *, base_offset: int, codec: int, now_ms: int,
                  producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                  is_transactional: bool = False) -> tuple[bytes, int]:
    """(the batch, its max timestamp) for normalized ``recs`` at ``base_offset``; refuses what the topic refuses."""
    check_keys(topic, config, recs)
    check_producer_arguments(producer_id, producer_epoch, base_sequence)
    check_producer_fields(topic, producer_id, producer_epoch, base_sequence, is_transactional)
    ts_type = LOG_APPEND_TIME if config.message_timestamp_type == "LogAppendTime" else 0
    data = build_batch(recs, base_offset=base_offset, codec=effective_codec(config, codec), timestamp_type=ts_type,
                       log_append_time_ms=now_ms if ts_type else None, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=is_transactional,
                       partition_leader_epoch=config.partition_leader_epoch)
    check_size(topic, config, len(data))
    return data, (now_ms if ts_type else max(r.timestamp for r in recs))


def check_producer_arguments(producer_id: object, producer_epoch: object, base_sequence: object) -> None:
    """Types and ranges of producer fields given through the API (a batch's header fields are ints already)."""
    for name, value, lo, hi in (("producer id", producer_id, -1, 2**63 - 1), ("producer epoch", producer_epoch, -1, 32767),
                                ("base sequence", base_sequence, -1, 2**31 - 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InvalidRecordError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_producer_fields(topic: str, producer_id: int, producer_epoch: int, base_sequence: int,
                          is_transactional: bool) -> None:
    """Kafka's client checks of a batch's producer fields (``LogValidator.validateBatch``)."""
    if producer_id < 0:
        if is_transactional:
            raise InvalidRecordError(f"cannot write a transactional batch without a producer id to topic {topic}")
        return
    if base_sequence < 0:
        raise InvalidRecordError(f"Invalid sequence number {base_sequence} in record batch with producerId "
                                 f"{producer_id} in topic partition {topic}")
    if producer_epoch < 0:
        raise InvalidRecordError(f"Invalid producer epoch {producer_epoch} in record batch with producerId "
                                 f"{producer_id} in topic partition {topic}")


def parse_client_batches(name: str, topic: str, config: LogConfig, data: bytes | bytearray | memoryview, *,
                         in_place: bool = False) -> tuple[bytearray | memoryview, list]:
    """The batches of a client's append, parsed (structure only) before the log is locked. They are parsed in a
    copy of ``data`` (offsets are assigned in it) unless ``in_place``: then ``data``, a writable buffer its caller
    gives up, is used and changed."""
    if in_place:
        if not isinstance(data, (bytearray, memoryview)) or (isinstance(data, memoryview) and data.readonly):
            raise TypeError(f"an append in place needs a writable buffer, got {type(data).__name__}")
        buf: bytearray | memoryview = data
    else:
        buf = bytearray(data)
    try:
        batches = list(iter_batches(buf, 0, len(buf), "<append>", strict=True))
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"invalid batch in append to {name}: {exc.reason}", None, exc.position) from None
    if not batches:
        raise InvalidRecordError(f"append to {name} holds no record batch")
    for batch in batches:      # Kafka's analyzeAndValidateRecords: each batch's size first (MESSAGE_TOO_LARGE)
        if batch.size_in_bytes > config.max_message_bytes:
            check_size(topic, config, batch.size_in_bytes)
    if len(buf) > config.segment_bytes:
        # Then the whole append: it goes into one segment, which must not exceed segment.bytes (RECORD_LIST_TOO_LARGE).
        raise RecordBatchTooLargeError(f"the append of {len(buf)} bytes to {name} is larger than "
                                       f"segment.bytes ({config.segment_bytes}) of topic {topic}")
    return buf, batches


def assign_offsets(name: str, topic: str, config: LogConfig, buf: bytearray | memoryview, batches: list, *, first_offset: int,
                   now_ms: int) -> tuple[int, int, int, int]:
    """Validate every batch and record and rewrite ``buf`` in place with offsets from ``first_offset`` (and the
    append time on a LogAppendTime topic). Returns (next offset, max timestamp, offset of the batch holding it,
    record count)."""
    offset = first_offset
    max_ts, max_ts_offset, count = -1, offset, 0
    for batch in batches:
        if batch.magic != MAGIC_V2:
            raise InvalidRecordError(f"append to {name}: only magic 2 batches are accepted, got magic {batch.magic}")
        batch.ensure_valid()
        check_size(topic, config, batch.size_in_bytes)
        # every record is read and checked (as decoding them would), but none is built: a batch whose records
        # scan holds exactly ``records_count`` of them
        bad, delta, keyless = batch.scan_records()
        if bad >= 0:
            raise InvalidRecordError(f"append to {name}: inner record offsets must be sequential, record {bad} "
                                     f"has offset delta {delta}")
        held = max(batch.records_count, 0)
        if batch.last_offset_delta != held - 1:
            raise InvalidRecordError(f"append to {name}: batch declares {batch.records_count} records and last "
                                     f"offset delta {batch.last_offset_delta} but holds {held}")
        if config.compact and keyless >= 0:
            raise _keyless(topic, keyless)
        if batch.is_control:
            raise InvalidRecordError(f"Clients are not allowed to write control records in topic partition {name}")
        check_producer_fields(name, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                              batch.is_transactional)
        set_base_offset(buf, batch.pos, offset)
        set_partition_leader_epoch(buf, batch.pos, config.partition_leader_epoch)
        batch.base_offset, batch.partition_leader_epoch = offset, config.partition_leader_epoch
        if config.message_timestamp_type == "LogAppendTime":
            stamp_log_append_time(buf, batch.pos, now_ms)
            bmax = batch.max_timestamp = now_ms
        else:
            bmax = batch.max_timestamp
        if bmax > max_ts:
            max_ts, max_ts_offset = bmax, offset + batch.last_offset_delta
        offset += batch.last_offset_delta + 1
        count += held
    return offset, max_ts, max_ts_offset, count
