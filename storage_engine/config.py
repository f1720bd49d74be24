"""Storage configuration: Kafka's key names, defaults and precedence, read from one YAML file.

The file has two maps::

    broker:                          # broker keys, named and defaulted as in Kafka's server.properties
      log.dirs: [../../var/logs/dir-a, ../../var/logs/dir-b]   # or "a,b"; relative to this file
      log.segment.bytes: 1048576
      log.retention.hours: 168
    topics:                          # per-topic overrides, with Kafka's topic key names
      user-emails:
        cleanup.policy: compact      # or [compact, delete], or "compact,delete"
        min.cleanable.dirty.ratio: 0.3

Effective value of a topic key for a topic (Kafka's ``ServerTopicConfigSynonyms``): the topic's override,
else the first of the key's broker synonyms that is set, in precedence order (``log.retention.ms`` >
``log.retention.minutes`` > ``log.retention.hours``; ``log.roll.ms`` > ``log.roll.hours``, jitter alike;
``log.flush.interval.ms`` > ``log.flush.scheduler.interval.ms``), else Kafka's default. The last synonym
of every chain has a default, so the chain always ends in a value. A negative broker retention time means
unlimited and becomes -1, as in ``KafkaConfig.logRetentionTimeMillis``.

Every value is checked at load against Kafka's type (INT is 32-bit, LONG 64-bit, DOUBLE, BOOLEAN, STRING,
LIST) and constraint; a failure raises :class:`ConfigError` naming the file, the key, the value and the
allowed range, e.g. ``log.segment.bytes = 5: must be >= 14``. As in a properties file, numbers and
booleans may be written as strings (``"1048576"``, ``"true"``); a float is never accepted for an integer.
Unknown keys are errors (with close matches suggested), so a typo cannot silently fall back to a default.

Stricter than Kafka, where Kafka would accept a value and fail later or misbehave:
``segment.index.bytes`` >= 12 (Kafka: >= 4, then fails creating a time index smaller than one entry);
``log.cleaner.threads`` >= 1 (Kafka: >= 0, then divides by it in its dedupe-buffer check);
``log.cleaner.io.buffer.size`` >= 1; ``cleanup.policy`` must not be empty; duplicate YAML keys and
duplicate log dirs are rejected. ``log.dirs`` (or ``log.dir``) must be set: Kafka falls back to
``/tmp/kafka-logs``, and a store that writes where nobody configured it to (an empty or truncated config file) is
worse than one that refuses. A log dir nested in another (or the same dir twice), and an entry naming an
existing file or device (or a path through one), are rejected too, naming the entry.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import stat
import random
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from storage_engine.errors import ConfigError, InvalidTopicError
from storage_engine.layout import validate_topic

__all__ = [
    "BROKER_KEYS", "TOPIC_KEYS", "DEFAULT_CONFIG_PATH", "ENV_VAR",
    "LogConfig", "CleanerConfig", "StorageConfig", "load_config", "config_from_mapping",
]

ENV_VAR = "STORAGE_ENGINE_CONFIG"
DEFAULT_CONFIG_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include", "config", "storage.yaml")

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MAX = sys.float_info.max
MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

CLEANUP_POLICIES = ("compact", "delete")
COMPRESSION_TYPES = ("uncompressed", "producer", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


# --------------------------------------------------------------------------------------------------------
# Types and constraints. A parser or check raises _Invalid(reason); the caller adds "key = value: ".

class _Invalid(Exception):
    """A value failed a type or range check; the message says what is allowed ("must be >= 14")."""


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


def _parse_integer(raw: object) -> int:
    if isinstance(raw, bool):
        raise _Invalid("must be an integer, not a boolean")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and _INTEGER_TEXT.fullmatch(raw.strip()):
        return int(raw.strip())
    raise _Invalid("must be an integer")


def _parse_double(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise _Invalid("must be a number")
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except (ValueError, OverflowError):
        raise _Invalid("must be a number") from None
    if math.isnan(value):
        raise _Invalid("must be a number, not NaN")
    return value


def _parse_boolean(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise _Invalid("must be true or false")


def _parse_string(raw: object) -> str:
    if not isinstance(raw, str):
        raise _Invalid("must be a string")
    return raw.strip()


def _parse_list(raw: object) -> tuple[str, ...]:
    """A YAML list, or Kafka's comma-separated string ("" is the empty list)."""
    items: list
    if isinstance(raw, os.PathLike):
        items = [os.fspath(raw)]
    elif isinstance(raw, str):
        items = raw.split(",") if raw.strip() else []
    elif isinstance(raw, (list, tuple)):
        items = list(raw)
    else:
        raise _Invalid("must be a list or a comma-separated string")
    out = []
    for item in items:
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str):
            raise _Invalid(f"must be a list of strings, {item!r} is not a string")
        if not item.strip():
            raise _Invalid("has an empty entry")
        out.append(item.strip())
    return tuple(out)


