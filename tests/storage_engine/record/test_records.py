"""Tests of storage_engine.record.record_batch and storage_engine.record.records (magic-2 record batches and the
records in them): the spec's byte vectors, Kafka's DefaultRecordBatchTest/DefaultRecordTest/MemoryRecordsTest cases,
agreement with kafka-python in both directions, property round trips, and malformed input (typed errors naming file
and position only).

Corrupt batches are written to a real ``.log`` file and read through ``FileRecords``, so every error is
checked to carry the file's path and the batch's byte position in it.
"""
from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint
from kafka.record.util import size_of_varint as kp_size_of_varint

from storage_engine.record import codecs
from storage_engine.errors import CompressionError, CorruptRecordError, StorageError
from storage_engine.segment.file_records import FileRecords, iter_batches
from storage_engine.record.record_batch import (
    BATCH_HEADER,
    BATCH_OVERHEAD,
    CREATE_TIME,
    INT32_MAX,
    LOG_APPEND_TIME,
    RecordBatch,
    build_batch,
    build_control_batch,
    build_empty_batch,
    decrement_sequence,
    increment_sequence,
    set_base_offset,
    set_partition_leader_epoch,
)
from storage_engine.record.records import (
    Record,
    SimpleRecord,
    decode_records,
    read_varint,
    size_of_varint,
    write_varint,
)
from tests.paths import REAL_KAFKA_FIXTURES

pytestmark = pytest.mark.unit

CODECS = (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD)
PROPERTY = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

# Spec 1.7: v2 batch, base offset 0, leader epoch 0, one record k/v at timestamp 1000.
V2_VECTOR = bytes.fromhex(
    "00000000000000000000003a0000000002716a618900000000000000000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff0000000110000000026b027600")

# Header field byte offsets (spec 1.2).
LENGTH_AT, EPOCH_AT, MAGIC_AT, CRC_AT, ATTRS_AT, COUNT_AT = 8, 12, 16, 17, 21, 57


# -- helpers ----------------------------------------------------------------------------------------------

def varint(value: int) -> bytes:
    """kafka-python's zig-zag encoding, independent of the engine's writer."""
    out = bytearray()
    kp_encode_varint(value, out.append)
    return bytes(out)


def raw_batch(section: bytes, count: int, *, base_offset: int = 0, attributes: int = 0, base_ts: int = 0,
              max_ts: int = 0, last_offset_delta: int | None = None, leader_epoch: int = 0,
              producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """A v2 batch around an arbitrary records section, with a correct CRC (built without the engine)."""
    lod = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    out = bytearray(BATCH_HEADER.pack(base_offset, BATCH_OVERHEAD - 12 + len(section), leader_epoch, 2, 0,
                                      attributes, lod, base_ts, max_ts, *producer, count) + section)
    restamp_crc(out)
    return bytes(out)


def restamp_crc(batch: bytearray, pos: int = 0) -> None:
    (length,) = struct.unpack_from(">i", batch, pos + LENGTH_AT)
    struct.pack_into(">I", batch, pos + CRC_AT, crc32c(bytes(batch[pos + ATTRS_AT:pos + 12 + length])))


def record_body(*, ts_delta: int = 0, offset_delta: int = 0, key=b"k", value=b"v", headers=(),
                raw_tail: bytes | None = None) -> bytes:
    """Body of one record (everything after its length varint)."""
    body = bytearray(b"\x00") + varint(ts_delta) + varint(offset_delta)
    if raw_tail is not None:
        return bytes(body + raw_tail)
    for field in (key, value):
        body += varint(-1) if field is None else varint(len(field)) + field
    body += varint(len(headers))
    for hkey, hval in headers:
        body += varint(len(hkey)) + hkey
        body += varint(-1) if hval is None else varint(len(hval)) + hval
    return bytes(body)


def framed(body: bytes, length: int | None = None) -> bytes:
    return varint(len(body) if length is None else length) + body


def kafka_python_read(data: bytes) -> list[tuple[DefaultRecordBatch, list]]:
    """Every batch in ``data`` through kafka-python's MemoryRecords, CRC checked before iterating."""
    out = []
    mr = MemoryRecords(bytes(data))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        out.append((batch, list(batch)))
    return out


def as_tuples(records) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of engine or kafka-python records."""
    return [(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in records]


def kp_build(records, *, codec=codecs.NONE, producer=(-1, -1, -1), transactional=False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 24)
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


@pytest.fixture
def log_file(tmp_path):
    """Write bytes to a real ``.log`` file and open it; every file opened is closed at teardown."""
    opened = []

    def make(data: bytes, name: str = "00000000000000000000.log") -> FileRecords:
        path = tmp_path / name
        path.write_bytes(data)
        fr = FileRecords(str(path))
        opened.append(fr)
        return fr

    yield make
    for fr in opened:
        fr.close()


def assert_located(exc: CorruptRecordError, fr: FileRecords, position: int) -> None:
    assert exc.path == fr.path
    assert exc.position == position
    assert fr.path in str(exc) and f"byte position {position}" in str(exc)


SAMPLE = [SimpleRecord(b"key0", b"value0", 1000, (("h1", b"x"),)),
          SimpleRecord(None, b"value1", 1005),
          SimpleRecord(b"key2", None, 1002, (("caf\u00e9", None), ("", b""))),
          SimpleRecord(b"", b"", 1001)]


# -- byte vectors and layout ------------------------------------------------------------------------------

def test_spec_v2_vector_is_reproduced_exactly():
    built = build_batch([SimpleRecord(b"k", b"v", 1000)], partition_leader_epoch=0)
    assert built == V2_VECTOR
    assert len(built) == 70
    assert struct.unpack_from(">i", built, LENGTH_AT)[0] == 58
    assert struct.unpack_from(">I", built, CRC_AT)[0] == 0x716A6189


def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF) bit by bit, a
    reference that shares no code with the ``crc32c`` package the engine computes batch CRCs with."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_the_batch_crc_is_crc32c_of_the_bytes_from_the_attributes_to_the_end():
    """The CRC the engine stamps on the batches it builds, and the one it checks on batches a Kafka broker wrote,
    is CRC-32C of bytes [21, end of batch) (spec 1.2), computed here without the engine's CRC library."""
    assert crc32c_bitwise(b"123456789") == 0xE3069283   # the reference: CRC-32C's published check value
    # Batches written by a Kafka broker: the engine computes the CRC Kafka stored, and accepts each batch.
    checked = 0
    for fixture in sorted(REAL_KAFKA_FIXTURES.glob("*.log")):
        data = fixture.read_bytes()
        for batch in iter_batches(data, strict=True):
            raw = batch.raw()
            stored = struct.unpack_from(">I", raw, CRC_AT)[0]
            assert stored == crc32c_bitwise(raw[ATTRS_AT:]), f"{fixture.name}: batch at {batch.file_position}"
            assert batch.compute_crc() == stored and batch.is_valid()
            batch.ensure_valid()
            checked += 1
    assert checked == 4, "the two real-Kafka segments hold 4 batches (their README)"
    # Batches the engine builds: the CRC field holds CRC-32C of what follows it, for every codec and for a
    # transactional batch of a producer.
    for codec in CODECS:
        for producer in ({}, {"producer_id": 7, "producer_epoch": 3, "base_sequence": 11, "is_transactional": True}):
            built = build_batch(SAMPLE, codec=codec, base_offset=42, **producer)  # type: ignore[arg-type]  # the fields of a dict of mixed value types
            assert struct.unpack_from(">I", built, CRC_AT)[0] == crc32c_bitwise(built[ATTRS_AT:]), (codec, producer)
            assert RecordBatch(built).compute_crc() == crc32c_bitwise(built[ATTRS_AT:])


def test_spec_v2_vector_parses_field_by_field():
    batch = RecordBatch(V2_VECTOR)
    assert (batch.base_offset, batch.length, batch.partition_leader_epoch, batch.magic) == (0, 58, 0, 2)
    assert (batch.crc, batch.attributes, batch.last_offset_delta) == (0x716A6189, 0, 0)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1000)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.records_count == 1 and batch.size_in_bytes == 70
    assert batch.is_valid()
    assert batch.records() == [Record(0, 1000, b"k", b"v", ())]


