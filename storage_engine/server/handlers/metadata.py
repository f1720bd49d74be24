"""Metadata: this node is the only broker and the leader of every partition; topics are what the log dirs hold,
created on first mention when ``auto.create.topics.enable`` and the client allow it."""
from __future__ import annotations

import logging
import uuid
from typing import Any

from storage_engine.errors import InvalidTopicError
from storage_engine.layout import validate_topic
from storage_engine.server.catalog import create_topic
from storage_engine.server.errors import ErrorCode, TopicError
from storage_engine.server.handlers.context import Ctx, has
from storage_engine.server.responses.metadata import (MetadataResponse, MetadataResponsePartition,
                                                      MetadataResponseTopic)

logger = logging.getLogger(__name__)
LEADER_EPOCH = 0
NO_TOPIC_ID = uuid.UUID(int=0)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # Integer.MIN_VALUE: not asked for


def partition_entry(node: int, p: int) -> MetadataResponsePartition:
    return {"error_code": ErrorCode.none, "partition_index": p, "leader_id": node, "leader_epoch": LEADER_EPOCH,
            "replica_nodes": (node,), "isr_nodes": (node,), "offline_replicas": ()}


async def metadata(ctx: Ctx, body: Any) -> MetadataResponse:
    broker = ctx.broker
    node = broker.node_id
    catalog = await broker.call(broker.topics)
    requested = body.topics
    allow_auto = getattr(body, "allow_auto_topic_creation", True) and broker.config.server["auto.create.topics.enable"]
    names: list[Any]
    if requested is None:
        names = sorted(catalog)
    else:
        names = []
        for t in requested:
            name = t.name
            if name is None and has(t, "topic_id") and t.topic_id is not None:
                name = await broker.call(broker.topic_by_id, t.topic_id)
                if name is None:
                    names.append(("", t.topic_id))
                    continue
            names.append(name)
    topics: list[MetadataResponseTopic] = []
    for entry in names:
        if isinstance(entry, tuple):
            topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": entry[1],
                           "partitions": ()})
            continue
        name = entry
        try:
            validate_topic(name)
        except (InvalidTopicError, TypeError, ValueError):
            topics.append(_failed(ErrorCode.invalid_topic_exception, name))
            continue
        if name not in catalog and allow_auto:
            try:
                await broker.call(create_topic, broker, name, broker.config.server["num.partitions"], {})
                logger.info("auto-created topic %s for %s", name, ctx.peer)
            except TopicError as exc:
                if exc.error_code != ErrorCode.topic_already_exists:
                    topics.append(_failed(ErrorCode.invalid_topic_exception, name))
                    continue
            catalog = await broker.call(broker.topics)
        if name not in catalog:
            topics.append(_failed(ErrorCode.unknown_topic_or_partition, name))
            continue
        topic_id = await broker.call(broker.topic_id, name)
        topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": topic_id,
                       "is_internal": name.startswith("__"),
                       "partitions": tuple(partition_entry(node, p) for p in catalog[name])})
    return {"throttle_time": 0, "cluster_id": broker.cluster_id,
            "controller_id": node,
            "brokers": ({"node_id": node, "host": ctx.host, "port": ctx.port, "rack": None},),
            "topics": tuple(topics), "cluster_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS}


def _failed(code: ErrorCode, name: str) -> MetadataResponseTopic:
    return {"error_code": code, "name": name, "topic_id": NO_TOPIC_ID, "partitions": ()}
