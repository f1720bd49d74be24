"""Loading the storage configuration: one YAML file with Kafka's key names, or the same as a mapping.

The file has two maps, and a third when the log dirs are spread over several storage hosts::

    broker:                          # broker keys, named and defaulted as in Kafka's server.properties
      log.dirs: [../../var/logs/dir-a, ../../var/logs/dir-b]   # or "a,b"; relative to this file
      log.segment.bytes: 1048576
      log.retention.hours: 168
    topics:                          # per-topic overrides, with Kafka's topic key names
      user-emails:
        cleanup.policy: compact      # or [compact, delete], or "compact,delete"
        min.cleanable.dirty.ratio: 0.3
    hosts:                           # optional: which storage host has which log dir (every dir on one host)
      storage-a: [../../var/logs/dir-a]   # resolved as log.dirs are
      storage-b: [../../var/logs/dir-b]
    console:                         # optional: what the consoles show masked (storage_engine.masking)
      masking:
        - {topic: user-emails, fields: [email]}

The keys, their defaults, precedence and checks are :mod:`storage_engine.config_keys`; the result is a
:class:`~storage_engine.config.StorageConfig`. Every error is a :class:`ConfigError`, prefixed with the path of
the file it came from.

Stricter than Kafka: duplicate YAML keys are rejected. ``log.dirs`` (or ``log.dir``) must be set: Kafka falls back
to ``/tmp/kafka-logs``, and a store that writes where nobody configured it to (an empty or truncated config file) is
worse than one that refuses.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml

from storage_engine import topic_store
from storage_engine.config import (CleanerConfig, LogConfig, StorageConfig, check_local_retention,
                                   check_remote_store, resolve_hosts, resolve_log_dirs)
from storage_engine.config_keys import (BROKER_KEYS, MIB, BROKER_DEFAULTS, broker_key, check_compaction_lags,
                                        log_values, unknown_key)
from storage_engine.durable import read_regular_file
from storage_engine.errors import ConfigError, UnsafeFileError
from storage_engine.masking import parse_masking

__all__ = ["DEFAULT_CONFIG_PATH", "ENV_VAR", "load_config", "config_from_mapping"]

ENV_VAR = "STORAGE_ENGINE_CONFIG"
DEFAULT_CONFIG_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include", "config", "storage.yaml")

_SECTIONS = ("broker", "topics", "hosts", "console")
_CONSOLE_KEYS = ("masking",)
# A config is a regular file of at most this many bytes (thousands of topic overrides fit): ``--config /dev/zero``
# or a FIFO is refused at once instead of being read for ever.
MAX_CONFIG_BYTES = 1024 * 1024


def _section(data: Mapping, name: str) -> Mapping:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"'{name}:' must be a mapping, got {type(value).__name__}")
    return value


def _build(data: object, source: str | None, base_dir: str | None) -> StorageConfig:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError("the top level must be a mapping with 'broker:', 'topics:' and 'hosts:', got "
                          f"{type(data).__name__}")
    for key in data:
        if key not in _SECTIONS:
            hint = "broker keys go under 'broker:'" if key in BROKER_KEYS else None
            raise unknown_key(key, _SECTIONS, "top-level", hint)

    values = dict(BROKER_DEFAULTS)
    broker = _section(data, "broker")
    for key, raw in broker.items():
        values[key] = broker_key(key).parse(raw)

    check_compaction_lags(values["log.cleaner.min.compaction.lag.ms"], values["log.cleaner.max.compaction.lag.ms"],
                           "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms")
    dedupe, threads = values["log.cleaner.dedupe.buffer.size"], values["log.cleaner.threads"]
    if dedupe // threads <= MIB:    # KafkaConfig: the dedupe map needs more than 1 MiB per cleaner thread
        raise ConfigError(f"log.cleaner.dedupe.buffer.size = {dedupe}: must be > {MIB} per cleaner thread "
                          f"(log.cleaner.threads = {threads}), i.e. >= {(MIB + 1) * threads}")

    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(source)) if source else os.getcwd()
    dirs_key = "log.dirs" if values["log.dirs"] is not None else "log.dir"   # Kafka: log.dirs wins
    storage = {k.attr: values[k.name] for k in BROKER_KEYS.values() if k.feeds == "storage"}
    configured = "log.dirs" in broker or "log.dir" in broker
    log_dirs = resolve_log_dirs(values[dirs_key], base_dir, dirs_key) if configured else ()
    hosts = resolve_hosts(_section(data, "hosts"), log_dirs, base_dir) if configured else {}
    file_topics = _section(data, "topics")
    console = _section(data, "console")
    for key in console:
        if key not in _CONSOLE_KEYS:
            raise unknown_key(f"console.{key}", tuple(f"console.{k}" for k in _CONSOLE_KEYS), "console")
    stored = topic_store.load(log_dirs)
    built = StorageConfig(
        source=source,
        log_dirs=log_dirs,
        default_log=LogConfig(**log_values(values), partition_leader_epoch=values["log.partition.leader.epoch"]),
        topic_overrides=topic_store.merged(file_topics, stored) if stored else file_topics,  # type: ignore[arg-type]
        dynamic_topics=stored,
        cleaner=CleanerConfig(**{k.attr: values[k.name] for k in BROKER_KEYS.values() if k.feeds == "cleaner"}),
        server={k.name: values[k.name] for k in BROKER_KEYS.values() if k.feeds == "server"},
        remote={k.name: values[k.name] for k in BROKER_KEYS.values() if k.feeds == "remote"},
        hosts=hosts,
        masking=parse_masking(console.get("masking")),
        **storage,
    )
    _check_remote_storage(built)
    if not configured:  # last, so any other mistake in the file is reported first
        raise ConfigError("no log.dirs (or log.dir) is set under 'broker:': refusing to fall back to Kafka's "
                          f"default {BROKER_KEYS['log.dir'].default!r}, which nobody configured")
    return built


def _check_remote_storage(config: StorageConfig) -> None:
    """Kafka's broker-level rules of tiered storage: with it enabled, the object store named well enough to reach it
    and log.local.retention.* within log.retention.* (``validateBrokerLogConfigValues``); with it disabled, no topic has remote.storage.enable=true (Kafka refuses to
    start so: "delete all topics with the property remote.storage.enable=true before disabling tiered storage")."""
    if config.remote_storage_system_enabled:
        check_remote_store(config.remote)
        check_local_retention(config.default_log, prefix="log.")
        return
    for topic in config.topic_overrides:
        if config.log_config(topic).remote_storage_enable:
            where = "set over the wire" if "remote.storage.enable" in config.dynamic_topics.get(topic, {}) \
                else "in 'topics:'"
            raise ConfigError(f"topic {topic!r} has remote.storage.enable = true ({where}) but "
                              "remote.log.storage.system.enable = false: enable tiered storage for the store, or "
                              "turn remote storage off for the topic (with remote.log.delete.on.disable=true)")


def config_from_mapping(data: Mapping | None, source: str | None = None,
                        base_dir: str | None = None) -> StorageConfig:
    """Build and validate a StorageConfig from ``{"broker": {...}, "topics": {...}, "hosts": {...}}``.

    Relative log dirs resolve against ``base_dir``, else the directory of ``source``, else the cwd.
    Raises :class:`ConfigError` (prefixed with ``source`` when given).
    """
    try:
        return _build(data, source, base_dir)
    except ConfigError as exc:
        if source is None:
            raise
        raise ConfigError(f"{source}: {exc}") from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML would silently keep the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:
            continue                    # unhashable; construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str, path: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        text = f"{path}: invalid YAML at {where}: {exc.problem or exc.context}"
        if exc.problem and exc.context and exc.context_mark is not None:
            text += f" ({exc.context} started at line {exc.context_mark.line + 1})"
        raise ConfigError(text) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None


def load_config(path: str | os.PathLike | None = None) -> StorageConfig:
    """Load the YAML config at ``path``, else at ``$STORAGE_ENGINE_CONFIG``, else :data:`DEFAULT_CONFIG_PATH`.

    Raises :class:`ConfigError` for a missing or unreadable file, one that is not a regular file or is larger than
    :data:`MAX_CONFIG_BYTES`, invalid YAML (naming the line) or any invalid key or value.
    """
    origin = ""
    if path is None or os.fspath(path) == "":
        path = os.environ.get(ENV_VAR) or DEFAULT_CONFIG_PATH
        origin = f" (named by ${ENV_VAR})" if os.environ.get(ENV_VAR) else " (the default config)"
    full = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        raw = read_regular_file(full, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {full}{origin}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {full}{origin}: {exc.strerror or exc}") from None
    except UnsafeFileError as exc:
        raise ConfigError(f"cannot read config file {full}{origin}: {exc.reason}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{full}: not UTF-8 text at line {line}") from None
    return config_from_mapping(_load_yaml(text, full), source=full)