def test_default_leader_epoch_is_unknown_and_outside_the_crc():
    built = build_batch([SimpleRecord(b"k", b"v", 1000)])
    assert RecordBatch(built).partition_leader_epoch == -1
    assert built[:EPOCH_AT] + b"\x00\x00\x00\x00" + built[EPOCH_AT + 4:] == V2_VECTOR


def test_attribute_bits():
    def attrs(**kw):
        return RecordBatch(build_batch([SimpleRecord(b"k", b"v" * 50, 5)], **kw)).attributes

    assert attrs() == 0
    for codec in CODECS:
        assert attrs(codec=codec) & 0x07 == codec
    assert attrs(timestamp_type=LOG_APPEND_TIME, log_append_time_ms=9) == 0x08
    assert attrs(producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True) == 0x10
    assert attrs(producer_id=1, producer_epoch=0, is_transactional=True, is_control=True) == 0x30
    assert attrs(delete_horizon_ms=10) == 0x40


def test_only_the_low_byte_of_attributes_is_read():
    data = bytearray(build_batch(SAMPLE))
    data[ATTRS_AT] = 0xFF  # high byte of the int16
    restamp_crc(data)
    batch = RecordBatch(bytes(data))
    assert batch.attributes == 0 and batch.compression == codecs.NONE
    assert as_tuples(batch.records()) == as_tuples(RecordBatch(build_batch(SAMPLE)).records())


# -- varints ----------------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(-2**31, 2**31 - 1))
def test_varint_agrees_with_kafka_python(value):
    out = bytearray()
    write_varint(value, out)
    assert bytes(out) == varint(value)
    assert size_of_varint(value) == len(out) == kp_size_of_varint(value)
    assert read_varint(bytes(out), 0) == (value, len(out)) == kp_decode_varint(bytes(out), 0)


@PROPERTY
@given(st.integers(-2**63, 2**63 - 1))
def test_varlong_agrees_with_kafka_python(value):
    out = bytearray()
    write_varint(value, out)
    assert bytes(out) == varint(value)
    assert read_varint(bytes(out) + b"\xaa", 0, 10) == (value, len(out))


def test_varint_known_encodings():
    for value, encoded in [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
                           (2**31 - 1, "feffffff0f"), (-2**31, "ffffffff0f")]:
        out = bytearray()
        write_varint(value, out)
        assert out.hex() == encoded


def test_varint_too_long_fails():
    # Fifth byte with its MSB set (ByteUtils: "Varint is too long").
    with pytest.raises(CorruptRecordError, match="varint is too long"):
        read_varint(b"\xff\xff\xff\xff\x8f\x00", 0)
    # Ten bytes with MSB set, then an eleventh.
    with pytest.raises(CorruptRecordError, match="varlong is too long"):
        read_varint(b"\xff" * 10 + b"\x01", 0, 10)
    assert read_varint(b"\xff" * 9 + b"\x01", 0, 10) == (-2**63, 10)


def test_varint_premature_end_fails():
    for data in (b"", b"\x80", b"\xff\xff\xff"):
        with pytest.raises(CorruptRecordError):
            read_varint(data, 0)


