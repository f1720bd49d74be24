"""Fetch responses encoded here, not by kio: Kafka's ``FetchResponse`` schema, versions 4-16, written straight from
the handler's values into one buffer, the records of each partition kept as they are (a
:class:`~storage_engine.segment.file_slice.FileSlice` goes out as a part of its own, sent from its file; large bytes,
from the remote tier, are not copied either).

Going through kio cost a dataclass per topic and partition (:func:`storage_engine.server.protocol.build`, then
kio's writer field by field): ~130 us for a one-partition fetch, the largest part of the broker's own CPU per fetch
after the kernel's copy. The layout, field by field (``FetchResponse.json``): throttle time; error code and session
id (v7+); topics: name (v4-12) or topic id (v13+); partitions: index, error code, high watermark, last stable
offset, log start offset (v5+), aborted transactions (nullable: producer id, first offset), preferred read replica
(v11+), records (nullable). From v12 (flexible versions) strings, arrays and bytes carry unsigned-varint lengths
plus one and every struct ends with its tagged fields: the partition's diverging epoch (0), current leader (1) and
snapshot id (2), and the response's node endpoints (0, v16), each written only when it differs from the schema's
default, as Kafka's generated writers (and kio) do. The tests compare these bytes with kio's for every version.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from storage_engine.segment.file_slice import FileSlice
from storage_engine.server.protocol import Encoded
from storage_engine.server.responses.fetch import FetchResponse, PartitionData
from storage_engine.server.handlers.wire_encoding import count as _count, string as _string, uvarint as _uvarint

MIN_VERSION, MAX_VERSION = 4, 16
FIRST_FLEXIBLE = 12
LARGE = 32 * 1024            # records of at least this many bytes are a part of their own, not copied
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_II = struct.Struct(">ih")                 # throttle time, error code (v7+)
_IHI = struct.Struct(">ihi")               # throttle time, error code, session id
_PART = struct.Struct(">ihqq")             # index, error code, high watermark, last stable offset
_PART5 = struct.Struct(">ihqqq")           # ... and log start offset (v5+)
_ABORTED = struct.Struct(">qq")
_ZERO_UUID = bytes(16)
NO_TAGS = b"\x00"

# Kafka's defaults of the partition's tagged fields (written only when the value differs)
_DIVERGING = (("epoch", -1), ("end_offset", -1))
_LEADER = (("leader_id", -1), ("leader_epoch", -1))
_SNAPSHOT = (("end_offset", -1), ("epoch", -1))


class _Out:
    """The body: bytes gathered into one buffer, records that must not be copied kept as parts between."""

    __slots__ = ("buf", "parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[bytes | bytearray | memoryview | FileSlice] = []

    def records(self, data: bytes | bytearray | memoryview | FileSlice) -> None:
        if isinstance(data, FileSlice) or len(data) >= LARGE:
            self.parts.append(self.buf)
            self.parts.append(data)
            self.buf = bytearray()
        else:
            self.buf += data

    def encoded(self, flexible: bool) -> Encoded:
        if not self.parts:
            return Encoded(self.buf, 1 if flexible else 0)
        head, rest = self.parts[0], self.parts[1:]
        assert isinstance(head, bytearray)
        tail = tuple(p for p in (*rest, self.buf) if isinstance(p, FileSlice) or len(p))
        return Encoded(head, 1 if flexible else 0, tail)


def _tag_struct(value: Any, fields: tuple[tuple[str, int], ...], int_kinds: str) -> bytes | None:
    """A tagged struct's bytes (its fields, then its empty tags), or None when every field has its default."""
    if value is None:
        return None
    got = [int(value.get(name, default)) for name, default in fields]
    if all(v == d for v, (_, d) in zip(got, fields)):
        return None
    return struct.pack(">" + int_kinds, *got) + NO_TAGS


def _partition_tags(out: bytearray, part: PartitionData) -> None:
    if "diverging_epoch" not in part and "current_leader" not in part and "snapshot_id" not in part:
        out += NO_TAGS              # a local read's entry: none of the three (the usual case)
        return
    tags: list[tuple[int, bytes]] = []
    for tag, key, fields, kinds in ((0, "diverging_epoch", _DIVERGING, "iq"), (1, "current_leader", _LEADER, "ii"),
                                    (2, "snapshot_id", _SNAPSHOT, "qi")):
        raw = _tag_struct(part.get(key), fields, kinds)
        if raw is not None:
            tags.append((tag, raw))
    out += _uvarint(len(tags))
    for tag, raw in tags:
        out += _uvarint(tag) + _uvarint(len(raw)) + raw


def _node_endpoints(endpoints: Sequence[Any]) -> bytes:
    out = bytearray(_uvarint(len(endpoints) + 1))
    for e in endpoints:
        out += _I32.pack(e["node_id"]) + _string(e["host"], True) + _I32.pack(e["port"])
        rack = e.get("rack")
        out += b"\x00" if rack is None else _string(rack, True)
        out += NO_TAGS
    return bytes(out)


def encode(version: int, response: FetchResponse) -> Encoded:
    """The body of ``response`` for Fetch ``version`` (4-16), records kept as parts (see the module)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here (v{MIN_VERSION}-{MAX_VERSION})")
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= 13
    out = _Out()
    buf = out.buf
    if version >= 7:
        buf += _IHI.pack(response["throttle_time"], int(response.get("error_code", 0)), response.get("session_id", 0))
    else:
        buf += _I32.pack(response["throttle_time"])
    topics = response["responses"]
    buf += _count(len(topics), flexible)
    for topic in topics:
        if by_id:
            topic_id = topic.get("topic_id")
            buf += _ZERO_UUID if topic_id is None else topic_id.bytes
        else:
            buf += _string(topic.get("topic", ""), flexible)
        parts = topic["partitions"]
        buf += _count(len(parts), flexible)
        for part in parts:
            if version >= 5:
                buf += _PART5.pack(part["partition_index"], int(part["error_code"]), part["high_watermark"],
                                   part.get("last_stable_offset", -1), part.get("log_start_offset", -1))
            else:
                buf += _PART.pack(part["partition_index"], int(part["error_code"]), part["high_watermark"],
                                  part.get("last_stable_offset", -1))
            aborted = part["aborted_transactions"]
            if aborted is None:
                buf += _count(-1, flexible)
            else:
                buf += _count(len(aborted), flexible)
                for a in aborted:
                    buf += _ABORTED.pack(a["producer_id"], a["first_offset"])
                    if flexible:
                        buf += NO_TAGS
            if version >= 11:
                buf += _I32.pack(part.get("preferred_read_replica", -1))
            records = part["records"]
            if records is None:
                buf += _count(-1, flexible)
            else:
                buf += _count(len(records), flexible)
                if len(records):
                    out.records(records)
                    buf = out.buf
            if flexible:
                _partition_tags(buf, part)
        if flexible:
            buf += NO_TAGS
    if flexible:
        endpoints = response.get("node_endpoints", ()) if version >= 16 else ()
        if endpoints:
            raw = _node_endpoints(endpoints)
            buf += b"\x01\x00" + _uvarint(len(raw)) + raw
        else:
            buf += NO_TAGS
    return out.encoded(flexible)