@dataclass(frozen=True)
class _Kind:
    """One of Kafka's ConfigDef types: how to parse a raw value, and the range the type can hold."""

    name: str
    parse: Callable[[object], object]
    lo: int | None = None
    hi: int | None = None

    def bound(self, value):
        if self.lo is not None and value < self.lo:
            raise _Invalid(f"must be >= {self.lo} (Kafka type {self.name})")
        if self.hi is not None and value > self.hi:
            raise _Invalid(f"must be <= {self.hi} (Kafka type {self.name})")
        return value


INT = _Kind("INT", _parse_integer, INT_MIN, INT_MAX)
LONG = _Kind("LONG", _parse_integer, LONG_MIN, LONG_MAX)
DOUBLE = _Kind("DOUBLE", _parse_double)
BOOLEAN = _Kind("BOOLEAN", _parse_boolean)
STRING = _Kind("STRING", _parse_string)
LIST = _Kind("LIST", _parse_list)


@dataclass(frozen=True)
class _Range:
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False

    def __call__(self, value):
        too_low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        if too_low or (self.hi is not None and value > self.hi):
            raise _Invalid(f"must be {self}")
        return value

    def __str__(self) -> str:
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {self.lo}"
        return f"in {'(' if self.lo_open else '['}{self.lo}, {self.hi}]"


def at_least(lo: int) -> _Range:
    return _Range(lo)


def above(lo: float) -> _Range:
    return _Range(lo, lo_open=True)


def between(lo: float, hi: float, lo_open: bool = False) -> _Range:
    return _Range(lo, hi, lo_open)


@dataclass(frozen=True)
class _OneOf:
    values: tuple[str, ...]

    def __call__(self, value: str) -> str:
        if value not in self.values:
            raise _Invalid(f"must be one of {', '.join(self.values)}")
        return value


@dataclass(frozen=True)
class _NonEmptySubsetOf:
    """A list of some of ``values``; returned deduplicated and in the order of ``values``."""

    values: tuple[str, ...]

    def __call__(self, items: tuple[str, ...]) -> tuple[str, ...]:
        if not items or any(item not in self.values for item in items):
            raise _Invalid(f"must be a non-empty list of {', '.join(self.values)}")
        return tuple(v for v in self.values if v in items)


def _unlimited_or_positive(value: int) -> int:
    # KafkaConfig: "log.retention.ms must be unlimited (-1) or, equal or greater than 1"; any negative is -1.
    if value == 0:
        raise _Invalid("must be >= 1, or negative for unlimited")
    return value


def _non_empty(items: tuple[str, ...]) -> tuple[str, ...]:
    if not items:
        raise _Invalid("must name at least one directory")
    return items


def _show(raw: object) -> str:
    return repr(raw) if isinstance(raw, str) else str(raw)


def _parse(key: str, kind: _Kind, check, raw: object):
    """Parse ``raw`` as ``kind``, apply ``check``; ConfigError "key = raw: reason" on failure."""
    try:
        value = kind.parse(raw)
        if check is not None:
            value = check(value)
        return kind.bound(value)
    except _Invalid as exc:
        raise ConfigError(f"{key} = {_show(raw)}: {exc}") from None


# --------------------------------------------------------------------------------------------------------
# The key tables. Every key is declared once, with its Kafka type, default and constraint.