def test_five_byte_varint_keeps_32_bits_like_java():
    # Kafka's int accumulator drops the bits of the fifth byte that do not fit 32 bits.
    assert read_varint(b"\xfe\xff\xff\xff\x7f", 0) == (2**31 - 1, 5)
    assert read_varint(b"\xfe\xff\xff\xff\x0f", 0) == (2**31 - 1, 5)
    value, _ = read_varint(b"\xff\xff\xff\xff\x7f", 0)
    assert value == -2**31


# -- sequence arithmetic (DefaultRecordBatchTest) ---------------------------------------------------------

def test_increment_sequence():
    assert increment_sequence(5, 5) == 10
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 5, 10) == 4
    assert increment_sequence(INT32_MAX - 5, 5) == INT32_MAX  # the boundary does not wrap
    assert increment_sequence(INT32_MAX - 5, 6) == 0


def test_decrement_sequence():
    assert decrement_sequence(5, 5) == 0
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(4, 10) == INT32_MAX - 5


@PROPERTY
@given(st.integers(0, INT32_MAX), st.integers(0, INT32_MAX))
def test_increment_then_decrement_is_identity(seq, delta):
    inc = increment_sequence(seq, delta)
    assert 0 <= inc <= INT32_MAX
    assert decrement_sequence(inc, delta) == seq


def test_last_sequence_wraps():
    batch = RecordBatch(build_batch([SimpleRecord(b"k", b"v", 1)] * 3, producer_id=7, producer_epoch=1,
                                    base_sequence=INT32_MAX - 1))
    assert batch.last_sequence == 0
    assert RecordBatch(build_batch(SAMPLE)).last_sequence == -1


# -- header rewrites (DefaultRecordBatchTest.testSetLastOffset / testSetPartitionLeaderEpoch) -------------

def test_set_base_offset_keeps_crc_valid():
    data = bytearray(build_batch(SAMPLE, base_offset=0))
    crc = RecordBatch(bytes(data)).crc
    set_base_offset(data, 0, 500 - 3)  # Kafka's setLastOffset(500): base = last - lastOffsetDelta
    batch = RecordBatch(bytes(data))
    assert batch.crc == crc and batch.is_valid()
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (497, 500, 501)
    assert [r.offset for r in batch.records()] == [497, 498, 499, 500]


def test_set_partition_leader_epoch_keeps_crc_valid():
    data = bytearray(build_batch(SAMPLE))
    set_partition_leader_epoch(data, 0, 15)
    batch = RecordBatch(bytes(data))
    assert batch.partition_leader_epoch == 15 and batch.is_valid()


def test_header_rewrites_at_a_position_inside_a_buffer():
    first, second = build_batch(SAMPLE), build_batch(SAMPLE[:2], base_offset=4)
    data = bytearray(first + second)
    set_base_offset(data, len(first), 40)
    set_partition_leader_epoch(data, len(first), 3)
    batches = list(iter_batches(bytes(data), strict=True))
    assert [b.base_offset for b in batches] == [0, 40]
    assert [b.partition_leader_epoch for b in batches] == [-1, 3]
    assert all(b.is_valid() for b in batches)


# -- batch semantics --------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_size_in_bytes_matches_kafka_python_record_sizes(codec):
    # DefaultRecordBatchTest.testSizeInBytes: header + sum of record sizes (uncompressed).
    data = build_batch(SAMPLE, codec=codec)
    batch = RecordBatch(data)
    assert batch.size_in_bytes == len(data)
    expected = BATCH_OVERHEAD + sum(
        DefaultRecordBatchBuilder.size_in_bytes(i, r.timestamp - SAMPLE[0].timestamp, r.key, r.value,
                                                list(r.headers)) for i, r in enumerate(SAMPLE))
    assert BATCH_OVERHEAD + len(batch.records_payload()) == expected
    if codec == codecs.NONE:
        assert len(data) == expected


def test_write_empty_header():
    # DefaultRecordBatchTest.testWriteEmptyHeader / spec 1.2 "Empty batch".
    template_data = build_batch(SAMPLE, base_offset=15, codec=codecs.GZIP, producer_id=23423,
                                producer_epoch=145, base_sequence=10, is_transactional=True,
                                partition_leader_epoch=9, delete_horizon_ms=1500, last_offset=27)
    template = RecordBatch(template_data)
    empty = build_empty_batch(template)
    assert len(empty) == BATCH_OVERHEAD == 61
    batch = RecordBatch(empty)
    assert batch.is_valid()
    batch.ensure_valid()
    assert (batch.base_offset, batch.last_offset, batch.last_offset_delta) == (15, 27, 12)
    assert batch.records_count == 0 and batch.records() == []
    assert batch.base_timestamp == -1 and batch.max_timestamp == 1005
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (23423, 145, 10)
    assert batch.last_sequence == 22
    assert batch.is_transactional and not batch.is_control
    assert batch.compression == codecs.NONE and batch.timestamp_type == CREATE_TIME
    assert not batch.has_delete_horizon and batch.delete_horizon_ms == -1
    assert batch.partition_leader_epoch == 9
    # kafka-python reads the same header.
    [(kb, krecs)] = kafka_python_read(empty)
    assert (kb.base_offset, kb.last_offset, kb.records_count, kb.first_timestamp) == (15, 27, 0, -1)
    assert krecs == []


