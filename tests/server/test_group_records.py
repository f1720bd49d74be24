"""``__consumer_offsets`` records (:mod:`storage_engine.server.groups.records`): Java's ``String.hashCode`` and the
partition of a group, round trips of every key and value, the exact bytes of Kafka's non-flexible schemas, the
older value versions Kafka wrote, and records that the coordinator appended through the engine read back from the
segment file on disk and decoded by hand (record batch v2, then the key and value schemas), without records.py.

No installed library parses ``__consumer_offsets`` records (kafka-python, aiokafka, confluent-kafka and kio have
no schema for them; kio only has the ``ConsumerProtocol*`` ones the members' subscription and assignment use), so
the independent check is the hand decoding of the on-disk bytes. Also: the coordinator appends the records of a
group in the order they were asked for, even when an earlier append is slower than a later one.
"""
from __future__ import annotations

import asyncio
import io
import struct
import threading
from pathlib import Path

import pytest
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.serial import entity_writer

from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.server.broker import Broker
from storage_engine.server.groups import records as rec
from storage_engine.server.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from tests.typed import present

pytestmark = pytest.mark.unit


# -- Java's String.hashCode and partitionFor -----------------------------------------------------------------------

def test_java_hash_matches_java_string_hashcode():
    assert rec.java_hash("") == 0
    assert rec.java_hash("hello") == 99162322
    assert rec.java_hash("Aa") == rec.java_hash("BB") == 2112                 # Java's classic collision
    assert rec.java_hash("polygenelubricants") == -(2 ** 31)                   # Integer.MIN_VALUE
    # By hand: "hello" with é (U+00E9 = 233) for e (101) adds (233 - 101) * 31^3.
    assert rec.java_hash("h\u00e9llo") == 99162322 + 132 * 31 ** 3 == 103094734
    # Over UTF-16 code units: U+1F600 is the surrogate pair D83D DE00.
    assert rec.java_hash("a\U0001F600") == (97 * 31 + 0xD83D) * 31 + 0xDE00 == 1866116
    # int32 wrap-around: 31 * h overflows for longer strings; compare with the arithmetic done in 32 bits.
    text = "consumer-group-with-a-long-name-\u00fc\u4e2d"
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (31 * h + unit) % 2 ** 32
    assert rec.java_hash(text) == (h - 2 ** 32 if h >= 2 ** 31 else h)


def test_partition_for_is_kafkas_abs_hash_modulo_the_partition_count():
    assert rec.partition_for("hello", 50) == 99162322 % 50 == 22
    assert rec.partition_for("polygenelubricants", 50) == 0       # Utils.abs(MIN_VALUE) is 0 (x & 0x7fffffff)
    negative = "consumer-group-with-a-long-name-\u00fc\u4e2d"
    if rec.java_hash(negative) < 0:
        assert rec.partition_for(negative, 7) == (rec.java_hash(negative) & 0x7FFFFFFF) % 7
    assert all(0 <= rec.partition_for(f"g{i}", 3) < 3 for i in range(100))


# -- round trips and exact bytes -------------------------------------------------------------------------------

def test_offset_key_and_value_bytes_and_round_trip():
    key = rec.offset_key("g", "t\u00e9", 1)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x03t\xc3\xa9" + b"\x00\x00\x00\x01"
    assert rec.parse_key(key) == rec.OffsetKey("g", "t\u00e9", 1)
    value = rec.offset_value(42, 7, "meta", 1_700_000_000_123)
    assert value == (b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 7) + b"\x00\x04meta"
                     + struct.pack(">q", 1_700_000_000_123))
    assert rec.parse_offset_value(value) == rec.OffsetValue(42, 7, "meta", 1_700_000_000_123)
    assert rec.parse_offset_value(rec.offset_value(0, -1, "", 0)) == rec.OffsetValue(0, -1, "", 0)


def test_older_offset_value_versions_that_kafka_wrote_are_read():
    v0 = b"\x00\x00" + struct.pack(">q", 5) + b"\x00\x02m0" + struct.pack(">q", 111)
    v1 = b"\x00\x01" + struct.pack(">q", 6) + b"\x00\x02m1" + struct.pack(">q", 222) + struct.pack(">q", 999)
    v2 = b"\x00\x02" + struct.pack(">q", 7) + b"\xff\xff" + struct.pack(">q", 333)      # null metadata
    assert rec.parse_offset_value(v0) == rec.OffsetValue(5, -1, "m0", 111)
    assert rec.parse_offset_value(v1) == rec.OffsetValue(6, -1, "m1", 222)
    assert rec.parse_offset_value(v2) == rec.OffsetValue(7, -1, "", 333)
    # Key version 0 is an offset key too.
    assert rec.parse_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x09") == rec.OffsetKey("g", "t", 9)


