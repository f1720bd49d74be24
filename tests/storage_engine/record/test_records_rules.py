"""The record formats (magic 2 and legacy 0/1) at their exact boundaries, and every error naming what is wrong
where (MUTATION.md: what the mutants of records.py and legacy_records.py showed the other tests let through).
Rules from the reference, sections 1.2 to 1.5: varints are zig-zag LEB128 read as ``ByteUtils.readVarint``
does (a non-canonical encoding is accepted; ``DefaultRecord.readFrom`` does not check the offset delta); a v2
batch is at least 61 bytes; a control record key is int16 version (>= 0) + int16 type; a legacy wrapper
needs a value and at least one uncompressed inner message of at least 14 bytes."""
from __future__ import annotations

import struct
import zlib

import pytest

from storage_engine.errors import CompressionError, CorruptRecordError
from storage_engine.record import codecs, record_batch, records
from storage_engine.record.legacy_records import LegacyBatch, build_legacy_batch, encode_message
from storage_engine.record.record_batch import RecordBatch, build_batch, build_control_batch, set_partition_leader_epoch
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit

BATCH = build_batch([SimpleRecord(b"k", b"v", 1000)], base_offset=40)


def varint(value: int) -> bytes:
    out = bytearray()
    records.write_varint(value, out)
    return bytes(out)


def frame_records(*bodies: bytes) -> bytes:
    return b"".join(varint(len(b)) + b for b in bodies)


def v2_batch_with_section(section: bytes, count: int, base_offset: int = 0) -> bytes:
    """A valid batch header (count, CRC) around a hand-made records section."""
    return record_batch.finish_batch(section, base_offset, count - 1, -1, 0, 0, 0, -1, -1, -1, count)


# -- v2 batch header ------------------------------------------------------------------------------------------------

def test_a_buffer_shorter_than_the_batch_overhead_is_located_where_it_starts():
    buf = b"\x00" * 20 + BATCH[:50]
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(buf, 20, "f")
    assert str(err.value) == ("record batch is corrupt: 50 bytes are smaller than the minimum allowed overhead 61 "
                              "(file f, byte position 20)")
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(buf, 20, "f", file_position=1000)
    assert err.value.position == 1000


def test_file_position_defaults_to_the_position_in_the_buffer():
    assert RecordBatch(b"\x00" * 7 + BATCH, 7).file_position == 7
    assert RecordBatch(b"\x00" * 7 + BATCH, 7, file_position=99).file_position == 99


def test_a_batch_whose_size_field_is_below_61_bytes_is_corrupt():
    bad = bytearray(BATCH)
    struct.pack_into(">i", bad, 8, 38)            # size 50 = length 38 + 12
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(bytes(bad), 0, "f", 500).ensure_valid()
    assert str(err.value) == ("record batch is corrupt: its size 50 is smaller than the minimum allowed overhead 61 "
                              "(file f, byte position 500)")


def test_iterating_a_batch_gives_its_records():
    assert list(RecordBatch(BATCH)) == RecordBatch(BATCH).records() == [records.Record(40, 1000, b"k", b"v", ())]
    legacy = build_legacy_batch([SimpleRecord(b"k", b"v", 5)], magic=1, base_offset=3)
    assert list(LegacyBatch(legacy)) == [records.Record(3, 5, b"k", b"v", ())]


# -- compressed payloads ---------------------------------------------------------------------------------------------

def test_decompression_errors_are_located_in_the_file():
    # gzip garbage fails at its first byte (inner position 0); a cut lz4 frame fails 11 bytes in.
    for codec, payload, inner_position in ((codecs.GZIP, b"\x1f\x8b\x08\x00garbagegarbage", 0),
                                           (codecs.LZ4, b"\x04\x22\x4d\x18\x60\x40\x82\xff\xff\x00\x00", 11)):
        batch = record_batch.finish_batch(payload, 7, 0, -1, codec, 0, 0, -1, -1, -1, 1)
        with pytest.raises(CompressionError) as err:
            RecordBatch(batch, 0, "f", 1000).records()
        assert err.value.position == 1000 + 61 + inner_position
        assert str(err.value).startswith(f"cannot decompress batch at offset 7: {codecs.CODEC_NAMES[codec]}: ")