def test_empty_batch_keeps_control_and_log_append_time():
    marker = RecordBatch(build_control_batch(1, base_offset=3, timestamp=77, producer_id=5, producer_epoch=2))
    empty = RecordBatch(build_empty_batch(marker))
    assert empty.is_control and empty.is_transactional and empty.records_count == 0
    lat = RecordBatch(build_batch(SAMPLE, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=9999))
    empty = RecordBatch(build_empty_batch(lat))
    assert empty.timestamp_type == LOG_APPEND_TIME and empty.max_timestamp == 9999 and empty.is_valid()


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_every_record_reports_max_timestamp(codec):
    # DefaultRecordBatchTest.testSetLogAppendTime (as written by the builder).
    batch = RecordBatch(build_batch(SAMPLE, codec=codec, timestamp_type=LOG_APPEND_TIME,
                                    log_append_time_ms=1_700_000_000_000))
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert batch.max_timestamp == 1_700_000_000_000
    assert [r.timestamp for r in batch.records()] == [1_700_000_000_000] * len(SAMPLE)
    [(kb, krecs)] = kafka_python_read(batch.raw())
    assert kb.timestamp_type == 1
    assert [r.timestamp for r in krecs] == [1_700_000_000_000] * len(SAMPLE)


def test_log_append_time_ignores_record_deltas_on_read():
    # A LogAppendTime batch whose records still carry CreateTime deltas: the max timestamp wins.
    section = framed(record_body(ts_delta=5)) + framed(record_body(ts_delta=-7, offset_delta=1))
    batch = RecordBatch(raw_batch(section, 2, attributes=0x08, base_ts=100, max_ts=4242))
    assert [r.timestamp for r in batch.records()] == [4242, 4242]


@pytest.mark.parametrize("codec", CODECS)
def test_delete_horizon_conversion(codec):
    # MemoryRecordsTest.testBaseTimestampToDeleteHorizonConversion.
    horizon = 60_000
    records = [SimpleRecord(b"a", b"1", 10), SimpleRecord(b"b", None, 5), SimpleRecord(b"c", b"3", 70_000)]
    batch = RecordBatch(build_batch(records, codec=codec, delete_horizon_ms=horizon))
    assert batch.attributes & 0x40 and batch.has_delete_horizon
    assert batch.base_timestamp == horizon == batch.delete_horizon_ms
    assert batch.max_timestamp == 70_000
    assert [r.timestamp for r in batch.records()] == [10, 5, 70_000]
    # Deltas are relative to the horizon, so kafka-python (which knows no bit 6) reads the same timestamps.
    [(kb, krecs)] = kafka_python_read(batch.raw())
    assert kb.first_timestamp == horizon
    assert [r.timestamp for r in krecs] == [10, 5, 70_000]


def test_no_delete_horizon_by_default():
    batch = RecordBatch(build_batch(SAMPLE))
    assert not batch.has_delete_horizon and batch.delete_horizon_ms == -1
    assert batch.base_timestamp == SAMPLE[0].timestamp


def test_offsets_with_gaps_and_last_offset_beyond_last_record():
    # What the cleaner writes: the original last offset is kept.
    batch = RecordBatch(build_batch(SAMPLE[:3], base_offset=100, offsets=[100, 104, 109], last_offset=120,
                                    producer_id=3, producer_epoch=0, base_sequence=50))
    assert (batch.base_offset, batch.last_offset_delta, batch.last_offset, batch.records_count) == (100, 20, 120, 3)
    assert batch.last_sequence == 70
    assert [r.offset for r in batch.records()] == [100, 104, 109]
    [(kb, krecs)] = kafka_python_read(batch.raw())
    assert kb.last_offset == 120 and [r.offset for r in krecs] == [100, 104, 109]


def test_writer_rejects_bad_arguments():
    with pytest.raises(ValueError):
        build_batch(SAMPLE, offsets=[0, 1])
    with pytest.raises(ValueError):
        build_batch(SAMPLE[:2], offsets=[5, 5])
    with pytest.raises(ValueError):
        build_batch(SAMPLE[:2], base_offset=10, offsets=[9, 11])
    with pytest.raises(ValueError):
        build_batch(SAMPLE[:2], offsets=[0, 4], last_offset=3)
    with pytest.raises(ValueError):
        build_batch([SimpleRecord(b"k", b"v", -2)])
    with pytest.raises(ValueError):
        build_batch(SAMPLE, timestamp_type=-1)
    with pytest.raises(ValueError):
        build_batch(SAMPLE, timestamp_type=LOG_APPEND_TIME)
    with pytest.raises(ValueError):
        build_batch(SAMPLE, is_transactional=True)


@pytest.mark.parametrize("control_type,name", [(0, "ABORT"), (1, "COMMIT")])
def test_control_batch_round_trip(control_type, name):
    # DefaultRecordBatchTest.testReadAndWriteControlBatch / spec 1.4.
    data = build_control_batch(control_type, base_offset=42, timestamp=1234, producer_id=99, producer_epoch=7,
                               coordinator_epoch=13, partition_leader_epoch=4)
    batch = RecordBatch(data)
    assert batch.is_valid() and batch.is_control and batch.is_transactional
    assert batch.control_type() == name
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (99, 7, -1)
    [rec] = batch.records()
    assert rec.offset == 42 and rec.timestamp == 1234
    assert rec.key == struct.pack(">hh", 0, control_type)
    assert rec.value == struct.pack(">hi", 0, 13)
    [(kb, [krec])] = kafka_python_read(data)
    assert kb.is_control_batch and kb.is_transactional
    assert (krec.version, krec.type, krec.commit, krec.abort) == (0, control_type, name == "COMMIT",
                                                                   name == "ABORT")


