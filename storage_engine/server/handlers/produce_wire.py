"""Produce requests decoded and Produce responses encoded here, not by kio: Kafka's ``ProduceRequest`` and
``ProduceResponse`` schemas, versions 3-11, read from and written to the wire directly.

Why: a producer at a steady rate sends one request per linger interval, each holding one large batch. kio's reader
copies the batch out of the frame and builds a dataclass per topic and partition; kio's writer builds the response
through :func:`storage_engine.server.protocol.build` (dataclasses, conversions, one Python call per field): together
about 150 us and a few hundred objects per request, on the event loop, before and after every append. Here a
request is a few ``struct`` reads and its records stay a writable ``memoryview`` of the frame (the engine assigns
their offsets in the frame and writes them from there: ``Log.append_batches(in_place=True)``); a response is a few
``struct`` packs.

Request layout (``ProduceRequest.json``), after the request header (v1: api key, version, correlation id, client id;
v2 from Produce v9 adds the header's tagged fields): transactional id (nullable string), acks (int16), timeout
(int32 ms), topics: name, partitions: index (int32), records (nullable bytes). From v9 (flexible versions) strings,
arrays and bytes carry unsigned-varint lengths plus one and every struct ends with its tagged fields (none are
defined for Produce; unknown ones are skipped, as Kafka's readers skip them, where kio refused them). A length that runs past the frame, a
negative length that is not the null of a nullable field, or a null where the schema has none is a
:class:`~storage_engine.server.protocol.MalformedRequest`, as kio's reader (after
:func:`~storage_engine.server.protocol.check_lengths`) refuses it; bytes after the body are ignored.

Response layout: topics: name, partitions: index, error code, base offset, log append time, log start offset
(v5+), record errors (v8+: batch index, nullable message) and error message (v8+, nullable); throttle time. The
tagged fields of v10+ (a partition's ``current_leader``, the response's ``node_endpoints``) are never set by this
broker (it is every partition's leader): a response carrying one is left to kio, and so is one with a key this
encoder does not know or without a required one (kio's ``build`` names it). The tests compare these bytes and
decoded values with kio's for every version.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage_engine.server import protocol
from storage_engine.server.protocol import Encoded, MalformedRequest, Request
from storage_engine.server.handlers.wire_encoding import count as _count, string as _string

FIRST_FLEXIBLE = 9
MIN_VERSION, MAX_VERSION = 3, 11
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")          # api key, api version, correlation id
_PARTITION = struct.Struct(">ihqq")      # index, error code, base offset, log append time
_I64 = struct.Struct(">q")
_ACKS_TIMEOUT = struct.Struct(">hi")


# -- the request --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PartitionData:
    index: int
    records: memoryview | None       # a view of the request frame: valid while the frame is


@dataclass(frozen=True, slots=True)
class TopicData:
    name: str
    partition_data: tuple[PartitionData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """What the Produce handler reads of a request (kio's ``ProduceRequest`` fields of the same names); ``timeout``
    in milliseconds."""
    transactional_id: str | None
    acks: int
    timeout: int
    topic_data: tuple[TopicData, ...]


class _Reader:
    """Reads the fields of one frame in order; every length is checked against the bytes left."""

    __slots__ = ("buf", "pos", "end", "flexible")

    def __init__(self, buf: memoryview, pos: int, flexible: bool) -> None:
        self.buf, self.pos, self.end, self.flexible = buf, pos, len(buf), flexible

    def bad(self, what: str) -> MalformedRequest:
        return MalformedRequest(f"Produce: {what} at byte {self.pos} of a {self.end}-byte request")

    def fixed(self, s: struct.Struct) -> tuple[Any, ...]:
        if self.pos + s.size > self.end:
            raise self.bad(f"{s.size} bytes of fixed fields past the end")
        out = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return out

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= self.end:
                raise self.bad("an unsigned varint past the end")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise self.bad("an unsigned varint longer than 5 bytes")

    def length(self, what: str, nullable: bool) -> int:
        """A string/bytes/array length; -1 for null."""
        if self.flexible:
            n = self.uvarint() - 1
        else:
            n = (self.fixed(_I32)[0] if what in ("bytes", "array") else self.fixed(_I16)[0])
        if n < -1 or (n == -1 and not nullable):
            raise self.bad(f"a {what} of length {n} where the schema allows no null")
        return n

    def take(self, n: int, what: str) -> memoryview:
        if n > self.end - self.pos:
            raise self.bad(f"a {what} of {n} bytes with {self.end - self.pos} left")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self, nullable: bool) -> str | None:
        n = self.length("string", nullable)
        if n < 0:
            return None
        raw = self.take(n, "string")
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise self.bad("a string that is not UTF-8") from None

    def count(self) -> int:
        """An array's element count; each element takes at least one byte, so a count beyond the bytes left is
        refused before anything is built for it."""
        n = self.length("array", False)
        if n > self.end - self.pos:
            raise self.bad(f"an array of {n} elements with {self.end - self.pos} bytes left")
        return n

    def tags(self) -> None:
        """Skip a struct's tagged fields (flexible versions only)."""
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()                       # the tag
            self.take(self.uvarint(), "tagged field")


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """The Produce request in ``frame`` (without its size prefix), of a version in [3, 11] (the caller checked the
    key and version); its records are views of ``frame``."""
    buf = memoryview(frame)
    if buf.ndim != 1 or buf.format not in ("B", "b", "c"):
        buf = buf.cast("B")
    key, version, correlation_id = _HEADER.unpack_from(buf, 0) if len(buf) >= 8 else (0, 0, 0)
    if key != 0 or not MIN_VERSION <= version <= MAX_VERSION:
        raise MalformedRequest(f"not a Produce request of a version in [{MIN_VERSION}, {MAX_VERSION}]: "
                               f"key {key} version {version}")
    flexible = version >= FIRST_FLEXIBLE
    r = _Reader(buf, 8, False)
    client_id = r.string(True) or ""            # the header's client id is a classic string in every version
    r.flexible = flexible
    r.tags()
    transactional_id = r.string(True)
    acks, timeout = r.fixed(_ACKS_TIMEOUT)
    topics = []
    for _ in range(r.count()):
        name = r.string(False)
        assert name is not None
        parts = []
        for _ in range(r.count()):
            index = r.fixed(_I32)[0]
            n = r.length("bytes", True)
            parts.append(PartitionData(index, None if n < 0 else r.take(n, "records")))
            r.tags()
        topics.append(TopicData(name, tuple(parts)))
        r.tags()
    r.tags()
    body = ProduceRequest(transactional_id, acks, timeout, tuple(topics))
    return Request(0, version, correlation_id, client_id, body, len(buf))


protocol.DIRECT_DECODERS[0] = decode_request


# -- the response -------------------------------------------------------------------------------------------------

def _time(value: Any) -> int:
    """A log append time as the handler gives it (ms, or None / a negative for none): -1 for none."""
    return -1 if value is None or int(value) < 0 else int(value)


_RESPONSE_KEYS = frozenset({"responses", "throttle_time", "node_endpoints"})
_TOPIC_KEYS = frozenset({"name", "partition_responses"})
_PARTITION_KEYS = frozenset({"index", "error_code", "base_offset", "log_append_time", "log_start_offset",
                             "record_errors", "error_message"})
_PARTITION_REQUIRED = frozenset({"index", "error_code", "base_offset"})


def encodable(response: Mapping[str, Any]) -> bool:
    """False when ``response`` sets a tagged field, or has a key this encoder does not know or lacks a required
    one: left to kio, whose :func:`~storage_engine.server.protocol.build` names a wrong key (``BuildError``), so a
    handler's mistake can never go out as a success here either."""
    if response.get("node_endpoints") or not response.keys() <= _RESPONSE_KEYS:
        return False
    for t in response["responses"]:
        if t.keys() != _TOPIC_KEYS:
            return False
        for p in t["partition_responses"]:
            keys = p.keys()
            if not (_PARTITION_REQUIRED <= keys <= _PARTITION_KEYS):
                return False
    return True


def encode_response(version: int, response: Mapping[str, Any]) -> Encoded:
    """The body of a ProduceResponse of ``version`` for the handler's values (``encodable(response)``)."""
    flexible = version >= FIRST_FLEXIBLE
    tags = b"\x00" if flexible else b""
    out: list[bytes] = [_count(len(response["responses"]), flexible)]
    for topic in response["responses"]:
        parts: Sequence[Mapping[str, Any]] = topic["partition_responses"]
        out += (_string(topic["name"], flexible), _count(len(parts), flexible))
        for p in parts:
            out.append(_PARTITION.pack(p["index"], p["error_code"], p["base_offset"], _time(p.get("log_append_time"))))
            if version >= 5:
                out.append(_I64.pack(p.get("log_start_offset", -1)))
            if version >= 8:
                errors = p.get("record_errors", ())
                out.append(_count(len(errors), flexible))
                for e in errors:
                    out += (_I32.pack(e["batch_index"]), _string(e.get("batch_index_error_message"), flexible), tags)
                out.append(_string(p.get("error_message"), flexible))
            out.append(tags)
        out.append(tags)
    out += (_I32.pack(response.get("throttle_time", 0)), tags)
    return Encoded(b"".join(out), 1 if flexible else 0)
