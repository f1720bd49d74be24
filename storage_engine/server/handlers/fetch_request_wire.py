"""Fetch requests decoded here, not by kio: Kafka's ``FetchRequest`` schema, versions 4-16 (every version this
broker serves), read from the frame directly.

Why: a consumer sends one Fetch per response it gets, so a steady consumer's fetches are decoded as often as they
are answered. kio's reader (after :func:`~storage_engine.server.protocol.check_lengths`, the walk over the frame
that refuses a length running past it) builds a frozen dataclass per topic and partition through one generic
reader per field: about 20 us of the event loop's time per fetch of one partition. Here a request is a few
``struct`` reads, every length checked as it is read.

Request layout (``FetchRequest.json``), after the request header (v1: api key, version, correlation id, client id;
v2 from Fetch v12 adds the header's tagged fields): replica id (int32, until v14), max wait (int32 ms), min bytes
(int32), max bytes (int32), isolation level (int8), session id and session epoch (int32 each, v7+), topics: topic
name (string, until v12) or topic id (uuid, v13+), partitions: partition (int32), current leader epoch (int32,
v9+), fetch offset (int64), last fetched epoch (int32, v12+), log start offset (int64, v5+), partition max bytes
(int32); forgotten topics (v7+): topic name or id, partitions (int32 array); rack id (string, v11+). From v12
(flexible versions) strings and arrays carry unsigned-varint lengths plus one and every struct ends with its tagged
fields: the request's tag 0 is the cluster id (nullable string, v12+), its tag 1 the replica state (v15+: replica
id int32, replica epoch int64, its own tagged fields); any other tag is skipped, as Kafka's generated readers skip
unknown tags (kio refuses them). A length that runs past the frame, a negative length where the schema has no
null, a string that is not UTF-8 or a known tagged field that does not fit in its own size is a
:class:`~storage_engine.server.protocol.MalformedRequest`, as kio's reader refuses it; bytes after the body are
ignored.

The decoded request (:class:`FetchRequest`) carries the fields of every version, with Kafka's defaults for those
a version lacks (session id 0 and epoch -1 before v7, leader epochs -1 before v9 and v12, ...): a topic's name
until v12 (its id None) and its id from v13 (its name None; the all-zero id reads as None, as kio reads it); the
replica id is always ``replica_state.replica_id`` (a field of the request until v14). The tests compare every field
with kio's reading of the same bytes, for every version.
"""
from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from storage_engine.server import protocol
from storage_engine.server.handlers.produce_wire import _Reader
from storage_engine.server.protocol import MalformedRequest, Request

API_KEY = 1
MIN_VERSION, MAX_VERSION = 4, 16
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
FIRST_REPLICA_STATE = 15
_HEADER = struct.Struct(">hhi")          # api key, api version, correlation id
_I32 = struct.Struct(">i")
_LIMITS = struct.Struct(">iiib")         # max wait, min bytes, max bytes, isolation level
_SESSION = struct.Struct(">ii")          # session id, session epoch
_I64 = struct.Struct(">q")
_UUID = struct.Struct(">16s")
_REPLICA_STATE = struct.Struct(">iq")    # replica id, replica epoch
_ZERO_UUID = bytes(16)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int = -1
    replica_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchPartition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchTopic:
    topic: str | None               # until v12
    topic_id: uuid.UUID | None      # from v13
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """What a Fetch request holds (kio's ``FetchRequest`` fields of the same names, every version's)."""
    replica_state: ReplicaState
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    rack_id: str
    cluster_id: str | None


_NO_REPLICA = ReplicaState()


