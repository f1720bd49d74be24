"""DescribeConfigs and IncrementalAlterConfigs for topics (configs stored where the maintenance jobs read them,
:mod:`storage_engine.topic_store`), DescribeLogDirs and AlterReplicaLogDirs (the engine's moves between log dirs).

Config sources as Kafka names them: 1 DYNAMIC_TOPIC_CONFIG (a topic override: set over the wire or in the config
file's ``topics:``), 4 STATIC_BROKER_CONFIG (a broker key in the config file), 5 DEFAULT_CONFIG (Kafka's default).
Broker configs are static here (the config file); altering one is INVALID_REQUEST naming the file."""
from __future__ import annotations

import logging
import os
from typing import Any

from storage_engine.config import LogConfig
from storage_engine.config_keys import BROKER_KEYS, LOG_DEFAULTS, TOPIC_KEYS, config_text, is_sensitive
from storage_engine.errors import PartitionNotFoundError
from storage_engine.server.catalog import check_configs, store_configs
from storage_engine.server.errors import ErrorCode, TopicError, describe, error_code, message
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.responses.configs import (AlterConfigsResourceResponse, AlterReplicaLogDirPartitionResult,
                                                     AlterReplicaLogDirsResponse, DescribeConfigsResourceResult,
                                                     DescribeConfigsResponse, DescribeConfigsResult,
                                                     DescribeLogDirsPartition, DescribeLogDirsResponse,
                                                     DescribeLogDirsResult, IncrementalAlterConfigsResponse)

logger = logging.getLogger(__name__)
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "PASSWORD": 9}


def _topic_configs(ctx: Ctx, topic: str, keys: Any) -> list[DescribeConfigsResourceResult]:
    config = ctx.broker.config
    return topic_config_entries(ctx, config.log_config(topic), set(config.topic_overrides.get(topic, {})), keys)


def topic_config_entries(ctx: Ctx, effective: LogConfig, overridden: set[str],
                         keys: Any = None) -> list[DescribeConfigsResourceResult]:
    """Every topic key (or those in ``keys``) of a topic whose LogConfig is ``effective`` and whose overrides are
    the keys ``overridden``, with Kafka's config source: what DescribeConfigs and the CreateTopics response
    (``configs``, v5+) list."""
    config = ctx.broker.config
    out: list[DescribeConfigsResourceResult] = []
    for name, spec in TOPIC_KEYS.items():
        if keys is not None and name not in keys:
            continue
        value = getattr(effective, spec.attr)
        if name in overridden:
            source = DYNAMIC_TOPIC
        elif getattr(config.default_log, spec.attr) != LOG_DEFAULTS[spec.attr]:
            source = STATIC_BROKER
        else:
            source = DEFAULT
        out.append({"name": name, "value": config_text(value), "read_only": False, "config_source": source,
                    "is_sensitive": False, "synonyms": (),
                    "config_type": _TYPES.get(spec.kind.name, 0), "documentation": None})
    return out


def _broker_configs(ctx: Ctx, keys: Any) -> list[DescribeConfigsResourceResult]:
    out: list[DescribeConfigsResourceResult] = []
    config = ctx.broker.config
    for name, value in {**config.server, **config.remote}.items():
        if keys is not None and name not in keys:
            continue
        spec = BROKER_KEYS[name]
        sensitive = is_sensitive(name)
        source = DEFAULT if value == spec.default else STATIC_BROKER
        out.append({"name": name, "value": None if sensitive else config_text(value), "read_only": True,
                    "config_source": source, "is_sensitive": sensitive,
                    "synonyms": (), "config_type": _TYPES.get(spec.kind.name, 0), "documentation": None})
    return out


async def describe_configs(ctx: Ctx, body: Any) -> DescribeConfigsResponse:
    results = []
    for r in body.resources:
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        entry: DescribeConfigsResult = {"error_code": ErrorCode.none, "error_message": None,
                                        "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": ()}
        if r.resource_type == TOPIC:
            catalog = await ctx.broker.call(ctx.broker.topics)
            if r.resource_name not in catalog:
                entry.update({"error_code": ErrorCode.unknown_topic_or_partition,
                              "error_message": f"topic {r.resource_name!r} does not exist"})
            else:
                entry["configs"] = tuple(_topic_configs(ctx, r.resource_name, keys))
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(ctx.broker.node_id)):
                entry.update({"error_code": ErrorCode.invalid_request,
                              "error_message": f"no broker {r.resource_name!r}; this is node {ctx.broker.node_id}"})
            else:
                entry["configs"] = tuple(_broker_configs(ctx, keys))
        else:
            entry.update({"error_code": ErrorCode.invalid_request,
                          "error_message": f"resource type {r.resource_type} is not served (topics: 2, brokers: 4)"})
        results.append(entry)
    return {"throttle_time": 0, "results": tuple(results)}


