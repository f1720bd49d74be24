"""Kafka's exact rules for what a log accepts, at their boundaries (MUTATION.md: what the mutants of the log and its
validator showed the other tests let through). Rules quoted from Kafka:

- ``LogValidator.validateBatch``/``UnifiedLog.analyzeAndValidateRecords``: ``if (batchSize > maxMessageSize)``
  RecordTooLargeException (a batch of exactly ``max.message.bytes`` is accepted);
- ``UnifiedLog.append``: ``if (validRecords.sizeInBytes > config.segmentSize)`` RecordBatchTooLargeException;
- ``LogValidator.assignOffsetsNonCompressed``: ``if (batch.maxTimestamp > maxTimestamp)`` the batch's max
  timestamp and its last offset become the append's (strict: the first batch with the largest timestamp keeps it);
- producer fields are Java types: producer id a long, epoch a short (<= 32767), sequence an int; -1 is "none".
"""
from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from storage_engine.errors import InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord

from ..helpers import batch, config, recs

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def size_of(*values: str) -> int:
    return len(batch(0, *values, timestamp=T0))


def test_batch_of_exactly_max_message_bytes_is_accepted(logs):
    size = size_of("v" * 50)
    log = logs(config(max_message_bytes=size))
    assert log.append_records(recs("v" * 50, timestamp=T0)).count == 1
    assert log.append_batches(batch(0, "w" * 50, timestamp=T0)).first_offset == 1
    with pytest.raises(RecordTooLargeError, match=f"is {size + 1} bytes, larger than max.message.bytes \\({size}\\)"):
        log.append_records(recs("v" * 51, timestamp=T0))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append_batches(batch(0, "w" * 51, timestamp=T0))
    assert log.log_end_offset == 2


def test_batch_of_exactly_segment_bytes_is_accepted(logs):
    size = size_of("v" * 50)
    log = logs(config(segment_bytes=size))
    assert log.append_records(recs("v" * 50, timestamp=T0)).count == 1
    assert log.append_batches(batch(0, "w" * 50, timestamp=T0)).first_offset == 1
    with pytest.raises(RecordTooLargeError, match=f"is {size + 1} bytes, larger than segment.bytes \\({size}\\)"):
        log.append_records(recs("v" * 51, timestamp=T0))
    with pytest.raises(RecordTooLargeError, match=f"append of {size + 1} bytes .* segment.bytes \\({size}\\)"):
        log.append_batches(batch(0, "w" * 51, timestamp=T0))
    assert log.log_end_offset == 2
    # each accepted batch filled a segment of its own
    assert [s.size for s in log.segments[:2]] == [size, size]


def test_append_max_timestamp_is_the_first_batch_holding_it_by_its_last_offset(logs):
    """assignOffsetsNonCompressed: maxTimestamp and shallowOffsetOfMaxTimestamp (the batch's last offset) change
    only on a strictly larger batch max timestamp."""
    log = logs(config(index_interval_bytes=1))
    data = (build_batch(recs("a", "b", timestamp=T0 + 5), base_offset=0)
            + build_batch(recs("c", "d", "e", timestamp=T0 + 9), base_offset=0)
            + build_batch(recs("f", timestamp=T0 + 9), base_offset=0)
            + build_batch(recs("g", timestamp=T0 + 1), base_offset=0))
    info = log.append_batches(data)
    assert (info.first_offset, info.last_offset, info.count, info.max_timestamp) == (0, 6, 7, T0 + 9)
    seg = log.active_segment
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (T0 + 9, 4)
    assert log.offset_for_timestamp(T0 + 9)[1] == 2
    assert log.offset_for_timestamp(T0 + 6)[1] == 2
    assert log.offset_for_timestamp(T0 + 5)[1] == 0


def test_records_path_max_timestamp_and_missing_timestamps(logs):
    """Records from the API: a missing timestamp (-1) becomes now; 0 is a timestamp; below -1 is refused."""
    log = logs()
    log.clock.set(T0 + 100)
    info = log.append_records([SimpleRecord(b"k", b"a", 0), SimpleRecord(b"k", b"b", -1),
                               SimpleRecord(b"k", b"c", T0)])
    assert info.max_timestamp == T0 + 100
    assert [r.timestamp for r in log.read_records()] == [0, T0 + 100, T0]
    with pytest.raises(InvalidRecordError, match=r"record 1: timestamp must be an integer >= 0 \(or -1 for now\), "
                                                 r"got -2"):
        log.append_records([SimpleRecord(b"k", b"a", 0), SimpleRecord(b"k", b"b", -2)])
    info = log.append_records([SimpleRecord(b"k", b"z", 0)])
    assert info.max_timestamp == 0
    assert log.log_end_offset == 4


@pytest.mark.parametrize("field,good,bad", [
    ("producer_epoch", 32767, 32768),
    ("base_sequence", 2**31 - 1, 2**31),
])
def test_producer_fields_are_java_types(logs, field, good, bad):
    log = logs()
    args = dict(producer_id=7, producer_epoch=0, base_sequence=0)
    name = field.replace("_", " ")
    with pytest.raises(InvalidRecordError, match=f"{name} must be an integer in \\[-1, {good}\\], got {bad}"):
        log.append_records(recs("a", timestamp=T0), **{**args, field: bad})
    with pytest.raises(InvalidRecordError, match=f"{name} must be an integer in \\[-1, {good}\\], got -2"):
        log.append_records(recs("a", timestamp=T0), **{**args, field: -2})
    assert log.log_end_offset == 0
    assert log.append_records(recs("a", timestamp=T0), **{**args, field: good}).count == 1


def test_producer_id_is_a_java_long(logs):
    log = logs()
    with pytest.raises(InvalidRecordError, match=r"producer id must be an integer in \[-1, 9223372036854775807\], "
                                                 r"got 9223372036854775808"):
        log.append_records(recs("a", timestamp=T0), producer_id=2**63, producer_epoch=0, base_sequence=0)
    with pytest.raises(InvalidRecordError, match="producer id must be an integer"):
        log.append_records(recs("a", timestamp=T0), producer_id=True, producer_epoch=0, base_sequence=0)
    assert log.append_records(recs("a", timestamp=T0), producer_id=2**63 - 1, producer_epoch=0,
                              base_sequence=0).count == 1


def test_idempotent_batch_needs_sequence_and_epoch(logs):
    """validateBatch: a batch with a producer id must carry a sequence and an epoch (Kafka's messages)."""
    log = logs()
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1 in record batch with producerId 7 "
                                                 "in topic partition"):
        log.append_records(recs("a", timestamp=T0), producer_id=7, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="Invalid producer epoch -1 in record batch with producerId 7 "
                                                 "in topic partition"):
        log.append_records(recs("a", timestamp=T0), producer_id=7, producer_epoch=-1, base_sequence=0)
    with pytest.raises(InvalidRecordError, match="cannot write a transactional batch without a producer id"):
        log.append_records(recs("a", timestamp=T0), is_transactional=True)
    assert log.log_end_offset == 0
    # producer id 0 is a producer id
    assert log.append_records(recs("a", timestamp=T0), producer_id=0, producer_epoch=0, base_sequence=0).count == 1