def test_control_type_of_other_keys():
    def control(key):
        return RecordBatch(raw_batch(framed(record_body(key=key, value=b"\x00" * 6)), 1, attributes=0x30,
                                     producer=(1, 0, -1)))

    assert control(struct.pack(">hh", 0, 2)).control_type() == "LEADER_CHANGE"
    assert control(struct.pack(">hh", 0, 6)).control_type() == "KRAFT_VOTERS"
    assert control(struct.pack(">hh", 0, 99)).control_type() == "UNKNOWN"
    assert control(struct.pack(">hh", 3, 1)).control_type() == "COMMIT"  # newer version parsed as v0
    for bad in (b"\x00\x00\x01", None, struct.pack(">hh", -1, 1)):
        with pytest.raises(CorruptRecordError):
            control(bad).control_type()
    assert RecordBatch(build_batch(SAMPLE)).control_type() is None


# -- interop with kafka-python ----------------------------------------------------------------------------

KP_RECORDS = [SimpleRecord(b"key-%d" % i if i % 3 else None,
                           (b"value-%d " % i) * 20 if i % 4 != 1 else None,
                           1_600_000_000_000 + (i * 37) % 11,
                           ((("trace", b"id-%d" % i), ("\u00fcber-\u65e5\u672c", None)) if i % 2 else ()))
              for i in range(12)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer,transactional", [((-1, -1, -1), False), ((8_000_000_001, 3, 41), False),
                                                    ((12, 0, INT32_MAX - 4), True)])
def test_kafka_python_built_batches_are_read_identically(tmp_path, codec, producer, transactional):
    data = kp_build(KP_RECORDS, codec=codec, producer=producer, transactional=transactional)
    [(kb, krecs)] = kafka_python_read(data)
    assert kb.compression_type == codec  # the values compress, so kafka-python kept the codec
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fr = FileRecords(str(path))
    try:
        [batch] = list(fr.batches(strict=True))
        batch.ensure_valid()
        assert batch.crc == kb.crc
        assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (0, 11, 0)
        assert (batch.compression, batch.timestamp_type, batch.is_transactional) == (codec, 0, transactional)
        assert (batch.base_timestamp, batch.max_timestamp) == (kb.first_timestamp, kb.max_timestamp)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
        assert batch.last_sequence == kb.last_sequence
        assert batch.records_count == kb.records_count == 12
        assert as_tuples(batch.records()) == as_tuples(krecs)
        assert as_tuples(batch.records()) == [(i, r.timestamp, r.key, r.value, r.headers)
                                              for i, r in enumerate(KP_RECORDS)]
    finally:
        fr.close()


@pytest.mark.parametrize("codec", CODECS)
def test_engine_batches_are_read_identically_by_kafka_python(codec):
    data = build_batch(KP_RECORDS, base_offset=1000, codec=codec, producer_id=77, producer_epoch=5,
                       base_sequence=INT32_MAX - 3, partition_leader_epoch=12)
    data += build_batch(KP_RECORDS[:3], base_offset=1012, codec=codec, timestamp_type=LOG_APPEND_TIME,
                        log_append_time_ms=1_700_000_000_123)
    data += build_control_batch(0, base_offset=1015, timestamp=5, producer_id=77, producer_epoch=5)
    ours = list(iter_batches(data, strict=True))
    theirs = kafka_python_read(data)
    assert len(ours) == len(theirs) == 3
    for batch, (kb, krecs) in zip(ours, theirs):
        assert isinstance(batch, RecordBatch)   # v2 batches, as the test built them
        assert kb.magic == 2 and kb.crc == batch.crc
        assert (kb.base_offset, kb.last_offset, kb.leader_epoch) == (batch.base_offset, batch.last_offset,
                                                                     batch.partition_leader_epoch)
        assert (kb.attributes, kb.first_timestamp, kb.max_timestamp) == (batch.attributes, batch.base_timestamp,
                                                                         batch.max_timestamp)
        assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (batch.producer_id, batch.producer_epoch,
                                                                         batch.base_sequence)
        assert kb.last_sequence == batch.last_sequence and kb.size_in_bytes == batch.size_in_bytes
        assert as_tuples(krecs) == as_tuples(batch.records())
    assert theirs[0][0].compression_type == codec and theirs[0][0].leader_epoch == 12
    assert theirs[2][1][0].abort


def test_uncompressed_bytes_equal_kafka_python_once_leader_epoch_is_aligned():
    # kafka-python writes leader epoch 0 (the broker assigns it); the engine defaults to -1 (unknown).
    # Nothing else differs; the leader epoch is outside the CRC, so the CRCs are equal either way.
    for producer, txn in [((-1, -1, -1), False), ((5, 1, 0), True)]:
        theirs = kp_build(KP_RECORDS, producer=producer, transactional=txn)
        ours = build_batch(KP_RECORDS, producer_id=producer[0], producer_epoch=producer[1],
                           base_sequence=producer[2], is_transactional=txn)
        assert ours != theirs and ours[:EPOCH_AT] + b"\x00" * 4 + ours[EPOCH_AT + 4:] == theirs
        assert build_batch(KP_RECORDS, producer_id=producer[0], producer_epoch=producer[1],
                           base_sequence=producer[2], is_transactional=txn, partition_leader_epoch=0) == theirs


def test_empty_batch_timestamps_differ_from_kafka_python():
    # Kafka writes base/max timestamp -1 for a batch without records; kafka-python writes 0 ("or 0").
    theirs = RecordBatch(kp_build([]))
    ours = RecordBatch(build_batch([]))
    assert (theirs.base_timestamp, theirs.max_timestamp) == (0, 0)
    assert (ours.base_timestamp, ours.max_timestamp) == (-1, -1)
    assert ours.records_count == theirs.records_count == 0 and ours.is_valid() and theirs.is_valid()


