"""The records of ``__remote_log_metadata`` in Kafka's own schemas, framed as Kafka's ``RemoteLogMetadataSerde`` frames
them, and the partition of that topic each belongs to (Kafka's ``RemoteLogMetadataTopicPartitioner``).

Records (``storage/src/main/resources/message/*.json`` in Kafka, all version 0, flexible from version 0):

* apiKey 0 ``RemoteLogSegmentMetadataRecord``: a segment whose copy starts (:class:`RemoteSegment`, state
  ``COPY_SEGMENT_STARTED``): its id (topic name, topic id, partition, segment id), start and end offsets
  (inclusive), broker id, max timestamp, event timestamp, leader epochs (epoch -> start offset), size in bytes,
  custom metadata (nullable bytes) and state;
* apiKey 1 ``RemoteLogSegmentMetadataUpdateRecord`` (:class:`SegmentUpdate`): a later state of a segment;
* apiKey 2 ``RemotePartitionDeleteMetadataRecord`` (:class:`PartitionDelete`): the deletion of a partition's remote
  data.

Value bytes (Kafka's ``AbstractApiMessageSerde``): unsigned varint frame version (1), unsigned varint apiKey,
unsigned varint version (0), then the message in Kafka's flexible encoding: int8/int32/int64 big-endian, a uuid
as its 16 bytes (most significant half first), a string as unsigned varint (length + 1) and UTF-8 bytes, nullable
bytes as unsigned varint (length + 1, 0 for null) and the bytes, an array as unsigned varint (count + 1) and its
entries; every struct (the message, each nested struct and each array entry) ends with its tagged fields: an
unsigned varint count and, for each, tag, size and bytes (none are written; unknown ones are skipped when read).
The record key is null.

States are Kafka's ids: segment ``COPY_SEGMENT_STARTED=0, COPY_SEGMENT_FINISHED=1, DELETE_SEGMENT_STARTED=2,
DELETE_SEGMENT_FINISHED=3``; partition ``DELETE_PARTITION_MARKED=0, DELETE_PARTITION_STARTED=1,
DELETE_PARTITION_FINISHED=2``, with Kafka's allowed transitions (:func:`segment_transition_ok`,
:func:`partition_transition_ok`; a state to itself is allowed, for retries).
"""
from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Union

from storage_engine.errors import StorageError
from storage_engine.record.partitioner import murmur2

__all__ = ["RemoteSegment", "SegmentUpdate", "PartitionDelete", "MetadataRecord", "MetadataFormatError", "encode",
           "decode", "metadata_partition", "murmur2", "segment_transition_ok", "partition_transition_ok",
           "COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED",
           "DELETE_PARTITION_MARKED", "DELETE_PARTITION_STARTED", "DELETE_PARTITION_FINISHED"]

COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED = 0, 1, 2, 3
DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, DELETE_PARTITION_FINISHED = 0, 1, 2
SEGMENT_STATES = {COPY_SEGMENT_STARTED: "COPY_SEGMENT_STARTED", COPY_SEGMENT_FINISHED: "COPY_SEGMENT_FINISHED",
                  DELETE_SEGMENT_STARTED: "DELETE_SEGMENT_STARTED", DELETE_SEGMENT_FINISHED: "DELETE_SEGMENT_FINISHED"}
PARTITION_STATES = {DELETE_PARTITION_MARKED: "DELETE_PARTITION_MARKED",
                    DELETE_PARTITION_STARTED: "DELETE_PARTITION_STARTED",
                    DELETE_PARTITION_FINISHED: "DELETE_PARTITION_FINISHED"}
FRAME_VERSION = 1
SEGMENT_API_KEY, UPDATE_API_KEY, PARTITION_DELETE_API_KEY = 0, 1, 2
_NEXT_SEGMENT = {COPY_SEGMENT_STARTED: (COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED),
                 COPY_SEGMENT_FINISHED: (DELETE_SEGMENT_STARTED,), DELETE_SEGMENT_STARTED: (DELETE_SEGMENT_FINISHED,)}
_NEXT_PARTITION = {DELETE_PARTITION_MARKED: (DELETE_PARTITION_STARTED,),
                   DELETE_PARTITION_STARTED: (DELETE_PARTITION_FINISHED,)}


class MetadataFormatError(StorageError):
    """Bytes of ``__remote_log_metadata`` that are not a record this engine knows (what Kafka's serde refuses)."""


def segment_transition_ok(current: int | None, target: int) -> bool:
    """Kafka's ``RemoteLogSegmentState.isValidTransition`` (None: no state yet, only COPY_SEGMENT_STARTED)."""
    if current is None:
        return target == COPY_SEGMENT_STARTED
    return current == target or target in _NEXT_SEGMENT.get(current, ())


def partition_transition_ok(current: int | None, target: int) -> bool:
    """Kafka's ``RemotePartitionDeleteState.isValidTransition`` (None: only DELETE_PARTITION_MARKED)."""
    if current is None:
        return target == DELETE_PARTITION_MARKED
    return current == target or target in _NEXT_PARTITION.get(current, ())