class _FetchReader(_Reader):
    __slots__ = ()

    def bad(self, what: str) -> MalformedRequest:
        return MalformedRequest(f"Fetch: {what} at byte {self.pos} of a {len(self.buf)}-byte request")

    def topic(self, by_id: bool) -> tuple[str | None, uuid.UUID | None]:
        if not by_id:
            return self.string(False), None
        raw = self.fixed(_UUID)[0]
        return None, (None if raw == _ZERO_UUID else uuid.UUID(bytes=raw))

    def request_tags(self, replica: ReplicaState, cluster_id: str | None,
                     version: int) -> tuple[ReplicaState, str | None]:
        """The request's tagged fields: the known ones read within their own size, the others skipped."""
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            if size > self.end - self.pos:
                raise self.bad(f"a tagged field of {size} bytes with {self.end - self.pos} left")
            if tag == 0:
                cluster_id = self._within(size, lambda: self.string(True))
            elif tag == 1 and version >= FIRST_REPLICA_STATE:
                def state() -> ReplicaState:
                    replica_id, epoch = self.fixed(_REPLICA_STATE)
                    self.tags()
                    return ReplicaState(replica_id, epoch)
                replica = self._within(size, state)
            else:
                self.pos += size
        return replica, cluster_id

    def _within(self, size: int, read: Callable[[], _T]) -> _T:
        """``read()`` over the next ``size`` bytes only; the reader then stands after them."""
        end, self.end = self.end, self.pos + size
        after = self.end
        try:
            value = read()
        finally:
            self.end = end
        self.pos = after
        return value


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """The Fetch request in ``frame`` (without its size prefix), of a version in [4, 16] (the caller checked the
    key and version)."""
    buf = memoryview(frame)
    if buf.ndim != 1 or buf.format not in ("B", "b", "c"):
        buf = buf.cast("B")
    key, version, correlation_id = _HEADER.unpack_from(buf, 0) if len(buf) >= 8 else (0, 0, 0)
    if key != API_KEY or not MIN_VERSION <= version <= MAX_VERSION:
        raise MalformedRequest(f"not a Fetch request of a version in [{MIN_VERSION}, {MAX_VERSION}]: "
                               f"key {key} version {version}")
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    r = _FetchReader(buf, 8, False)
    client_id = r.string(True) or ""            # the header's client id is a classic string in every version
    r.flexible = flexible
    r.tags()
    replica = _NO_REPLICA
    if version < FIRST_REPLICA_STATE:
        replica_id = r.fixed(_I32)[0]
        if replica_id != -1:
            replica = ReplicaState(replica_id, -1)
    max_wait, min_bytes, max_bytes, isolation = r.fixed(_LIMITS)
    session_id, session_epoch = r.fixed(_SESSION) if version >= 7 else (0, -1)
    topics = []
    for _ in range(r.count()):
        name, topic_id = r.topic(by_id)
        parts = []
        for _ in range(r.count()):
            partition = r.fixed(_I32)[0]
            leader_epoch = r.fixed(_I32)[0] if version >= 9 else -1
            fetch_offset = r.fixed(_I64)[0]
            last_fetched = r.fixed(_I32)[0] if version >= 12 else -1
            log_start = r.fixed(_I64)[0] if version >= 5 else -1
            parts.append(FetchPartition(partition, leader_epoch, fetch_offset, last_fetched, log_start,
                                        r.fixed(_I32)[0]))
            r.tags()
        topics.append(FetchTopic(name, topic_id, tuple(parts)))
        r.tags()
    forgotten = []
    if version >= 7:
        for _ in range(r.count()):
            name, topic_id = r.topic(by_id)
            indexes = tuple(r.fixed(_I32)[0] for _ in range(r.count()))
            forgotten.append(ForgottenTopic(name, topic_id, indexes))
            r.tags()
    rack_id = (r.string(False) or "") if version >= 11 else ""
    cluster_id = None
    if flexible:
        replica, cluster_id = r.request_tags(replica, cluster_id, version)
    body = FetchRequest(replica, datetime.timedelta(milliseconds=max_wait), min_bytes, max_bytes, isolation,
                        session_id, session_epoch, tuple(topics), tuple(forgotten), rack_id, cluster_id)
    return Request(API_KEY, version, correlation_id, client_id, body, len(buf))


protocol.DIRECT_DECODERS[API_KEY] = decode_request
