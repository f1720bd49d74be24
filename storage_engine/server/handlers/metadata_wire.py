"""Metadata responses encoded here, not by kio: Kafka's ``MetadataResponse`` schema, versions 0-12, written
straight from the handler's values.

kio builds a dataclass per partition and writes each field through Python calls, about 20 us a partition: a
Metadata for 10,000 partitions took hundreds of milliseconds. On one broker every partition entry is the same
bytes but for its index, so a topic's partition array is encoded once per (version, node, partition ids) and kept
(:func:`partitions_bytes`); answering is then a few ``struct`` packs per topic. The layout, field by field
(``MetadataResponse.json``): throttle time (v3+); brokers: node id, host, port, rack (v1+, nullable); cluster id
(v2+, nullable); controller id (v1+); topics: error code, name (nullable v12+), topic id (v10+), is internal (v1+),
partitions: error code, index, leader, leader epoch (v7+), replicas, ISR, offline replicas (v5+); topic authorized
operations (v8+); cluster authorized operations (v8-10). From v9 (flexible versions) strings and arrays carry
unsigned-varint lengths plus one and every struct ends with its (empty) tagged fields. The tests compare these bytes
with kio's for every version.
"""
from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

from storage_engine.server.protocol import Encoded
from storage_engine.server.responses.metadata import MetadataResponse, MetadataResponseTopic
from storage_engine.server.handlers.wire_encoding import count as _count, string as _string

FIRST_FLEXIBLE = 9
NO_TAGS = b"\x00"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ZERO_UUID = bytes(16)


def _ints(values: Sequence[int], flexible: bool) -> bytes:
    return _count(len(values), flexible) + b"".join(_I32.pack(v) for v in values)


@functools.lru_cache(maxsize=65536)
def partitions_bytes(version: int, node: int, partitions: tuple[int, ...], leader_epoch: int) -> bytes:
    """The partition array of a topic whose partitions ``partitions`` all have this node as leader, only replica
    and ISR, no error. Cached: every topic of a given partition count shares one entry."""
    flexible = version >= FIRST_FLEXIBLE
    nodes = _ints((node,), flexible)
    tail = nodes + nodes + (_ints((), flexible) if version >= 5 else b"") + (NO_TAGS if flexible else b"")
    head_leader = _I32.pack(node) + (_I32.pack(leader_epoch) if version >= 7 else b"")
    out = [_count(len(partitions), flexible)]
    for p in partitions:
        out.append(b"\x00\x00" + _I32.pack(p) + head_leader + tail)
    return b"".join(out)


def _topic(version: int, node: int, topic: MetadataResponseTopic, epoch: int, ids: tuple[int, ...] | None) -> bytes:
    flexible = version >= FIRST_FLEXIBLE
    out = [_I16.pack(int(topic["error_code"])), _string(topic["name"], flexible)]
    if version >= 10:
        topic_id = topic.get("topic_id")
        out.append(_ZERO_UUID if topic_id is None else topic_id.bytes)
    if version >= 1:
        out.append(b"\x01" if topic.get("is_internal", False) else b"\x00")
    if ids is not None:
        out.append(partitions_bytes(version, node, ids, epoch))
    else:
        parts = topic["partitions"]
        out.append(_count(len(parts), flexible))
        for part in parts:
            out.append(_I16.pack(int(part["error_code"])) + _I32.pack(part["partition_index"]) +
                       _I32.pack(part["leader_id"]))
            if version >= 7:
                out.append(_I32.pack(part.get("leader_epoch", -1)))
            out.append(_ints(part.get("replica_nodes", ()), flexible) + _ints(part.get("isr_nodes", ()), flexible))
            if version >= 5:
                out.append(_ints(part.get("offline_replicas", ()), flexible))
            if flexible:
                out.append(NO_TAGS)
    if version >= 8:
        out.append(_I32.pack(topic.get("topic_authorized_operations", -2147483648)))
    if flexible:
        out.append(NO_TAGS)
    return b"".join(out)


def encode(version: int, response: MetadataResponse, node: int = -1, leader_epoch: int = 0,
           shared: Sequence[tuple[int, ...] | None] = ()) -> Encoded:
    """The body of ``response`` for ``version``. ``shared[i]``, when given and not None, says topic ``i``'s
    partitions are the plain ones of :func:`partitions_bytes` with these ids (led by ``node`` at
    ``leader_epoch``), so their cached bytes are used instead of the dicts."""
    if not 0 <= version <= 12:
        raise ValueError(f"Metadata v{version} is not encoded here (v0-12)")
    flexible = version >= FIRST_FLEXIBLE
    out = []
    if version >= 3:
        out.append(_I32.pack(response.get("throttle_time", 0)))
    brokers = response["brokers"]
    out.append(_count(len(brokers), flexible))
    for b in brokers:
        out.append(_I32.pack(b["node_id"]) + _string(b["host"], flexible) + _I32.pack(b["port"]))
        if version >= 1:
            out.append(_string(b.get("rack"), flexible))
        if flexible:
            out.append(NO_TAGS)
    if version >= 2:
        out.append(_string(response.get("cluster_id"), flexible))
    if version >= 1:
        out.append(_I32.pack(response.get("controller_id", -1)))
    topics = response["topics"]
    out.append(_count(len(topics), flexible))
    for i, topic in enumerate(topics):
        out.append(_topic(version, node, topic, leader_epoch, shared[i] if i < len(shared) else None))
    if 8 <= version <= 10:
        out.append(_I32.pack(response.get("cluster_authorized_operations", -2147483648)))
    if flexible:
        out.append(NO_TAGS)
    return Encoded(b"".join(out), 1 if flexible else 0)
