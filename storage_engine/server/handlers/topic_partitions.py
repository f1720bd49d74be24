"""DescribeTopicPartitions (KIP-966, the Java admin client's ``describeTopics`` since 3.8) and ListConfigResources
(KIP-1142; v0 was ListClientMetricsResources), answered as a one-broker Kafka 4.x.

DescribeTopicPartitions pages as Kafka's ``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``: topics
in name order from the cursor's topic (the cursor's partition first within it), at most
min(``response_partition_limit``, 2000) partitions (``max.request.partition.size.limit``'s default) and at least
one per answer; when the limit stops inside a topic, ``next_cursor`` names that topic and its next partition; when
it stops at a topic boundary with topics left, the next topic and partition 0. An empty topic list means every
topic the principal may DESCRIBE (the others are left out); a named topic it may not describe is
TOPIC_AUTHORIZATION_FAILED with no id, whether or not it exists; a named unknown topic UNKNOWN_TOPIC_OR_PARTITION
(INVALID_TOPIC_EXCEPTION for an invalid name). Each topic carries its authorized operations.

ListConfigResources needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED). v0 lists client
metrics resources: this broker has none (no client telemetry, see the README). v1 lists the asked types (all
when none is asked): topics, this broker (for BROKER and BROKER_LOGGER, as Kafka lists each broker id for both),
groups that have dynamic group configs (none: group configs are not kept here), client metrics (none). A type Kafka
does not list is UNSUPPORTED_VERSION for the whole request."""
from __future__ import annotations

import uuid
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.errors import InvalidTopicError
from storage_engine.layout import validate_topic
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.handlers.metadata import LEADER_EPOCH
from storage_engine.server.responses.topic_partitions import (ConfigResource, Cursor, DescribeTopicPartitionsResponse,
                                                              DescribeTopicPartitionsResponsePartition,
                                                              DescribeTopicPartitionsResponseTopic,
                                                              ListConfigResourcesResponse)

NO_TOPIC_ID = uuid.UUID(int=0)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # Integer.MIN_VALUE, the schema's default
MAX_PARTITIONS_PER_RESPONSE = 2000      # Kafka's max.request.partition.size.limit default
# ConfigResource.Type ids
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
V0_TYPES, V1_TYPES = (CLIENT_METRICS,), (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


def _partition(ctx: Ctx, p: int) -> DescribeTopicPartitionsResponsePartition:
    node = ctx.broker.node_id
    return {"error_code": ErrorCode.none, "partition_index": p, "leader_id": node,
            "leader_epoch": LEADER_EPOCH, "replica_nodes": (node,),
            "isr_nodes": (node,), "eligible_leader_replicas": (), "last_known_elr": (), "offline_replicas": ()}


def _unlisted(code: ErrorCode, name: str) -> DescribeTopicPartitionsResponseTopic:
    return {"error_code": code, "name": name, "topic_id": NO_TOPIC_ID, "is_internal": False, "partitions": (),
            "topic_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS}


async def describe_topic_partitions(ctx: Ctx, body: Any) -> DescribeTopicPartitionsResponse:
    broker = ctx.broker
    catalog = await broker.call(broker.topics)
    all_topics = not body.topics
    cursor = body.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    wanted = sorted(catalog) if all_topics else sorted({t.name for t in body.topics})
    wanted = [name for name in wanted if name >= start_topic]
    if cursor is not None and not all_topics and cursor.topic_name not in wanted:
        return _request_error(body, "DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                              f"{cursor.topic_name}")
    if cursor is not None and cursor.partition_index < 0:
        return _request_error(body, f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}")
    refused: list[DescribeTopicPartitionsResponseTopic] = []
    allowed: list[str] = []
    for name in wanted:
        if access.allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name, log=not all_topics):
            allowed.append(name)
        elif not all_topics:     # never says whether it exists
            refused.append(_unlisted(ErrorCode.topic_authorization_failed, name))
    remaining = max(min(MAX_PARTITIONS_PER_RESPONSE, int(body.response_partition_limit)), 1)
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: Cursor | None = None
    for name in allowed:
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        parts = catalog.get(name)
        if parts is None:
            if not all_topics:
                try:
                    validate_topic(name)
                    code = ErrorCode.unknown_topic_or_partition
                except (InvalidTopicError, TypeError, ValueError):
                    code = ErrorCode.invalid_topic_exception
                topics.append(_unlisted(code, name))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        ordered = sorted(p for p in parts if p >= first)
        page, rest = ordered[:remaining], ordered[remaining:]
        topics.append({"error_code": ErrorCode.none, "name": name,
                       "topic_id": await broker.call(broker.topic_id, name), "is_internal": name.startswith("__"),
                       "partitions": tuple(_partition(ctx, p) for p in page),
                       "topic_authorized_operations": access.authorized_operations(ctx, ResourceType.TOPIC, name)})
        if rest:
            next_cursor = {"topic_name": name, "partition_index": rest[0]}
            break
        remaining -= len(page)
    return {"throttle_time": 0, "topics": tuple(topics + refused), "next_cursor": next_cursor}


def _request_error(body: Any, text: str) -> DescribeTopicPartitionsResponse:
    """Kafka's answer to an InvalidRequestException: INVALID_REQUEST on each named topic (the message is only
    logged by Kafka; this response has no field for it)."""
    return {"throttle_time": 0, "next_cursor": None,
            "topics": tuple(_unlisted(ErrorCode.invalid_request, t.name) for t in body.topics)}


async def list_config_resources(ctx: Ctx, body: Any) -> ListConfigResourcesResponse:
    if not access.allowed(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "config_resources": ()}
    supported = V0_TYPES if ctx.version == 0 else V1_TYPES
    asked = tuple(int(t) for t in getattr(body, "resource_types", ()) or ()) or supported
    if any(t not in supported for t in asked):
        return {"throttle_time": 0, "error_code": ErrorCode.unsupported_version, "config_resources": ()}
    out: list[ConfigResource] = []
    broker = ctx.broker
    # GROUP: groups with dynamic group configs (none kept here); CLIENT_METRICS: no subscriptions (no telemetry).
    for kind in (BROKER_LOGGER, BROKER):
        if kind in asked:
            out.append({"resource_name": str(broker.node_id), "resource_type": kind})
    if TOPIC in asked:
        catalog = await broker.call(broker.topics)
        out.extend({"resource_name": name, "resource_type": TOPIC} for name in sorted(catalog))
    return {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": tuple(out)}