def test_group_key_and_value_round_trip_with_null_strings_and_members():
    assert rec.group_key("grp") == b"\x00\x02\x00\x03grp"
    assert rec.parse_key(rec.group_key("gr\u00fcn")) == rec.GroupKey("gr\u00fcn")
    members = [rec.MemberRecord("m-1", None, "client-1", "/127.0.0.1", 10000, 6000, b"\x00\x01sub", b"assign"),
               rec.MemberRecord("m-2", "static-\u00e9", "client-2", "/10.0.0.2", 20000, 7000, b"", b"")]
    g = rec.GroupRecord("consumer", 12, "range", "m-1", 1_700_000_000_000, members)
    assert rec.parse_group_value(rec.group_value(g)) == g
    empty = rec.GroupRecord("consumer", 13, None, None, 5, [])
    raw = rec.group_value(empty)
    assert raw == (b"\x00\x03" + b"\x00\x08consumer" + struct.pack(">i", 13) + b"\xff\xff" + b"\xff\xff"
                   + struct.pack(">q", 5) + struct.pack(">i", 0))
    assert rec.parse_group_value(raw) == empty


def test_group_value_version_0_without_rebalance_timeout_instance_id_or_timestamp():
    member = b"\x00\x02m1" + b"\x00\x02c1" + b"\x00\x02h1" + struct.pack(">i", 6000) \
        + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 2) + b"as"
    v0 = b"\x00\x00" + b"\x00\x08consumer" + struct.pack(">i", 4) + b"\x00\x05range" + b"\x00\x02m1" \
        + struct.pack(">i", 1) + member
    assert rec.parse_group_value(v0) == rec.GroupRecord(
        "consumer", 4, "range", "m1", -1, [rec.MemberRecord("m1", None, "c1", "h1", -1, 6000, b"sub", b"as")])


def test_unreadable_and_unknown_records():
    with pytest.raises(rec.RecordFormatError):
        rec.parse_key(rec.offset_key("g", "t", 0)[:-1])
    with pytest.raises(rec.RecordFormatError):
        rec.parse_offset_value(b"\x00\x09" + bytes(30))            # an unknown value version
    with pytest.raises(rec.RecordFormatError):
        rec.parse_group_value(rec.group_value(rec.GroupRecord("consumer", 1, None, None, 0, []))[:-2])
    # KIP-848 consumer-group and share-group records (key versions 3 and up) are not this coordinator's.
    assert rec.parse_key(b"\x00\x03\x00\x01g") is None
    assert rec.parse_key(b"\x00\x0b\x00\x01g") is None


def test_assigned_partitions_decodes_a_consumer_protocol_assignment():
    assignment = assignment_v1.ConsumerProtocolAssignment(assigned_partitions=(
        assignment_v1.TopicPartition(topic="orders", partitions=(3, 1)),  # type: ignore[arg-type]  # plain str/ints for kio's nominal types
        assignment_v1.TopicPartition(topic="audit", partitions=(0,))), user_data=None)  # type: ignore[arg-type]  # (TopicName, i32)
    buf = io.BytesIO()
    entity_writer(assignment_v1.ConsumerProtocolAssignment)(buf, assignment)
    assert rec.assigned_partitions(b"\x00\x01" + buf.getvalue()) == {"orders": [1, 3], "audit": [0]}
    assert rec.assigned_partitions(b"") == {}
    assert rec.assigned_partitions(b"\x00\x01not an assignment") == {}


# -- records the coordinator wrote, decoded from the segment file by hand ------------------------------------------

def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class _Bytes:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        assert self.pos + n <= len(self.data), "record ends early"
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        (value,) = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return value

    def varint(self) -> int:                  # zigzag varint (record fields)
        shift = raw = 0
        while True:
            b = self.take(1)[0]
            raw |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (raw >> 1) ^ -(raw & 1)

    def string(self) -> str | None:           # int16 length, -1 null (the non-flexible schemas)
        n = self.unpack(">h")
        return None if n == -1 else self.take(n).decode("utf-8")

    def blob(self) -> bytes | None:           # int32 length, -1 null
        n = self.unpack(">i")
        return None if n == -1 else self.take(n)

    def done(self) -> bool:
        return self.pos == len(self.data)