@dataclass(frozen=True)
class _BrokerKey:
    name: str
    kind: _Kind
    default: object          # None: unset, a lower-precedence synonym applies
    check: Callable | None
    feeds: str               # "log": a topic key's synonym (see TOPIC_KEYS); "cleaner"; "storage"; "dirs";
                             # "leader": the partition leader epoch stamped on appends (LogConfig, no topic key)

    @property
    def attr(self) -> str:
        name = self.name.removeprefix("log.cleaner.") if self.feeds == "cleaner" else self.name
        return name.replace(".", "_")

    def parse(self, raw: object):
        if raw is None and self.default is None:
            return None
        return _parse(self.name, self.kind, self.check, raw)


@dataclass(frozen=True)
class _TopicKey:
    name: str
    kind: _Kind
    check: Callable | None
    synonyms: tuple           # broker keys, highest precedence first; (name, unit factor) or name
    negative_is_unlimited: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    def chain(self) -> tuple[tuple[str, int], ...]:
        return tuple((s, 1) if isinstance(s, str) else s for s in self.synonyms)

    def parse(self, raw: object):
        return _parse(self.name, self.kind, self.check, raw)


def _hours(name: str) -> tuple[str, int]:
    return (name, HOUR_MS)


def _minutes(name: str) -> tuple[str, int]:
    return (name, MINUTE_MS)


def _by_name(*keys):
    return types.MappingProxyType({k.name: k for k in keys})


_B = _BrokerKey
BROKER_KEYS: Mapping[str, _BrokerKey] = _by_name(
    # Kafka broker key                              type     Kafka's default      constraint               feeds
    _B("log.dirs",                                  LIST,    None,                _non_empty,              "dirs"),
    _B("log.dir",                                   LIST,    "/tmp/kafka-logs",   _non_empty,              "dirs"),
    _B("log.segment.bytes",                         INT,     GIB,                 at_least(14),            "log"),
    _B("log.roll.ms",                               LONG,    None,                at_least(1),             "log"),
    _B("log.roll.hours",                            INT,     168,                 at_least(1),             "log"),
    _B("log.roll.jitter.ms",                        LONG,    None,                at_least(0),             "log"),
    _B("log.roll.jitter.hours",                     INT,     0,                   at_least(0),             "log"),
    _B("log.index.size.max.bytes",                  INT,     10 * MIB,            at_least(12),            "log"),
    _B("log.index.interval.bytes",                  INT,     4096,                at_least(0),             "log"),
    _B("log.flush.interval.messages",               LONG,    LONG_MAX,            at_least(1),             "log"),
    _B("log.flush.interval.ms",                     LONG,    None,                at_least(0),             "log"),
    _B("log.flush.scheduler.interval.ms",           LONG,    LONG_MAX,            at_least(0),             "storage"),
    _B("log.flush.offset.checkpoint.interval.ms",   INT,     60_000,              at_least(0),             "storage"),
    _B("log.flush.start.offset.checkpoint.interval.ms", INT, 60_000,              at_least(0),             "storage"),
    _B("log.retention.bytes",                       LONG,    -1,                  None,                    "log"),
    _B("log.retention.ms",                          LONG,    None,                _unlimited_or_positive,  "log"),
    _B("log.retention.minutes",                     INT,     None,                _unlimited_or_positive,  "log"),
    _B("log.retention.hours",                       INT,     168,                 _unlimited_or_positive,  "log"),
    _B("log.retention.check.interval.ms",           LONG,    300_000,             at_least(1),             "storage"),
    _B("log.cleanup.policy",                        LIST,    "delete",            _NonEmptySubsetOf(CLEANUP_POLICIES), "log"),
    _B("log.cleaner.delete.retention.ms",           LONG,    86_400_000,          at_least(0),             "log"),
    _B("log.cleaner.min.compaction.lag.ms",         LONG,    0,                   at_least(0),             "log"),
    _B("log.cleaner.max.compaction.lag.ms",         LONG,    LONG_MAX,            at_least(1),             "log"),
    _B("log.cleaner.min.cleanable.ratio",           DOUBLE,  0.5,                 between(0, 1),           "log"),
    _B("log.segment.delete.delay.ms",               LONG,    60_000,              at_least(0),             "log"),
    _B("message.max.bytes",                         INT,     MIB + 12,            at_least(0),             "log"),
    _B("log.preallocate",                           BOOLEAN, False,               None,                    "log"),
    _B("compression.type",                          STRING,  "producer",          _OneOf(COMPRESSION_TYPES), "log"),
    _B("log.message.timestamp.type",                STRING,  "CreateTime",        _OneOf(TIMESTAMP_TYPES), "log"),
    _B("num.recovery.threads.per.data.dir",         INT,     1,                   at_least(1),             "storage"),
    _B("log.cleaner.enable",                        BOOLEAN, True,                None,                    "cleaner"),
    _B("log.cleaner.threads",                       INT,     1,                   at_least(1),             "cleaner"),
    _B("log.cleaner.dedupe.buffer.size",            LONG,    128 * MIB,           None,                    "cleaner"),
    _B("log.cleaner.io.buffer.size",                INT,     512 * KIB,           at_least(1),             "cleaner"),
    _B("log.cleaner.io.buffer.load.factor",         DOUBLE,  0.9,                 between(0, 1, lo_open=True), "cleaner"),
    _B("log.cleaner.io.max.bytes.per.second",       DOUBLE,  DOUBLE_MAX,          above(0),                "cleaner"),
    _B("log.cleaner.backoff.ms",                    LONG,    15_000,              at_least(0),             "cleaner"),
    _B("producer.id.expiration.ms",                 INT,     86_400_000,          at_least(1),             "storage"),
    # Not a Kafka key: the partition leader epoch a broker stamps on every batch it appends. A single broker
    # that is the only leader ever stamps 0; -1 ("unknown") is what a batch carries before a broker sees it.
    _B("log.partition.leader.epoch",                INT,     0,                   at_least(-1),            "leader"),
)

