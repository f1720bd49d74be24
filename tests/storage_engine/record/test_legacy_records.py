"""Tests of storage_engine.record.legacy_records (message formats v0/v1): the spec's byte vectors, Kafka's
LegacyRecordTest / AbstractLegacyRecordBatchTest / SimpleLegacyRecordTest cases, compressed-wrapper offset
rules (relative inner offsets, wrapper offset 0, KAFKA-4298), agreement with kafka-python both ways, and
malformed messages (typed errors naming file and position only).
"""
from __future__ import annotations

import struct
from typing import Any, cast
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage_engine.record import codecs
from storage_engine.errors import CompressionError, CorruptRecordError
from storage_engine.segment.file_records import FileRecords, iter_batches
from storage_engine.record.legacy_records import LegacyBatch, build_legacy_batch, encode_message
from storage_engine.record.record_batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE
from storage_engine.record.records import Record, SimpleRecord

pytestmark = pytest.mark.unit

LEGACY_CODECS = (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4)
MAGIC_CODECS = [(magic, codec) for magic in (0, 1) for codec in LEGACY_CODECS]
PROPERTY = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

# Spec 1.7.
V0_VECTOR = bytes.fromhex("0000000000000000000000101fecd70a0000000000016b0000000176")
V1_VECTOR = bytes.fromhex("000000000000000000000018e4e321bc010000000000000003e8000000016b0000000176")


# -- helpers ----------------------------------------------------------------------------------------------

def message(offset: int, magic: int, attributes: int, timestamp: int, key, value) -> bytes:
    """One log entry built with struct and zlib only (independent of the engine's writer)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def wrapper(offset: int, magic: int, codec: int, inner: bytes, timestamp: int = -1, log_append: bool = False):
    attrs = codec | (0x08 if log_append else 0)
    return message(offset, magic, attrs, timestamp, None, codecs.compress(codec, inner, magic=magic))


def kp_legacy_build(magic: int, codec: int, records) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 24)
    for i, r in enumerate(records):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value) is not None
    return bytes(builder.build())


def kp_read(data: bytes) -> list[tuple[LegacyRecordBatch, list]]:
    out = []
    mr = MemoryRecords(bytes(data))
    while mr.has_next():
        batch = mr.next_batch()
        assert isinstance(batch, LegacyRecordBatch) and batch.validate_crc()
        recs = list(batch)
        assert all(r.validate_crc() for r in recs)
        out.append((batch, recs))
    return out


def flatten(pairs) -> list[tuple]:
    """(offset, timestamp, key, value) of kafka-python records; v0's None timestamp reads as -1."""
    return [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for _, recs in pairs for r in recs]


def ours(batches) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b.records()]


@pytest.fixture
def log_file(tmp_path):
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
    assert exc.path == fr.path and exc.position == position
    assert fr.path in str(exc) and f"byte position {position}" in str(exc)


RECORDS = [SimpleRecord(b"k%d" % i if i % 3 else None, (b"value %d " % i) * 10 if i != 2 else None,
                        1_500_000_000_000 + i * 3 - (i % 2) * 5) for i in range(7)] + [SimpleRecord(b"", b"", 7)]


# -- byte vectors and field layout (LegacyRecordTest) -----------------------------------------------------

def test_spec_vectors_are_reproduced_exactly():
    assert build_legacy_batch([SimpleRecord(b"k", b"v")], magic=0) == V0_VECTOR
    assert build_legacy_batch([SimpleRecord(b"k", b"v", 1000)], magic=1) == V1_VECTOR
    assert encode_message(0, 0, 0, -1, b"k", b"v") == V0_VECTOR == message(0, 0, 0, -1, b"k", b"v")
    assert encode_message(0, 1, 0, 1000, b"k", b"v") == V1_VECTOR == message(0, 1, 0, 1000, b"k", b"v")
    assert struct.unpack_from(">I", V0_VECTOR, 12)[0] == 0x1FECD70A
    assert struct.unpack_from(">I", V1_VECTOR, 12)[0] == 0xE4E321BC