def test_expire_producers_at_exactly_the_expiration_and_never_with_an_open_transaction(logs, log_dir):
    """ProducerStateManager.isProducerExpired: ``currentTxnFirstOffset.isEmpty && currentTimeMs -
    lastTimestamp >= producerIdExpirationMs``; the state is then snapshotted at the log end, which the next load
    starts from."""
    from ..helpers import open_log
    log = logs()
    log.append_records(recs("a", timestamp=T0), producer_id=1, producer_epoch=0, base_sequence=0)
    log.append_records(recs("b", timestamp=T0 + 10), producer_id=2, producer_epoch=0, base_sequence=0)
    log.append_records(recs("c", timestamp=T0), producer_id=3, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    assert log.expire_producers(T0 + 99, 100) == []
    assert log.expire_producers(T0 + 100, 100, dry_run=True) == [1]
    assert sorted(log.producer_state.producers) == [1, 2, 3]
    assert log.expire_producers(T0 + 110, 100) == [1, 2]
    assert sorted(log.producer_state.producers) == [3]
    assert log.expire_producers(T0 + 10**9, 100) == []          # 3 has an open transaction
    end = log.log_end_offset
    assert end in log.producer_state.snapshot_offsets()
    log.close(clean=True)
    again, _ = open_log(log_dir, now_ms=T0, had_clean_shutdown=True)
    assert sorted(again.producer_state.producers) == [3]
    again.close(clean=True)


def test_describe(logs):
    log = logs(config(segment_bytes=size_of("a") * 2, index_interval_bytes=1))
    log.append_records(recs("a", timestamp=T0 + 1))
    log.append_records(recs("b", timestamp=T0 + 2))
    log.append_records(recs("c", timestamp=T0 + 3), producer_id=4, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    d = log.describe()
    segs = d.pop("segments")
    assert d == {"topic": log.topic, "partition": log.partition, "dir": log.dir, "future": False,
                 "log_start_offset": 0, "local_log_start_offset": 0, "remote_storage_enable": False,
                 "log_end_offset": 3, "high_watermark": 3, "last_stable_offset": 2,
                 "recovery_point": 2, "producers": 1, "open_transactions": 1, "size_bytes": log.size_in_bytes()}
    assert [(s["base_offset"], s["size_bytes"], s["largest_timestamp"]) for s in segs] == [
        (0, 2 * size_of("a"), T0 + 2), (2, log.active_segment.size, T0 + 3)]
    assert [(s["index_entries"], s["time_index_entries"]) for s in segs] == [(1, 1), (0, 0)]


@pytest.mark.parametrize("record,message", [
    ((b"k",), "record 1 must be (key, value[, timestamp[, headers]]), got (b'k',)"),
    (("k", b"v"), "record 1: key must be bytes or None, got str"),
    ((b"k", 5), "record 1: value must be bytes or None, got int"),
    ((b"k", b"v", True), "record 1: timestamp must be an integer >= 0 (or -1 for now), got True"),
    ((b"k", b"v", 1.5), "record 1: timestamp must be an integer >= 0 (or -1 for now), got 1.5"),
    ((b"k", b"v", 0, [("h", 5)]), "record 1: headers must be (str key, bytes or None value) pairs, got ('h', 5)"),
    ((b"k", b"v", 0, [(b"h", b"x")]), "record 1: headers must be (str key, bytes or None value) pairs, got (b'h', b'x')"),
    ((b"k", b"v", 0, [("h", b"x", b"y")]), "record 1: headers must be (str key, bytes or None value) pairs, got ('h', b'x', b'y')"),
    ((b"k", b"v", 0, ["hx"]), "record 1: headers must be (str key, bytes or None value) pairs, got 'hx'"),
    ((b"k", b"v", 0, [("\udc80", None)]), "record 1: header key '\\udc80' is not valid Unicode text"),
])
def test_a_bad_record_field_is_named_and_nothing_is_written(logs, record, message):
    """Bad input gets a clear error naming the record and the field, and nothing already stored is lost."""
    log = logs()
    good = (b"k", b"ok", T0, [("h", None), ("h2", bytearray(b"x"))])
    with pytest.raises(InvalidRecordError) as err:
        log.append_records([good, record])
    assert str(err.value) == message
    assert log.log_end_offset == 0
    info = log.append_records([good, (b"k", memoryview(b"v"), -1, [])])
    assert info.count == 2


def test_read_committed_as_kafkas_consumer_filters_a_fetch(logs):
    """read_committed stops at the last stable offset and drops the records of aborted transactions: a producer's
    data is aborted from the first offset of an aborted transaction (``firstOffset <= batch.lastOffset``, a
    one-record transaction included) until its ABORT marker, after which the same producer's next transaction is
    read; producer id 0 is a producer id. read_uncommitted returns every data record; markers never."""
    from storage_engine.log.reads import READ_COMMITTED
    log = logs()

    def txn(pid, seq, *values):
        log.append_records(recs(*values, timestamp=T0), producer_id=pid, producer_epoch=0, base_sequence=seq,
                           is_transactional=True)

    txn(0, 0, "a", "b")                          # 0, 1
    log.append_end_txn(0, 0, commit=False)       # 2
    txn(5, 0, "c")                               # 3
    log.append_end_txn(5, 0, commit=True)        # 4
    txn(9, 0, "x")                               # 5
    log.append_end_txn(9, 0, commit=False)       # 6
    txn(0, 2, "d")                               # 7
    log.append_end_txn(0, 0, commit=True)        # 8
    txn(7, 0, "e")                               # 9, left open
    log.append_records(recs("f", timestamp=T0))  # 10
    assert log.last_stable_offset == 9

    def read(start=None, n=None, level=READ_COMMITTED):
        return [(r.offset, r.value) for r in log.read_records(start, n, isolation_level=level)]

    assert read() == [(3, b"c"), (7, b"d")]
    assert read(1) == [(3, b"c"), (7, b"d")]
    assert read(5) == [(7, b"d")]
    assert read(n=1) == [(3, b"c")]
    assert read(level="read_uncommitted") == [(0, b"a"), (1, b"b"), (3, b"c"), (5, b"x"), (7, b"d"), (9, b"e"),
                                              (10, b"f")]
    assert read(1, level="read_uncommitted")[:2] == [(1, b"b"), (3, b"c")]
    with pytest.raises(OffsetOutOfRangeError, match=r"^offset 12 is out of range for .*: log start offset 0, log end offset 11$"):
        read(12)


# ------------------------------------------------------------------ client batches (LogValidator, leader append)

def test_client_batch_errors_name_the_append_and_the_byte(logs):
    """A client's append that does not parse is refused whole with the reason and the byte position in it (Kafka's
    ``CorruptRecordException`` / ``InvalidRecordException`` of ``LogValidator``): a CRC mismatch names the append
    and the batch's position, a torn batch or entry header is an error of the append to the partition."""
    from storage_engine.errors import CorruptRecordError
    log = logs(topic="orders")
    good = batch(0, "a", timestamp=T0)
    bad = bytearray(batch(0, "b", timestamp=T0))
    bad[-3] ^= 0x01
    err: pytest.ExceptionInfo[Any]   # one name for each refusal below
    with pytest.raises(CorruptRecordError) as err:
        log.append_batches(good + bytes(bad))
    assert str(err.value).startswith("record batch is corrupt (stored crc = ")
    assert str(err.value).endswith(f") (file <append>, byte position {len(good)})")
    with pytest.raises(CorruptRecordError) as err:
        log.append_batches(good + good[:30])
    assert str(err.value) == (f"invalid batch in append to orders-0: truncated batch at offset 0: it declares "
                              f"{len(good) - 12} bytes but only 18 follow (byte position {len(good)})")
    assert (err.value.path, err.value.position) == (None, len(good))
    with pytest.raises(CorruptRecordError) as err:
        log.append_batches(good[:10])
    assert str(err.value) == ("invalid batch in append to orders-0: truncated entry: only 10 bytes left, fewer than "
                              "the 17-byte entry header (byte position 0)")
    with pytest.raises(InvalidRecordError) as err:
        log.append_batches(b"")
    assert str(err.value) == "append to orders-0 holds no record batch"
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0


def test_client_base_offsets_are_replaced_and_offset_deltas_checked(logs):
    """LogValidator.assignOffsetsNonCompressed: the client's base offset means nothing, the log assigns offsets from
    its end; ``validateRecord``/``InvalidRecordException``: the inner offsets of a batch must be its base + 0, 1, ...
    and the header's record count and last offset delta must match its records."""
    log = logs(topic="orders")
    info = log.append_batches(batch(100, "a", "b", timestamp=T0) + batch(7, "c", timestamp=T0))
    assert (info.first_offset, info.last_offset, info.count) == (0, 2, 3)
    assert [b.base_offset for b in log.active_segment.batches()] == [0, 2]
    assert read_values(log) == [(0, b"a"), (1, b"b"), (2, b"c")]
    gap = build_batch(recs("a", "b", timestamp=T0), base_offset=100, offsets=[100, 102])
    with pytest.raises(InvalidRecordError) as err:
        log.append_batches(gap)
    assert str(err.value) == ("append to orders-0: inner record offsets must be sequential, record 1 has offset "
                              "delta 2")
    wide = build_batch(recs("a", "b", timestamp=T0), base_offset=100, last_offset=105)
    with pytest.raises(InvalidRecordError) as err:
        log.append_batches(wide)
    assert str(err.value) == "append to orders-0: batch declares 2 records and last offset delta 5 but holds 2"
    assert log.log_end_offset == 3


def read_values(log):
    return [(r.offset, r.value) for r in log.read_records()]


def test_refusals_name_the_topic(logs):
    """Kafka's messages name the topic (``InvalidRecordException``, ``RecordTooLargeException``): a keyless record
    on a compacted topic (``LogValidator.validateKey``), a batch over max.message.bytes, an append over
    segment.bytes (``UnifiedLog.append``: ``validRecords.sizeInBytes > config.segmentSize``)."""
    from storage_engine.errors import InvalidRecordForTopicError
    size = size_of("v" * 50)
    log = logs(config(cleanup_policy="compact", max_message_bytes=size, segment_bytes=size + 8), topic="orders")
    keyed = recs("x", "y", keys=["k", None], timestamp=T0)
    msg = "compacted topic orders cannot accept a record without a key (record 1 of the batch)"
    err: pytest.ExceptionInfo[Any]   # one name for each refusal below
    with pytest.raises(InvalidRecordForTopicError) as err:
        log.append_records(keyed)
    assert str(err.value) == msg
    with pytest.raises(InvalidRecordForTopicError) as err:
        log.append_batches(build_batch(keyed))
    assert str(err.value) == msg
    big = recs("v" * 51, keys=["k"], timestamp=T0)
    big_size = len(build_batch(big))
    too_big = f"the record batch is {big_size} bytes, larger than max.message.bytes ({size}) of topic orders"
    with pytest.raises(RecordTooLargeError) as err:
        log.append_records(big)
    assert str(err.value) == too_big
    with pytest.raises(RecordTooLargeError) as err:
        log.append_batches(build_batch(big))
    assert str(err.value) == too_big
    small = build_batch(recs("v", keys=["k"], timestamp=T0))
    with pytest.raises(RecordTooLargeError) as err:
        log.append_batches(small * 3)
    assert str(err.value) == (f"the append of {3 * len(small)} bytes to orders-0 is larger than segment.bytes "
                              f"({size + 8}) of topic orders")
    assert log.log_end_offset == 0


def test_producer_field_errors_name_the_partition(logs):
    """LogValidator.validateBatch's messages: ``Invalid sequence number ... in topic partition <tp>``, and a
    transactional batch needs a producer id, on both paths (records from the API name the topic, client batches
    the partition)."""
    log = logs(topic="orders")
    with pytest.raises(InvalidRecordError) as err:
        log.append_records(recs("a", timestamp=T0), producer_id=7, producer_epoch=0, base_sequence=-1)
    assert str(err.value) == "Invalid sequence number -1 in record batch with producerId 7 in topic partition orders"
    with pytest.raises(InvalidRecordError) as err:
        log.append_batches(build_batch(recs("a", timestamp=T0), producer_id=7, producer_epoch=-1, base_sequence=0))
    assert str(err.value) == "Invalid producer epoch -1 in record batch with producerId 7 in topic partition orders-0"
    txn_without_pid = bytearray(build_batch(recs("a", timestamp=T0)))
    txn_without_pid[22] |= 0x10  # attributes (int16 at 21): the transactional bit, CRC redone below
    from storage_engine.record.record_batch import RecordBatch, CRC_OFFSET
    import struct
    struct.pack_into(">I", txn_without_pid, CRC_OFFSET, RecordBatch(txn_without_pid, 0).compute_crc())
    assert RecordBatch(txn_without_pid, 0).is_transactional
    with pytest.raises(InvalidRecordError) as err:
        log.append_batches(bytes(txn_without_pid))
    assert str(err.value) == "cannot write a transactional batch without a producer id to topic orders-0"
    assert log.log_end_offset == 0


@pytest.mark.parametrize("topic_codec,requested,stored", [
    ("producer", "gzip", "gzip"), ("producer", "none", "none"), ("gzip", "none", "gzip"),
    ("uncompressed", "gzip", "none"), ("lz4", "gzip", "lz4"),
])
def test_compression_type_of_the_topic_decides_the_codec(logs, topic_codec, requested, stored):
    """compression.type (Kafka's ``LogConfig``/``LogValidator``): ``producer`` keeps the producer's codec,
    ``uncompressed`` stores batches uncompressed, any codec name recompresses with that codec."""
    from storage_engine.record import codecs
    log = logs(config(compression_type=topic_codec))
    log.append_records(recs("a" * 100, "b" * 100, timestamp=T0), codec=codecs.CODEC_IDS[requested])
    (stored_batch,) = list(log.active_segment.batches())
    assert stored_batch.compression == codecs.CODEC_IDS[stored]
    assert read_values(log) == [(0, b"a" * 100), (1, b"b" * 100)]


def test_log_append_time_keeps_the_other_attributes_and_an_unsigned_crc(logs):
    """LogValidator on a LogAppendTime topic: ``setMaxTimestamp(LOG_APPEND_TIME, now)`` changes only the timestamp
    type bit and the max timestamp (compression, transactional bit, producer fields stay), and the batch's CRC-32C
    is rewritten as the unsigned 32-bit header field it is."""
    from storage_engine.record import codecs
    log = logs(config(message_timestamp_type="LogAppendTime"))
    log.clock.set(T0 + 7)
    data = b"".join(build_batch(recs(f"v{i}" * 20, timestamp=T0), codec=codecs.GZIP, producer_id=5,
                                producer_epoch=0, base_sequence=i, is_transactional=True) for i in range(8))
    info = log.append_batches(data)
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (0, 7, T0 + 7)
    stored = list(log.active_segment.batches())
    crcs = []
    for b in stored:
        b.ensure_valid()
        assert (b.compression, b.is_transactional, b.timestamp_type, b.max_timestamp) == (codecs.GZIP, True, 1,
                                                                                         T0 + 7)
        crcs.append(b.crc)
    assert any(c >= 2**31 for c in crcs)  # the data above gives CRCs on both sides of 2^31
    assert [r.timestamp for r in log.read_records()] == [T0 + 7] * 8


def test_check_records_is_the_records_path_without_the_log(tmp_path):
    """``validator.check_records`` (the pre-check of a whole input) refuses exactly what ``append_records`` refuses,
    with the same messages: an empty append, a keyless record on a compacted topic, a batch over
    max.message.bytes (measured compressed, with the topic's codec), a bad field; records without a timestamp
    are stamped with now, and a plain append needs no producer id."""
    from storage_engine.config import LogConfig
    from storage_engine.errors import InvalidRecordForTopicError
    from storage_engine.log.validator import check_records
    from storage_engine.record import codecs
    cfg = LogConfig()
    check_records("orders", cfg, recs("a", "b"), now_ms=T0)
    check_records("orders", config(message_timestamp_type="LogAppendTime"), recs("a"), now_ms=T0)
    check_records("orders", cfg, [(None, b"a", -1, [("h", None)])], now_ms=T0)  # type: ignore[list-item]  # a plain tuple, accepted as a SimpleRecord is
    err: pytest.ExceptionInfo[Any]   # one name for each refusal below
    with pytest.raises(InvalidRecordError) as err:
        check_records("orders", cfg, [], now_ms=T0)
    assert str(err.value) == "cannot append an empty list of records"
    with pytest.raises(InvalidRecordForTopicError) as err:
        check_records("orders", config(cleanup_policy="compact"), recs("a"), now_ms=T0)
    assert str(err.value) == "compacted topic orders cannot accept a record without a key (record 0 of the batch)"
    with pytest.raises(InvalidRecordError) as err:
        check_records("orders", cfg, [(b"k", 5)], now_ms=T0)  # type: ignore[list-item]  # a malformed tuple: the test checks it is refused
    assert str(err.value) == "record 0: value must be bytes or None, got int"
    values = ["x" * 300, "x" * 300]
    plain = len(build_batch(recs(*values, timestamp=T0)))
    limit = config(max_message_bytes=plain - 1)
    with pytest.raises(RecordTooLargeError) as err:
        check_records("orders", limit, recs(*values), now_ms=T0)
    assert str(err.value) == (f"the record batch is {plain} bytes, larger than max.message.bytes ({plain - 1}) "
                              f"of topic orders")
    check_records("orders", limit, recs(*values), codec=codecs.GZIP, now_ms=T0)   # compressed, it fits


# ------------------------------------------------------------------ appends: records, retries, markers

def test_records_append_defaults_and_what_it_reports(logs):
    """The producer path (``UnifiedLog.appendAsLeader`` of one batch): an empty append is refused; without producer
    arguments the batch is plain (no producer id, not transactional); the append reports its offsets, record count,
    max timestamp and size; the producer state's map end follows the log end (Kafka's
    ``updateMapEndOffset(lastOffset + 1)``), so the snapshot a clean close writes is named by the log end."""
    from storage_engine.log import appends
    log = logs()
    with pytest.raises(InvalidRecordError) as err:
        log.append_records([])
    assert str(err.value) == "cannot append an empty list of records"
    info = appends.append_records(log, recs("a", "b", timestamp=T0 + 3))
    (stored,) = list(log.active_segment.batches())
    assert (stored.producer_id, stored.is_transactional) == (-1, False)
    assert (info.first_offset, info.last_offset, info.count, info.max_timestamp, info.bytes, info.rolled,
            info.duplicate) == (0, 1, 2, T0 + 3, stored.size_in_bytes, False, False)
    assert log.producer_state.map_end_offset == 2
    log.append_batches(batch(0, "c", timestamp=T0))
    assert log.producer_state.map_end_offset == 3
    log.close(clean=True)
    assert sorted(n for n in os.listdir(log.dir) if n.endswith(".snapshot")) == ["00000000000000000003.snapshot"]


def test_a_retry_reports_the_first_append(logs, caplog):
    """Kafka's duplicate detection (``ProducerStateEntry.findDuplicateBatch``): a retried batch gets the offsets and
    the timestamp of its first append, writes nothing (0 bytes) and is logged; a client-encoded retry is detected
    for producer id 0 too (``producerId >= 0`` is a producer)."""
    import logging
    log = logs()
    first = log.append_records(recs("a", "b", "c", timestamp=T0 + 4), producer_id=0, producer_epoch=0,
                               base_sequence=0)
    size = log.size_in_bytes()
    with caplog.at_level(logging.INFO, logger="storage_engine.log.appends"):
        retry = log.append_records(recs("a", "b", "c", timestamp=T0 + 9), producer_id=0, producer_epoch=0,
                                   base_sequence=0)
    assert (retry.first_offset, retry.last_offset, retry.count, retry.max_timestamp, retry.bytes, retry.rolled,
            retry.duplicate) == (0, 2, 3, T0 + 4, 0, False, True)
    assert [r.getMessage() for r in caplog.records if r.name == "storage_engine.log.appends"] == [
        "topic-0: retried batch of sequences [0, 2] already at offsets [0, 2]"]
    client = log.append_batches(build_batch(recs("x", "y", "z", timestamp=T0), producer_id=0, producer_epoch=0,
                                            base_sequence=0))
    assert (client.first_offset, client.last_offset, client.count, client.bytes, client.duplicate) == (0, 2, 3, 0,
                                                                                                      True)
    assert log.size_in_bytes() == size and log.log_end_offset == 3 and first.count == 3


def marker_coordinator_epoch(log, offset: int) -> int:
    import struct
    b = [b for s in log.segments for b in s.batches() if b.base_offset == offset][0]
    assert b.is_control
    (rec,) = b.records()
    return struct.unpack(">hi", rec.value)[1]


def test_end_txn_marker_rules(logs):
    """WriteTxnMarkers as the coordinator writes them: one control record at the log end, reported as 1 record at
    its own offset stamped now; the coordinator epoch defaults to 0 and is an int32 (Kafka's
    ``TRANSACTION_COORDINATOR_FENCED`` compares it); the producer id must be a producer's (>= 0) and its epoch
    given, with Kafka's messages."""
    from storage_engine.errors import TransactionCoordinatorFencedError
    log = logs(topic="orders")
    log.clock.set(T0 + 11)
    log.append_records(recs("a", timestamp=T0), producer_id=3, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    info = log.append_end_txn(3, 0, commit=True)
    (marker,) = [b for b in log.active_segment.batches() if b.is_control]
    assert (info.first_offset, info.last_offset, info.count, info.max_timestamp, info.bytes) == (
        1, 1, 1, T0 + 11, marker.size_in_bytes)
    assert marker_coordinator_epoch(log, 1) == 0
    log.append_end_txn(3, 0, commit=False, coordinator_epoch=0)            # epoch 0 again: not fenced
    log.append_end_txn(3, 0, commit=False, coordinator_epoch=2**31 - 1)
    assert marker_coordinator_epoch(log, 3) == 2**31 - 1
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_end_txn(3, 0, commit=False, coordinator_epoch=0)
    for bad in (2**31, -1, True, "1"):
        with pytest.raises(InvalidRecordError) as err:
            log.append_end_txn(3, 0, commit=True, coordinator_epoch=bad)
        assert str(err.value) == f"coordinator epoch must be an integer in [0, 2147483647], got {bad!r}"
    with pytest.raises(InvalidRecordError) as err:
        log.append_end_txn(-1, 0, commit=True)
    assert str(err.value) == "cannot write a transactional batch without a producer id to topic orders"
    with pytest.raises(InvalidRecordError) as err:
        log.append_end_txn(3, -1, commit=True)
    assert str(err.value) == "Invalid producer epoch -1 in record batch with producerId 3 in topic partition orders"
    assert log.log_end_offset == 4


def test_a_roll_is_logged_with_its_reason(logs, caplog):
    """Kafka logs every roll (``UnifiedLog.roll``: "Rolled new log segment at offset ..."); here with the partition,
    the offset the new segment starts at and the ``shouldRoll`` condition that fired."""
    import logging
    size = size_of("a")
    log = logs(config(segment_bytes=2 * size))
    with caplog.at_level(logging.INFO, logger="storage_engine.log.local_log"):
        for _ in range(3):
            log.append_records(recs("a", timestamp=T0))
    assert [r.getMessage() for r in caplog.records if r.name == "storage_engine.log.local_log"] == [
        "rolling topic-0 at offset 2 (segment-bytes)"]


@pytest.mark.parametrize("compact,lag,rolls_at", [
    (True, 1, 2),            # min(max.compaction.lag.ms, segment.ms) = 1: due once 1 ms has passed
    (True, 500, 501),
    (False, 1, 10**6 + 1),   # a delete topic: segment.ms alone
    (True, 0, 10**6 + 1),    # no lag (0: only a LogConfig built without validation has it): segment.ms alone
])
def test_max_compaction_lag_bounds_the_segment_age(logs, compact, lag, rolls_at):
    """UnifiedLog.maybeRoll: on a compacted topic with ``max.compaction.lag.ms > 0`` the active segment rolls at
    ``min(max.compaction.lag.ms, segment.ms)`` (so the cleaner can reach its records in time); other topics use
    segment.ms (``LogSegment.shouldRoll``: ``timeWaitedForRoll > maxSegmentMs - rollJitterMs``)."""
    import dataclasses
    cfg = config(cleanup_policy="compact" if compact else "delete", max_compaction_lag_ms=max(lag, 1),
                 segment_ms=10**6)
    log = logs(dataclasses.replace(cfg, max_compaction_lag_ms=lag))
    log.append_records(recs("a", keys=["k"], timestamp=T0))
    log.append_records(recs("b", keys=["k"], timestamp=T0 + rolls_at - 1))
    assert len(log.segments) == 1
    assert log.append_records(recs("c", keys=["k"], timestamp=T0 + rolls_at)).rolled
    assert [s.base_offset for s in log.segments] == [0, 2]


# ------------------------------------------------------------------ appendAsFollower (the copy of a partition)

def segment_bytes(log) -> list[tuple[int, bytes]]:
    return [(s.base_offset, bytes(s.log.read(0, s.size))) for s in log.segments]


def aborted(log):
    return [t for s in log.segments for t in s.txn_index.all_aborted_txns()]


def test_follower_append_copies_batches_byte_for_byte(logs):
    """UnifiedLog.appendAsFollower: batches keep their offsets and bytes (no re-validation of offsets, timestamps or
    producer fields beyond size and CRC), the log rolls as it would (``shouldRoll``), and the producer state is
    replayed as a replica's (REPLICATION origin): the copy ends with the same segments, producer state, aborted
    transactions and LSO as the source, and writes the same snapshots at its rolls."""
    size = size_of("v0")
    cfg = config(segment_bytes=3 * size + 30)
    leader = logs(cfg, partition=0)
    leader.append_records(recs("v0", "v1", timestamp=T0 + 5))
    leader.append_records(recs("i0", timestamp=T0 + 6), producer_id=0, producer_epoch=0, base_sequence=0)
    leader.append_records(recs("t0", "t1", timestamp=T0 + 7), producer_id=4, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    leader.append_records(recs("v2", timestamp=T0 + 2))
    leader.append_end_txn(4, 0, commit=False, coordinator_epoch=3)
    for i in range(4):
        leader.append_records(recs(f"w{i}", timestamp=T0 + 10 + i))
    leader.append_records(recs("t2", timestamp=T0 + 20), producer_id=4, producer_epoch=0, base_sequence=2,
                          is_transactional=True)
    leader.append_records(recs("v3", timestamp=T0 + 1))
    assert len(leader.segments) >= 3
    copy = logs(cfg, partition=1)
    infos = [copy.append_as_follower(data) for _, data in segment_bytes(leader)]
    assert segment_bytes(copy) == segment_bytes(leader)
    assert copy.log_end_offset == leader.log_end_offset == 13
    first_data = segment_bytes(leader)[0][1]
    assert (infos[0].first_offset, infos[0].last_offset, infos[0].bytes, infos[0].max_timestamp) == (
        0, leader.segments[1].base_offset - 1, len(first_data), max(b.max_timestamp for b in
                                                                      leader.segments[0].batches()))
    assert sum(i.count for i in infos) == sum(b.records_count for s in leader.segments for b in s.batches())
    assert copy.producer_state.state_key() == leader.producer_state.state_key()
    assert aborted(copy) == aborted(leader) and aborted(copy)
    assert copy.last_stable_offset == leader.last_stable_offset == 11
    assert copy.producer_state.map_end_offset == 13
    assert sorted(copy.producer_state.snapshot_offsets()) == sorted(leader.producer_state.snapshot_offsets())
    # the copy goes on as a log: its next append lands after the copied data
    assert copy.append_records(recs("z", timestamp=T0)).first_offset == 13
    copy.refresh()
    assert [r.value for r in copy.read_records(12)] == [b"v3", b"z"]


def test_follower_append_of_plain_batches_moves_the_map_end(logs):
    """Batches without a producer id move only the producer state's map end (``updateMapEndOffset``): the snapshot a
    clean close writes is named by the log end; a gap before the first batch is kept (offsets are the source's)."""
    copy = logs()
    data = batch(5, "a", "b", timestamp=T0 + 1) + batch(7, "c", timestamp=T0 + 3) + batch(9, "d", timestamp=T0)
    info = copy.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.count, info.max_timestamp, info.bytes) == (5, 9, 4, T0 + 3,
                                                                                                 len(data))
    assert copy.producer_state.map_end_offset == 10 and copy.log_end_offset == 10
    assert [(r.offset, r.value) for r in copy.read_records(5)] == [(5, b"a"), (6, b"b"), (7, b"c"), (9, b"d")]
    assert copy.producer_state.producers == {}
    copy.close(clean=True)
    assert sorted(n for n in os.listdir(copy.dir) if n.endswith(".snapshot")) == ["00000000000000000010.snapshot"]


def test_follower_append_refuses_offsets_below_the_log_end(logs):
    """appendAsFollower: a batch must start at or after the log end offset and offsets must increase
    (``UnexpectedAppendOffsetException``/``InvalidRecordException``); an append that fails writes nothing of itself;
    empty data appends nothing and reports an empty range at the log end; torn or corrupt data is refused."""
    from storage_engine.errors import CorruptRecordError
    copy = logs()
    copy.append_as_follower(batch(0, "a", "b", timestamp=T0))
    info = copy.append_as_follower(b"")
    assert (info.first_offset, info.last_offset, info.count, info.max_timestamp, info.bytes) == (2, 1, 0, -1, 0)
    assert copy.append_as_follower(batch(2, "c", timestamp=T0)).first_offset == 2     # exactly at the log end
    with pytest.raises(InvalidRecordError) as err:
        copy.append_as_follower(batch(1, "x", "y", timestamp=T0))
    assert str(err.value) == "out of order offsets appending to topic-0: batch 1..2 at or after offset 3 expected"
    with pytest.raises(InvalidRecordError) as err:
        copy.append_as_follower(batch(3, "x", timestamp=T0) + batch(3, "y", timestamp=T0))
    assert str(err.value) == "out of order offsets appending to topic-0: batch 3..3 at or after offset 4 expected"
    backwards = build_batch([], base_offset=10, last_offset=9)
    with pytest.raises(InvalidRecordError) as err:
        copy.append_as_follower(backwards)
    assert str(err.value) == "out of order offsets appending to topic-0: batch 10..9 at or after offset 4 expected"
    good = batch(4, "d", timestamp=T0)
    with pytest.raises(CorruptRecordError):
        copy.append_as_follower(good + good[:30])
    bad = bytearray(good)
    bad[-2] ^= 0x01
    with pytest.raises(CorruptRecordError, match="crc"):
        copy.append_as_follower(bytes(bad))
    assert copy.log_end_offset == 4
    assert [r.value for r in copy.read_records()] == [b"a", b"b", b"c", b"x"]


def test_follower_rolls_at_the_batch_base_when_offsets_overflow(logs):
    """UnifiedLog.maybeRoll / LocalLog.roll for a follower: a batch whose last offset does not fit the active
    segment (``lastOffset - baseOffset > Int.MAX``) rolls first, and the new segment starts at
    max(the batch's first offset, LEO); a size roll of contiguous data starts at the log end (= its first offset)."""
    from storage_engine.segment.segment import INT32_MAX
    size = size_of("a")
    copy = logs(config(segment_bytes=2 * size))
    copy.append_as_follower(batch(0, "a", timestamp=T0) + batch(1, "a", timestamp=T0))
    info = copy.append_as_follower(batch(2, "a", timestamp=T0))
    assert [s.base_offset for s in copy.segments] == [0, 2]
    far = INT32_MAX + 10
    copy.append_as_follower(batch(far, "b", timestamp=T0 + 1))
    assert [s.base_offset for s in copy.segments] == [0, 2, far]
    assert copy.log_end_offset == far + 1
    assert [(r.offset, r.value) for r in copy.read_records(2)] == [(2, b"a"), (far, b"b")]
    assert info.count == 1


def test_a_follower_size_roll_across_an_offset_gap_starts_at_the_batch_base(logs):
    """UnifiedLog.maybeRoll rolls at ``appendInfo.firstOffset`` and LocalLog.roll takes max(it, LEO): a copy of
    compacted data (offsets with gaps) that rolls for size starts the new segment at the batch's first offset,
    not at the log end, as the source's replica names it."""
    size = size_of("a")
    copy = logs(config(segment_bytes=2 * size))
    copy.append_as_follower(batch(0, "a", timestamp=T0) + batch(1, "a", timestamp=T0))
    copy.append_as_follower(batch(10, "b", timestamp=T0))
    assert [s.base_offset for s in copy.segments] == [0, 10]
    assert [f for f in sorted(os.listdir(copy.dir)) if f.endswith(".log")] == [
        "00000000000000000000.log", "00000000000000000010.log"]
    assert copy.log_end_offset == 11
    assert [(r.offset, r.value) for r in copy.read_records()] == [(0, b"a"), (1, b"a"), (10, b"b")]


# ------------------------------------------------------------------ deleting segments (retention's step)

def one_per_segment(logs, n: int, **kw):
    """A log of ``n`` one-record segments of two records each ([0, 1], [2, 3], ...), the last one active."""
    size = size_of("a")
    log = logs(config(segment_bytes=2 * size, **kw))
    for _ in range(2 * n - 1):
        log.append_records(recs("a", timestamp=T0))
    assert [s.base_offset for s in log.segments] == list(range(0, 2 * n, 2))
    return log


def shared_generation(log) -> int:
    return log.lock.read_state().generation


def mtime_ms(path: str) -> int:
    """The file's modification time (ms), checked equal to its access time: both are set to the deletion time."""
    st = os.stat(path)
    assert st.st_atime == st.st_mtime
    return round(st.st_mtime * 1000)


def test_delete_segments_moves_the_log_start_and_schedules_the_files(logs):
    """UnifiedLog.deleteSegments: the log start offset moves to the base of the segment after the last one deleted;
    each deleted segment's files and the producer snapshot named by its base are renamed ``.deleted``, stamped with
    the deletion time (``file.delete.delay.ms`` counts from it); nothing to delete changes nothing."""
    log = one_per_segment(logs, 4)
    g = shared_generation(log)
    now = T0 + 123_456
    with log.locked():
        assert log.delete_segments_locked([], now) == []
    assert shared_generation(log) == g
    doomed = log.segments[:3]
    with log.locked():
        gone = log.delete_segments_locked(doomed, now)
    assert gone == doomed
    assert [s.base_offset for s in log.segments] == [6]
    assert log.log_start_offset == 6 and log.lock.read_state().log_start_offset == 6
    names = os.listdir(log.dir)
    for base in (0, 2, 4):
        prefix = f"{base:020d}"
        for suffix in (".log.deleted", ".index.deleted", ".timeindex.deleted"):
            assert mtime_ms(os.path.join(log.dir, prefix + suffix)) == now
        assert prefix + ".log" not in names
    for base in (2, 4):   # the snapshots written at the rolls to 2 and 4 go with the segments named by them
        assert mtime_ms(os.path.join(log.dir, f"{base:020d}.snapshot.deleted")) == now
    assert f"{6:020d}.snapshot" in names


def test_delete_every_segment_rolls_first(logs):
    """UnifiedLog.deleteSegments: if every segment would go, roll first so an empty active segment remains (its base
    the log end, its roll clock started now) and the log start moves to it; an active segment that is already empty
    at the log end is kept, the others go."""
    log = one_per_segment(logs, 3)
    now = T0 + 777
    with log.locked():
        gone = log.delete_segments_locked(list(log.segments), now)
    assert [s.base_offset for s in gone] == [0, 2, 4]
    assert [s.base_offset for s in log.segments] == [5]
    assert (log.log_start_offset, log.log_end_offset, log.active_segment.size) == (5, 5, 0)
    assert log.active_segment.created_ms == now
    log.append_records(recs("b", timestamp=T0))
    log.roll()
    for _ in range(3):                       # two fill the segment at 6, the third rolls to 8
        log.append_records(recs("c", timestamp=T0))
    log.roll()                               # an empty active segment at the log end, 9
    assert [s.base_offset for s in log.segments] == [5, 6, 8, 9]
    with log.locked():
        gone = log.delete_segments_locked(list(log.segments), now)
    assert [s.base_offset for s in gone] == [5, 6, 8]
    assert [s.base_offset for s in log.segments] == [9] and log.log_start_offset == 9


def test_a_failed_rename_moves_the_log_start_only_past_what_went(logs):
    """A deletion that fails half way (a rename refused by the file system: here the ``.deleted`` name is taken by a
    directory) raises the I/O error; the log start moves only past the segments really renamed, and the segment
    list is reloaded from the folder; a failure after the last segment went (its snapshot) keeps the new start."""
    from storage_engine.errors import StorageIOError
    log = one_per_segment(logs, 4)
    g = shared_generation(log)
    obstacle = os.path.join(log.dir, f"{2:020d}.log.deleted")
    os.makedirs(os.path.join(obstacle, "x"))
    now = T0 + 5
    with pytest.raises(StorageIOError, match="cannot rename"):
        with log.locked():
            log.delete_segments_locked(log.segments[:3], now)
    assert log.log_start_offset == 2 and log.lock.read_state().log_start_offset == 2
    assert [s.base_offset for s in log.segments] == [2, 4, 6]
    assert shared_generation(log) == log.generation == g + 2
    assert log.active_segment.created_ms == now      # reloaded from the folder now
    assert [r.offset for r in log.read_records()] == [2, 3, 4, 5, 6]
    os.rmdir(os.path.join(obstacle, "x"))
    os.rmdir(obstacle)
    os.makedirs(os.path.join(log.dir, f"{4:020d}.snapshot.deleted", "x"))
    with pytest.raises(StorageIOError, match="cannot delete producer snapshot"):
        with log.locked():
            log.delete_segments_locked(log.segments[:2], now)
    assert [s.base_offset for s in log.segments] == [6] and log.log_start_offset == 6


def test_delete_records_bounds_and_messages(logs):
    """DeleteRecords (``UnifiedLog.maybeIncrementLogStartOffset``): the new start must be in [0, high watermark]
    (Kafka's ``OffsetOutOfRangeException`` message names both); 0 is allowed; a start that does not move is not
    published."""
    log = logs(topic="orders")
    log.append_records(recs("a", "b", "c", timestamp=T0))
    g = shared_generation(log)
    assert log.delete_records(0) == 0
    assert shared_generation(log) == g
    for bad in (4, -2):
        with pytest.raises(OffsetOutOfRangeError) as err:
            log.delete_records(bad)
        assert str(err.value) == (f"cannot increment the log start offset of orders-0 to {bad}: it must be in "
                                  f"[0, high watermark 3]")
    assert log.delete_records(2) == 2
    assert shared_generation(log) == g + 1
    assert log.delete_records(2) == 2
    assert shared_generation(log) == g + 1


def test_every_change_of_the_segment_set_is_published_before_and_after(logs):
    """A change that renames files bumps the shared generation before its first rename (a process that meets it half
    done reloads) and once done: a roll (and its flush), retention's deletion, truncation, a full truncation, each
    moves the generation by exactly two; a roll of an empty active segment (KAFKA-6388) changes nothing."""
    log = one_per_segment(logs, 3)
    g = shared_generation(log)
    log.roll()
    assert shared_generation(log) == g + 2
    log.roll()
    assert shared_generation(log) == g + 2
    log.append_records(recs("a", timestamp=T0))
    with log.locked():
        log.delete_segments_locked(log.segments[:1], T0)
    assert shared_generation(log) == g + 4
    assert log.truncate_to(4)
    assert shared_generation(log) == g + 6
    log.truncate_fully_and_start_at(10)
    assert shared_generation(log) == g + 8
    assert shared_generation(log) == log.generation


# ------------------------------------------------------------------ truncation (truncateTo, truncateFullyAndStartAt)

def test_truncate_to_bounds_and_what_it_returns(logs):
    """UnifiedLog.truncateTo: a negative target is refused; a target at or past the log end changes nothing (False);
    a target below the first segment truncates fully and starts there (True), as does any real truncation."""
    log = logs(topic="orders")
    log.append_records(recs("a", "b", timestamp=T0))
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.truncate_to(-1)
    assert str(err.value) == "cannot truncate orders-0 to negative offset -1"
    assert log.truncate_to(2) is False
    log.truncate_fully_and_start_at(10)
    log.append_records(recs("c", timestamp=T0))
    assert log.truncate_to(4) is True
    assert [s.base_offset for s in log.segments] == [4] and log.log_end_offset == log.log_start_offset == 4
    assert log.truncate_to(5) is False


def test_truncate_to_the_first_segment_base_keeps_the_producer_state_snapshotted_there(logs):
    """UnifiedLog.truncateTo: only a target *below* the first segment's base truncates fully
    (``firstSegmentBaseOffset > targetOffset``); at the base the log is truncated and the producer state rebuilt from
    the snapshot at that offset (``truncateAndReload``), so producers known there are kept."""
    log = one_per_segment(logs, 2)
    log.append_records(recs("p", timestamp=T0), producer_id=7, producer_epoch=0, base_sequence=0)
    log.roll()                                   # a snapshot at 4 holds producer 7
    log.append_records(recs("q", timestamp=T0))
    with log.locked():
        log.delete_segments_locked(log.segments[:2], T0)
    assert [s.base_offset for s in log.segments] == [4] and log.log_start_offset == 4
    assert log.truncate_to(4) is True
    assert (log.log_end_offset, log.active_segment.size) == (4, 0)
    assert sorted(log.producer_state.producers) == [7]
    assert f"{4:020d}.snapshot" in os.listdir(log.dir)


def test_truncation_to_empty_restarts_the_roll_clock(logs, log_dir):
    """LogSegment.truncateTo: a segment truncated to empty restarts its roll clock (``created = now``), and a segment
    a truncation creates or reopens starts it then too; records without a timestamp then roll segment.ms after it."""
    log = logs(config(segment_ms=1000))
    log.clock.set(T0 + 5000)
    log.append_batches(batch(0, "a", timestamp=-1))
    log.clock.set(T0 + 9000)
    assert log.truncate_to(0)
    assert log.active_segment.created_ms == T0 + 9000
    log.clock.set(T0 + 9500)
    log.append_batches(batch(0, "b", timestamp=-1))
    log.append_batches(batch(0, "c", timestamp=-1))
    assert len(log.segments) == 1            # 500 ms since the truncation
    log.clock.set(T0 + 10_001)
    log.append_batches(batch(0, "d", timestamp=-1))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.clock.set(T0 + 20_000)
    log.truncate_fully_and_start_at(2)       # the segment at 2 exists: it is kept and emptied
    assert log.active_segment.created_ms == T0 + 20_000
    log.clock.set(T0 + 30_000)
    log.truncate_fully_and_start_at(50)      # a new segment
    assert log.active_segment.created_ms == T0 + 30_000
    assert log.producer_state.map_end_offset == 50


def test_truncate_fully_at_an_existing_base_keeps_that_segment_only(logs):
    """UnifiedLog.truncateFullyAndStartAt: every segment goes (``.deleted``), except that a segment already at the new
    start is kept, emptied, under its own name; log start, log end and recovery point are the new start."""
    log = one_per_segment(logs, 3)
    log.flush()
    log.truncate_fully_and_start_at(2)
    assert [s.base_offset for s in log.segments] == [2]
    names = os.listdir(log.dir)
    assert f"{2:020d}.log" in names and os.path.getsize(os.path.join(log.dir, f"{2:020d}.log")) == 0
    for base in (0, 4):
        assert f"{base:020d}.log.deleted" in names and f"{base:020d}.log" not in names
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (2, 2, 2)
    log.append_records(recs("x", timestamp=T0))
    assert [(r.offset, r.value) for r in log.read_records()] == [(2, b"x")]


def _joined_view_of_five_records(logs, now: int):
    """Five records in segments of two (bases 0, 2, 4), written by one process; another process joins the log
    dir (it opens the sealed segments read-only) with its clock at ``now``."""
    cfg = config(segment_bytes=2 * size_of("a"), segment_ms=1000)
    owner = logs(cfg)
    for _ in range(5):
        owner.append_records(recs("a", timestamp=T0))
    joiner = logs(cfg, exclusive=False)
    joiner.clock.set(now)
    return joiner


def test_a_view_truncating_into_a_sealed_segment_reopens_it_writable(logs):
    """A process that joined the log dir opens sealed segments read-only; when truncation makes one the active
    segment it is reopened writable (its roll clock starting then) and takes appends, records without a timestamp
    included."""
    joiner = _joined_view_of_five_records(logs, T0 + 50)
    joiner.truncate_to(3)
    seg = joiner.active_segment
    assert seg.base_offset == 2 and seg.log.writable and seg.offset_index.writable and seg.time_index.writable
    assert seg.created_ms == T0 + 50
    joiner.append_batches(batch(0, "n", timestamp=-1))
    assert [r.offset for r in joiner.read_records()] == [0, 1, 2, 3]


# ------------------------------------------------------------------ the steps a kill -9 can interrupt

def killed_at(step: str, action, nth: int = 1) -> bool:
    """Run ``action`` in a forked process armed to die (SIGKILL) at crash step ``step``; True if it died there."""
    from storage_engine import crashpoints
    pid = os.fork()
    if pid == 0:   # the child: never returns into the test
        try:
            crashpoints.arm(step, nth)
            action()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def joiner_of(log_dir, cfg):
    from ..helpers import open_log
    return open_log(log_dir, cfg, now_ms=T0, exclusive=False)[0]


def names(log) -> set[str]:
    return set(os.listdir(log.dir))


@pytest.mark.kills
@pytest.mark.parametrize("step", ["roll.published", "roll.sealed", "roll.created", "roll.flushed"])
def test_a_roll_killed_at_each_step(logs, log_dir, step):
    """LocalLog.roll's steps, each a point a kill -9 can stop at: the generation is published first (before any file
    changes), then the old segment is sealed (its indexes trimmed), then the new segment's files exist, then the
    producer snapshot at the new base is written and everything below it flushed (the recovery point moves to the
    new base). Whatever step the process died at, the data is all there afterwards."""
    size = size_of("a")
    cfg = config(segment_bytes=10 * size)
    log = logs(cfg)
    for _ in range(3):
        log.append_records(recs("a", timestamp=T0))
    log.roll()
    for _ in range(3):
        log.append_records(recs("a", timestamp=T0))
    g = shared_generation(log)
    seg = log.active_segment
    full_index = os.path.getsize(seg.offset_index.path)
    assert killed_at(step, lambda: joiner_of(log_dir, cfg).roll())
    state = log.lock.read_state()
    new = {f"{6:020d}.log", f"{6:020d}.index", f"{6:020d}.timeindex"}
    assert state.generation == g + (2 if step == "roll.flushed" else 1)
    assert (os.path.getsize(seg.offset_index.path) < full_index) == (step != "roll.published")
    assert new <= names(log) if step in ("roll.created", "roll.flushed") else not (new & names(log))
    assert (f"{6:020d}.snapshot" in names(log)) == (step == "roll.flushed")
    assert state.recovery_point == (6 if step == "roll.flushed" else 3)
    log.refresh()
    assert [r.offset for r in log.read_records()] == [0, 1, 2, 3, 4, 5]


@pytest.mark.kills
@pytest.mark.parametrize("step", ["retention.published", "retention.partial", "retention.renamed"])
def test_retention_killed_at_each_step(logs, log_dir, step):
    """deleteSegments' steps: the new log start offset is published before any rename (a process meeting the
    deletion half done reads from there and deletes what is left below it), then the segments are renamed
    ``.deleted`` one by one (first one, then all)."""
    log = one_per_segment(logs, 5)
    cfg = log.config
    with log.locked():
        log.delete_segments_locked(log.segments[:1], T0)
    g = shared_generation(log)

    def delete():
        j = joiner_of(log_dir, cfg)
        with j.locked():
            j.delete_segments_locked(j.segments[:3], T0)

    assert killed_at(step, delete)
    state = log.lock.read_state()
    assert (state.generation, state.log_start_offset) == (g + 1, 8)
    renamed = {base for base in (2, 4, 6) if f"{base:020d}.log.deleted" in names(log)}
    assert renamed == {"retention.published": set(), "retention.partial": {2},
                       "retention.renamed": {2, 4, 6}}[step]
    log.refresh()
    assert log.log_start_offset == 8
    assert [r.offset for r in log.read_records()] == [8]


@pytest.mark.kills
def test_a_segment_deletion_can_name_the_step_after_its_log_file(logs, log_dir):
    """Deleting a segment's files renames the ``.log`` first; ``after_log`` names the crash step reached right then
    (the cleaner's swap uses it), with the indexes not yet renamed; a plain deletion keeps the producer snapshot
    named by the segment unless asked to delete it too."""
    log = one_per_segment(logs, 3)
    cfg = log.config

    def delete():
        j = joiner_of(log_dir, cfg)
        with j.locked():
            j.delete_segment_files(j.segments[1], T0, after_log="swap.delete-after")

    assert killed_at("swap.delete-after", delete)
    assert {f"{2:020d}.log.deleted", f"{2:020d}.index", f"{2:020d}.timeindex"} <= names(log)
    log2 = one_per_segment(lambda cfg: logs(cfg, partition=1), 3)
    with log2.locked():
        log2.delete_segment_files(log2.segments[1], T0 + 9)
    assert f"{2:020d}.snapshot" in names(log2)
    with log2.locked():
        log2.delete_segment_files(log2.segments[0], T0 + 9, snapshot=True)
    assert f"{2:020d}.snapshot" in names(log2)
    with log2.locked():
        seg = log2.segments[0]
        log2.delete_segment_files(seg, T0 + 9, snapshot=True)
    assert mtime_ms(os.path.join(log2.dir, f"{4:020d}.snapshot.deleted")) == T0 + 9


def test_a_marker_without_a_coordinator_epoch_has_epoch_0(logs):
    """WriteTxnMarkers: a marker written without a coordinator epoch carries 0 in its control record
    (``EndTransactionMarker``: version 0, coordinator epoch int32), as a marker of the first coordinator."""
    from storage_engine.log import appends
    log = logs()
    log.append_records(recs("a", timestamp=T0), producer_id=3, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    info = appends.append_end_txn(log, 3, 0, commit=False)
    assert (info.first_offset, info.count) == (1, 1)
    assert marker_coordinator_epoch(log, 1) == 0


def test_follower_replays_producer_state_as_a_replica(logs):
    """ProducerAppendInfo with origin REPLICATION: a replica records what the leader wrote without the leader's
    checks (an older producer epoch or an older coordinator epoch is logged, not refused); data from before magic 2
    (no producer fields) only moves the map end."""
    from storage_engine.record.legacy_records import build_legacy_batch
    from storage_engine.record.record_batch import build_control_batch
    copy = logs()
    legacy = build_legacy_batch([SimpleRecord(b"k", b"old", T0)], magic=1, base_offset=0)
    assert copy.append_as_follower(legacy).last_offset == 0
    assert copy.producer_state.map_end_offset == 1 and copy.producer_state.producers == {}
    data = (build_batch(recs("a", timestamp=T0), base_offset=1, producer_id=4, producer_epoch=1, base_sequence=0,
                        is_transactional=True)
            + build_control_batch(1, base_offset=2, timestamp=T0, producer_id=4, producer_epoch=1,
                                  coordinator_epoch=5)
            + build_batch(recs("b", timestamp=T0), base_offset=3, producer_id=4, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
            + build_control_batch(0, base_offset=4, timestamp=T0, producer_id=4, producer_epoch=0,
                                  coordinator_epoch=2))
    info = copy.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.count) == (1, 4, 4)
    assert copy.last_stable_offset == 5
    assert [t.first_offset for s in copy.segments for t in s.txn_index.all_aborted_txns()] == [3]


def test_follower_errors_name_the_partition_and_time_rolls_use_the_clock(logs):
    """appendAsFollower: a corrupt batch is reported in the partition's name at its byte position; records without a
    timestamp roll the copy by the wall clock like any append (``shouldRoll``: ``now - created``)."""
    from storage_engine.errors import CorruptRecordError
    copy = logs(config(segment_ms=1000))
    good = batch(0, "a", timestamp=-1)
    bad = bytearray(good)
    bad[-2] ^= 0x01
    with pytest.raises(CorruptRecordError) as err:
        copy.append_as_follower(good + bytes(bad))
    assert str(err.value).startswith("record batch is corrupt (stored crc = ")
    assert str(err.value).endswith(f") (file topic-0, byte position {len(good)})")
    copy.clock.set(T0 + 10)
    copy.append_as_follower(good)
    copy.clock.set(T0 + 1000)
    copy.append_as_follower(batch(1, "b", timestamp=-1))
    assert len(copy.segments) == 1
    copy.clock.set(T0 + 1001)
    copy.append_as_follower(batch(2, "c", timestamp=-1))
    assert [s.base_offset for s in copy.segments] == [0, 2]


def test_truncation_snapshots_the_rebuilt_producer_state_at_the_new_end(logs):
    """UnifiedLog.truncateTo -> rebuildProducerState: the producer state is rebuilt for the new log end and written as
    a snapshot there, so a later load starts from it."""
    log = logs()
    log.append_records(recs("a", "b", timestamp=T0), producer_id=2, producer_epoch=0, base_sequence=0)
    log.append_records(recs("c", timestamp=T0))
    log.append_records(recs("d", timestamp=T0), producer_id=2, producer_epoch=0, base_sequence=2)
    assert log.truncate_to(3)
    assert log.producer_state.producers[2].last_seq == 1
    assert f"{3:020d}.snapshot" in os.listdir(log.dir)


def test_a_deleted_segment_keeps_its_files_as_they_were(logs):
    """A segment leaving the log is renamed ``.deleted`` and closed without trimming: another process may still map
    its files (Kafka's delete renames and deletes later, it never writes to a deleted segment); its preallocated
    index keeps its length."""
    log = logs(config(index_interval_bytes=1))
    for _ in range(3):
        log.append_records(recs("a", timestamp=T0))
    index_len = os.path.getsize(log.active_segment.offset_index.path)
    time_len = os.path.getsize(log.active_segment.time_index.path)
    assert index_len > 3 * 8
    log.truncate_fully_and_start_at(10)
    assert os.path.getsize(os.path.join(log.dir, f"{0:020d}.index.deleted")) == index_len
    assert os.path.getsize(os.path.join(log.dir, f"{0:020d}.timeindex.deleted")) == time_len


def test_a_view_truncating_fully_to_a_sealed_segment_reopens_it_writable(logs):
    """truncateFullyAndStartAt at the base of a segment a joined process opened read-only: the segment is kept,
    reopened writable with its roll clock starting now, and takes appends, records without a timestamp included."""
    joiner = _joined_view_of_five_records(logs, T0 + 70)
    joiner.truncate_fully_and_start_at(2)
    seg = joiner.active_segment
    assert seg.base_offset == 2 and seg.log.writable and seg.created_ms == T0 + 70
    joiner.append_batches(batch(0, "n", timestamp=-1))
    joiner.append_batches(batch(0, "m", timestamp=-1))
    assert [r.offset for r in joiner.read_records()] == [2, 3]


def test_append_max_timestamp_starts_at_no_timestamp(logs):
    """LogValidator.assignOffsetsNonCompressed: ``maxTimestamp`` starts at NO_TIMESTAMP (-1) and only a batch whose max
    timestamp is larger replaces it: client batches without timestamps report -1, and a header max timestamp below
    -1 does not lower it."""
    import struct
    from storage_engine.record.record_batch import BATCH_HEADER, CRC_OFFSET, RecordBatch
    log = logs()
    assert log.append_batches(batch(0, "a", timestamp=-1)).max_timestamp == -1
    below = bytearray(batch(0, "b", timestamp=-1))
    fields = list(BATCH_HEADER.unpack_from(below, 0))
    fields[8] = -2                                        # max_timestamp
    BATCH_HEADER.pack_into(below, 0, *fields)
    struct.pack_into(">I", below, CRC_OFFSET, RecordBatch(below, 0).compute_crc())
    assert RecordBatch(bytes(below), 0).max_timestamp == -2
    info = log.append_batches(bytes(below))
    assert (info.first_offset, info.max_timestamp) == (1, -1)


def test_truncation_deletes_only_the_producer_snapshots_above_the_new_end(logs):
    """UnifiedLog.truncateTo -> ProducerStateManager.truncateAndReload: snapshots above the new log end go; the
    truncation does not move the log start, so no snapshot below the end goes, one at offset 0 included (an empty
    log's, as a clean close of a new log writes)."""
    log = logs(config(segment_bytes=2 * size_of("a")))
    assert log.producer_state.take_snapshot(force=True) is not None      # 00000000000000000000.snapshot
    for _ in range(5):
        log.append_records(recs("a", timestamp=T0))                       # rolls at 2 and 4 snapshot there
    assert log.producer_state.snapshot_offsets() == [0, 2, 4]
    assert log.truncate_to(3) is True
    assert log.log_end_offset == 3
    # 4 is gone; the producer state rebuilt at the new end is snapshotted there (3)
    assert sorted(n for n in os.listdir(log.dir) if n.endswith(".snapshot")) == [
        "00000000000000000000.snapshot", "00000000000000000002.snapshot", "00000000000000000003.snapshot"]