def _alter_topic(ctx: Ctx, topic: str, ops: Any, validate_only: bool) -> None:
    broker = ctx.broker
    if topic not in broker.topics(fresh=True):
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist")
    current: dict[str, str | None] = {k: str(v) for k, v in broker.config.dynamic_topics.get(topic, {}).items()}
    for op in ops:
        name, kind, value = op.name, int(op.config_operation), op.value
        if name not in TOPIC_KEYS:
            check_configs({name: value or ""})     # raises INVALID_CONFIG naming the unknown key
        if kind == SET:
            current[name] = value
        elif kind == DELETE:
            current.pop(name, None)
        elif kind in (APPEND, SUBTRACT):
            if TOPIC_KEYS[name].kind.name != "LIST":
                raise TopicError(ErrorCode.invalid_config, f"{name} is not a list: APPEND and SUBTRACT need a list key")
            existing = current.get(name)
            items = [i for i in (existing.split(",") if existing else
                                 list(getattr(broker.config.log_config(topic), TOPIC_KEYS[name].attr))) if i]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            items = items + [i for i in given if i not in items] if kind == APPEND else \
                [i for i in items if i not in given]
            current[name] = ",".join(items)
        else:
            raise TopicError(ErrorCode.invalid_request, f"unknown config operation {kind} for {name}")
    checked = check_configs(current, broker.config, topic, creating=False)
    if not validate_only:
        store_configs(broker, topic, checked)
        logger.info("topic %s configs now %s", topic, checked)


async def incremental_alter_configs(ctx: Ctx, body: Any) -> IncrementalAlterConfigsResponse:
    results = []
    for r in body.resources:
        entry: AlterConfigsResourceResponse = {"error_code": ErrorCode.none, "error_message": None,
                                               "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            if r.resource_type != TOPIC:
                raise TopicError(ErrorCode.invalid_request, "only topic configs can be altered; broker configs are "
                                 f"read from {ctx.broker.config.source or 'the config file'}")
            await ctx.broker.call(_alter_topic, ctx, r.resource_name, r.configs, bool(body.validate_only))
        except Exception as exc:   # noqa: BLE001 - the resource's error
            code, text = describe(exc)
            entry.update({"error_code": code, "error_message": text})
        results.append(entry)
    return {"throttle_time": 0, "responses": tuple(results)}


def _log_dirs(ctx: Ctx, wanted: Any) -> list[DescribeLogDirsResult]:
    broker = ctx.broker
    catalog = broker.topics(fresh=True)
    per_dir: dict[str, dict[str, list[DescribeLogDirsPartition]]] = {d: {} for d in broker.config.log_dirs}
    offline = broker.manager.offline_dirs()
    for topic, parts in catalog.items():
        want = None if wanted is None else wanted.get(topic)
        if wanted is not None and want is None:
            continue
        for p in parts:
            if want is not None and p not in want:
                continue
            try:
                log = broker.manager.get_log(topic, p)
            except Exception:   # noqa: BLE001 - an offline dir: reported per dir below
                continue
            if log is None:
                continue
            per_dir.setdefault(log.log_dir, {}).setdefault(topic, []).append(
                {"partition_index": p, "partition_size": log.size_in_bytes(), "offset_lag": 0,
                 "is_future_key": False})
    results: list[DescribeLogDirsResult] = []
    for d, topics in per_dir.items():
        total = usable = -1
        try:
            st = os.statvfs(d)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            pass
        results.append({"error_code": ErrorCode.kafka_storage_error if d in offline else ErrorCode.none,
                         "log_dir": d, "total_bytes": total,
                        "usable_bytes": usable,
                        "topics": tuple({"name": t, "partitions": tuple(ps)} for t, ps in sorted(topics.items()))})
    return results


async def describe_log_dirs(ctx: Ctx, body: Any) -> DescribeLogDirsResponse:
    wanted = None if body.topics is None else {t.topic: set(t.partitions) for t in body.topics}
    results = await ctx.broker.call(_log_dirs, ctx, wanted)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": tuple(results)}


def _move(ctx: Ctx, topic: str, p: int, path: str) -> None:
    try:
        report = ctx.broker.manager.move_log(topic, p, path)
        logger.info("moved %s-%d to %s: %s", topic, p, path, report)
    except Exception as exc:   # noqa: BLE001 - a background move: logged, the partition stays where it was
        logger.error("moving %s-%d to %s failed: %s", topic, p, path, message(exc))


async def alter_replica_log_dirs(ctx: Ctx, body: Any) -> AlterReplicaLogDirsResponse:
    broker = ctx.broker
    dirs = {os.path.realpath(d): d for d in broker.config.log_dirs}
    results: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    catalog = await broker.call(broker.topics, fresh=True)
    for entry in body.dirs:
        target = dirs.get(os.path.realpath(entry.path))
        for t in entry.topics:
            for p in t.partitions:
                code = ErrorCode.none
                if target is None:
                    code = ErrorCode.log_dir_not_found
                elif p not in catalog.get(t.name, ()):
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    try:
                        log = await broker.call(broker.manager.get_log, t.name, int(p))
                        if log is None:
                            raise PartitionNotFoundError(f"{t.name}-{p}")
                        if log.log_dir != target:
                            broker.pool.submit(_move, ctx, t.name, int(p), target)
                    except Exception as exc:   # noqa: BLE001 - the partition's error
                        code = error_code(exc)
                results.setdefault(t.name, []).append({"partition_index": p, "error_code": code})
    return {"throttle_time": 0, "results": tuple({"topic_name": t, "partitions": tuple(ps)}
                                                 for t, ps in results.items())}