@pytest.mark.parametrize("magic", [0, 1])
def test_fields(magic):
    data = message(1234, magic, 0, 5000, b"key", b"value")
    batch = LegacyBatch(data)
    assert (batch.offset, batch.magic, batch.attributes, batch.compression) == (1234, magic, 0, codecs.NONE)
    assert batch.size == len(data) - 12 == (14 if magic == 0 else 22) + 8
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (1234, 1234, 1235)
    assert batch.timestamp == batch.max_timestamp == (-1 if magic == 0 else 5000)
    assert batch.timestamp_type == (NO_TIMESTAMP_TYPE if magic == 0 else CREATE_TIME)
    assert batch.key_value() == (b"key", b"value")
    assert batch.records_count == 1
    assert batch.records() == [Record(1234, -1 if magic == 0 else 5000, b"key", b"value", ())]
    # Batch-level flags of legacy batches (spec 1.2).
    assert not batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert batch.partition_leader_epoch == -1 and batch.delete_horizon_ms == -1
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (-1, -1, -1, -1)
    assert not batch.has_producer_id and batch.control_type() is None
    assert batch.size_in_bytes == len(data) and batch.raw() == data


def test_null_and_empty_key_and_value():
    for key, value in [(None, None), (b"", b""), (None, b""), (b"", None)]:
        for magic in (0, 1):
            batch = LegacyBatch(build_legacy_batch([SimpleRecord(key, value, 3)], magic=magic))
            assert batch.is_valid() and batch.key_value() == (key, value)


def test_log_append_time_attribute_v1():
    batch = LegacyBatch(build_legacy_batch(RECORDS[:1], magic=1, timestamp_type=LOG_APPEND_TIME,
                                           log_append_time_ms=777))
    assert batch.attributes == 0x08 and batch.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [777]
    # v0 has no timestamp type: the bit is never written.
    v0 = LegacyBatch(build_legacy_batch(RECORDS[:1], magic=0, timestamp_type=LOG_APPEND_TIME,
                                        log_append_time_ms=777))
    assert v0.attributes == 0 and v0.timestamp == -1


@pytest.mark.parametrize("magic", [0, 1])
def test_checksum_covers_magic_to_end_only(magic):
    data = message(7, magic, 0, 99, b"key", b"value")
    assert struct.unpack_from(">I", data, 12)[0] == zlib.crc32(data[16:])
    assert LegacyBatch(data).compute_crc() == LegacyBatch(data).crc
    for at in range(len(data)):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        if at in range(8, 12):
            continue  # the size field: covered by the framing, not the CRC
        if at == 16:
            continue  # magic 0 <-> 1 changes the layout; covered by the magic test below
        batch = LegacyBatch(bytes(flipped), path="m.log")
        assert batch.is_valid() == (at < 8), at
        if at >= 8:
            with pytest.raises(CorruptRecordError, match="m.log"):
                batch.ensure_valid()


def test_too_small_buffer_is_invalid():
    # SimpleLegacyRecordTest.testIsValidWithTooSmallBuffer.
    for data in (b"\x00\x00", V0_VECTOR[:25]):
        with pytest.raises(CorruptRecordError):
            LegacyBatch(data, path="s.log")


def test_v1_message_shorter_than_v1_overhead_is_corrupt(log_file):
    data = bytearray(message(0, 0, 0, -1, None, None))  # 14-byte v0 message ...
    data[16] = 1  # ... claiming to be v1
    fr = log_file(V0_VECTOR + bytes(data))
    with pytest.raises(CorruptRecordError, match="below the minimum for magic 1") as info:
        list(fr.batches())
    assert_located(info.value, fr, len(V0_VECTOR))


# -- malformed messages -----------------------------------------------------------------------------------

