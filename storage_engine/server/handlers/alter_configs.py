"""AlterConfigs (API 33), the legacy whole-config form clients such as aiokafka's ``alter_configs`` still use:
each resource's given configs REPLACE its configs set over the wire, as Kafka's controller does
(``ConfigurationControlManager.legacyAlterConfigs``): every key not given returns to its default.

- Topic: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED); UNKNOWN_TOPIC_OR_PARTITION for a topic
  that does not exist; a null value is INVALID_REQUEST; keys and values are checked by the same rules as
  CreateTopics and IncrementalAlterConfigs (INVALID_CONFIG naming the first bad one); stored as
  IncrementalAlterConfigs stores them (:func:`storage_engine.server.catalog.store_configs`). The config file's
  ``topics:`` entries stay: they are the file's, not the wire's.
- Broker: ALTER_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED). This broker has no dynamic broker
  configs (its keys come from the config file and DescribeConfigs reports them read-only), so an empty set is
  accepted (nothing to replace) and any key is INVALID_REQUEST, as Kafka refuses keys it cannot update
  dynamically.
- BROKER_LOGGER: INVALID_REQUEST (Kafka: "AlterConfigs is deprecated and does not support ..."); a resource named
  twice: INVALID_REQUEST "Duplicate resource." for each; any other type INVALID_REQUEST.
``validate_only`` checks everything and stores nothing."""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.server import access
from storage_engine.server.catalog import check_configs, store_configs
from storage_engine.server.errors import ErrorCode, TopicError, describe
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.responses.alter_configs import AlterConfigsResourceResponse, AlterConfigsResponse

logger = logging.getLogger(__name__)
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def _replace_topic(ctx: Ctx, topic: str, entries: Any, validate_only: bool) -> None:
    """Kafka's legacy AlterConfigs: the given configs become the topic's whole set of configs set over the wire
    (every key not given returns to its default; the config file's ``topics:`` entries stay, being the file's),
    checked by the same rules as CreateTopics and IncrementalAlterConfigs."""
    broker = ctx.broker
    if topic not in broker.topics(fresh=True):
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist")
    given: dict[str, str | None] = {}
    for entry in entries:
        if entry.value is None:
            raise TopicError(ErrorCode.invalid_request, f"Null value not supported for : {entry.name}")
        given[entry.name] = entry.value
    checked = check_configs(given, broker.config, topic, creating=False)
    if not validate_only:
        store_configs(broker, topic, checked)
        logger.info("topic %s configs replaced by %s", topic, checked)


def _replace_broker(ctx: Ctx, name: str, entries: Any) -> None:
    """A broker's dynamic configs replaced: this broker has none (its keys come from the config file, read-only
    as DescribeConfigs reports them), so only an empty set is accepted, as Kafka refuses read-only keys."""
    broker = ctx.broker
    if name not in ("", str(broker.node_id)):
        raise TopicError(ErrorCode.invalid_request, f"no broker {name!r}; this is node {broker.node_id}")
    keys = sorted(e.name for e in entries)
    if keys:
        raise TopicError(ErrorCode.invalid_request, f"Cannot update these configs dynamically: {', '.join(keys)} "
                         f"(broker configs are read from {broker.config.source or 'the config file'})")


async def alter_configs(ctx: Ctx, body: Any) -> AlterConfigsResponse:
    seen = Counter((int(r.resource_type), r.resource_name) for r in body.resources)
    results: list[AlterConfigsResourceResponse] = []
    for r in body.resources:
        entry: AlterConfigsResourceResponse = {"error_code": ErrorCode.none, "error_message": None,
                                               "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            kind = int(r.resource_type)
            if seen[(kind, r.resource_name)] > 1:
                raise TopicError(ErrorCode.invalid_request, "Duplicate resource.")
            if kind == TOPIC:
                if not access.allowed(ctx, Operation.ALTER_CONFIGS, ResourceType.TOPIC, r.resource_name):
                    raise TopicError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
                await ctx.broker.call(_replace_topic, ctx, r.resource_name, r.configs, bool(body.validate_only))
            elif kind == BROKER:
                if not access.allowed(ctx, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
                    raise TopicError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
                _replace_broker(ctx, r.resource_name, r.configs)
            elif kind == BROKER_LOGGER:
                raise TopicError(ErrorCode.invalid_request,
                                 "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER")
            else:
                raise TopicError(ErrorCode.invalid_request, f"Unexpected resource type {kind}")
        except Exception as exc:   # noqa: BLE001 - the resource's error
            code, text = describe(exc)
            entry.update({"error_code": code, "error_message": text})
        results.append(entry)
    return {"throttle_time": 0, "responses": tuple(results)}