def _decode_segment(path: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of a .log file: record batch v2, uncompressed, CRC-32C checked."""
    out = []
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        head = _Bytes(data[pos:pos + 12])
        base_offset, length = head.unpack(">q"), head.unpack(">i")
        batch = _Bytes(data[pos + 12:pos + 12 + length])
        batch.unpack(">i")                                      # partition leader epoch
        assert batch.unpack(">b") == 2                          # magic
        crc = batch.unpack(">I")
        assert crc == _crc32c(batch.data[batch.pos:])
        attributes = batch.unpack(">h")
        assert attributes & 0x07 == 0, "uncompressed"
        batch.unpack(">i")                                      # last offset delta
        batch.unpack(">q"), batch.unpack(">q")                  # base and max timestamp
        assert batch.unpack(">q") == -1                         # producer id: the coordinator is no producer
        batch.unpack(">h"), batch.unpack(">i")                  # producer epoch, base sequence
        for _ in range(batch.unpack(">i")):
            record = _Bytes(batch.take(batch.varint()))
            record.take(1)                                      # attributes
            record.varint()                                     # timestamp delta
            offset = base_offset + record.varint()
            n = record.varint()
            key = None if n < 0 else record.take(n)
            n = record.varint()
            value = None if n < 0 else record.take(n)
            assert record.varint() == 0                         # no headers
            assert record.done()
            out.append((offset, key, value))
        assert batch.done()
        pos += 12 + length
    return out


def _decode_key(key: bytes) -> tuple:
    b = _Bytes(key)
    version = b.unpack(">h")
    out = (version, b.string(), b.string(), b.unpack(">i")) if version == 1 else (version, b.string())
    assert b.done()
    return out


def _decode_offset_value(value: bytes) -> tuple:
    b = _Bytes(value)
    out = (b.unpack(">h"), b.unpack(">q"), b.unpack(">i"), b.string(), b.unpack(">q"))
    assert b.done()
    return out


def _decode_group_value(value: bytes) -> tuple:
    b = _Bytes(value)
    head = (b.unpack(">h"), b.string(), b.unpack(">i"), b.string(), b.string(), b.unpack(">q"))
    members = [(b.string(), b.string(), b.string(), b.string(), b.unpack(">i"), b.unpack(">i"), b.blob(), b.blob())
               for _ in range(b.unpack(">i"))]
    assert b.done()
    return head + (members,)


def _broker_config(tmp_path: Path, partitions: int = 3):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "logs")],
                                           "offsets.topic.num.partitions": partitions,
                                           "group.initial.rebalance.delay.ms": 0}})


def _segments(tmp_path: Path, partition: int) -> list[Path]:
    return sorted((tmp_path / "logs" / f"{OFFSETS_TOPIC}-{partition}").glob("*.log"))


def test_records_the_coordinator_appends_decode_by_hand_from_the_segment_file(tmp_path):
    config = _broker_config(tmp_path)
    group = "hand-decoded"
    subscription = b"\x00\x01\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff"    # v1: [orders], no user data

    async def scenario(broker: Broker):
        c = broker.groups
        joined = await c.join(group, "", None, "client-a", "127.0.0.1", 6000, 9000, "consumer",
                              [("range", subscription), ("roundrobin", b"")], require_known_member=False)
        assert joined["error_code"] == 0 and joined["leader"] == joined["member_id"]
        member = joined["member_id"]
        synced = await c.sync(group, joined["generation_id"], member, {member: b"assignment-bytes"})
        assert synced["error_code"] == 0 and synced["assignment"] == b"assignment-bytes"
        codes = await c.commit(group, joined["generation_id"], member, [("orders", 2, 41, 3, "meta-\u00e9")])
        assert codes == [0]
        assert c.leave(group, member, None) == 0
        # The group's Empty record is written by a task of its own: wait for it (and any other left running).
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not asyncio.current_task()))
        return member, joined["generation_id"]

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            member, generation = asyncio.run(scenario(broker))
        finally:
            broker.close()

    partition = rec.partition_for(group, 3)
    [segment] = _segments(tmp_path, partition)
    records = _decode_segment(segment)
    assert [o for o, _, _ in records] == [0, 1, 2]
    (_, k0, v0), (_, k1, v1), (_, k2, v2) = records
    # The group as the leader's SyncGroup made it Stable.
    assert _decode_key(present(k0)) == (2, group)
    version, ptype, gen, protocol, leader, state_ms, members = _decode_group_value(present(v0))
    assert (version, ptype, gen, protocol, leader) == (3, "consumer", generation, "range", member)
    assert state_ms > 1_600_000_000_000
    assert members == [(member, None, "client-a", "127.0.0.1", 9000, 6000, subscription, b"assignment-bytes")]
    # The commit: key version 1, value version 3 with the leader epoch.
    assert _decode_key(present(k1)) == (1, group, "orders", 2)
    version, offset, epoch, metadata, commit_ms = _decode_offset_value(present(v1))
    assert (version, offset, epoch, metadata) == (3, 41, 3, "meta-\u00e9")
    assert commit_ms > 1_600_000_000_000
    # The last member left: Empty, next generation, no protocol, leader or members.
    assert _decode_key(present(k2)) == (2, group)
    assert _decode_group_value(present(v2))[:5] == (3, "consumer", generation + 1, None, None)
    assert _decode_group_value(present(v2))[6] == []
    # records.py reads the same.
    assert rec.parse_offset_value(present(v1)) == rec.OffsetValue(41, 3, "meta-\u00e9", commit_ms)


def test_commits_of_a_group_are_appended_in_the_order_they_were_asked_for(tmp_path):
    """The first of two commits of one partition is slow to append (its append waits until the second has been
    appended, or half a second): the second commit still wins, in memory, on disk and after a reload."""
    config = _broker_config(tmp_path)
    second_appended = threading.Event()

    async def scenario(broker: Broker):
        c = broker.groups
        append = c._append
        calls = []

        def append_in_turn(group_id, records, producer=None):
            calls.append(records)
            if len(calls) == 1:
                second_appended.wait(0.5)
            first = append(group_id, records, producer)
            if len(calls) == 2:
                second_appended.set()
            return first

        c._append = append_in_turn  # type: ignore[method-assign]  # the test interleaves two appends through the coordinator's own
        first = asyncio.create_task(c.commit("ordered", -1, "", [("t", 0, 5, -1, "first")]))
        second = asyncio.create_task(c.commit("ordered", -1, "", [("t", 0, 7, -1, "second")]))
        assert await first == [0] and await second == [0]
        [(_, [(_, value)])] = c.fetch_offsets("ordered", [("t", [0])])
        return value

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            in_memory = asyncio.run(scenario(broker))
        finally:
            broker.close()
    assert (in_memory.offset, in_memory.metadata) == (7, "second")

    records = [r for s in _segments(tmp_path, rec.partition_for("ordered", 3)) for r in _decode_segment(s)]
    assert [_decode_offset_value(present(v))[1] for _, _, v in records] == [5, 7]

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            reloaded = GroupCoordinator(broker)
            reloaded.load()
            assert reloaded.groups["ordered"].offsets[("t", 0)].offset == 7
        finally:
            broker.close()


def test_a_commit_while_its_group_is_being_deleted_starts_the_group_anew(tmp_path):
    """DeleteGroups writes its tombstones; a standalone commit of the same group id arriving meanwhile begins a new
    group, which the deletion must not drop: its offset is kept in memory as on disk (after the tombstones)."""
    config = _broker_config(tmp_path)

    async def scenario(broker: Broker):
        c = broker.groups
        assert await c.commit("reborn", -1, "", [("t", 0, 1, -1, None)]) == [0]
        deleting = asyncio.create_task(c.delete("reborn"))
        await asyncio.sleep(0)                      # the deletion has begun appending its tombstones
        committing = asyncio.create_task(c.commit("reborn", -1, "", [("t", 0, 2, -1, None)]))
        assert await deleting == 0 and await committing == [0]
        return c.fetch_offsets("reborn", None)

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            fetched = asyncio.run(scenario(broker))
        finally:
            broker.close()
    assert [(t, [(p, v.offset) for p, v in parts]) for t, parts in fetched] == [("t", [(0, 2)])]

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            reloaded = GroupCoordinator(broker)
            reloaded.load()
            assert reloaded.groups["reborn"].offsets[("t", 0)].offset == 2
        finally:
            broker.close()
