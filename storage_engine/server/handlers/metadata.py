"""Metadata: this node is the only broker and the leader of every partition; topics are what the log dirs hold,
created on first mention when ``auto.create.topics.enable`` and the client allow it."""
from __future__ import annotations

import logging
from typing import Any

from storage_engine.errors import InvalidTopicError
from storage_engine.layout import validate_topic
from storage_engine.server.handlers.context import Ctx, has
from storage_engine.server.catalog import TopicError, create_topic

logger = logging.getLogger(__name__)
LEADER_EPOCH = 0


def partition_entry(node: int, p: int) -> dict[str, Any]:
    return {"error_code": 0, "partition_index": p, "leader_id": node, "leader_epoch": LEADER_EPOCH,
            "replica_nodes": (node,), "isr_nodes": (node,), "offline_replicas": ()}


async def metadata(ctx: Ctx, body: Any) -> dict[str, Any]:
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
    topics = []
    for entry in names:
        if isinstance(entry, tuple):
            topics.append({"error_code": 100, "name": None, "topic_id": entry[1], "partitions": ()})
            continue
        name = entry
        try:
            validate_topic(name)
        except (InvalidTopicError, TypeError, ValueError):
            topics.append({"error_code": 17, "name": name, "topic_id": _zero_id(), "partitions": ()})
            continue
        if name not in catalog and allow_auto:
            try:
                await broker.call(create_topic, broker, name, broker.config.server["num.partitions"], {})
                logger.info("auto-created topic %s for %s", name, ctx.peer)
            except TopicError as exc:
                if exc.code != "topic_already_exists":
                    topics.append({"error_code": 17, "name": name, "topic_id": _zero_id(), "partitions": ()})
                    continue
            catalog = await broker.call(broker.topics)
        if name not in catalog:
            topics.append({"error_code": 3, "name": name, "topic_id": _zero_id(), "partitions": ()})
            continue
        topic_id = await broker.call(broker.topic_id, name)
        topics.append({"error_code": 0, "name": name, "topic_id": topic_id, "is_internal": name.startswith("__"),
                       "partitions": tuple(partition_entry(node, p) for p in catalog[name])})
    return {"throttle_time": 0, "error_code": 0, "cluster_id": broker.cluster_id, "controller_id": node,
            "brokers": ({"node_id": node, "host": ctx.host, "port": ctx.port, "rack": None},),
            "topics": tuple(topics), "cluster_authorized_operations": -2147483648}


def _zero_id() -> Any:
    import uuid
    return uuid.UUID(int=0)
