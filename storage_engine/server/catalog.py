"""Creating topics (CreateTopics, Metadata's auto-creation, CreatePartitions, the coordinators' internal topics)
deleting topics and changing topic configs, as every handler and coordinator that does so shares it: names checked,
configs checked against Kafka's topic keys and stored where the maintenance jobs read them
(:mod:`storage_engine.topic_store`). Creating, extending and deleting are each one recorded change
(:mod:`storage_engine.log.topic_changes`): whole or not at all after any crash, and invisible to Metadata until
whole."""
from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Mapping
from typing import Protocol

from storage_engine import topic_store
from storage_engine.config import StorageConfig
from storage_engine.config_file import load_config
from storage_engine.config_keys import topic_key
from storage_engine.errors import ConfigError
from storage_engine.layout import validate_topic
from storage_engine.log import topic_changes
from storage_engine.log.manager import LogManager
from storage_engine.server import identity
from storage_engine.server.errors import ErrorCode, error_code
from storage_engine.server.errors import TopicError as TopicError     # where the coordinators import it from

MAX_PARTITIONS = 10_000


class Broker(Protocol):
    """What topic creation needs of the broker (:class:`storage_engine.server.broker.Broker`)."""

    config: StorageConfig
    manager: LogManager
    config_mutex: threading.Lock

    def topics(self, *, fresh: bool = False) -> dict[str, list[int]]: ...

    def forget_catalog(self) -> None: ...

    def note_topic_change(self, topic: str, record: dict | None) -> None: ...

    def topic_id(self, topic: str) -> uuid.UUID: ...


def check_configs(configs: Mapping[str, str | None], config: StorageConfig | None = None, topic: str | None = None,
                  *, creating: bool = True) -> dict[str, str]:
    """Raw values checked against Kafka's topic keys; INVALID_CONFIG names the first bad one. Given the store's
    ``config`` and the ``topic``, also Kafka's rules on their combination (:meth:`StorageConfig.check_topic_configs`:
    min/max compaction lag, remote storage)."""
    out = {}
    for key, value in configs.items():
        if value is None:
            raise TopicError(ErrorCode.invalid_config, f"config {key!r} has a null value")
        try:
            topic_key(key).parse(value)
        except ConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
        out[key] = value
    if config is not None and topic is not None:
        try:
            config.check_topic_configs(topic, out, creating=creating)
        except ConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    return out


def store_configs(broker: Broker, topic: str, configs: Mapping[str, str]) -> None:
    """Replace ``topic``'s wire-set configs with ``configs`` and make every open log use the result (blocking)."""
    with broker.config_mutex:
        topic_store.replace(broker.manager.online_dirs(), topic, configs)
        reload_config(broker)


def reload_config(broker: Broker) -> None:
    old = broker.config
    if old.source:
        new = load_config(old.source)
        new = dataclasses.replace(new, log_dirs=old.log_dirs)   # the dirs this broker serves (--log-dirs)
    else:
        stored = topic_store.load(broker.manager.online_dirs())
        base = {t: {k: v for k, v in c.items() if k not in old.dynamic_topics.get(t, {})}
                for t, c in old.topic_overrides.items()}
        new = dataclasses.replace(old, topic_overrides=topic_store.merged(base, stored),  # type: ignore[arg-type]
                                  dynamic_topics=stored)
    broker.config = new
    broker.manager.config = new
    for (topic, _), log in list(broker.manager.logs.items()):
        log.config = new.log_config(topic)


def _store(broker: Broker) -> topic_changes.StoreConfigs:
    return lambda topic, configs: store_configs(broker, topic, configs)


def create_topic(broker: Broker, topic: str, partitions: int, configs: Mapping[str, str], *,
                 validate_only: bool = False) -> None:
    """Create ``topic`` with ``partitions`` partitions whole (blocking; :mod:`storage_engine.log.topic_changes`):
    Metadata shows it only once every partition exists, and a kill at any step leaves it whole at the next start.
    TOPIC_ALREADY_EXISTS if any partition exists, except when a create of it with as many partitions was left
    half done by a process that died: that create is completed (the retry of an unanswered CreateTopics)."""
    try:
        validate_topic(topic)
    except Exception as exc:   # noqa: BLE001 - InvalidTopicError or a type error: both mean a bad name
        raise TopicError(ErrorCode.invalid_topic_exception, str(exc)) from None
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise TopicError(ErrorCode.invalid_partitions, f"number of partitions must be in [1, {MAX_PARTITIONS}], "
                                               f"got {partitions}")
    checked = check_configs(configs, broker.config, topic)
    if validate_only:
        if topic in broker.topics(fresh=True):
            raise TopicError(ErrorCode.topic_already_exists, f"topic {topic!r} already exists")
        return
    try:
        topic_changes.create(broker.manager, topic, partitions, checked, topic_id=identity.random_uuid(),
                             store=_store(broker), on_record=broker.note_topic_change)
    except topic_changes.TopicChangeError as exc:
        raise TopicError(error_code(exc), str(exc)) from None
    broker.forget_catalog()
    broker.topics(fresh=True)
    broker.topic_id(topic)


def add_partitions(broker: Broker, topic: str, count: int, *, validate_only: bool = False) -> None:
    """Extend ``topic`` to ``count`` partitions whole (blocking): Metadata shows the new ones only once all exist."""
    existing = broker.topics(fresh=True).get(topic)
    if not existing:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist")
    current = max(existing) + 1
    if count <= current:
        raise TopicError(ErrorCode.invalid_partitions, f"topic {topic!r} has {current} partitions; the new count "
                                               f"{count} must be larger")
    if count > MAX_PARTITIONS:
        raise TopicError(ErrorCode.invalid_partitions, f"at most {MAX_PARTITIONS} partitions, got {count}")
    if validate_only:
        return
    try:
        topic_changes.add_partitions(broker.manager, topic, count, broker.topic_id(topic), store=_store(broker),
                                     on_record=broker.note_topic_change)
    except topic_changes.TopicChangeError as exc:
        raise TopicError(error_code(exc), str(exc)) from None
    broker.forget_catalog()


def delete_topic(broker: Broker, topic: str) -> None:
    """Delete every partition of ``topic`` and its stored configs whole (blocking)."""
    topic_changes.delete(broker.manager, topic, store=_store(broker), on_record=broker.note_topic_change)
    broker.forget_catalog()
