"""The storage configuration objects, frozen and typed: :class:`LogConfig` (one topic's effective configuration,
Kafka's ``LogConfig``), :class:`CleanerConfig` (Kafka's ``CleanerConfig``) and :class:`StorageConfig` (everything
one process needs).

Their keys, Kafka's defaults and the checks of every value are in :mod:`storage_engine.config_keys`; reading them
from the YAML file is :mod:`storage_engine.config_file`.

Log dirs are resolved when a config is built: ``$VARS`` and ``~`` expanded, relative paths made absolute. Stricter
than Kafka: the same dir named twice, a log dir nested in another, and an entry naming a device (or a path through
one) are rejected, naming the entry. An entry naming a regular file (or a path through one), or a dir that cannot be
read, is valid configuration: as in Kafka, the process that opens it takes that dir offline and the others serve.

A store whose log dirs are spread over several storage hosts says which host has which dir (``hosts:``,
:func:`resolve_hosts`): every log dir on exactly one host; :meth:`StorageConfig.for_host` is one host's part.
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
import stat
import types
from urllib.parse import urlsplit
from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass, field

from storage_engine.config_keys import (LIST, BROKER_DEFAULTS, CLEANER_DEFAULTS, LOG_DEFAULTS,
                                        check_compaction_lags, non_empty, parse_value, show_value, topic_key)
from storage_engine.errors import ConfigError, InvalidTopicError
from storage_engine.layout import validate_topic
from storage_engine.masking import MaskRule

__all__ = ["LogConfig", "CleanerConfig", "StorageConfig"]


# --------------------------------------------------------------------------------------------------------
# The config objects.

@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic's logs (Kafka's ``LogConfig``).

    Attribute names are Kafka's topic keys with ``_``; the defaults are Kafka's, derived from
    :data:`~storage_engine.config_keys.BROKER_KEYS`. Constructing one directly does no validation (handy in tests);
    :meth:`with_overrides` and :func:`~storage_engine.config_file.config_from_mapping` validate.
    """

    segment_bytes: int = LOG_DEFAULTS["segment_bytes"]
    segment_ms: int = LOG_DEFAULTS["segment_ms"]
    segment_jitter_ms: int = LOG_DEFAULTS["segment_jitter_ms"]
    segment_index_bytes: int = LOG_DEFAULTS["segment_index_bytes"]
    index_interval_bytes: int = LOG_DEFAULTS["index_interval_bytes"]
    flush_messages: int = LOG_DEFAULTS["flush_messages"]
    flush_ms: int = LOG_DEFAULTS["flush_ms"]
    retention_bytes: int = LOG_DEFAULTS["retention_bytes"]
    retention_ms: int = LOG_DEFAULTS["retention_ms"]
    delete_retention_ms: int = LOG_DEFAULTS["delete_retention_ms"]
    min_compaction_lag_ms: int = LOG_DEFAULTS["min_compaction_lag_ms"]
    max_compaction_lag_ms: int = LOG_DEFAULTS["max_compaction_lag_ms"]
    min_cleanable_dirty_ratio: float = LOG_DEFAULTS["min_cleanable_dirty_ratio"]
    file_delete_delay_ms: int = LOG_DEFAULTS["file_delete_delay_ms"]
    cleanup_policy: tuple[str, ...] = LOG_DEFAULTS["cleanup_policy"]   # subset of ("compact", "delete"), in that order
    max_message_bytes: int = LOG_DEFAULTS["max_message_bytes"]
    preallocate: bool = LOG_DEFAULTS["preallocate"]
    compression_type: str = LOG_DEFAULTS["compression_type"]
    message_timestamp_type: str = LOG_DEFAULTS["message_timestamp_type"]   # "CreateTime" | "LogAppendTime"
    # Tiered storage (KIP-405): local.retention.* -2 follows retention.* (see effective_local_retention_*).
    remote_storage_enable: bool = LOG_DEFAULTS["remote_storage_enable"]
    local_retention_ms: int = LOG_DEFAULTS["local_retention_ms"]
    local_retention_bytes: int = LOG_DEFAULTS["local_retention_bytes"]
    remote_log_copy_disable: bool = LOG_DEFAULTS["remote_log_copy_disable"]
    remote_log_delete_on_disable: bool = LOG_DEFAULTS["remote_log_delete_on_disable"]
    partition_leader_epoch: int = BROKER_DEFAULTS["log.partition.leader.epoch"]   # broker key only

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def effective_local_retention_ms(self) -> int:
        """Kafka's ``localRetentionMs``: ``local.retention.ms``, or ``retention.ms`` when it is -2."""
        return self.retention_ms if self.local_retention_ms == LOCAL_FOLLOWS_RETENTION else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """Kafka's ``localRetentionBytes``: ``local.retention.bytes``, or ``retention.bytes`` when it is -2."""
        return (self.retention_bytes if self.local_retention_bytes == LOCAL_FOLLOWS_RETENTION
                else self.local_retention_bytes)

    def random_segment_jitter_ms(self) -> int:
        """Kafka's ``randomSegmentJitter``: drawn for every segment opened, in [0, min(segment.jitter.ms,
        segment.ms))."""
        jitter = self.segment_jitter_ms
        return random.randrange(min(jitter, self.segment_ms)) if jitter > 0 else 0

    @property
    def initial_file_bytes(self) -> int:
        """Bytes a new ``.log`` is preallocated to: ``segment.bytes`` with ``preallocate=true``, else 0."""
        return self.segment_bytes if self.preallocate else 0

    def with_overrides(self, overrides: Mapping[str, object] | None) -> "LogConfig":
        """This config with topic-key ``overrides`` applied (Kafka's names, e.g. ``{"retention.ms": 1000}``).

        Raises :class:`ConfigError` for an unknown key, a bad value, min lag > max lag, or a combination Kafka
        refuses for a topic with remote storage (:func:`check_remote_storage`).
        """
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"topic overrides must be a mapping of topic keys, got {type(overrides).__name__}")
        changes = {}
        for key, raw in overrides.items():
            spec = topic_key(key)
            changes[spec.attr] = spec.parse(raw)
        result = dataclasses.replace(self, **changes)
        check_compaction_lags(result.min_compaction_lag_ms, result.max_compaction_lag_ms,
                               "min.compaction.lag.ms", "max.compaction.lag.ms")
        check_remote_storage(result)
        return result


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")    # S3's bucket naming rules (3 to 63 characters)
LOCAL_FOLLOWS_RETENTION = -2     # local.retention.* = -2: the local log follows retention.* (Kafka's default)


