"""Metadata: this node is the only broker and the leader of every partition; topics are what the log dirs hold,
created on first mention when ``auto.create.topics.enable`` and the client allow it.

Answered in one pass: one engine call (the catalog and the topic ids, both cached by the broker) whatever the
number of topics, the rest on the event loop, and the response encoded by :mod:`.metadata_wire` with each topic's
partition array encoded once per shape and kept.

Authorization is Kafka's (``KafkaApis.handleTopicMetadataRequest``): topics the principal may not DESCRIBE are left
out of an all-topics answer (checked without logging, as Kafka) and answered TOPIC_AUTHORIZATION_FAILED when named
(with the zero id, never the real one, so the answer does not tell whether they exist; asked by id, the id is
given back, ids not being secret). A topic that does not exist is created only if the principal may CREATE on the
cluster or on that topic, else TOPIC_AUTHORIZATION_FAILED. Topic authorized operations (v8+) are computed for the
topics described when the client asks, and cluster authorized operations (v8-10 only) when asked, 0 without
DESCRIBE on the cluster; otherwise both are ``Integer.MIN_VALUE``, the schema's default."""
from __future__ import annotations

import functools
import logging
import uuid
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.errors import InvalidTopicError
from storage_engine.layout import validate_topic
from storage_engine.server import access
from storage_engine.server.broker import Broker
from storage_engine.server.catalog import create_topic
from storage_engine.server.errors import ErrorCode, TopicError
from storage_engine.server.handlers import metadata_wire
from storage_engine.server.handlers.context import Ctx, has
from storage_engine.server.protocol import Encoded
from storage_engine.server.responses.metadata import MetadataResponse, MetadataResponsePartition, MetadataResponseTopic

logger = logging.getLogger(__name__)
LEADER_EPOCH = 0
NO_TOPIC_ID = uuid.UUID(int=0)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # Integer.MIN_VALUE: not asked for
# Kafka's Topic.INTERNAL_TOPICS
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def partition_entry(node: int, p: int) -> MetadataResponsePartition:
    return {"error_code": ErrorCode.none, "partition_index": p, "leader_id": node, "leader_epoch": LEADER_EPOCH,
            "replica_nodes": (node,), "isr_nodes": (node,), "offline_replicas": ()}


@functools.lru_cache(maxsize=4096)
def _partition_entries(node: int, ids: tuple[int, ...]) -> tuple[MetadataResponsePartition, ...]:
    return tuple(partition_entry(node, p) for p in ids)


def _view(broker: Broker, names: list[str] | None, ids: list[uuid.UUID]
          ) -> tuple[dict[str, list[int]], dict[str, uuid.UUID], dict[uuid.UUID, str | None]]:
    """One engine call (blocking): the catalog, the ids of ``names`` that exist (of every topic when None) and the
    names of ``ids`` (None: unknown)."""
    catalog = broker.topics()
    by_id = {tid: broker.topic_by_id(tid) for tid in ids}
    wanted = catalog.keys() if names is None else [n for n in names if n in catalog]
    wanted = list(wanted) + [n for n in by_id.values() if n is not None]
    topic_ids = {}
    for name in wanted:
        if name in catalog:
            topic_ids[name] = broker.topic_id(name)
    return catalog, topic_ids, by_id