def test_compressed_batches_compared_with_kafka_python():
    # snappy (xerial, 32 KiB blocks) and zstd (level 3) come out byte-identical too. gzip differs in the
    # member header (kafka-python: mtime set, level 9; Kafka/JDK: mtime 0, default level) and lz4 in the frame
    # (kafka-python sets the content-size flag, Kafka never does). Headers still agree field for field except
    # length and CRC, and both payloads decode to the same records section.
    for codec in (codecs.SNAPPY, codecs.ZSTD):
        assert build_batch(KP_RECORDS, codec=codec, partition_leader_epoch=0) == kp_build(KP_RECORDS, codec=codec)
    for codec in (codecs.GZIP, codecs.LZ4):
        theirs = RecordBatch(kp_build(KP_RECORDS, codec=codec))
        ours = RecordBatch(build_batch(KP_RECORDS, codec=codec, partition_leader_epoch=0))
        assert ours.raw() != theirs.raw()
        assert ours.raw()[ATTRS_AT:COUNT_AT + 4] == theirs.raw()[ATTRS_AT:COUNT_AT + 4]
        assert ours.records_payload() == theirs.records_payload()
    assert kp_build(KP_RECORDS, codec=codecs.LZ4)[BATCH_OVERHEAD + 4] & 0x08  # content size present
    assert build_batch(KP_RECORDS, codec=codecs.LZ4)[BATCH_OVERHEAD + 4] == 0x60


# -- property round trips ---------------------------------------------------------------------------------

header_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)  # type: ignore[arg-type]  # mypy widens the literal "Cs" to str
nullable_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=12))), max_size=3).map(tuple)
timestamps = st.one_of(st.just(-1), st.integers(0, 2**40), st.integers(2**61, 2**62))
simple_records = st.builds(SimpleRecord, nullable_bytes, nullable_bytes, timestamps, headers)


@st.composite
def batch_specs(draw):
    records = draw(st.lists(simple_records, max_size=8))
    base_offset = draw(st.integers(0, 2**62))
    gaps = draw(st.lists(st.integers(0, 1000), min_size=len(records), max_size=len(records)))
    offsets, nxt = [], base_offset
    for gap in gaps:
        nxt += gap
        offsets.append(nxt)
        nxt += 1
    extra = draw(st.integers(0, 50))
    has_producer = draw(st.booleans())
    kw = dict(
        base_offset=base_offset, offsets=offsets,
        last_offset=(offsets[-1] if offsets else base_offset) + extra,
        codec=draw(st.sampled_from(CODECS)),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        producer_id=draw(st.integers(0, 2**63 - 1)) if has_producer else -1,
        producer_epoch=draw(st.integers(0, 2**15 - 1)) if has_producer else -1,
        base_sequence=draw(st.integers(0, INT32_MAX)) if has_producer else -1,
        is_transactional=has_producer and draw(st.booleans()),
    )
    if draw(st.booleans()):
        kw.update(timestamp_type=LOG_APPEND_TIME, log_append_time_ms=draw(st.integers(0, 2**42)))
    elif draw(st.booleans()):
        kw.update(delete_horizon_ms=draw(st.integers(0, 2**42)))
    return records, kw


@PROPERTY
@given(batch_specs())
def test_round_trip_property(spec):
    records, kw = spec
    data = build_batch(records, **kw)
    batch = RecordBatch(data)
    batch.ensure_valid()
    log_append = kw.get("timestamp_type") == LOG_APPEND_TIME
    expected = [(off, kw["log_append_time_ms"] if log_append else r.timestamp, r.key, r.value,
                 tuple((k, v) for k, v in r.headers)) for off, r in zip(kw["offsets"], records)]
    assert as_tuples(batch.records()) == expected
    assert batch.size_in_bytes == len(data)
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (kw["base_offset"], kw["last_offset"],
                                                                           len(records))
    assert batch.partition_leader_epoch == kw["partition_leader_epoch"]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        kw["producer_id"], kw["producer_epoch"], kw["base_sequence"])
    assert batch.is_transactional == kw["is_transactional"]
    assert batch.compression == (kw["codec"] if records or kw["codec"] == codecs.NONE else batch.compression)
    stamps = [e[1] for e in expected]
    assert batch.max_timestamp == (max(stamps) if stamps else -1)
    if "delete_horizon_ms" in kw:
        assert batch.has_delete_horizon and batch.base_timestamp == kw["delete_horizon_ms"]
    else:
        assert not batch.has_delete_horizon
        assert batch.base_timestamp == (stamps[0] if stamps else -1)
    # kafka-python reads the same batch identically. (It decompresses even a batch of no records, and
    # cannot read the bare 16-byte xerial header that snappy writes for empty input.)
    if records or kw["codec"] != codecs.SNAPPY:
        [(kb, krecs)] = kafka_python_read(data)
        assert as_tuples(krecs) == expected
        assert (kb.last_offset, kb.max_timestamp, kb.last_sequence) == (batch.last_offset, batch.max_timestamp,
                                                                        batch.last_sequence)
    # The empty batch of any batch is a valid 61-byte header that keeps its offsets and producer state.
    empty = RecordBatch(build_empty_batch(batch))
    assert empty.is_valid() and empty.size_in_bytes == 61 and empty.records() == []
    assert (empty.base_offset, empty.last_offset, empty.base_timestamp) == (batch.base_offset, batch.last_offset, -1)
    assert (empty.producer_id, empty.last_sequence) == (batch.producer_id, batch.last_sequence)
    assert not empty.has_delete_horizon


@PROPERTY
@given(st.lists(simple_records.filter(lambda r: r.timestamp >= 0), min_size=1, max_size=8),
       st.tuples(st.integers(0, 2**40), st.integers(0, 100), st.integers(0, INT32_MAX)), st.booleans())
def test_uncompressed_bytes_equal_kafka_python_property(records, producer, transactional):
    ours = build_batch(records, producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
                       is_transactional=transactional, partition_leader_epoch=0)
    assert ours == kp_build(records, producer=producer, transactional=transactional)