def check_local_retention(log: LogConfig, prefix: str = "") -> None:
    """Kafka's rule (``LogConfig.validateRemoteStorageRetentionSize``/``Time``): ``local.retention.*`` must not be
    more than ``retention.*`` and must not be -1 (unlimited) while ``retention.*`` is limited; -2 follows it.
    ``prefix`` "log." names the broker keys (checked when the store has remote storage on)."""
    for unit, limit, local in (("bytes", log.retention_bytes, log.local_retention_bytes),
                               ("ms", log.retention_ms, log.local_retention_ms)):
        if limit <= -1 or local == LOCAL_FOLLOWS_RETENTION:
            continue
        local_key, key = f"{prefix}local.retention.{unit}", f"{prefix}retention.{unit}"
        if local == -1:
            raise ConfigError(f"{local_key} = -1: must not be -1 (unlimited) as {key} is set as {limit}; "
                              f"use -2 to follow {key}")
        if local > limit:
            raise ConfigError(f"{local_key} = {local}: must not be more than {key} = {limit} (the local log is "
                              "part of the whole log)")


def check_remote_storage(log: LogConfig) -> None:
    """Kafka's rules for a topic with ``remote.storage.enable=true`` (``LogConfig.validateTopicLogConfigValues``):
    not compacted, local retention within retention, and with ``remote.log.copy.disable=true`` local retention
    equal to retention (nothing more is copied)."""
    if not log.remote_storage_enable:
        return
    if log.compact:
        raise ConfigError(f"remote.storage.enable = true: remote log storage is unsupported for compacted topics "
                          f"(cleanup.policy = {','.join(log.cleanup_policy)}); set cleanup.policy=delete or "
                          "remote.storage.enable=false")
    check_local_retention(log)
    if log.remote_log_copy_disable:
        for unit, limit, local in (("bytes", log.retention_bytes, log.local_retention_bytes),
                                   ("ms", log.retention_ms, log.local_retention_ms)):
            if local not in (LOCAL_FOLLOWS_RETENTION, limit):
                raise ConfigError(f"local.retention.{unit} = {local}: must equal retention.{unit} = {limit} (or be "
                                  f"-2) while remote.log.copy.disable = true: nothing more is copied to remote storage")