def test_records_payload_honours_the_output_limit():
    batch = build_batch([SimpleRecord(b"k", b"v" * 10_000, 0)], codec=codecs.GZIP)
    assert len(RecordBatch(batch).records_payload()) > 10_000
    with pytest.raises(CompressionError):
        RecordBatch(batch).records_payload(max_output_bytes=1000)


def test_the_compression_level_is_the_callers():
    recs = [SimpleRecord(b"k%d" % i, b"value %d " % i * 20, 0) for i in range(50)]
    section = records.encode_records(recs, None, 0, 0)
    fast = build_batch(recs, codec=codecs.GZIP, compression_level=1)
    best = build_batch(recs, codec=codecs.GZIP, compression_level=9)
    assert fast[61:] == codecs.compress(codecs.GZIP, section, level=1)
    assert best[61:] == codecs.compress(codecs.GZIP, section, level=9)
    assert fast[61:] != best[61:]


# -- records section ---------------------------------------------------------------------------------------------------

def test_varint_boundaries_of_lengths_and_deltas_round_trip():
    # 64 is the first value whose zig-zag encoding takes two bytes (0x80 0x01): keys, values and offset deltas.
    recs = [SimpleRecord(b"k" * 64, b"v" * 64, 1000 + i) for i in range(66)]
    batch = build_batch(recs, base_offset=5)
    assert varint(64) == b"\x80\x01"
    got = RecordBatch(batch).records()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (5 + i, b"k" * 64, b"v" * 64, 1000 + i) for i in range(66)]


def test_the_offset_delta_is_not_checked_when_reading():
    body = b"\x00" + varint(0) + varint(-1) + varint(1) + b"k" + varint(1) + b"v" + varint(0)
    [rec] = RecordBatch(v2_batch_with_section(frame_records(body), 1, base_offset=10)).records()
    assert rec.offset == 9


def test_a_non_canonical_header_count_of_zero_is_accepted():
    body = b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + b"\x80\x00"
    [rec] = RecordBatch(v2_batch_with_section(frame_records(body), 1)).records()
    assert (rec.key, rec.value, rec.headers) == (b"k", b"v", ())


def test_header_keys_that_are_not_utf8_survive_a_round_trip():
    batch = build_batch([SimpleRecord(b"k", b"v", 0, ((b"\xff\xfe", b"x"), (bytearray(b"h"), None)))])
    [rec] = RecordBatch(batch).records()
    assert rec.headers == (("\udcff\udcfe", b"x"), ("h", None))
    again = build_batch([SimpleRecord(rec.key, rec.value, rec.timestamp, rec.headers)])
    assert again == batch


def test_a_batch_can_be_built_from_plain_tuples():
    assert build_batch([(b"k", b"v", 1000, ())], base_offset=40) == BATCH
    legacy = build_legacy_batch([SimpleRecord(b"k", b"v", 5)], magic=1)
    assert build_legacy_batch([(b"k", b"v", 5, ())], magic=1) == legacy  # type: ignore[list-item]  # a plain tuple, accepted as a SimpleRecord is


@pytest.mark.parametrize("kwargs, message", [
    ({"timestamp_type": 2}, "invalid timestamp type 2 for a magic 2 batch"),
    ({"is_transactional": True}, "cannot write a transactional batch without a producer id"),
    ({"offsets": [1, 2]}, "offsets and records differ in length"),
    ({"timestamp_type": 1}, "LogAppendTime batches need log_append_time_ms"),
    ({"offsets": [3], "base_offset": 3, "last_offset": 2}, "last_offset 2 is below the last record's offset 3"),
    ({"offsets": [2], "base_offset": 3}, "offset 2 is below the base offset 3"),
])
def test_build_batch_refuses_what_kafka_would_not_write(kwargs, message):
    with pytest.raises(ValueError) as err:
        build_batch([SimpleRecord(b"k", b"v", 0)], **kwargs)
    assert str(err.value) == message