@PROPERTY
@given(st.lists(simple_records, min_size=1, max_size=8), st.sampled_from(CODECS),
       st.tuples(st.integers(0, 2**40), st.integers(0, 100), st.integers(0, INT32_MAX)), st.booleans())
def test_kafka_python_built_batches_read_back_property(records, codec, producer, transactional):
    data = kp_build(records, codec=codec, producer=producer, transactional=transactional)
    [(kb, krecs)] = kafka_python_read(data)
    [batch] = list(iter_batches(data, strict=True))
    batch.ensure_valid()
    assert as_tuples(batch.records()) == as_tuples(krecs)
    assert (batch.compression, batch.producer_id, batch.last_sequence) == (kb.compression_type, kb.producer_id,
                                                                           kb.last_sequence)


# -- malformed records (DefaultRecordTest) ----------------------------------------------------------------

def corrupt_record_file(log_file, section: bytes, count: int):
    """A file holding a valid batch and then a batch around ``section`` (CRC valid): (file, bad batch)."""
    good = build_batch(SAMPLE)
    fr = log_file(good + raw_batch(section, count, base_offset=4, base_ts=1000, max_ts=1000))
    first, bad = list(fr.batches(strict=True))
    first.ensure_valid()
    bad.ensure_valid()  # the CRC is right: only the record structure is wrong
    assert bad.file_position == len(good)
    return fr, bad


def expect_invalid_records(log_file, section: bytes, count: int = 1, match: str | None = None):
    fr, bad = corrupt_record_file(log_file, section, count)
    with pytest.raises(CorruptRecordError, match=match) as info:
        bad.records()
    assert_located(info.value, fr, bad.file_position)
    return info.value


def test_basic_serde_of_hand_encoded_record(log_file):
    # DefaultRecordTest.testBasicSerde: an independently encoded record decodes field by field.
    body = record_body(ts_delta=-5, offset_delta=3, key=b"key", value=b"value",
                       headers=[(b"h\xc3\xa9", b"v"), (b"n", None)])
    fr, batch = corrupt_record_file(log_file, framed(body), 1)
    assert batch.records() == [Record(7, 995, b"key", b"value", (("h\u00e9", b"v"), ("n", None)))]


def test_invalid_key_size(log_file):
    body = record_body(offset_delta=0, raw_tail=varint(105)).ljust(100, b"\x00")
    expect_invalid_records(log_file, framed(body))


def test_invalid_value_size(log_file):
    body = record_body(raw_tail=varint(1) + b"k" + varint(105)).ljust(100, b"\x00")
    expect_invalid_records(log_file, framed(body))


@pytest.mark.parametrize("key_size", [-2, -100, -2**31])
def test_negative_key_size_other_than_minus_one(log_file, key_size):
    body = record_body(raw_tail=varint(key_size) + varint(-1) + varint(0))
    expect_invalid_records(log_file, framed(body), match="negative key size")


def test_negative_value_size_other_than_minus_one(log_file):
    body = record_body(raw_tail=varint(-1) + varint(-3) + varint(0))
    expect_invalid_records(log_file, framed(body), match="negative value size")


@pytest.mark.parametrize("num_headers", [-1, INT32_MAX])
def test_invalid_num_headers(log_file, num_headers):
    body = record_body(raw_tail=varint(1) + b"k" + varint(1) + b"v" + varint(num_headers)).ljust(40, b"\x00")
    expect_invalid_records(log_file, framed(body), match="number of record headers")


def test_invalid_header_key_size(log_file):
    body = record_body(raw_tail=varint(-1) + varint(-1) + varint(1) + varint(105)).ljust(30, b"\x00")
    expect_invalid_records(log_file, framed(body))


@pytest.mark.parametrize("hkey_size", [-1, -7])
def test_null_or_negative_header_key(log_file, hkey_size):
    body = record_body(raw_tail=varint(-1) + varint(-1) + varint(1) + varint(hkey_size) + varint(-1))
    expect_invalid_records(log_file, framed(body), match="header key size")


def test_invalid_header_value_size(log_file):
    body = record_body(raw_tail=varint(-1) + varint(-1) + varint(1) + varint(1) + b"h" + varint(-2))
    expect_invalid_records(log_file, framed(body), match="header value size")


def test_invalid_varlong_timestamp_delta(log_file):
    body = b"\x00" + b"\xff" * 10 + b"\x01" + record_body()[2:]
    expect_invalid_records(log_file, framed(body), match="varlong is too long")


def test_invalid_varint_offset_delta(log_file):
    body = b"\x00\x00" + b"\xff\xff\xff\xff\x8f\x00" + varint(-1) + varint(-1) + varint(0)
    expect_invalid_records(log_file, framed(body), match="varint is too long")


def test_invalid_varint_record_length(log_file):
    expect_invalid_records(log_file, b"\xff\xff\xff\xff\xff\x01" + record_body(), match="varint is too long")


def test_record_length_larger_than_remaining(log_file):
    # DefaultRecordTest.testInvalidSizeOfBodyInBytes.
    body = record_body()
    expect_invalid_records(log_file, framed(body, len(body) + 1))
    expect_invalid_records(log_file, varint(10) + b"\x00\x00\x00")


def test_negative_record_length(log_file):
    expect_invalid_records(log_file, varint(-5) + record_body(), match="record size -5")


def test_record_body_longer_than_its_fields(log_file):
    body = record_body() + b"\x00\x00"
    expect_invalid_records(log_file, framed(body), match="invalid record size")