def _raw_message(offset: int, magic: int, fields: bytes, size: int | None = None) -> bytes:
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic == 1 else b"") + fields
    return struct.pack(">qiI", offset, len(body) + 4 if size is None else size, zlib.crc32(body)) + body


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("fields,match", [
    (struct.pack(">i", -2) + struct.pack(">i", 1) + b"v", "invalid key size -2"),
    (struct.pack(">i", -1) + struct.pack(">i", -5), "invalid value size -5"),
    (struct.pack(">i", 1) + b"k" + struct.pack(">i", 3) + b"v", "runs past|declares"),
    (struct.pack(">i", 1000) + struct.pack(">i", 0), "runs past|declares"),
    (struct.pack(">i", -1) + struct.pack(">i", 1) + b"vv", "declares"),
])
def test_malformed_message_fields(log_file, magic, fields, match):
    fr = log_file(V1_VECTOR + _raw_message(1, magic, fields))
    bad = list(fr.batches(strict=True))[1]
    bad.ensure_valid()  # the CRC matches: the fields themselves are wrong
    with pytest.raises(CorruptRecordError, match=match) as info:
        bad.records()
    assert_located(info.value, fr, len(V1_VECTOR))


def test_crc_mismatch_is_located(log_file):
    data = bytearray(V0_VECTOR)
    data[-1] ^= 0xFF
    fr = log_file(V1_VECTOR + bytes(data))
    bad = list(fr.batches(strict=True))[1]
    assert not bad.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc") as info:
        bad.ensure_valid()
    assert_located(info.value, fr, len(V1_VECTOR))


# -- compressed wrappers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != codecs.NONE])
def test_v1_inner_offsets_are_relative(codec):
    data = build_legacy_batch(RECORDS, magic=1, codec=codec, base_offset=100)
    batch = LegacyBatch(data)
    assert batch.offset == batch.last_offset == 107 and batch.compression == codec
    assert batch.max_timestamp == max(r.timestamp for r in RECORDS)
    inner = codecs.decompress(codec, cast(bytes, batch.key_value()[1]), magic=1)
    inner_offsets = [cast(LegacyBatch, b).offset for b in iter_batches(inner, strict=True)]
    assert inner_offsets == list(range(8))
    assert [r.offset for r in batch.records()] == list(range(100, 108))
    assert batch.base_offset == 100 and batch.records_count == 8


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != codecs.NONE])
def test_v0_inner_offsets_are_absolute(codec):
    data = build_legacy_batch(RECORDS, magic=0, codec=codec, base_offset=100)
    batch = LegacyBatch(data)
    inner = codecs.decompress(codec, cast(bytes, batch.key_value()[1]), magic=0)
    assert [cast(LegacyBatch, b).offset for b in iter_batches(inner, strict=True)] == list(range(100, 108))
    assert [r.offset for r in batch.records()] == list(range(100, 108))
    assert batch.offset == 107 and batch.timestamp == -1


@pytest.mark.parametrize("magic", [0, 1])
def test_iterate_compressed_record_with_wrapper_offset_zero(magic):
    # AbstractLegacyRecordBatchTest.testIterateCompressedRecordWithWrapperOffsetZero.
    data = bytearray(build_legacy_batch(RECORDS[:3], magic=magic, codec=codecs.GZIP, base_offset=0))
    struct.pack_into(">q", data, 0, 0)  # setLastOffset(0): the offset field is outside the CRC
    batch = LegacyBatch(bytes(data))
    assert batch.is_valid()
    assert [r.offset for r in batch.records()] == [0, 1, 2]


def test_set_last_offset_compressed():
    # AbstractLegacyRecordBatchTest.testSetLastOffsetCompressed.
    data = bytearray(build_legacy_batch(RECORDS[:4], magic=1, codec=codecs.GZIP, base_offset=0))
    struct.pack_into(">q", data, 0, 20)
    batch = LegacyBatch(bytes(data))
    assert batch.is_valid()
    assert [r.offset for r in batch.records()] == [17, 18, 19, 20]
    assert (batch.base_offset, batch.last_offset) == (17, 20)


