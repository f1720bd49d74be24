"""``__consumer_offsets`` records in Kafka's schemas (``group-coordinator/src/main/resources/common/message``), so
Kafka's own tools could read them:

* key version 1, ``OffsetCommitKey`` {group, topic: string; partition: int32}; value version 3,
  ``OffsetCommitValue`` {offset int64, leaderEpoch int32, metadata string, commitTimestamp int64} (what Kafka writes
  without an explicit expire timestamp);
* key version 2, ``GroupMetadataKey`` {group}; value version 3, ``GroupMetadataValue`` {protocolType string,
  generation int32, protocol nullable string, leader nullable string, currentStateTimestamp int64, members
  [memberId, groupInstanceId (nullable), clientId, clientHost: string; rebalanceTimeout, sessionTimeout: int32;
  subscription, assignment: bytes]};
* a null value is a tombstone (the offset or the group deleted).

These versions are not flexible: strings carry an int16 length (-1 for null), bytes and arrays an int32 one. The
partition of a group is ``abs(javaHashCode(group)) % offsets.topic.num.partitions`` (Kafka's
``partitionFor``), the same rule the transaction coordinator uses for transactional ids.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    pass


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    return (java_hash(key) & 0x7FFFFFFF) % partitions


# -- writing ----------------------------------------------------------------------------------------------------

def put_string(out: bytearray, text: str | None) -> None:
    if text is None:
        out += _I16.pack(-1)
        return
    raw = text.encode("utf-8")
    out += _I16.pack(len(raw)) + raw


def put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(data)) + data


def offset_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(_I16.pack(OFFSET_KEY_VERSION))
    put_string(out, group)
    put_string(out, topic)
    out += _I32.pack(partition)
    return bytes(out)


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_ms: int) -> bytes:
    out = bytearray(_I16.pack(OFFSET_VALUE_VERSION))
    out += _I64.pack(offset) + _I32.pack(leader_epoch)
    put_string(out, metadata)
    out += _I64.pack(commit_ms)
    return bytes(out)


def group_key(group: str) -> bytes:
    out = bytearray(_I16.pack(GROUP_KEY_VERSION))
    put_string(out, group)
    return bytes(out)


@dataclass
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: list[MemberRecord] = field(default_factory=list)


def group_value(g: GroupRecord) -> bytes:
    out = bytearray(_I16.pack(GROUP_VALUE_VERSION))
    put_string(out, g.protocol_type)
    out += _I32.pack(g.generation)
    put_string(out, g.protocol)
    put_string(out, g.leader)
    out += _I64.pack(g.state_timestamp_ms)
    out += _I32.pack(len(g.members))
    for m in g.members:
        put_string(out, m.member_id)
        put_string(out, m.group_instance_id)
        put_string(out, m.client_id)
        put_string(out, m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms) + _I32.pack(m.session_timeout_ms)
        put_bytes(out, m.subscription)
        put_bytes(out, m.assignment)
    return bytes(out)


# -- reading ----------------------------------------------------------------------------------------------------

class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"record ends at byte {len(self.data)}, {n} more bytes wanted at {self.pos}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def i8(self) -> int:
        return int(self._take(1)[0])

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        return self._take(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n == -1 else self._take(n)


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


def parse_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for kinds this coordinator does not keep (KIP-848
    consumer-group and share-group records, versions >= 3)."""
    r = Reader(data)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        if group is None or topic is None:
            raise RecordFormatError("offset commit key with a null group or topic")
        return OffsetKey(group, topic, r.i32())
    if version == 2:
        group = r.string()
        if group is None:
            raise RecordFormatError("group metadata key with a null group")
        return GroupKey(group)
    return None


def parse_offset_value(data: bytes) -> OffsetValue:
    r = Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"offset commit value version {version} (0-3 are read)")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit = r.i64()
    if version == 1:
        r.i64()     # expireTimestamp
    return OffsetValue(offset, epoch, metadata, commit)


def parse_group_value(data: bytes) -> GroupRecord:
    r = Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"group metadata value version {version} (0-3 are read)")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol, leader = r.string(), r.string()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id, host = r.string() or "", r.string() or ""
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        members.append(MemberRecord(member_id, instance, client_id, host, rebalance, session,
                                    r.bytes_() or b"", r.bytes_() or b""))
    return GroupRecord(protocol_type, generation, protocol, leader, ts, members)


def assigned_partitions(assignment: bytes) -> dict[str, list[int]]:
    """The partitions in a consumer's assignment (``ConsumerProtocolAssignment``, decoded with kio's schema of its
    version, newer versions with the newest known one, as Kafka's ``ConsumerProtocol`` reads them); empty when
    the bytes are not a consumer assignment (another protocol type)."""
    import importlib

    from kio.serial import entity_reader
    if len(assignment) < 2:
        return {}
    version = min(int(_I16.unpack_from(assignment, 0)[0]), 3)
    if version < 0:
        return {}
    module = importlib.import_module(f"kio.schema.consumer_protocol_assignment.v{version}.data")
    try:
        decoded, _ = entity_reader(module.ConsumerProtocolAssignment)(memoryview(assignment[2:]), 0)
    except Exception:   # noqa: BLE001 - not a consumer assignment: nothing to show
        return {}
    return {str(tp.topic): sorted(int(p) for p in tp.partitions) for tp in decoded.assigned_partitions}


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics a consumer subscribes to (``ConsumerProtocolSubscription``, its member metadata for the chosen
    protocol), decoded as :func:`assigned_partitions` decodes assignments; empty when the bytes are not a consumer
    subscription."""
    import importlib

    from kio.serial import entity_reader
    if len(metadata) < 2:
        return []
    version = min(int(_I16.unpack_from(metadata, 0)[0]), 3)
    if version < 0:
        return []
    module = importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{version}.data")
    try:
        decoded, _ = entity_reader(module.ConsumerProtocolSubscription)(memoryview(metadata[2:]), 0)
    except Exception:   # noqa: BLE001 - not a consumer subscription: nothing to show
        return []
    return sorted({str(t) for t in decoded.topics})