def check_remote_storage_change(was_enabled: bool, new: LogConfig) -> None:
    """Kafka's rule when a topic's configs change (``validateTurningOffRemoteStorageWithDelete``): remote storage is
    turned off only together with ``remote.log.delete.on.disable=true``, which deletes the remote data."""
    if was_enabled and not new.remote_storage_enable and not new.remote_log_delete_on_disable:
        raise ConfigError("remote.storage.enable = false: it is invalid to disable remote storage without deleting "
                          "remote data; to keep the remote data read-only set remote.storage.enable=true and "
                          "remote.log.copy.disable=true, to delete it set remote.storage.enable=false and "
                          "remote.log.delete.on.disable=true")


def check_remote_store(remote: Mapping[str, Any]) -> None:
    """With ``remote.log.storage.system.enable``, the object store must be named well enough to reach it: an
    http(s) endpoint URL, a valid S3 bucket name, both credentials or neither. ConfigError naming the key."""
    endpoint = remote.get("rsm.config.storage.s3.endpoint.url") or None
    bucket = remote.get("rsm.config.storage.s3.bucket.name") or ""
    key_id = remote.get("rsm.config.storage.aws.access.key.id") or None
    secret = remote.get("rsm.config.storage.aws.secret.access.key") or None
    on = "remote.log.storage.system.enable = true"
    if not endpoint:
        raise ConfigError(f"{on} but rsm.config.storage.s3.endpoint.url is not set: name the object store "
                          "(e.g. http://127.0.0.1:8333)")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"rsm.config.storage.s3.endpoint.url = {endpoint!r}: must be an http:// or https:// URL "
                          "with a host")
    try:
        parts.port        # raises ValueError for a port that is not a number in range
    except ValueError:
        raise ConfigError(f"rsm.config.storage.s3.endpoint.url = {endpoint!r}: the port is not valid") from None
    if not bucket:
        raise ConfigError(f"{on} but rsm.config.storage.s3.bucket.name is not set: name the bucket (the engine "
                          "never creates one)")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(f"rsm.config.storage.s3.bucket.name = {bucket!r}: not a valid S3 bucket name (3 to 63 "
                          "lower-case letters, digits, '.' or '-', starting and ending with a letter or digit)")
    if (key_id is None) != (secret is None):
        given, missing = (("rsm.config.storage.aws.access.key.id", "rsm.config.storage.aws.secret.access.key")
                          if secret is None else
                          ("rsm.config.storage.aws.secret.access.key", "rsm.config.storage.aws.access.key.id"))
        raise ConfigError(f"{given} is set but {missing} is not: give both credentials or neither")


def check_remote_storage_allowed(log: LogConfig, system_enabled: bool) -> None:
    """Kafka's ``validateRemoteStorageOnlyIfSystemEnabled``: a topic enables remote storage only on a store with
    ``remote.log.storage.system.enable=true``."""
    if log.remote_storage_enable and not system_enabled:
        raise ConfigError("remote.storage.enable = true: tiered storage is disabled for this store "
                          "(remote.log.storage.system.enable = false); a topic cannot be configured with remote log "
                          "storage until it is enabled")