def test_wrapper_offset_below_last_relative_offset_is_invalid(log_file):
    data = bytearray(build_legacy_batch(RECORDS[:3], magic=1, codec=codecs.GZIP, base_offset=0))
    struct.pack_into(">q", data, 0, 1)  # last inner relative offset is 2
    fr = log_file(V0_VECTOR + bytes(data))
    bad = list(fr.batches(strict=True))[1]
    bad.ensure_valid()
    with pytest.raises(CorruptRecordError, match="invalid wrapper offset 1") as info:
        bad.records()
    assert_located(info.value, fr, len(V0_VECTOR))


@pytest.mark.parametrize("magic", [0, 1])
def test_compressed_wrapper_with_null_value(log_file, magic):
    # SimpleLegacyRecordTest.testCompressedIterationWithNullValue.
    fr = log_file(message(0, magic, codecs.GZIP, 1, None, None))
    [bad] = list(fr.batches(strict=True))
    bad.ensure_valid()
    with pytest.raises(CorruptRecordError, match="null value") as info:
        bad.records()
    assert_located(info.value, fr, 0)


@pytest.mark.parametrize("magic,codec", [(m, c) for m, c in MAGIC_CODECS if c != codecs.NONE])
def test_compressed_wrapper_with_empty_records(log_file, magic, codec):
    # SimpleLegacyRecordTest.testCompressedIterationWithEmptyRecords.
    fr = log_file(V1_VECTOR + wrapper(0, magic, codec, b""))
    bad = list(fr.batches(strict=True))[1]
    bad.ensure_valid()
    with pytest.raises(CorruptRecordError, match="no inner records") as info:
        bad.records()
    assert_located(info.value, fr, len(V1_VECTOR))


@pytest.mark.parametrize("magic", [0, 1])
def test_compressed_inner_message_is_invalid(log_file, magic):
    inner = message(0, magic, 0, 1, b"a", b"1") + message(1, magic, codecs.GZIP, 1, None,
                                                           codecs.compress(codecs.GZIP, V0_VECTOR))
    fr = log_file(wrapper(1, magic, codecs.GZIP, inner))
    [bad] = list(fr.batches(strict=True))
    with pytest.raises(CorruptRecordError, match="must not be compressed") as info:
        bad.records()
    assert_located(info.value, fr, 0)


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_rejected_with_legacy_magic(log_file, magic):
    with pytest.raises(ValueError, match="zstd"):
        build_legacy_batch(RECORDS, magic=magic, codec=codecs.ZSTD)
    inner = message(0, magic, 0, 1, b"a", b"1")
    zstd_wrapper = message(0, magic, codecs.ZSTD, 1, None, codecs.compress(codecs.ZSTD, inner, magic=2))
    fr = log_file(V0_VECTOR + zstd_wrapper)
    bad = list(fr.batches(strict=True))[1]
    bad.ensure_valid()
    with pytest.raises(CorruptRecordError, match="zstd is not allowed") as info:
        bad.records()
    assert_located(info.value, fr, len(V0_VECTOR))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_legacy_codec(log_file, codec):
    fr = log_file(message(0, 1, codec, 1, None, b"garbage"))
    [bad] = list(fr.batches(strict=True))
    with pytest.raises(CompressionError) as info:
        bad.records()
    assert_located(info.value, fr, 0)


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != codecs.NONE])
def test_garbled_wrapper_value(log_file, codec):
    good = build_legacy_batch(RECORDS, magic=1, codec=codec)
    batch = LegacyBatch(good)
    value = bytes(b ^ 0x33 for b in cast(bytes, batch.key_value()[1]))
    fr = log_file(V1_VECTOR + message(batch.offset, 1, codec, batch.timestamp, None, value))
    bad = list(fr.batches(strict=True))[1]
    with pytest.raises((CompressionError, CorruptRecordError)) as info:
        bad.records()
    assert_located(info.value, fr, len(V1_VECTOR))


