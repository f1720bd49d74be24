"""Metadata responses encoded by :mod:`storage_engine.server.handlers.metadata_wire` are byte for byte what kio
(generated from Kafka's ``MetadataResponse.json``) writes for the same values, in every version 0-12, with and
without the cached partition arrays."""
from __future__ import annotations

import uuid
from typing import Any

import pytest

from storage_engine.server import protocol
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers import metadata_wire
from storage_engine.server.handlers.metadata import partition_entry

pytestmark = pytest.mark.unit

TOPIC_ID = uuid.UUID(int=(34 << 64) | 98)


def _response(version: int, node: int) -> tuple[Any, list]:
    plain = (0, 1, 2, 7, 300)
    topics = [
        {"error_code": ErrorCode.none, "name": "orders", "topic_id": TOPIC_ID, "is_internal": False,
         "partitions": tuple(partition_entry(node, p) for p in plain), "topic_authorized_operations": 0x5f8},
        {"error_code": ErrorCode.none, "name": "__consumer_offsets", "topic_id": uuid.uuid4(), "is_internal": True,
         "partitions": (partition_entry(node, 0),)},
        {"error_code": ErrorCode.topic_authorization_failed, "name": "secret", "topic_id": uuid.UUID(int=0),
         "is_internal": False, "partitions": ()},
        # an entry written field by field (not the cached shape): an error, other nodes, offline replicas
        {"error_code": ErrorCode.none, "name": "odd-ünïcode", "topic_id": uuid.uuid4(), "is_internal": False,
         "partitions": ({"error_code": ErrorCode.leader_not_available, "partition_index": 3, "leader_id": -1,
                         "leader_epoch": 4, "replica_nodes": (1, 2), "isr_nodes": (2,), "offline_replicas": (1,)},)},
    ]
    shared: list = [plain, (0,), None, None]
    if version >= 12:
        topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": TOPIC_ID,
                       "is_internal": False, "partitions": ()})
        shared.append(None)
    response = {"throttle_time": 0, "cluster_id": "cluster-Ä" if version != 5 else None, "controller_id": node,
                "brokers": ({"node_id": node, "host": "127.0.0.1", "port": 9092, "rack": None},
                            {"node_id": 7, "host": "other", "port": 1, "rack": "r1"}),
                "topics": tuple(topics), "cluster_authorized_operations": 0x1234 if version == 9 else -2147483648}
    return response, shared


@pytest.mark.parametrize("version", range(13))
@pytest.mark.parametrize("use_cache", [True, False])
def test_every_version_is_kios_bytes(version, use_cache):
    node = 3
    response, shared = _response(version, node)
    request = protocol.Request(3, version, 1234567, "client", None, 0)
    kio = protocol.encode_response(request, protocol.build(protocol.response_class(3, version),
                                                                          response))
    ours = protocol.frame_encoded_bytes(request, metadata_wire.encode(
        version, response, node, 0, shared if use_cache else ()))
    assert ours == kio


def test_many_partitions_and_an_empty_answer():
    for version in (1, 9, 12):
        request = protocol.Request(3, version, 1, "client", None, 0)
        ids = tuple(range(200))     # array lengths past one varint byte
        response: Any = {"throttle_time": 0, "cluster_id": "c", "controller_id": 0, "brokers": (),
                    "topics": ({"error_code": ErrorCode.none, "name": "t" * 200, "topic_id": TOPIC_ID,
                                "is_internal": False, "partitions": tuple(partition_entry(0, p) for p in ids)},)}
        kio = protocol.encode_response(request, protocol.build(protocol.response_class(3, version),
                                                                              response))
        assert protocol.frame_encoded_bytes(request, metadata_wire.encode(version, response, 0, 0, [ids])) == kio
        empty: Any = {**response, "topics": ()}
        kio = protocol.encode_response(request, protocol.build(protocol.response_class(3, version),
                                                                              empty))
        assert protocol.frame_encoded_bytes(request, metadata_wire.encode(version, empty)) == kio
