"""Kafka's configuration keys: every broker and topic key the engine reads, with its type, default and constraint.

:data:`BROKER_KEYS` (Kafka's ``server.properties`` keys, ``log.*`` and a few others) and :data:`TOPIC_KEYS` (the
per-topic keys) are the one declaration of each key; the config objects (:mod:`storage_engine.config`) take their
defaults from here, and loading (:mod:`storage_engine.config_file`) checks every value here.

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
``log.cleaner.io.buffer.size`` >= 1; ``cleanup.policy`` must not be empty.
"""
from __future__ import annotations

import difflib
import math
import os
import re
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_engine.errors import ConfigError

__all__ = ["BROKER_KEYS", "TOPIC_KEYS", "is_sensitive"]

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

    def bound(self, value: Any) -> Any:
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
# Kafka's PASSWORD: a string never shown (DescribeConfigs answers null with is_sensitive, the console leaves it out).
PASSWORD = _Kind("PASSWORD", _parse_string)


_Number = TypeVar("_Number", int, float)


@dataclass(frozen=True)
class _Range:
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False

    def __call__(self, value: _Number) -> _Number:
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


# authorizer.class.name's values: none, or a Kafka class with StandardAuthorizer's semantics (storage_engine.acl)
AUTHORIZER_CLASSES = ("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "kafka.security.authorizer.AclAuthorizer")


def _authorizer_class(value: str) -> str:
    if value not in AUTHORIZER_CLASSES:
        raise _Invalid(f"no such authorizer: leave it empty for none, or set {AUTHORIZER_CLASSES[1]} "
                       f"(or {AUTHORIZER_CLASSES[2]}, same semantics)")
    return value


def _unlimited_or_positive(value: int) -> int:
    # KafkaConfig: "log.retention.ms must be unlimited (-1) or, equal or greater than 1"; any negative is -1.
    if value == 0:
        raise _Invalid("must be >= 1, or negative for unlimited")
    return value


def non_empty(items: tuple[str, ...]) -> tuple[str, ...]:
    if not items:
        raise _Invalid("must name at least one directory")
    return items


def config_text(value: object) -> str | None:
    """A config value as Kafka's DescribeConfigs prints it: booleans lower case, lists joined by ``,``, None as
    None (a key without a value). The one rendering of a value: the broker's DescribeConfigs
    (:mod:`storage_engine.server.handlers.configs`) and the console's topic and broker pages
    (:mod:`storage_engine.inspection.topics`) both print through it, so they always agree."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def is_sensitive(name: str) -> bool:
    """Whether broker key ``name`` holds a secret (Kafka's PASSWORD type): its value is never displayed."""
    spec = BROKER_KEYS.get(name)
    return spec is not None and spec.kind is PASSWORD


def show_value(raw: object) -> str:
    return repr(raw) if isinstance(raw, str) else str(raw)


def parse_value(key: str, kind: _Kind, check: Callable[[Any], Any] | None, raw: object) -> Any:
    """Parse ``raw`` as ``kind``, apply ``check``; ConfigError "key = raw: reason" on failure."""
    try:
        value = kind.parse(raw)
        if check is not None:
            value = check(value)
        return kind.bound(value)
    except _Invalid as exc:
        shown = "(hidden)" if kind is PASSWORD else show_value(raw)    # a secret is never echoed, not even a bad one
        raise ConfigError(f"{key} = {shown}: {exc}") from None


# --------------------------------------------------------------------------------------------------------
# The key tables. Every key is declared once, with its Kafka type, default and constraint.

@dataclass(frozen=True)
class _BrokerKey:
    name: str
    kind: _Kind
    default: object          # None: unset, a lower-precedence synonym applies
    check: Callable | None
    feeds: str               # "log": a topic key's synonym (see TOPIC_KEYS); "cleaner"; "storage"; "dirs"; "server";
                             # "leader": the partition leader epoch stamped on appends (LogConfig, no topic key);
                             # "remote": tiered storage (StorageConfig.remote, read by storage_engine.tiered.settings)

    @property
    def attr(self) -> str:
        name = self.name.removeprefix("log.cleaner.") if self.feeds == "cleaner" else self.name
        return name.replace(".", "_")

    def parse(self, raw: object) -> Any:
        if raw is None and self.default is None:
            return None
        return parse_value(self.name, self.kind, self.check, raw)


@dataclass(frozen=True)
class _TopicKey:
    name: str
    kind: _Kind
    check: Callable | None
    synonyms: tuple           # broker keys, highest precedence first; (name, unit factor) or name
    negative_is_unlimited: bool = False
    default: object = None    # Kafka's default of a key without a broker synonym (empty ``synonyms``)

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    def chain(self) -> tuple[tuple[str, int], ...]:
        return tuple((s, 1) if isinstance(s, str) else s for s in self.synonyms)

    def parse(self, raw: object) -> Any:
        return parse_value(self.name, self.kind, self.check, raw)


def _hours(name: str) -> tuple[str, int]:
    return (name, HOUR_MS)


def _minutes(name: str) -> tuple[str, int]:
    return (name, MINUTE_MS)


_Key = TypeVar("_Key", "_BrokerKey", "_TopicKey")


def _by_name(*keys: _Key) -> Mapping[str, _Key]:
    return types.MappingProxyType({k.name: k for k in keys})


_B = _BrokerKey
BROKER_KEYS: Mapping[str, _BrokerKey] = _by_name(
    # Kafka broker key                              type     Kafka's default      constraint               feeds
    _B("log.dirs",                                  LIST,    None,                non_empty,              "dirs"),
    _B("log.dir",                                   LIST,    "/tmp/kafka-logs",   non_empty,              "dirs"),
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
    # The Kafka-protocol listener (``serve``): Kafka's keys; the default listener is loopback only (Kafka's binds
    # every interface), and TLS takes PEM files (Kafka's ``ssl.keystore.type=PEM``).
    _B("listeners",                                 STRING,  "PLAINTEXT://127.0.0.1:9092", None,          "server"),
    _B("advertised.listeners",                      STRING,  None,                None,                    "server"),
    _B("node.id",                                   INT,     1,                   at_least(0),             "server"),
    _B("auto.create.topics.enable",                 BOOLEAN, True,                None,                    "server"),
    _B("delete.topic.enable",                       BOOLEAN, True,                None,                    "server"),
    _B("num.partitions",                            INT,     1,                   at_least(1),             "server"),
    _B("socket.request.max.bytes",                  INT,     100 * MIB,           at_least(1),             "server"),
    # Fetch sessions (KIP-227): how many the broker keeps (Kafka's key and default); 0 turns them off.
    _B("max.incremental.fetch.session.cache.slots", INT,     1000,                at_least(0),             "server"),
    # max.connections and queued.max.request.bytes: unset (None) means derived from the machine at start
    # (storage_engine/server/limits.py: open-file limit and memory); Kafka's defaults are unlimited.
    _B("max.connections",                           INT,     None,                at_least(0),             "server"),
    _B("max.connections.per.ip",                    INT,     INT_MAX,             at_least(0),             "server"),
    _B("queued.max.request.bytes",                  LONG,    None,                _unlimited_or_positive,  "server"),
    _B("connections.max.idle.ms",                   LONG,    600_000,             _unlimited_or_positive,  "server"),
    # Not a Kafka key (Kafka has no such timeout): the longest a request frame may take to arrive, from its first
    # byte to its last (time spent waiting for queued.max.request.bytes not counted), and a response to be taken.
    _B("socket.request.receive.timeout.ms",         LONG,    60_000,              _unlimited_or_positive,  "server"),
    _B("sasl.enabled.mechanisms",                   LIST,    "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
       _NonEmptySubsetOf(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),                                   "server"),
    # Not a Kafka key (Kafka takes JAAS config and SCRAM credentials from its controller): a YAML file of users.
    _B("sasl.credentials.file",                     STRING,  None,                None,                    "server"),
    _B("ssl.keystore.location",                     STRING,  None,                None,                    "server"),
    _B("ssl.key.password",                          PASSWORD, None,                None,                    "server"),
    _B("ssl.truststore.location",                   STRING,  None,                None,                    "server"),
    # Authorization (storage_engine.acl): Kafka's keys. Empty authorizer.class.name: no authorizer, everything
    # allowed (Kafka's default); Kafka's StandardAuthorizer (or ZooKeeper-era Kafka's AclAuthorizer) turns ACLs on.
    _B("authorizer.class.name",                     STRING,  "",                  _authorizer_class,       "server"),
    _B("super.users",                               STRING,  None,                None,                    "server"),
    _B("allow.everyone.if.no.acl.found",            BOOLEAN, False,               None,                    "server"),
    # The group coordinator (Kafka's group.* and offsets.* keys and defaults).
    _B("offsets.topic.num.partitions",              INT,     50,                  at_least(1),             "server"),
    _B("offsets.topic.segment.bytes",               INT,     100 * MIB,           at_least(14),            "server"),
    _B("offsets.retention.minutes",                 INT,     10080,               at_least(1),             "server"),
    _B("offsets.retention.check.interval.ms",       LONG,    600_000,             at_least(1),             "server"),
    _B("offset.metadata.max.bytes",                 INT,     4096,                at_least(0),             "server"),
    _B("group.initial.rebalance.delay.ms",          INT,     3000,                at_least(0),             "server"),
    _B("group.min.session.timeout.ms",              INT,     6000,                at_least(0),             "server"),
    _B("group.max.session.timeout.ms",              INT,     1_800_000,           at_least(0),             "server"),
    # The transaction coordinator (Kafka's transaction.* keys and defaults).
    _B("transaction.state.log.num.partitions",      INT,     50,                  at_least(1),             "server"),
    _B("transaction.state.log.segment.bytes",       INT,     100 * MIB,           at_least(14),            "server"),
    _B("transaction.max.timeout.ms",                INT,     900_000,             at_least(1),             "server"),
    _B("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10_000, at_least(1),           "server"),
    _B("transactional.id.expiration.ms",            INT,     604_800_000,         at_least(1),             "server"),
    # How often serve writes each log dir's replication-offset-checkpoint (Kafka's ReplicaManager).
    _B("replica.high.watermark.checkpoint.interval.ms", LONG, 5000,               at_least(1),             "server"),
    _B("ssl.client.auth",                           STRING,  "none",              _OneOf(("none", "requested", "required")),
       "server"),
    # Tiered storage (KIP-405). Local retention of a tiered topic: -2 follows log.retention.* (Kafka's default).
    _B("log.local.retention.ms",                    LONG,    -2,                  at_least(-2),            "log"),
    _B("log.local.retention.bytes",                 LONG,    -2,                  at_least(-2),            "log"),
    _B("remote.log.storage.system.enable",          BOOLEAN, False,               None,                    "remote"),
    # Kafka passes its metadata manager's keys under the rlmm.config. prefix (TopicBasedRemoteLogMetadataManager).
    _B("rlmm.config.remote.log.metadata.topic.num.partitions", INT, 50,           at_least(1),             "remote"),
    _B("remote.log.index.file.cache.total.size.bytes", LONG, GIB,                 at_least(1),             "remote"),
    # The object store, under Kafka's rsm.config. prefix with the names of Aiven's S3 RemoteStorageManager (both
    # credentials are PASSWORD there too). No endpoint: AWS's own; the bucket is never created by the engine.
    _B("rsm.config.storage.s3.endpoint.url",        STRING,  None,                None,                    "remote"),
    _B("rsm.config.storage.s3.bucket.name",         STRING,  None,                None,                    "remote"),
    _B("rsm.config.storage.s3.region",              STRING,  "us-east-1",         None,                    "remote"),
    _B("rsm.config.storage.s3.path.style.access.enabled", BOOLEAN, True,          None,                    "remote"),
    _B("rsm.config.storage.aws.access.key.id",      PASSWORD, None,               None,                    "remote"),
    _B("rsm.config.storage.aws.secret.access.key",  PASSWORD, None,               None,                    "remote"),
    _B("rsm.config.key.prefix",                     STRING,  "",                  None,                    "remote"),
    # Aiven's chunk cache of remote segment bytes; its folder defaults to <first log dir>/remote-log-index-cache,
    # the folder Kafka keeps its remote index cache in (and skips when it scans a log dir).
    _B("rsm.config.fetch.chunk.cache.size",         LONG,    256 * MIB,           at_least(1),             "remote"),
    _B("rsm.config.fetch.chunk.cache.path",         STRING,  None,                None,                    "remote"),
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
    # Tiered storage (KIP-405); the three switches have no broker synonym in Kafka.
    _T("remote.storage.enable",  BOOLEAN, None,                              (), default=False),
    _T("local.retention.ms",     LONG,    at_least(-2),                      ("log.local.retention.ms",)),
    _T("local.retention.bytes",  LONG,    at_least(-2),                      ("log.local.retention.bytes",)),
    _T("remote.log.copy.disable", BOOLEAN, None,                             (), default=False),
    _T("remote.log.delete.on.disable", BOOLEAN, None,                        (), default=False),
)

# broker key -> the topic key it is a synonym of (for "did you mean" hints)
_TOPIC_KEY_OF: Mapping[str, str] = {b: t.name for t in TOPIC_KEYS.values() for b, _ in t.chain()}


def unknown_key(key: object, known: Iterable[str], where: str, hint: str | None = None) -> ConfigError:
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


def broker_key(key: object) -> _BrokerKey:
    spec = BROKER_KEYS.get(key) if isinstance(key, str) else None
    if spec is not None:
        return spec
    hint = None
    if isinstance(key, str) and key in TOPIC_KEYS:
        chain = TOPIC_KEYS[key].chain()
        hint = (f"{key} is a topic key, its broker key is {chain[0][0]}" if chain
                else f"{key} is a topic key and has no broker key (set it per topic)")
    raise unknown_key(key, BROKER_KEYS, "broker", hint)


def topic_key(key: object) -> _TopicKey:
    spec = TOPIC_KEYS.get(key) if isinstance(key, str) else None
    if spec is not None:
        return spec
    hint = None
    if isinstance(key, str) and key in _TOPIC_KEY_OF:
        hint = f"{key} is a broker key, its topic key is {_TOPIC_KEY_OF[key]}"
    elif key in BROKER_KEYS:
        hint = f"{key} is a broker key and cannot be set per topic"
    raise unknown_key(key, TOPIC_KEYS, "topic", hint)


def log_values(broker: Mapping[str, Any]) -> dict[str, Any]:
    """LogConfig attributes from complete broker values, following each topic key's synonym chain."""
    out: dict[str, Any] = {}
    for key in TOPIC_KEYS.values():
        value: Any = key.default
        factor = 1
        for name, factor in key.chain():
            value = broker[name]
            if value is not None:
                break
        value = value * factor if factor != 1 else value
        if key.negative_is_unlimited and value < 0:
            value = -1
        out[key.attr] = value
    return out


BROKER_DEFAULTS: Mapping[str, Any] = {k.name: k.parse(k.default) for k in BROKER_KEYS.values()}
LOG_DEFAULTS = log_values(BROKER_DEFAULTS)
CLEANER_DEFAULTS = {k.attr: BROKER_DEFAULTS[k.name] for k in BROKER_KEYS.values() if k.feeds == "cleaner"}


def check_compaction_lags(min_lag: int, max_lag: int, min_key: str, max_key: str) -> None:
    # LogConfig.validateValues: min.compaction.lag.ms may not exceed max.compaction.lag.ms.
    if min_lag > max_lag:
        raise ConfigError(f"{min_key} = {min_lag}: must be <= {max_key} = {max_lag}")