@pytest.mark.parametrize("inner,error", [
    (V0_VECTOR[:20], CorruptRecordError),                                      # truncated inner entry
    (V0_VECTOR[:8] + struct.pack(">i", 13) + V0_VECTOR[12:], CorruptRecordError),   # inner size < 14
    (V0_VECTOR[:8] + struct.pack(">i", 500) + V0_VECTOR[12:], CorruptRecordError),  # inner size past end
    (V0_VECTOR[:16] + b"\x07" + V0_VECTOR[17:], CorruptRecordError),            # inner magic 7
    (V0_VECTOR + b"\x00" * 5, CorruptRecordError),                              # trailing garbage
])
def test_malformed_inner_message_set(log_file, inner, error):
    fr = log_file(V0_VECTOR + wrapper(1, 1, codecs.GZIP, inner))
    bad = list(fr.batches(strict=True))[1]
    bad.ensure_valid()
    with pytest.raises(error) as info:
        bad.records()
    assert_located(info.value, fr, len(V0_VECTOR))


def test_kafka_4298_v1_wrapper_with_v0_inner_messages_is_readable():
    # LogCleanerTest.invalidCleanedMessage: old cleaners wrote magic-1 wrappers around magic-0 messages
    # carrying relative offsets, with a wrapper timestamp of -1.
    inner = b"".join(message(i, 0, 0, -1, b"%d" % i, b"v%d" % i) for i in range(3))
    batch = LegacyBatch(wrapper(52, 1, codecs.GZIP, inner, timestamp=-1))
    assert batch.is_valid() and batch.magic == 1
    assert batch.records() == [Record(50 + i, -1, b"%d" % i, b"v%d" % i, ()) for i in range(3)]
    assert batch.base_offset == 50 and batch.last_offset == 52


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != codecs.NONE])
def test_v1_log_append_time_inner_records_report_wrapper_timestamp(codec):
    inner = b"".join(message(i, 1, 0x08, 10 + i, b"k", b"v") for i in range(3))
    batch = LegacyBatch(wrapper(2, 1, codec, inner, timestamp=999, log_append=True))
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [999, 999, 999]
    built = LegacyBatch(build_legacy_batch(RECORDS, magic=1, codec=codec, timestamp_type=LOG_APPEND_TIME,
                                           log_append_time_ms=4242))
    assert built.max_timestamp == 4242 and {r.timestamp for r in built.records()} == {4242}
    [(kb, krecs)] = kp_read(built.raw())
    assert kb.timestamp_type == 1 and {r.timestamp for r in krecs} == {4242}


def test_v1_create_time_inner_records_keep_their_timestamps():
    inner = b"".join(message(i, 1, 0, 10 + i, b"k", b"v") for i in range(3))
    batch = LegacyBatch(wrapper(2, 1, codecs.GZIP, inner, timestamp=12))
    assert [r.timestamp for r in batch.records()] == [10, 11, 12]


def test_lz4_magic_0_wrapper_uses_kafkas_broken_header_checksum():
    data = build_legacy_batch(RECORDS, magic=0, codec=codecs.LZ4)
    value = cast(bytes, LegacyBatch(data).key_value()[1])
    assert value[:7] == bytes.fromhex("04224d1860401a")
    v1 = cast(bytes, LegacyBatch(build_legacy_batch(RECORDS, magic=1, codec=codecs.LZ4)).key_value()[1])
    assert v1[:7] == bytes.fromhex("04224d18604082")


def test_writer_rejects_bad_arguments():
    with pytest.raises(ValueError):
        build_legacy_batch(RECORDS, magic=2)
    with pytest.raises(ValueError):
        build_legacy_batch([], magic=1)
    with pytest.raises(ValueError):
        build_legacy_batch(RECORDS, magic=1, timestamp_type=LOG_APPEND_TIME)


# -- interop with kafka-python ----------------------------------------------------------------------------