def test_record_body_shorter_than_its_fields(log_file):
    # Declared length stops inside the headers count; the next record's bytes are not borrowed.
    body = record_body()
    expect_invalid_records(log_file, framed(body, len(body) - 1) + framed(body), count=2)


def test_records_still_remaining_after_count(log_file):
    section = framed(record_body()) + framed(record_body(offset_delta=1))
    expect_invalid_records(log_file, section, count=1, match="records still remaining")


def test_premature_eof(log_file):
    section = framed(record_body()) + framed(record_body(offset_delta=1))
    expect_invalid_records(log_file, section, count=3, match="premature EOF")


@pytest.mark.parametrize("count", [-1, -2**31])
def test_negative_records_count(log_file, count):
    expect_invalid_records(log_file, framed(record_body()), count=count, match="invalid record count")


@pytest.mark.parametrize("codec", [c for c in CODECS if c != codecs.NONE])
@pytest.mark.parametrize("declared", [1, 5])
def test_wrong_record_count_in_compressed_batch(log_file, codec, declared):
    # MemoryRecordsTest testInvalidRecordCountTooManyCompressedV2 / TooLittle.
    data = bytearray(build_batch(SAMPLE[:3], codec=codec))
    struct.pack_into(">i", data, COUNT_AT, declared)
    restamp_crc(data)
    fr = log_file(build_batch(SAMPLE) + bytes(data))
    bad = list(fr.batches(strict=True))[1]
    bad.ensure_valid()
    with pytest.raises(CorruptRecordError) as info:
        bad.records()
    assert_located(info.value, fr, len(build_batch(SAMPLE)))


@pytest.mark.parametrize("codec", [c for c in CODECS if c != codecs.NONE])
def test_garbled_compressed_payload(log_file, codec):
    data = bytearray(build_batch(KP_RECORDS, codec=codec))
    data[BATCH_OVERHEAD:] = bytes(b ^ 0x5A for b in data[BATCH_OVERHEAD:])
    restamp_crc(data)
    fr = log_file(V2_VECTOR + bytes(data))
    bad = list(fr.batches(strict=True))[1]
    with pytest.raises((CompressionError, CorruptRecordError)) as info:
        bad.records()
    assert info.value.position is not None
    assert info.value.path == fr.path and info.value.position >= 70  # the batch, or a place in its payload
    assert fr.path in str(info.value)


def test_unknown_codec_id(log_file):
    data = bytearray(build_batch(SAMPLE))
    data[ATTRS_AT + 1] = 0x05
    restamp_crc(data)
    fr = log_file(bytes(data))
    [bad] = list(fr.batches(strict=True))
    with pytest.raises(CompressionError, match="codec id 5") as info:
        bad.records()
    assert info.value.path == fr.path and fr.path in str(info.value)


def test_decode_records_positions_are_payload_relative():
    section = framed(record_body()) + b"\x07"
    with pytest.raises(CorruptRecordError) as info:
        decode_records(section, 1, 0, 0, None)
    assert info.value.position == len(section) - 1


# -- malformed batches (DefaultRecordBatchTest.testInvalidRecordSize / testInvalidCrc) --------------------

def test_invalid_crc(log_file):
    data = bytearray(build_batch(SAMPLE))
    struct.pack_into(">I", data, CRC_AT, 982734)
    fr = log_file(V2_VECTOR + bytes(data))
    bad = list(fr.batches(strict=True))[1]
    assert not bad.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc = 982734") as info:
        bad.ensure_valid()
    assert_located(info.value, fr, 70)


def test_batch_smaller_than_header_is_invalid():
    data = bytearray(build_batch(SAMPLE))
    struct.pack_into(">i", data, LENGTH_AT, 10)
    batch = RecordBatch(bytes(data), path="x.log")
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="minimum allowed overhead 61"):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="x.log"):
        RecordBatch(bytes(data[:60]), path="x.log")


@pytest.mark.parametrize("start", [CRC_AT, ATTRS_AT, BATCH_OVERHEAD], ids=["crc", "header", "payload"])
def test_every_flipped_bit_in_crc_coverage_is_detected(log_file, start):
    good = build_batch(SAMPLE, producer_id=3, producer_epoch=1, base_sequence=0)
    data = V2_VECTOR + good
    end = ATTRS_AT if start == CRC_AT else (BATCH_OVERHEAD if start == ATTRS_AT else len(good))
    for at in range(70 + start, 70 + end):
        for bit in (0, 7):
            flipped = bytearray(data)
            flipped[at] ^= 1 << bit
            fr = log_file(bytes(flipped))
            bad = list(fr.batches(strict=True))[1]
            assert not bad.is_valid()
            with pytest.raises(CorruptRecordError, match="stored crc") as info:
                bad.ensure_valid()
            assert_located(info.value, fr, 70)
            fr.close()


def test_base_offset_leader_epoch_and_magic_are_outside_the_crc():
    data = build_batch(SAMPLE)
    for at in list(range(0, 8)) + list(range(EPOCH_AT, EPOCH_AT + 4)):
        flipped = bytearray(data)
        flipped[at] ^= 0x10
        assert RecordBatch(bytes(flipped)).is_valid()
    flipped = bytearray(data)
    flipped[MAGIC_AT] = 3  # the batch CRC does not cover the magic; iteration rejects it (file tests)
    assert RecordBatch(bytes(flipped)).is_valid()


def test_errors_are_never_untyped_on_truncated_batches():
    data = build_batch(SAMPLE, codec=codecs.NONE)
    for cut in range(len(data)):
        try:
            batch = RecordBatch(data[:cut], path="t.log")
            batch.ensure_valid()
            batch.records()
        except StorageError as exc:
            assert "t.log" in str(exc)
        else:
            pytest.fail(f"a batch cut at {cut} bytes was accepted")