@dataclass(frozen=True)
class CleanerConfig:
    """The ``log.cleaner.*`` broker keys that configure compaction itself (Kafka's ``CleanerConfig``)."""

    enable: bool = CLEANER_DEFAULTS["enable"]
    threads: int = CLEANER_DEFAULTS["threads"]
    dedupe_buffer_size: int = CLEANER_DEFAULTS["dedupe_buffer_size"]
    io_buffer_size: int = CLEANER_DEFAULTS["io_buffer_size"]
    io_buffer_load_factor: float = CLEANER_DEFAULTS["io_buffer_load_factor"]   # the dedupe map's load factor
    io_max_bytes_per_second: float = CLEANER_DEFAULTS["io_max_bytes_per_second"]
    backoff_ms: int = CLEANER_DEFAULTS["backoff_ms"]


@dataclass(frozen=True)
class StorageConfig:
    """Everything one process needs: log dirs, broker-level defaults, per-topic overrides, cleaner settings.

    ``topic_overrides`` maps topic name -> {topic key: parsed value}; it is validated (topic names with
    :func:`layout.validate_topic`, keys and values with :data:`~storage_engine.config_keys.TOPIC_KEYS`) when the
    object is built.
    """

    source: str | None
    log_dirs: tuple[str, ...]
    default_log: LogConfig
    topic_overrides: Mapping[str, Mapping[str, object]] = field(hash=False)
    cleaner: CleanerConfig
    num_recovery_threads_per_data_dir: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    producer_id_expiration_ms: int
    # The Kafka-protocol listener's keys (``listeners``, ``node.id``, ...; see BROKER_KEYS, feeds "server").
    server: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # Topic configs set over the wire (:mod:`storage_engine.topic_store`), already merged into topic_overrides:
    # kept apart so a describe can name each value's source.
    dynamic_topics: Mapping[str, Mapping[str, object]] = field(default_factory=dict, hash=False, compare=False)
    # Which storage host has which log dirs (the file's ``hosts:``; empty when it has none): {host: (dir, ...)}, each
    # log dir under exactly one host, spelled as in ``log_dirs`` (:func:`resolve_hosts` checks it).
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # In one host's part of the store (:meth:`for_host`): the log dirs of the other hosts. A topic filter naming a
    # topic that only they hold gives this host nothing to do rather than "unknown topic".
    other_host_dirs: tuple[str, ...] = field(default=(), hash=False, compare=False)
    # Tiered storage's broker keys (BROKER_KEYS feeding "remote": remote.log.storage.system.enable, rsm.config.*,
    # ...), by Kafka name; storage_engine.tiered.settings.RemoteStorageSettings reads them.
    remote: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # The console's masking rules (the file's ``console.masking``, :mod:`storage_engine.masking`): which values the
    # consoles show masked to readers without the right to read them in clear. The engine itself never masks.
    masking: tuple[MaskRule, ...] = field(default=(), hash=False, compare=False)
    _topic_logs: Mapping[str, LogConfig] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        overrides, logs = {}, {}
        for topic, raw in (self.topic_overrides or {}).items():
            try:
                validate_topic(topic)
            except InvalidTopicError as exc:
                hint = " (quote it in YAML)" if not isinstance(topic, str) else ""
                raise ConfigError(f"topics: {exc}{hint}") from None
            if raw is not None and not isinstance(raw, Mapping):
                raise ConfigError(f"topic {topic!r}: overrides must be a mapping of topic keys, "
                                  f"got {type(raw).__name__}")
            try:
                parsed = {key: topic_key(key).parse(value) for key, value in (raw or {}).items()}
                logs[topic] = self.default_log.with_overrides(parsed)
            except ConfigError as exc:
                raise ConfigError(f"topic {topic!r}: {exc}") from None
            overrides[topic] = types.MappingProxyType(parsed)
        object.__setattr__(self, "log_dirs", tuple(self.log_dirs))
        object.__setattr__(self, "hosts", types.MappingProxyType({h: tuple(d) for h, d in self.hosts.items()}))
        object.__setattr__(self, "topic_overrides", types.MappingProxyType(overrides))
        object.__setattr__(self, "_topic_logs", types.MappingProxyType(logs))

    def log_config(self, topic: str) -> LogConfig:
        """The effective LogConfig of ``topic``: its overrides on top of the broker-level defaults."""
        return self._topic_logs.get(validate_topic(topic), self.default_log)

    @property
    def remote_storage_system_enabled(self) -> bool:
        """The broker key ``remote.log.storage.system.enable`` (False when the config has no remote keys)."""
        return bool(self.remote.get("remote.log.storage.system.enable", False))

    def check_topic_configs(self, topic: str, overrides: Mapping[str, object], *, creating: bool) -> LogConfig:
        """The LogConfig ``topic`` would have with ``overrides`` (Kafka topic keys, raw or parsed) as its configs
        set over the wire, checked by Kafka's rules for CreateTopics (``creating``) or IncrementalAlterConfigs:
        every value, the combinations (:meth:`LogConfig.with_overrides`), remote storage only when the store has it
        enabled, and remote storage turned off only with ``remote.log.delete.on.disable``. Raises ConfigError."""
        dynamic = self.dynamic_topics.get(topic, {})
        from_file = {k: v for k, v in self.topic_overrides.get(topic, {}).items() if k not in dynamic}
        new = self.default_log.with_overrides({**from_file, **overrides})
        check_remote_storage_allowed(new, self.remote_storage_system_enabled)
        if not creating:
            check_remote_storage_change(self.log_config(topic).remote_storage_enable, new)
        return new

    def replace_log_dirs(self, log_dirs: object) -> "StorageConfig":
        """A copy using ``log_dirs`` (a list, or a comma-separated string); relative paths resolve against the cwd."""
        entries = parse_value("log.dirs", LIST, non_empty, log_dirs)
        # The hosts named the dirs replaced: the copy declares none.
        return dataclasses.replace(self, log_dirs=resolve_log_dirs(entries, os.getcwd(), "log.dirs"), hosts={},
                                   other_host_dirs=())

    def for_host(self, host: str) -> "StorageConfig":
        """A copy with only the log dirs of storage ``host`` (see ``hosts``): what a process on that host
        maintains. Raises :class:`ConfigError` when the config declares no such host."""
        if host not in self.hosts:
            declared = ", ".join(map(repr, self.hosts)) or "none"
            raise ConfigError(f"storage host {host!r} is not declared under 'hosts:' (declared: {declared})")
        others = tuple(d for h, dirs in self.hosts.items() if h != host for d in dirs)
        return dataclasses.replace(self, log_dirs=self.hosts[host], hosts={host: self.hosts[host]},
                                   other_host_dirs=others)