@pytest.mark.parametrize("magic,codec", MAGIC_CODECS)
def test_kafka_python_built_messages_are_read_identically(log_file, magic, codec):
    data = kp_legacy_build(magic, codec, RECORDS)
    theirs = kp_read(data)
    fr = log_file(data)
    batches = list(fr.batches(strict=True))
    for b in batches:
        b.ensure_valid()
        assert b.magic == magic and b.compression == codec
    assert len(batches) == (len(RECORDS) if codec == codecs.NONE else 1)
    assert ours(batches) == flatten(theirs)
    expected_ts = [-1] * len(RECORDS) if magic == 0 else [r.timestamp for r in RECORDS]
    assert ours(batches) == [(i, ts, r.key, r.value) for i, (ts, r) in enumerate(zip(expected_ts, RECORDS))]
    for b, (kb, _) in zip(batches, theirs):
        # kafka-python keeps a batch's CRC only in ``_crc`` (validate_crc() above checked it).
        assert (b.offset, b.crc, b.size_in_bytes) == (kb.base_offset, kb._crc, kb.size_in_bytes)
        assert b.timestamp_type == (NO_TIMESTAMP_TYPE if kb.timestamp_type is None else kb.timestamp_type)


@pytest.mark.parametrize("magic,codec", [(m, c) for m, c in MAGIC_CODECS if c != codecs.NONE])
def test_kafka_python_wrapper_with_assigned_offset(magic, codec):
    # kafka-python's producer writes wrapper offset 0; a broker assigns the last offset. Both readers then
    # agree: v1 inner offsets become absolute, v0 inner offsets are already absolute.
    data = bytearray(kp_legacy_build(magic, codec, RECORDS))
    struct.pack_into(">q", data, 0, 500)
    assert ours(iter_batches(bytes(data), strict=True)) == flatten(kp_read(bytes(data)))
    offsets = [r.offset for r in LegacyBatch(bytes(data)).records()]
    assert offsets == (list(range(493, 501)) if magic == 1 else list(range(8)))


@pytest.mark.parametrize("magic,codec", MAGIC_CODECS)
@pytest.mark.parametrize("log_append", [False, True])
def test_engine_messages_are_read_identically_by_kafka_python(magic, codec, log_append):
    kw: dict[str, Any] = dict(timestamp_type=LOG_APPEND_TIME, log_append_time_ms=1_700_000_000_000) if log_append else {}
    data = build_legacy_batch(RECORDS, magic=magic, codec=codec, base_offset=50, **kw)
    data += build_legacy_batch(RECORDS[:2], magic=magic, codec=codec, base_offset=58, **kw)
    theirs = kp_read(data)
    batches = list(iter_batches(data, strict=True))
    assert len(theirs) == len(batches)
    assert flatten(theirs) == ours(batches)
    assert [r[0] for r in ours(batches)] == list(range(50, 60))
    for b, (kb, _) in zip(batches, theirs):
        assert b.is_valid() and kb.magic == magic and kb.compression_type == codec
        assert isinstance(b, LegacyBatch)
        assert (kb.base_offset, kb._crc, kb.size_in_bytes) == (b.offset, b.crc, b.size_in_bytes)


# -- property round trip ----------------------------------------------------------------------------------

nullable_bytes = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def legacy_specs(draw):
    magic = draw(st.sampled_from([0, 1]))
    records = draw(st.lists(st.builds(SimpleRecord, nullable_bytes, nullable_bytes,
                                      st.one_of(st.just(-1), st.integers(0, 2**62))), min_size=1, max_size=8))
    base = draw(st.integers(0, 2**62))
    offsets, nxt = [], base
    for gap in draw(st.lists(st.integers(0, 100), min_size=len(records), max_size=len(records))):
        offsets.append(nxt + gap)
        nxt += gap + 1
    kw = dict(magic=magic, codec=draw(st.sampled_from(LEGACY_CODECS)), base_offset=base, offsets=offsets)
    if draw(st.booleans()):
        kw.update(timestamp_type=LOG_APPEND_TIME, log_append_time_ms=draw(st.integers(0, 2**42)))
    return records, kw