def test_build_batch_refuses_negative_timestamps_and_decreasing_offsets():
    with pytest.raises(ValueError) as err:
        build_batch([SimpleRecord(b"k", b"v", -2)])
    assert str(err.value) == "invalid negative timestamp -2"
    with pytest.raises(ValueError) as err:
        build_batch([SimpleRecord(b"k", b"v", 0)] * 2, offsets=[5, 5], base_offset=5)
    assert str(err.value) == "offsets must increase, got 5 after 5"
    with pytest.raises(ValueError) as err:
        records.encode_records([SimpleRecord(b"k", b"v", 0)], [1, 2], 0, 0)
    assert str(err.value) == "offsets and records differ in length"


# -- control batches ---------------------------------------------------------------------------------------------------

def test_transaction_markers_carry_version_0_the_coordinator_epoch_and_the_leader_epoch():
    marker = RecordBatch(build_control_batch(1, base_offset=9, timestamp=5, producer_id=7, producer_epoch=2))
    assert marker.records()[0].key == b"\x00\x00\x00\x01" and marker.records()[0].value == b"\x00\x00\x00\x00\x00\x00"
    assert marker.partition_leader_epoch == -1 and marker.control_type() == "COMMIT"
    marker = RecordBatch(build_control_batch(0, base_offset=9, timestamp=5, producer_id=7, producer_epoch=2,
                                             coordinator_epoch=-1, partition_leader_epoch=3))
    assert marker.records()[0].value == b"\x00\x00\xff\xff\xff\xff"
    assert marker.partition_leader_epoch == 3 and marker.control_type() == "ABORT"


@pytest.mark.parametrize("key, message", [
    (b"\x00\x01", "control record key is shorter than 4 bytes"),
    (b"\xff\xff\x00\x01", "invalid control record version -1"),
])
def test_bad_control_keys_are_corrupt_records_naming_the_batch(key, message):
    batch = build_batch([SimpleRecord(key, b"", 0)], producer_id=1, is_transactional=True, is_control=True)
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(b"\x00" * 3 + batch, 3, "f").control_type()
    assert str(err.value) == f"{message} (file f, byte position 3)"


def test_setting_the_leader_epoch_to_unknown_writes_minus_one():
    buf = bytearray(BATCH)
    set_partition_leader_epoch(buf, 0, -1)
    assert buf[12:16] == b"\xff\xff\xff\xff"
    set_partition_leader_epoch(buf, 0, 7)
    assert RecordBatch(bytes(buf)).partition_leader_epoch == 7 and RecordBatch(bytes(buf)).is_valid()


# -- legacy messages -----------------------------------------------------------------------------------------------------

V1 = build_legacy_batch([SimpleRecord(b"k", b"v", 5)], magic=1, base_offset=3)


def legacy_error(buf: bytes, pos: int = 0, call=lambda b: b.records()) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as err:
        call(LegacyBatch(buf, pos, "f"))
    return err.value


def test_legacy_entries_shorter_than_the_v0_overhead_are_located_where_they_start():
    buf = b"\x00" * 10 + V1[:20]
    with pytest.raises(CorruptRecordError) as err:
        LegacyBatch(buf, 10, "f")
    assert str(err.value) == ("legacy message is shorter than the minimum record overhead (file f, "
                              "byte position 10)")
    with pytest.raises(CorruptRecordError) as err:
        LegacyBatch(buf, 10, "f", file_position=77)
    assert err.value.position == 77
    assert LegacyBatch(b"\x00" * 4 + V1, 4).file_position == 4


def test_a_legacy_entry_with_another_magic_is_corrupt():
    bad = bytearray(V1)
    bad[16] = 2
    with pytest.raises(CorruptRecordError) as err:
        LegacyBatch(b"\x00" + bytes(bad), 1, "f")
    assert str(err.value) == "invalid magic byte 2 for a legacy message (file f, byte position 1)"


def test_a_legacy_message_whose_fields_do_not_fill_its_size_says_by_how_much():
    bad = bytearray(V1 + b"\x00\x00")
    struct.pack_into(">i", bad, 8, len(V1) - 12 + 2)   # two bytes more than its fields take
    err = legacy_error(bytes(bad), call=lambda b: b.key_value())
    assert str(err) == (f"legacy message declares {len(V1) - 12 + 2} bytes but its fields take {len(V1) - 12} "
                        "(file f, byte position 0)")
    bad = bytearray(V1)
    struct.pack_into(">i", bad, 12 + 14 + 4 + 1, 9)     # value length 9 where 1 byte is left
    err = legacy_error(b"\x00" * 5 + bytes(bad), 5, call=lambda b: b.key_value())
    assert str(err) == "legacy message declares 24 bytes but its fields take 32 (file f, byte position 5)"