async def metadata(ctx: Ctx, body: Any) -> MetadataResponse | Encoded:
    broker = ctx.broker
    node = broker.node_id
    version = ctx.version
    requested = body.topics
    all_topics = requested is None or (version == 0 and not requested)
    if not all_topics and version < 12 and any(
            t.name is None or (has(t, "topic_id") and t.topic_id not in (None, NO_TOPIC_ID)) for t in requested):
        return metadata_wire.encode(version, _invalid_request(requested))
    named: dict[str, None] = {}        # the names asked for, once each, in the request's order (Kafka: a set)
    ids: list[uuid.UUID] = []
    nameless = False                   # v12: neither a name nor an id
    for t in () if all_topics else requested:
        topic_id = t.topic_id if has(t, "topic_id") else None
        if topic_id is not None and topic_id != NO_TOPIC_ID:
            if topic_id not in ids:
                ids.append(topic_id)
        elif t.name is None:
            nameless = True
        else:
            named[t.name] = None
    names = list(named)
    use_ids = bool(ids)
    catalog, topic_ids, by_id = await broker.call(_view, broker, None if all_topics else names, ids)
    if all_topics:
        topics = sorted(catalog)
    elif use_ids:
        topics = list(dict.fromkeys(n for n in by_id.values() if n is not None))
    else:
        topics = names

    authorized: list[str] = []
    hidden: list[str] = []
    for name in topics:
        (authorized if access.allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name, log=not all_topics)
         else hidden).append(name)
    allow_auto = (getattr(body, "allow_auto_topic_creation", True) and broker.config.server["auto.create.topics.enable"]
                  and not all_topics)
    refused_create: list[str] = []
    missing = [n for n in authorized if n not in catalog]
    if missing and allow_auto and not access.allowed(ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME,
                                                     log=False):
        refused_create = [n for n in missing if not access.allowed(ctx, Operation.CREATE, ResourceType.TOPIC, n)]
        authorized = [n for n in authorized if n not in refused_create]

    answers: dict[str, MetadataResponseTopic] = {}
    created = False
    for name in authorized:
        if name in catalog:
            continue
        try:
            validate_topic(name)
        except (InvalidTopicError, TypeError, ValueError):
            answers[name] = _failed(ErrorCode.invalid_topic_exception, name)
            continue
        if not allow_auto:
            answers[name] = _failed(ErrorCode.unknown_topic_or_partition, name)
            continue
        try:
            await broker.call(create_topic, broker, name, broker.config.server["num.partitions"], {})
            logger.info("auto-created topic %s for %s", name, ctx.peer)
        except TopicError as exc:
            if exc.error_code != ErrorCode.topic_already_exists:
                answers[name] = _failed(ErrorCode.invalid_topic_exception, name)
                continue
        created = True
    if created:
        catalog, topic_ids, _ = await broker.call(_view, broker, [n for n in authorized if n not in answers], [])

    described: list[MetadataResponseTopic] = []
    shared: list[tuple[int, ...] | None] = []
    for name in authorized:
        entry = answers.get(name)
        if entry is None and name not in catalog:     # deleted between the two looks, or a create still under way
            entry = _failed(ErrorCode.unknown_topic_or_partition, name)
        if entry is not None:
            described.append(entry)
            shared.append(None)
            continue
        partitions = tuple(catalog[name])
        described.append({"error_code": ErrorCode.none, "name": name, "topic_id": topic_ids[name],
                          "is_internal": name in INTERNAL_TOPICS,
                          "partitions": _partition_entries(node, partitions)})
        shared.append(partitions)
    if version >= 8 and getattr(body, "include_topic_authorized_operations", False):
        for entry in described:
            entry["topic_authorized_operations"] = access.authorized_operations(ctx, ResourceType.TOPIC,
                                                                                entry["name"] or "")
    cluster_ops = UNKNOWN_AUTHORIZED_OPERATIONS
    if 8 <= version <= 10 and getattr(body, "include_cluster_authorized_operations", False):
        cluster_ops = (access.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                       if access.allowed(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)

    unknown_ids: list[MetadataResponseTopic] = [
        {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": tid, "is_internal": False,
         "partitions": ()} for tid, name in by_id.items() if name is None]
    if nameless and not use_ids:
        unknown_ids.append({"error_code": ErrorCode.invalid_topic_exception, "name": None, "topic_id": NO_TOPIC_ID,
                            "is_internal": False, "partitions": ()})
    refused: list[MetadataResponseTopic] = [
        {**_failed(ErrorCode.topic_authorization_failed, n), "is_internal": n in INTERNAL_TOPICS}
        for n in refused_create]
    if not all_topics:
        for name in hidden:
            if use_ids:
                refused.append({"error_code": ErrorCode.topic_authorization_failed, "name": None,
                                "topic_id": topic_ids.get(name, NO_TOPIC_ID), "is_internal": False, "partitions": ()})
            else:
                refused.append(_failed(ErrorCode.topic_authorization_failed, name))
    response: MetadataResponse = {
        "throttle_time": 0, "cluster_id": broker.cluster_id, "controller_id": node,
        "brokers": ({"node_id": node, "host": ctx.host, "port": ctx.port, "rack": None},),
        "topics": (*unknown_ids, *described, *refused), "cluster_authorized_operations": cluster_ops}
    return metadata_wire.encode(version, response, node, LEADER_EPOCH,
                                [None] * len(unknown_ids) + shared)


def _invalid_request(requested: Any) -> MetadataResponse:
    """Kafka's answer to topic ids, or a topic without a name, before v12 (``InvalidRequestException``, answered
    by ``MetadataRequest.getErrorResponse``): every topic asked for with INVALID_REQUEST, a null name as ""."""
    topics: list[MetadataResponseTopic] = [
        {"error_code": ErrorCode.invalid_request, "name": t.name or "",
         "topic_id": (t.topic_id if has(t, "topic_id") else None) or NO_TOPIC_ID, "is_internal": False,
         "partitions": ()} for t in requested]
    return {"throttle_time": 0, "brokers": (), "cluster_id": None, "controller_id": -1, "topics": tuple(topics),
            "cluster_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS}


def _failed(code: ErrorCode, name: str) -> MetadataResponseTopic:
    return {"error_code": code, "name": name, "topic_id": NO_TOPIC_ID, "is_internal": False, "partitions": ()}
