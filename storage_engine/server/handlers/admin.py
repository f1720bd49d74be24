"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords. Replication factor: this node is the only
replica, so -1 and 1 are accepted and anything else is INVALID_REPLICATION_FACTOR; manual replica assignments are
accepted when each names this broker alone (what every partition has here), else INVALID_REPLICA_ASSIGNMENT with
Kafka's controller's message. A created topic's answer (v5+) lists its configs, as Kafka's does."""
from __future__ import annotations

import logging
import uuid
from typing import Any

from storage_engine.acl.model import Operation, ResourceType
from storage_engine.errors import OffsetOutOfRangeError, PartitionNotFoundError
from storage_engine.server import access
from storage_engine.server.catalog import add_partitions, create_topic, delete_topic
from storage_engine.server.errors import ErrorCode, TopicError, describe, error_code
from storage_engine.server.handlers.cluster import METADATA_TOPIC, replica_assignment_error
from storage_engine.server.handlers.configs import topic_config_entries
from storage_engine.server.handlers.context import Ctx, has
from storage_engine.server.responses.admin import (CreatableTopicConfigs, CreatableTopicResult, CreatePartitionsResponse,
                                                   CreatePartitionsTopicResult, CreateTopicsResponse,
                                                   DeletableTopicResult, DeleteRecordsPartitionResult,
                                                   DeleteRecordsResponse, DeleteRecordsTopicResult,
                                                   DeleteTopicsResponse)

logger = logging.getLogger(__name__)
NO_TOPIC_ID = uuid.UUID(int=0)


def _assigned_count(ctx: Ctx, t: Any) -> int:
    """The partition count of a CreateTopics entry with manual replica assignments, checked as Kafka's controller
    checks them (``createTopic``, ``validateManualPartitionAssignment``): each partition once, 0..n-1, each naming
    this broker alone (the cluster's only node) -- the assignment every partition has here anyway."""
    if int(t.replication_factor) != -1:
        raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was specified, but replication "
                         "factor was not set to -1.")
    if int(t.num_partitions) != -1:
        raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was specified, but "
                         "numPartitions was not set to -1.")
    seen: set[int] = set()
    factor: int | None = None
    for a in t.assignments:
        index = int(a.partition_index)
        if index in seen:
            raise TopicError(ErrorCode.invalid_replica_assignment,
                             f"Found multiple manual partition assignments for partition {index}")
        problem = replica_assignment_error(ctx, [int(b) for b in a.broker_ids], factor)
        if problem is not None:
            raise TopicError(ErrorCode.invalid_replica_assignment, problem)
        factor = len(a.broker_ids)
        seen.add(index)
    if seen != set(range(len(seen))):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         "partitions should be a consecutive 0-based integer sequence")
    return len(seen)


def _created_configs(ctx: Ctx, topic: str, configs: dict[str, str]) -> tuple[CreatableTopicConfigs, ...]:
    """The topic's every config as Kafka's controller lists them in the answer (v5+; the Java client reads them
    whenever ``topic_config_error_code`` is 0): by name, sensitive values null."""
    config = ctx.broker.config
    effective = config.check_topic_configs(topic, configs, creating=True)
    overridden = set(configs) | set(config.topic_overrides.get(topic, {}))
    return tuple({"name": e["name"], "value": None if e["is_sensitive"] else e["value"], "read_only": e["read_only"],
                  "config_source": e["config_source"], "is_sensitive": e["is_sensitive"]}
                 for e in sorted(topic_config_entries(ctx, effective, overridden), key=lambda e: e["name"]))