@dataclass(frozen=True)
class RemoteSegment:
    """A remote segment as Kafka's ``RemoteLogSegmentMetadata`` describes it (and apiKey 0 carries it, with the
    state its copy starts in). ``end_offset`` is inclusive; ``segment_leader_epochs``: leader epoch -> the first
    offset of that epoch in the segment."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    broker_id: int
    segment_leader_epochs: Mapping[int, int] = field(hash=False)
    size_bytes: int
    state: int = COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None

    @property
    def offsets(self) -> tuple[int, int]:
        return self.start_offset, self.end_offset

    def updated(self, update: "SegmentUpdate") -> "RemoteSegment":
        """This segment in the state of ``update`` (Kafka's ``createWithUpdates``)."""
        return replace(self, state=update.state, event_timestamp_ms=update.event_timestamp_ms,
                       broker_id=update.broker_id, custom_metadata=update.custom_metadata)

    def update(self, state: int, event_timestamp_ms: int, broker_id: int | None = None) -> "SegmentUpdate":
        """The apiKey 1 record moving this segment to ``state``."""
        return SegmentUpdate(self.topic, self.topic_id, self.partition, self.segment_id,
                             self.broker_id if broker_id is None else broker_id, event_timestamp_ms, state)


@dataclass(frozen=True)
class SegmentUpdate:
    """apiKey 1: segment ``segment_id`` of the partition moves to ``state``."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    broker_id: int
    event_timestamp_ms: int
    state: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True)
class PartitionDelete:
    """apiKey 2: the remote data of the partition is being deleted (``state``: a DELETE_PARTITION_* id)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    broker_id: int
    event_timestamp_ms: int
    state: int


MetadataRecord = Union[RemoteSegment, SegmentUpdate, PartitionDelete]


# ---------------------------------------------------------------------------------------------------------------
# Writing

def _uvarint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _string(text: str, out: bytearray) -> None:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes is longer than Kafka's 32767")
    _uvarint(len(raw) + 1, out)
    out += raw


def _nullable_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        _uvarint(0, out)
    else:
        _uvarint(len(value) + 1, out)
        out += value


def _topic_id_partition(topic: str, topic_id: uuid.UUID, partition: int, out: bytearray) -> None:
    _string(topic, out)
    out += topic_id.bytes
    out += struct.pack(">i", partition)
    _uvarint(0, out)                 # the struct's tagged fields


def _segment_id(r: RemoteSegment | SegmentUpdate, out: bytearray) -> None:
    _topic_id_partition(r.topic, r.topic_id, r.partition, out)
    out += r.segment_id.bytes
    _uvarint(0, out)


def encode(record: MetadataRecord) -> bytes:
    """The value bytes of ``record`` as Kafka's ``RemoteLogMetadataSerde.serialize`` writes them."""
    out = bytearray()
    _uvarint(FRAME_VERSION, out)
    if isinstance(record, RemoteSegment):
        _uvarint(SEGMENT_API_KEY, out)
        _uvarint(0, out)
        _segment_id(record, out)
        out += struct.pack(">qqiqq", record.start_offset, record.end_offset, record.broker_id,
                           record.max_timestamp_ms, record.event_timestamp_ms)
        _uvarint(len(record.segment_leader_epochs) + 1, out)
        for epoch, offset in sorted(record.segment_leader_epochs.items()):
            out += struct.pack(">iq", epoch, offset)
            _uvarint(0, out)
        out += struct.pack(">i", record.size_bytes)
        _nullable_bytes(record.custom_metadata, out)
        out += struct.pack(">b", record.state)
    elif isinstance(record, SegmentUpdate):
        _uvarint(UPDATE_API_KEY, out)
        _uvarint(0, out)
        _segment_id(record, out)
        out += struct.pack(">iq", record.broker_id, record.event_timestamp_ms)
        _nullable_bytes(record.custom_metadata, out)
        out += struct.pack(">b", record.state)
    elif isinstance(record, PartitionDelete):
        _uvarint(PARTITION_DELETE_API_KEY, out)
        _uvarint(0, out)
        _topic_id_partition(record.topic, record.topic_id, record.partition, out)
        out += struct.pack(">iqb", record.broker_id, record.event_timestamp_ms, record.state)
    else:
        raise TypeError(f"not a remote log metadata record: {record!r}")
    _uvarint(0, out)                 # the message's tagged fields
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------
# Reading

class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MetadataFormatError(f"truncated record: {what} needs {n} bytes at byte {self.pos}, "
                                      f"{len(self.data) - self.pos} left")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while True:
            byte = self.take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MetadataFormatError(f"{what}: unsigned varint longer than 5 bytes at byte {self.pos}")

    def fixed(self, fmt: str, what: str) -> int:
        return int(struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0])

    def string(self, what: str) -> str:
        n = self.uvarint(what) - 1
        if n < 0:
            raise MetadataFormatError(f"{what} is null where Kafka's schema has a non-null string")
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetadataFormatError(f"{what} is not UTF-8: {exc}") from None

    def nullable_bytes(self, what: str) -> bytes | None:
        n = self.uvarint(what) - 1
        return None if n < 0 else self.take(n, what)

    def uuid(self, what: str) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16, what))

    def tagged_fields(self, what: str) -> None:
        for _ in range(self.uvarint(f"{what} tagged field count")):
            self.uvarint(f"{what} tag")
            self.take(self.uvarint(f"{what} tagged field size"), f"{what} tagged field")