@PROPERTY
@given(legacy_specs())
def test_round_trip_property(spec):
    records, kw = spec
    data = build_legacy_batch(records, **kw)
    batches = list(iter_batches(data, strict=True))
    for b in batches:
        b.ensure_valid()
    if kw["magic"] == 0:
        stamps = [-1] * len(records)
    elif "log_append_time_ms" in kw:
        stamps = [kw["log_append_time_ms"]] * len(records)
    else:
        stamps = [r.timestamp for r in records]
    expected = [(o, ts, r.key, r.value) for o, ts, r in zip(kw["offsets"], stamps, records)]
    assert ours(batches) == expected
    assert batches[-1].last_offset == kw["offsets"][-1]
    assert flatten(kp_read(data)) == expected


# -- per-message checksums (what DumpLogSegments prints for each legacy record) ------------------------------

def _stored_crc(entry: bytes | bytearray) -> int:
    return struct.unpack_from(">I", entry, 12)[0]


def test_message_checksums_of_an_uncompressed_message_are_its_own():
    """Kafka's DumpLogSegments prints ``crc`` and ``isValid`` per legacy record: for an uncompressed message that
    is the message itself, valid while its CRC (magic to end) matches."""
    data = message(3, 1, 0, 99, b"key", b"value")
    assert LegacyBatch(data).message_checksums() == [(_stored_crc(data), True)]
    flipped = bytearray(data)
    flipped[-1] ^= 0x01
    assert LegacyBatch(bytes(flipped)).message_checksums() == [(_stored_crc(data), False)]


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_message_checksums_of_a_wrapper_are_its_inner_messages(magic, codec):
    """A compressed wrapper's records are its inner messages (``AbstractLegacyRecordBatch.iterator``): each
    inner message's stored CRC and whether it matches; the wrapper's own CRC is not among them. An inner message
    whose size field runs past the decompressed data, or is below the v0 overhead (14), is reported invalid; fewer
    bytes than one header (12 + 14) left at the end are not a message."""
    good = [message(i, magic, 0, 10 + i, b"k%d" % i, b"v" * i) for i in range(3)]
    bad = bytearray(good[1])
    bad[-1] ^= 0x01                                     # value changed, stored CRC kept: invalid
    minimal = message(3, 0, 0, -1, None, None)         # exactly 12 + 14 bytes: the smallest message
    assert len(minimal) == 26
    small = bytearray(message(4, 0, 0, -1, None, None))
    struct.pack_into(">i", small, 8, 13)                # size 13 < 14: invalid; it spans 12 + 13 bytes
    overrun = bytearray(message(5, magic, 0, 1, b"x", b"y"))
    struct.pack_into(">i", overrun, 8, len(overrun))    # runs past the end of the inner data
    inner = good[0] + bytes(bad) + good[2] + minimal + bytes(small[:25]) + bytes(overrun)
    checks = LegacyBatch(wrapper(9, magic, codec, inner)).message_checksums()
    assert checks == [(_stored_crc(good[0]), True), (_stored_crc(good[1]), False), (_stored_crc(good[2]), True),
                      (_stored_crc(minimal), True), (_stored_crc(small), False), (_stored_crc(overrun), False)]
    # 25 bytes left after the last whole message: one byte short of a header, not counted
    tail = LegacyBatch(wrapper(9, magic, codec, good[0] + bytes(25))).message_checksums()
    assert tail == [(_stored_crc(good[0]), True)]
    # exactly one header's worth left at the end: a message
    last = LegacyBatch(wrapper(9, magic, codec, good[0] + minimal)).message_checksums()
    assert last == [(_stored_crc(good[0]), True), (_stored_crc(minimal), True)]


def test_message_checksums_of_a_wrapper_without_a_value_say_the_payload_is_empty():
    """A compressed wrapper must carry its inner messages in its value (Kafka: "Found invalid compressed record
    set with null value"): a null value is decompressed as no bytes at all, and the error says so."""
    with pytest.raises(CompressionError, match="gzip: empty payload"):
        LegacyBatch(message(0, 1, codecs.GZIP, 1, None, None)).message_checksums()