async def create_topics(ctx: Ctx, body: Any) -> CreateTopicsResponse:
    broker = ctx.broker
    results = []
    names = [t.name for t in body.topics]
    for t in body.topics:
        entry: CreatableTopicResult = {"name": t.name, "error_code": ErrorCode.none, "error_message": None,
                                       "topic_id": NO_TOPIC_ID, "num_partitions": -1, "replication_factor": -1,
                                       "topic_config_error_code": ErrorCode.none, "configs": None}
        try:
            if names.count(t.name) > 1:
                raise TopicError(ErrorCode.invalid_request, f"topic {t.name!r} is named more than once in the request")
            if t.name == METADATA_TOPIC:     # the name DescribeQuorum describes; Kafka's controller refuses it too
                raise TopicError(ErrorCode.invalid_request,
                                 f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
            if t.assignments:
                count = _assigned_count(ctx, t)
            else:
                if int(t.replication_factor) not in (-1, 1):
                    raise TopicError(ErrorCode.invalid_replication_factor, f"replication factor "
                                     f"{t.replication_factor}: this broker is the only replica (use 1)")
                count = int(t.num_partitions)
                if count == -1:
                    count = broker.config.server["num.partitions"]
            configs = {c.name: c.value for c in t.configs}
            await broker.call(create_topic, broker, t.name, count, configs, validate_only=bool(body.validate_only))
            if access.allowed(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
                entry.update({"num_partitions": count, "replication_factor": 1,
                              "configs": await broker.call(_created_configs, ctx, t.name, configs)})
            else:      # created, but the principal may not see its configs (Kafka's controller answers so)
                entry["topic_config_error_code"] = ErrorCode.topic_authorization_failed
            if not body.validate_only:
                entry["topic_id"] = await broker.call(broker.topic_id, t.name)
                logger.info("created topic %s (%d partitions, configs %s) for %s", t.name, count, configs, ctx.peer)
        except Exception as exc:   # noqa: BLE001 - the topic's error
            code, text = describe(exc)
            entry.update({"error_code": code, "error_message": text})
        results.append(entry)
    return {"throttle_time": 0, "topics": tuple(results)}


def _delete_topic(ctx: Ctx, topic: str) -> None:
    broker = ctx.broker
    if not broker.config.server["delete.topic.enable"]:
        raise TopicError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
    if not broker.topics(fresh=True).get(topic):
        raise PartitionNotFoundError(f"topic {topic!r} does not exist")
    delete_topic(broker, topic)


async def delete_topics(ctx: Ctx, body: Any) -> DeleteTopicsResponse:
    results = []
    if has(body, "topics"):
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    for name, topic_id in wanted:
        entry: DeletableTopicResult = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.none,
                                 "error_message": None}
        try:
            if name is None and topic_id is not None:
                name = await ctx.broker.call(ctx.broker.topic_by_id, topic_id)
                if name is None:
                    raise TopicError(ErrorCode.unknown_topic_id, f"no topic has id {topic_id}")
                entry["name"] = name
            elif topic_id is None or topic_id.int == 0:
                entry["topic_id"] = await ctx.broker.call(ctx.broker.topic_id, name) \
                    if name in await ctx.broker.call(ctx.broker.topics) else None
            await ctx.broker.call(_delete_topic, ctx, name)
            logger.info("deleted topic %s for %s", name, ctx.peer)
        except Exception as exc:   # noqa: BLE001 - the topic's error
            code, text = describe(exc)
            entry.update({"error_code": code, "error_message": text})
        results.append(entry)
    return {"throttle_time": 0, "responses": tuple(results)}


def _check_new_assignments(ctx: Ctx, topic: str, count: int, assignments: Any) -> None:
    """Kafka's controller on CreatePartitions with assignments: one per new partition, each naming this broker
    alone (the replication factor of the existing partitions, 1). A missing topic or a count that is no increase
    is left to :func:`add_partitions`, which reports it as Kafka does, first."""
    existing = ctx.broker.topics(fresh=True).get(topic)
    if not existing or count <= max(existing) + 1:
        return
    additional = count - (max(existing) + 1)
    if len(assignments) != additional:
        raise TopicError(ErrorCode.invalid_replica_assignment, f"Attempted to add {additional} additional "
                         f"partition(s), but only {len(assignments)} assignment(s) were specified.")
    for a in assignments:
        problem = replica_assignment_error(ctx, [int(b) for b in a.broker_ids], 1)
        if problem is not None:
            raise TopicError(ErrorCode.invalid_replica_assignment, problem)


async def create_partitions(ctx: Ctx, body: Any) -> CreatePartitionsResponse:
    results = []
    for t in body.topics:
        entry: CreatePartitionsTopicResult = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if t.assignments is not None:
                await ctx.broker.call(_check_new_assignments, ctx, t.name, int(t.count), t.assignments)
            await ctx.broker.call(add_partitions, ctx.broker, t.name, int(t.count),
                                  validate_only=bool(body.validate_only))
        except Exception as exc:   # noqa: BLE001 - the topic's error
            code, text = describe(exc)
            entry.update({"error_code": code, "error_message": text})
        results.append(entry)
    return {"throttle_time": 0, "results": tuple(results)}


def _delete_records(ctx: Ctx, topic: str, p: int, offset: int) -> DeleteRecordsPartitionResult:
    try:
        log = ctx.broker.manager.get_log(topic, p)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{p} does not exist")
        if offset > log.high_watermark:
            raise OffsetOutOfRangeError(f"offset {offset} is above the high watermark {log.high_watermark} "
                                        f"of {topic}-{p}")
        low = log.delete_records(offset)
        return {"partition_index": p, "low_watermark": low, "error_code": ErrorCode.none}
    except Exception as exc:   # noqa: BLE001 - the partition's error
        return {"partition_index": p, "low_watermark": -1, "error_code": error_code(exc)}


async def delete_records(ctx: Ctx, body: Any) -> DeleteRecordsResponse:
    topics: list[DeleteRecordsTopicResult] = []
    for t in body.topics:
        parts = [await ctx.broker.call(_delete_records, ctx, t.name, int(p.partition_index), int(p.offset))
                 for p in t.partitions]
        topics.append({"name": t.name, "partitions": tuple(parts)})
    return {"throttle_time": 0, "topics": tuple(topics)}
