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
                 "log_start_offset": 0, "log_end_offset": 3, "high_watermark": 3, "last_stable_offset": 2,
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