_T = _TopicKey
TOPIC_KEYS: Mapping[str, _TopicKey] = _by_name(
    # Kafka topic key            type     constraint                         broker synonyms, highest precedence first
    _T("segment.bytes",          INT,     at_least(14),                      ("log.segment.bytes",)),
    _T("segment.ms",             LONG,    at_least(1),                       ("log.roll.ms", _hours("log.roll.hours"))),
    _T("segment.jitter.ms",      LONG,    at_least(0),                       ("log.roll.jitter.ms", _hours("log.roll.jitter.hours"))),
    _T("segment.index.bytes",    INT,     at_least(12),                      ("log.index.size.max.bytes",)),
    _T("index.interval.bytes",   INT,     at_least(0),                       ("log.index.interval.bytes",)),
    _T("flush.messages",         LONG,    at_least(1),                       ("log.flush.interval.messages",)),
    _T("flush.ms",               LONG,    at_least(0),                       ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    _T("retention.bytes",        LONG,    None,                              ("log.retention.bytes",)),
    _T("retention.ms",           LONG,    at_least(-1),                      ("log.retention.ms", _minutes("log.retention.minutes"),
                                                                              _hours("log.retention.hours")),
       negative_is_unlimited=True),
    _T("delete.retention.ms",    LONG,    at_least(0),                       ("log.cleaner.delete.retention.ms",)),
    _T("min.compaction.lag.ms",  LONG,    at_least(0),                       ("log.cleaner.min.compaction.lag.ms",)),
    _T("max.compaction.lag.ms",  LONG,    at_least(1),                       ("log.cleaner.max.compaction.lag.ms",)),
    _T("min.cleanable.dirty.ratio", DOUBLE, between(0, 1),                   ("log.cleaner.min.cleanable.ratio",)),
    _T("file.delete.delay.ms",   LONG,    at_least(0),                       ("log.segment.delete.delay.ms",)),
    _T("cleanup.policy",         LIST,    _NonEmptySubsetOf(CLEANUP_POLICIES), ("log.cleanup.policy",)),
    _T("max.message.bytes",      INT,     at_least(0),                       ("message.max.bytes",)),
    _T("preallocate",            BOOLEAN, None,                              ("log.preallocate",)),
    _T("compression.type",       STRING,  _OneOf(COMPRESSION_TYPES),         ("compression.type",)),
    _T("message.timestamp.type", STRING,  _OneOf(TIMESTAMP_TYPES),           ("log.message.timestamp.type",)),
)

# broker key -> the topic key it is a synonym of (for "did you mean" hints)
_TOPIC_KEY_OF: Mapping[str, str] = {b: t.name for t in TOPIC_KEYS.values() for b, _ in t.chain()}


def _unknown_key(key: object, known: Iterable[str], where: str, hint: str | None = None) -> ConfigError:
    if not isinstance(key, str):
        return ConfigError(f"{where} key {key!r} is not a string")
    text = f"unknown {where} key {key!r}"
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    if hint:
        text += f"; {hint}"
    elif close:
        text += f"; did you mean {close[0]}?" if len(close) == 1 else \
            f"; did you mean {', '.join(close[:-1])} or {close[-1]}?"
    return ConfigError(text)


def _broker_key(key: object) -> _BrokerKey:
    spec = BROKER_KEYS.get(key) if isinstance(key, str) else None
    if spec is not None:
        return spec
    hint = None
    if isinstance(key, str) and key in TOPIC_KEYS:
        hint = f"{key} is a topic key, its broker key is {TOPIC_KEYS[key].chain()[0][0]}"
    raise _unknown_key(key, BROKER_KEYS, "broker", hint)


def _topic_key(key: object) -> _TopicKey:
    spec = TOPIC_KEYS.get(key) if isinstance(key, str) else None
    if spec is not None:
        return spec
    hint = None
    if isinstance(key, str) and key in _TOPIC_KEY_OF:
        hint = f"{key} is a broker key, its topic key is {_TOPIC_KEY_OF[key]}"
    elif key in BROKER_KEYS:
        hint = f"{key} is a broker key and cannot be set per topic"
    raise _unknown_key(key, TOPIC_KEYS, "topic", hint)


def _log_values(broker: Mapping[str, Any]) -> dict[str, Any]:
    """LogConfig attributes from complete broker values, following each topic key's synonym chain."""
    out: dict[str, Any] = {}
    for key in TOPIC_KEYS.values():
        for name, factor in key.chain():
            value = broker[name]
            if value is not None:
                break
        value = value * factor if factor != 1 else value
        if key.negative_is_unlimited and value < 0:
            value = -1
        out[key.attr] = value
    return out


_BROKER_DEFAULTS: Mapping[str, Any] = {k.name: k.parse(k.default) for k in BROKER_KEYS.values()}
_LOG_DEFAULTS = _log_values(_BROKER_DEFAULTS)
_CLEANER_DEFAULTS = {k.attr: _BROKER_DEFAULTS[k.name] for k in BROKER_KEYS.values() if k.feeds == "cleaner"}


def _check_compaction_lags(min_lag: int, max_lag: int, min_key: str, max_key: str) -> None:
    # LogConfig.validateValues: min.compaction.lag.ms may not exceed max.compaction.lag.ms.
    if min_lag > max_lag:
        raise ConfigError(f"{min_key} = {min_lag}: must be <= {max_key} = {max_lag}")


# --------------------------------------------------------------------------------------------------------
# The config objects.

@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic's logs (Kafka's ``LogConfig``).

    Attribute names are Kafka's topic keys with ``_``; the defaults are Kafka's, derived from
    :data:`BROKER_KEYS`. Constructing one directly does no validation (handy in tests);
    :meth:`with_overrides` and :func:`config_from_mapping` validate.
    """

    segment_bytes: int = _LOG_DEFAULTS["segment_bytes"]
    segment_ms: int = _LOG_DEFAULTS["segment_ms"]
    segment_jitter_ms: int = _LOG_DEFAULTS["segment_jitter_ms"]
    segment_index_bytes: int = _LOG_DEFAULTS["segment_index_bytes"]
    index_interval_bytes: int = _LOG_DEFAULTS["index_interval_bytes"]
    flush_messages: int = _LOG_DEFAULTS["flush_messages"]
    flush_ms: int = _LOG_DEFAULTS["flush_ms"]
    retention_bytes: int = _LOG_DEFAULTS["retention_bytes"]
    retention_ms: int = _LOG_DEFAULTS["retention_ms"]
    delete_retention_ms: int = _LOG_DEFAULTS["delete_retention_ms"]
    min_compaction_lag_ms: int = _LOG_DEFAULTS["min_compaction_lag_ms"]
    max_compaction_lag_ms: int = _LOG_DEFAULTS["max_compaction_lag_ms"]
    min_cleanable_dirty_ratio: float = _LOG_DEFAULTS["min_cleanable_dirty_ratio"]
    file_delete_delay_ms: int = _LOG_DEFAULTS["file_delete_delay_ms"]
    cleanup_policy: tuple[str, ...] = _LOG_DEFAULTS["cleanup_policy"]   # subset of ("compact", "delete"), in that order
    max_message_bytes: int = _LOG_DEFAULTS["max_message_bytes"]
    preallocate: bool = _LOG_DEFAULTS["preallocate"]
    compression_type: str = _LOG_DEFAULTS["compression_type"]
    message_timestamp_type: str = _LOG_DEFAULTS["message_timestamp_type"]   # "CreateTime" | "LogAppendTime"
    partition_leader_epoch: int = _BROKER_DEFAULTS["log.partition.leader.epoch"]   # broker key only

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

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

        Raises :class:`ConfigError` for an unknown key, a bad value, or min lag > max lag.
        """
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"topic overrides must be a mapping of topic keys, got {type(overrides).__name__}")
        changes = {}
        for key, raw in overrides.items():
            spec = _topic_key(key)
            changes[spec.attr] = spec.parse(raw)
        result = dataclasses.replace(self, **changes)
        _check_compaction_lags(result.min_compaction_lag_ms, result.max_compaction_lag_ms,
                               "min.compaction.lag.ms", "max.compaction.lag.ms")
        return result


