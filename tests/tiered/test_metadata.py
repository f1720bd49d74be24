"""The records of ``__remote_log_metadata`` byte for byte as Kafka's schemas and serde give them (golden bytes
written out by hand from RemoteLogSegmentMetadataRecord.json, RemoteLogSegmentMetadataUpdateRecord.json and
RemotePartitionDeleteMetadataRecord.json), Kafka's transitions, murmur2 and the metadata partitioner."""
from __future__ import annotations

import uuid

import pytest

from storage_engine.tiered import metadata as m
from storage_engine.tiered.metadata import (MetadataFormatError, PartitionDelete, RemoteSegment, SegmentUpdate, decode,
                                            encode)

pytestmark = pytest.mark.unit

TOPIC_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
SEGMENT_ID = uuid.UUID(bytes=b"\x11" * 16)
TIP = "02 74" + " 0102030405060708090a0b0c0d0e0f10" + " 00000003" + " 00"   # "t", the id, partition 3, no tags


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


SEGMENT = RemoteSegment("t", TOPIC_ID, 3, SEGMENT_ID, start_offset=0, end_offset=9, max_timestamp_ms=5,
                        event_timestamp_ms=7, broker_id=1, segment_leader_epochs={2: 5, 0: 0}, size_bytes=100)
SEGMENT_BYTES = hexbytes(
    "01 00 00"                                  # frame version 1, apiKey 0, version 0 (unsigned varints)
    + TIP + " 1111111111111111 1111111111111111 00"   # RemoteLogSegmentId: TopicIdPartition, Id, no tags
    + " 0000000000000000 0000000000000009"      # StartOffset, EndOffset
    + " 00000001"                               # BrokerId
    + " 0000000000000005 0000000000000007"      # MaxTimestampMs, EventTimestampMs
    + " 03"                                     # SegmentLeaderEpochs: 2 entries (compact array: count + 1)
    + " 00000000 0000000000000000 00"           #   epoch 0 from offset 0, no tags
    + " 00000002 0000000000000005 00"           #   epoch 2 from offset 5, no tags
    + " 00000064"                               # SegmentSizeInBytes 100
    + " 00"                                     # CustomMetadata null (compact nullable bytes: 0)
    + " 00"                                     # RemoteLogSegmentState COPY_SEGMENT_STARTED
    + " 00")                                    # the message's tagged fields: none
UPDATE = SegmentUpdate("t", TOPIC_ID, 3, SEGMENT_ID, broker_id=1, event_timestamp_ms=8, state=m.COPY_SEGMENT_FINISHED,
                       custom_metadata=b"ab")
UPDATE_BYTES = hexbytes("01 01 00" + TIP + " 1111111111111111 1111111111111111 00"
                        + " 00000001 0000000000000008"   # BrokerId, EventTimestampMs
                        + " 03 6162"                    # CustomMetadata b"ab" (length + 1)
                        + " 01 00")                     # COPY_SEGMENT_FINISHED, no tags
DELETE = PartitionDelete("t", TOPIC_ID, 3, broker_id=1, event_timestamp_ms=1000, state=m.DELETE_PARTITION_STARTED)
DELETE_BYTES = hexbytes("01 02 00" + TIP + " 00000001 00000000000003e8 01 00")


@pytest.mark.parametrize("record, golden", [(SEGMENT, SEGMENT_BYTES), (UPDATE, UPDATE_BYTES), (DELETE, DELETE_BYTES)])
def test_records_are_kafkas_bytes_and_read_back(record, golden):
    assert encode(record) == golden
    assert decode(golden) == record


def test_a_long_topic_name_has_a_two_byte_length_and_unknown_tagged_fields_are_skipped():
    name = "x" * 200
    record = PartitionDelete(name, TOPIC_ID, 0, 1, 0, m.DELETE_PARTITION_MARKED)
    raw = encode(record)
    assert raw[3:5] == bytes([0xC9, 0x01])            # 201 as an unsigned varint
    tagged = raw[:-1] + hexbytes("01 05 02 7a7a")      # one tagged field (tag 5, 2 bytes) a later version may add
    assert decode(tagged) == record
    back = decode(encode(SEGMENT))
    assert isinstance(back, RemoteSegment) and back.segment_leader_epochs == {0: 0, 2: 5}