def _read_topic_id_partition(r: _Reader) -> tuple[str, uuid.UUID, int]:
    name, topic_id, partition = r.string("topic name"), r.uuid("topic id"), r.fixed(">i", "partition")
    r.tagged_fields("TopicIdPartition")
    return name, topic_id, partition


def decode(data: bytes) -> MetadataRecord:
    """The record in value bytes written by Kafka's ``RemoteLogMetadataSerde`` (or :func:`encode`);
    :class:`MetadataFormatError` for anything else (an unknown frame version, apiKey or version, damage, bytes left
    over)."""
    r = _Reader(data)
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise MetadataFormatError(f"unknown frame version {frame} (only {FRAME_VERSION} is known)")
    api_key, version = r.uvarint("apiKey"), r.uvarint("version")
    if api_key not in (SEGMENT_API_KEY, UPDATE_API_KEY, PARTITION_DELETE_API_KEY):
        raise MetadataFormatError(f"unknown record type (apiKey {api_key})")
    if version != 0:
        raise MetadataFormatError(f"unknown version {version} of apiKey {api_key} (only 0 is known)")
    record: MetadataRecord
    if api_key == PARTITION_DELETE_API_KEY:
        topic, topic_id, partition = _read_topic_id_partition(r)
        record = PartitionDelete(topic, topic_id, partition, r.fixed(">i", "broker id"),
                                 r.fixed(">q", "event timestamp"), r.fixed(">b", "state"))
        if record.state not in PARTITION_STATES:
            raise MetadataFormatError(f"unknown partition delete state {record.state}")
    else:
        topic, topic_id, partition = _read_topic_id_partition(r)
        segment_id = r.uuid("segment id")
        r.tagged_fields("RemoteLogSegmentId")
        if api_key == SEGMENT_API_KEY:
            start, end, broker = r.fixed(">q", "start offset"), r.fixed(">q", "end offset"), r.fixed(">i", "broker id")
            max_ts, event_ts = r.fixed(">q", "max timestamp"), r.fixed(">q", "event timestamp")
            count = r.uvarint("leader epoch count") - 1
            if count < 0:
                raise MetadataFormatError("the leader epochs are null where Kafka's schema has an array")
            epochs = {}
            for _ in range(count):
                epoch = r.fixed(">i", "leader epoch")
                epochs[epoch] = r.fixed(">q", "leader epoch offset")
                r.tagged_fields("SegmentLeaderEpoch")
            record = RemoteSegment(topic, topic_id, partition, segment_id, start, end, max_ts, event_ts, broker,
                                   epochs, r.fixed(">i", "segment size"),
                                   custom_metadata=r.nullable_bytes("custom metadata"), state=r.fixed(">b", "state"))
        else:
            record = SegmentUpdate(topic, topic_id, partition, segment_id, r.fixed(">i", "broker id"),
                                   r.fixed(">q", "event timestamp"),
                                   custom_metadata=r.nullable_bytes("custom metadata"), state=r.fixed(">b", "state"))
        if record.state not in SEGMENT_STATES:
            raise MetadataFormatError(f"unknown segment state {record.state}")
    r.tagged_fields("message")
    if r.pos != len(data):
        raise MetadataFormatError(f"{len(data) - r.pos} byte(s) of garbage after the record (apiKey {api_key})")
    return record


# ---------------------------------------------------------------------------------------------------------------
# Partitioning

_M32 = 0xFFFFFFFF


def _java_int(value: int) -> int:
    value &= _M32
    return value - (1 << 32) if value & 0x80000000 else value


def _long_hash(value: int) -> int:
    """Java's ``Long.hashCode``: (int)(value ^ (value >>> 32)) of a signed 64-bit value."""
    unsigned = value & 0xFFFFFFFFFFFFFFFF
    return _java_int(unsigned ^ (unsigned >> 32))


def metadata_partition(topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """The partition of ``__remote_log_metadata`` holding the records of ``(topic_id, partition)``: Kafka's
    ``RemoteLogMetadataTopicPartitioner`` (``Objects.hash(lsb, msb, partition)`` as 4 big-endian bytes, murmur2,
    ``toPositive``, modulo the partition count)."""
    msb, lsb = topic_id.int >> 64, topic_id.int & 0xFFFFFFFFFFFFFFFF
    h = 1
    for element in (_long_hash(lsb), _long_hash(msb), _java_int(partition)):
        h = _java_int(31 * h + element)
    return (murmur2((h & _M32).to_bytes(4, "big")) & 0x7FFFFFFF) % num_partitions