@dataclass(frozen=True)
class CleanerConfig:
    """The ``log.cleaner.*`` broker keys that configure compaction itself (Kafka's ``CleanerConfig``)."""

    enable: bool = _CLEANER_DEFAULTS["enable"]
    threads: int = _CLEANER_DEFAULTS["threads"]
    dedupe_buffer_size: int = _CLEANER_DEFAULTS["dedupe_buffer_size"]
    io_buffer_size: int = _CLEANER_DEFAULTS["io_buffer_size"]
    io_buffer_load_factor: float = _CLEANER_DEFAULTS["io_buffer_load_factor"]   # the dedupe map's load factor
    io_max_bytes_per_second: float = _CLEANER_DEFAULTS["io_max_bytes_per_second"]
    backoff_ms: int = _CLEANER_DEFAULTS["backoff_ms"]


@dataclass(frozen=True)
class StorageConfig:
    """Everything one process needs: log dirs, broker-level defaults, per-topic overrides, cleaner settings.

    ``topic_overrides`` maps topic name -> {topic key: parsed value}; it is validated (topic names with
    :func:`layout.validate_topic`, keys and values with :data:`TOPIC_KEYS`) when the object is built.
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
                parsed = {key: _topic_key(key).parse(value) for key, value in (raw or {}).items()}
                logs[topic] = self.default_log.with_overrides(parsed)
            except ConfigError as exc:
                raise ConfigError(f"topic {topic!r}: {exc}") from None
            overrides[topic] = types.MappingProxyType(parsed)
        object.__setattr__(self, "log_dirs", tuple(self.log_dirs))
        object.__setattr__(self, "topic_overrides", types.MappingProxyType(overrides))
        object.__setattr__(self, "_topic_logs", types.MappingProxyType(logs))

    def log_config(self, topic: str) -> LogConfig:
        """The effective LogConfig of ``topic``: its overrides on top of the broker-level defaults."""
        return self._topic_logs.get(validate_topic(topic), self.default_log)

    def replace_log_dirs(self, log_dirs) -> "StorageConfig":
        """A copy using ``log_dirs`` (a list, or a comma-separated string); relative paths resolve against the cwd."""
        entries = _parse("log.dirs", LIST, _non_empty, log_dirs)
        return dataclasses.replace(self, log_dirs=_resolve_log_dirs(entries, os.getcwd(), "log.dirs"))


# --------------------------------------------------------------------------------------------------------
# Building a StorageConfig from a mapping or a file.

_SECTIONS = ("broker", "topics")
_ENV_REFERENCE = re.compile(r"\$(?:\{([^}]*)\}|(\w+))")


def _check_dir_path(entry: str, path: str, key: str) -> None:
    """``path`` must be a directory or not exist yet, and the nearest existing ancestor must be a directory. A path
    that cannot be inspected is left to the process that opens it (see :mod:`storage_engine.log.failure`)."""
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
        if stat.S_ISDIR(mode):
            return
        kind = ("a regular file" if stat.S_ISREG(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "not a directory")
        where = "it" if probe == path else f"{probe}, on its path,"
        raise ConfigError(f"{key} entry {entry!r} ({path}): {where} is {kind}; a log dir must be a directory")


def _resolve_log_dirs(entries: tuple[str, ...], base_dir: str, key: str) -> tuple[str, ...]:
    """Expand ``$VARS`` and ``~``, make relative paths absolute against ``base_dir``; reject duplicates, dirs nested
    in one another, and entries naming a file or a device."""
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
            raise ConfigError(f"{key} = {_show(list(entries))}: {entry!r} and {seen[real]!r} "
                              f"are the same directory ({path})")
        _check_dir_path(entry, path, key)
        for other_real, other in seen.items():
            inner, outer = (real, other_real) if len(real) > len(other_real) else (other_real, real)
            if inner.startswith(outer.rstrip(os.sep) + os.sep):
                first, second = (entry, other) if inner == real else (other, entry)
                raise ConfigError(f"{key} = {_show(list(entries))}: {first!r} lies inside {second!r}; log dirs "
                                  "must not be nested (the inner one would be taken for a partition folder)")
        seen[real] = entry
        resolved.append(path)
    return tuple(resolved)


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
        raise ConfigError(f"the top level must be a mapping with 'broker:' and 'topics:', got {type(data).__name__}")
    for key in data:
        if key not in _SECTIONS:
            hint = "broker keys go under 'broker:'" if key in BROKER_KEYS else None
            raise _unknown_key(key, _SECTIONS, "top-level", hint)

    values = dict(_BROKER_DEFAULTS)
    broker = _section(data, "broker")
    for key, raw in broker.items():
        values[key] = _broker_key(key).parse(raw)

    _check_compaction_lags(values["log.cleaner.min.compaction.lag.ms"], values["log.cleaner.max.compaction.lag.ms"],
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
    built = StorageConfig(
        source=source,
        log_dirs=_resolve_log_dirs(values[dirs_key], base_dir, dirs_key) if configured else (),
        default_log=LogConfig(**_log_values(values), partition_leader_epoch=values["log.partition.leader.epoch"]),
        topic_overrides=_section(data, "topics"),
        cleaner=CleanerConfig(**{k.attr: values[k.name] for k in BROKER_KEYS.values() if k.feeds == "cleaner"}),
        **storage,
    )
    if not configured:  # last, so any other mistake in the file is reported first
        raise ConfigError("no log.dirs (or log.dir) is set under 'broker:': refusing to fall back to Kafka's "
                          f"default {BROKER_KEYS['log.dir'].default!r}, which nobody configured")
    return built


def config_from_mapping(data: Mapping | None, source: str | None = None,
                        base_dir: str | None = None) -> StorageConfig:
    """Build and validate a StorageConfig from ``{"broker": {...}, "topics": {...}}``.

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


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
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

    Raises :class:`ConfigError` for a missing or unreadable file, invalid YAML (naming the line) or any
    invalid key or value.
    """
    origin = ""
    if path is None or os.fspath(path) == "":
        path = os.environ.get(ENV_VAR) or DEFAULT_CONFIG_PATH
        origin = f" (named by ${ENV_VAR})" if os.environ.get(ENV_VAR) else " (the default config)"
    full = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        with open(full, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {full}{origin}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {full}{origin}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{full}: not UTF-8 text at line {line}") from None
    return config_from_mapping(_load_yaml(text, full), source=full)