@pytest.mark.parametrize("raw, named", [
    (b"", "truncated record: frame version"),
    (hexbytes("00 00 00"), "unknown frame version 0"),
    (hexbytes("01 07 00"), "unknown record type (apiKey 7)"),
    (hexbytes("01 00 01"), "unknown version 1 of apiKey 0"),
    (SEGMENT_BYTES[:-9], "truncated record"),
    (SEGMENT_BYTES + b"\x00", "1 byte(s) of garbage after the record"),
    (DELETE_BYTES[:-2] + b"\x09\x00", "unknown partition delete state 9"),
    (UPDATE_BYTES[:-2] + b"\x04\x00", "unknown segment state 4"),
    (hexbytes("01 02 00 00") + DELETE_BYTES[5:], "null where Kafka's schema has a non-null string"),
    (hexbytes("01 02 00 ff ff ff ff ff ff"), "longer than 5 bytes"),
])
def test_bytes_that_are_no_record_are_refused_naming_why(raw, named):
    with pytest.raises(MetadataFormatError, match=named.replace("(", r"\(").replace(")", r"\)")):
        decode(raw)


def test_kafkas_state_transitions():
    s = m.segment_transition_ok
    assert s(None, m.COPY_SEGMENT_STARTED) and not s(None, m.COPY_SEGMENT_FINISHED)
    assert s(m.COPY_SEGMENT_STARTED, m.COPY_SEGMENT_FINISHED) and s(m.COPY_SEGMENT_STARTED, m.DELETE_SEGMENT_STARTED)
    assert s(m.COPY_SEGMENT_FINISHED, m.DELETE_SEGMENT_STARTED) and not s(m.COPY_SEGMENT_FINISHED, m.COPY_SEGMENT_STARTED)
    assert s(m.DELETE_SEGMENT_STARTED, m.DELETE_SEGMENT_FINISHED)
    assert not s(m.DELETE_SEGMENT_STARTED, m.COPY_SEGMENT_FINISHED) and not s(m.DELETE_SEGMENT_FINISHED, 0)
    assert all(s(state, state) for state in range(4))                   # retries are idempotent
    p = m.partition_transition_ok
    assert p(None, 0) and not p(None, 1) and p(0, 1) and p(1, 2) and not p(0, 2) and not p(2, 0) and p(2, 2)


def test_murmur2_is_kafkas():
    # Kafka's UtilsTest.testMurmur2 cases
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    assert {k: m.murmur2(k) for k in cases} == cases


def test_the_metadata_partition_is_kafkas_partitioner():
    # Topic id with msb 0 and lsb 1, partition 0: Objects.hash(1L, 0L, 0) = 31 * (31 * (31 + 1) + 0) + 0 = 30752
    # = 0x00007820; murmur2 of those 4 bytes, made positive, modulo the partition count.
    h = m.murmur2(bytes.fromhex("00007820")) & 0x7FFFFFFF
    assert m.metadata_partition(uuid.UUID(int=1), 0, 50) == h % 50
    # a negative long: Long.hashCode(-1) = (int)(0xffffffffffffffff ^ 0x00000000ffffffff) = 0
    # Objects.hash(-1L, -1L, 7) = 31 * (31 * 31 + 0) + 7 = 29798 = 0x00007466
    h = m.murmur2(bytes.fromhex("00007466")) & 0x7FFFFFFF
    assert m.metadata_partition(uuid.UUID(int=(1 << 128) - 1), 7, 13) == h % 13
    spread = {m.metadata_partition(uuid.UUID(int=i * 7919), p, 50) for i in range(20) for p in range(10)}
    assert len(spread) > 40 and all(0 <= x < 50 for x in spread)


def test_a_segment_moves_through_its_updates():
    finished = SEGMENT.updated(SEGMENT.update(m.COPY_SEGMENT_FINISHED, 99))
    assert (finished.state, finished.event_timestamp_ms, finished.start_offset, finished.size_bytes) == (1, 99, 0, 100)
    assert SEGMENT.offsets == (0, 9)