# --------------------------------------------------------------------------------------------------------
# Resolving log dirs.

_ENV_REFERENCE = re.compile(r"\$(?:\{([^}]*)\}|(\w+))")


def _check_dir_path(entry: str, path: str, key: str) -> None:
    """``path`` must not be a device nor lie under one: naming ``/dev/sdb`` for its mount point is a mistake in the
    configuration. Anything else that is no directory (a regular file, a file on the path) or cannot be inspected is
    a dir failure, not a mistake in the configuration: the process that opens it takes that dir offline and the
    others serve, as Kafka starts with its healthy dirs (see :mod:`storage_engine.log.failure`)."""
    probe = path
    while True:
        try:
            mode = os.stat(probe).st_mode
        except (FileNotFoundError, NotADirectoryError):  # absent, or a file on the way: look further up
            parent = os.path.dirname(probe)
            if parent == probe:
                return
            probe = parent
            continue
        except OSError:
            # Unreadable (a permission, a link loop, a failing disk): not a mistake in the configuration but a dir
            # failure, which takes that dir offline in the process that opens it while the others keep working.
            return
        if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
            return
        where = "it" if probe == path else f"{probe}, on its path,"
        raise ConfigError(f"{key} entry {entry!r} ({path}): {where} is a device; a log dir must be a directory")