def test_a_legacy_message_whose_fields_run_past_the_buffer_is_corrupt():
    v0 = bytearray(encode_message(0, 0, 0, -1, b"k", b"v"))
    struct.pack_into(">i", v0, 18, 100)                  # key length 100: the value length lies past the end
    err = legacy_error(bytes(v0), call=lambda b: b.key_value())
    assert str(err) == "legacy message runs past its declared size (file f, byte position 0)"


def wrapper(inner: bytes, codec: int = codecs.GZIP, offset: int = 1, magic: int = 1) -> bytes:
    return encode_message(offset, magic, codec, 5, None, codecs.compress(codec, inner, magic=magic))


def inner_message(offset: int, key=b"k", value=b"v", magic: int = 1, attributes: int = 0) -> bytes:
    return encode_message(offset, magic, attributes, 5, key, value)


def _one_byte_more_declared() -> bytes:
    m = bytearray(inner_message(0) + b"\x00")
    struct.pack_into(">i", m, 8, struct.unpack_from(">i", m, 8)[0] + 1)
    return bytes(m)


@pytest.mark.parametrize("inner, message", [
    (b"", "found invalid compressed record set with no inner records"),
    (inner_message(0)[:20], "truncated inner message in a compressed wrapper"),
    (struct.pack(">qiIbb", 0, 10, 0, 1, 0) + b"\x00" * 20, "inner message size 10 is invalid"),
    (struct.pack(">qiIbb", 0, 40, 0, 1, 0) + b"\x00" * 20, "inner message size 40 is invalid"),
    (struct.pack(">qiIbb", 0, 14, 0, 3, 0) + b"\x00" * 8, "invalid inner magic 3"),
    (inner_message(0, attributes=codecs.GZIP), "inner messages must not be compressed"),
    (_one_byte_more_declared(), "legacy message declares 25 bytes but its fields take 24"),
], ids=["empty", "truncated", "size-below-14", "size-past-end", "magic-3", "compressed", "size-not-filled"])
def test_bad_inner_messages_name_the_wrapper(inner, message):
    err = legacy_error(b"\x00" * 5 + wrapper(inner), 5)
    assert str(err) == f"{message} (file f, byte position 5)"


def test_an_inner_message_with_a_bad_key_size_names_the_wrapper():
    bad = bytearray(inner_message(0))
    struct.pack_into(">i", bad, 12 + 14, -3)
    err = legacy_error(b"\x00" * 5 + wrapper(bytes(bad)), 5)
    assert str(err) == "invalid key size -3 (file f, byte position 5)"


def test_wrapper_errors_name_the_wrapper():
    err = legacy_error(encode_message(1, 1, codecs.GZIP, 5, None, None))
    assert str(err) == "found invalid compressed record set with null value (file f, byte position 0)"
    with pytest.raises(CompressionError) as cerr:
        LegacyBatch(b"\x00" * 2 + encode_message(4, 1, codecs.GZIP, 5, None, b"garbage"), 2, "f").records()
    assert str(cerr.value).startswith("cannot decompress legacy wrapper at offset 4: gzip: ")
    assert cerr.value.position == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"magic": 2}, "legacy magic must be 0 or 1, got 2"),
    ({"magic": 1, "timestamp_type": 1}, "LogAppendTime needs log_append_time_ms"),
])
def test_build_legacy_batch_refuses_what_kafka_would_not_write(kwargs, message):
    with pytest.raises(ValueError) as err:
        build_legacy_batch([SimpleRecord(b"k", b"v", 0)], **kwargs)
    assert str(err.value) == message
    with pytest.raises(ValueError) as err:
        build_legacy_batch([], magic=0)
    assert str(err.value) == "a legacy batch needs at least one record"


def test_the_legacy_crc_covers_magic_to_the_end():
    msg = inner_message(0)
    assert struct.unpack_from(">I", msg, 12)[0] == zlib.crc32(msg[16:])