def resolve_log_dirs(entries: tuple[str, ...], base_dir: str, key: str) -> tuple[str, ...]:
    """Expand ``$VARS`` and ``~``, make relative paths absolute against ``base_dir``; reject duplicates, dirs nested
    in one another, and entries naming a device (an entry naming a regular file is a dir that goes offline)."""
    resolved: list[str] = []
    seen: dict[str, str] = {}
    for entry in entries:
        for match in _ENV_REFERENCE.finditer(entry):
            var = match.group(1) if match.group(1) is not None else match.group(2)
            if var not in os.environ:
                raise ConfigError(f"{key} = {entry!r}: environment variable ${var} is not set")
        path = os.path.expanduser(os.path.expandvars(entry))
        path = os.path.normpath(os.path.join(os.path.abspath(base_dir), path))
        real = os.path.realpath(path)
        if real in seen:
            raise ConfigError(f"{key} = {show_value(list(entries))}: {entry!r} and {seen[real]!r} "
                              f"are the same directory ({path})")
        _check_dir_path(entry, path, key)
        for other_real, other in seen.items():
            inner, outer = (real, other_real) if len(real) > len(other_real) else (other_real, real)
            if inner.startswith(outer.rstrip(os.sep) + os.sep):
                first, second = (entry, other) if inner == real else (other, entry)
                raise ConfigError(f"{key} = {show_value(list(entries))}: {first!r} lies inside {second!r}; log dirs "
                                  "must not be nested (the inner one would be taken for a partition folder)")
        seen[real] = entry
        resolved.append(path)
    return tuple(resolved)


# A host's name is the Celery queue its workers listen on and the Airflow task group of its tasks.
_HOST_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")
DEFAULT_QUEUE = "default"     # Airflow's queue for tasks that touch no log dir, which every worker listens on


def resolve_hosts(section: Mapping, log_dirs: tuple[str, ...], base_dir: str) -> dict[str, tuple[str, ...]]:
    """The ``hosts:`` section ({host: [dir, ...]}) checked against the resolved ``log_dirs``: host names fit a
    Celery queue and an Airflow task group id, each host lists at least one dir (resolved as ``log.dirs`` are), every
    dir is one of ``log_dirs`` and every one of ``log_dirs`` is on exactly one host. An empty section: no hosts."""
    if not section:
        return {}
    known = {os.path.realpath(d): d for d in log_dirs}
    owner: dict[str, str] = {}
    hosts: dict[str, tuple[str, ...]] = {}
    for name, raw in section.items():
        if not isinstance(name, str) or not _HOST_NAME.fullmatch(name):
            hint = " (quote it in YAML)" if not isinstance(name, str) else ""
            raise ConfigError(f"hosts: {name!r} is not a valid host name{hint}: it names the host's Celery queue and "
                              "Airflow task group, so 1 to 200 letters, digits, '-' or '_'")
        if name == DEFAULT_QUEUE:
            raise ConfigError(f"hosts: a host cannot be named {DEFAULT_QUEUE!r}: that is the Celery queue every "
                              "worker listens on; name the storage host")
        key = f"hosts.{name}"
        entries = parse_value(key, LIST, non_empty, raw)
        dirs = []
        for entry, path in zip(entries, resolve_log_dirs(entries, base_dir, key)):
            log_dir = known.get(os.path.realpath(path))
            if log_dir is None:
                raise ConfigError(f"{key}: {entry!r} ({path}) is not one of log.dirs "
                                  f"({', '.join(log_dirs)}); a host lists its log dirs as log.dirs names them")
            if log_dir in owner:
                raise ConfigError(f"hosts: log dir {log_dir} is listed under both {owner[log_dir]!r} and {name!r}; "
                                  "a log dir is on one host")
            owner[log_dir] = name
            dirs.append(log_dir)
        hosts[name] = tuple(dirs)
    missing = [d for d in log_dirs if d not in owner]
    if missing:
        raise ConfigError(f"hosts: log dir{'s' if len(missing) > 1 else ''} {', '.join(missing)} of log.dirs "
                          f"{'are' if len(missing) > 1 else 'is'} on no host; list each log dir under the host "
                          "that has it")
    return hosts
