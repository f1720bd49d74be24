"""Topic facts for operators: the topics of the log dirs with their size, and every config of a topic with the
place its value comes from, as Kafka's ``DescribeConfigs`` names it.

A topic config's value comes from, first match wins (:mod:`storage_engine.config_keys`):

* a **topic override** (Kafka's ``DYNAMIC_TOPIC_CONFIG``): the config file's ``topics:`` section, or a value set
  over the wire (``CreateTopics``, ``IncrementalAlterConfigs``; :mod:`storage_engine.topic_store`), which wins;
* a **broker override** (``STATIC_BROKER_CONFIG``): the first of the key's broker synonyms set under
  ``broker:`` in the config file (``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``);
* **Kafka's default** (``DEFAULT_CONFIG``).

Which broker keys the file sets is read from the file itself (:attr:`StorageConfig.source`); a config built
from a mapping, or a file that can no longer be read, falls back to comparing the effective broker value with
Kafka's default. Broker configs (:func:`broker_configs`) are told apart the same way.

Read-only, like the rest of :mod:`storage_engine.inspection`: folders are listed and ``stat``-ed, nothing is
opened for writing. Topic names starting with ``__`` are the broker's own (``__consumer_offsets``,
``__transaction_state``) and are marked ``internal``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.config_file import MAX_CONFIG_BYTES
from storage_engine.config_keys import BROKER_DEFAULTS, BROKER_KEYS, LOG_DEFAULTS, TOPIC_KEYS, config_text, is_sensitive
from storage_engine.durable import read_regular_file
from storage_engine.errors import PartitionNotFoundError, StorageError
from storage_engine.inspection.listing import PartitionStatus, list_partition_status

TOPIC_OVERRIDE = "topic override"
BROKER_OVERRIDE = "broker override"
KAFKA_DEFAULT = "Kafka default"
KAFKA_SOURCES = {TOPIC_OVERRIDE: "DYNAMIC_TOPIC_CONFIG", BROKER_OVERRIDE: "STATIC_BROKER_CONFIG",
                 KAFKA_DEFAULT: "DEFAULT_CONFIG"}
MAX_TOPIC_PARTITIONS = 100_000


class ConfigEntry(TypedDict):
    name: str
    value: str | None               # as Kafka's DescribeConfigs prints it (booleans lower case, lists joined by ",")
    source: str                     # TOPIC_OVERRIDE, BROKER_OVERRIDE or KAFKA_DEFAULT
    kafka_source: str               # DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG
    set_by: str | None              # "config file", "set over the wire", or the broker key that set it ("log.retention.hours")
    kafka_default: str | None
    differs: bool                   # the value is not Kafka's default


class TopicSummary(TypedDict):
    topic: str
    internal: bool
    partitions: int
    size_bytes: int                 # live segments' .log files
    segments: int
    deleted_bytes: int              # .deleted files awaiting purge
    log_dirs: list[str]
    cleanup_policy: str
    overrides: int                  # topic overrides (config file and over the wire)
    declared: bool                  # named in the config file's topics:


class TopicDetail(TopicSummary):
    records: int                    # sum of (log end offset - log start offset): offsets, compaction leaves gaps
    partition_list: list[PartitionStatus]
    configs: list[ConfigEntry]


def broker_keys_set(config: StorageConfig) -> dict[str, object] | None:
    """The raw ``broker:`` section of the config file, or None when there is no file to read it from."""
    return _file_section(config, "broker")


def _file_section(config: StorageConfig, name: str) -> dict[str, object] | None:
    if not config.source:
        return None
    import yaml
    try:
        data = yaml.safe_load(read_regular_file(config.source, MAX_CONFIG_BYTES))
    except (OSError, StorageError, yaml.YAMLError):
        return None
    section = data.get(name) if isinstance(data, Mapping) else None
    return dict(section) if isinstance(section, Mapping) else {}


def topic_configs(config: StorageConfig, topic: str, *, broker_keys: dict[str, object] | None = None) -> list[ConfigEntry]:
    """Every topic config of ``topic`` (Kafka's topic keys, in :data:`TOPIC_KEYS` order) with its value and
    source; ``broker_keys``: :func:`broker_keys_set`, read once by a caller that asks for many topics."""
    layout.validate_topic(topic)
    if broker_keys is None:
        broker_keys = broker_keys_set(config)
    effective = config.log_config(topic)
    overrides = config.topic_overrides.get(topic, {})
    dynamic = config.dynamic_topics.get(topic, {})
    out: list[ConfigEntry] = []
    for name, spec in TOPIC_KEYS.items():
        value = getattr(effective, spec.attr)
        set_by: str | None = None
        if name in overrides:
            source, set_by = TOPIC_OVERRIDE, "set over the wire" if name in dynamic else "config file"
        else:
            source = KAFKA_DEFAULT
            if broker_keys is not None:
                chain = [b for b, _ in spec.chain()]
                set_by = next((b for b in chain if broker_keys.get(b) is not None), None)
                if set_by is not None:
                    source = BROKER_OVERRIDE
            elif getattr(config.default_log, spec.attr) != LOG_DEFAULTS[spec.attr]:
                source = BROKER_OVERRIDE
        default = LOG_DEFAULTS[spec.attr]
        out.append({"name": name, "value": config_text(value), "source": source, "kafka_source": KAFKA_SOURCES[source],
                    "set_by": set_by, "kafka_default": config_text(default), "differs": value != default})
    return out


def broker_configs(config: StorageConfig) -> list[dict]:
    """Every broker key (:data:`BROKER_KEYS`) with its value, ``config file`` or ``Kafka default`` as its source,
    and Kafka's default. Values of keys holding secrets are left out."""
    raw = broker_keys_set(config) or {}
    values: dict[str, object] = {}
    for spec in BROKER_KEYS.values():
        if spec.name in raw:
            try:
                values[spec.name] = spec.parse(raw[spec.name])
            except StorageError:
                values[spec.name] = raw[spec.name]
    out = []
    for name, spec in BROKER_KEYS.items():
        set_in_file = name in values
        value = values[name] if set_in_file else BROKER_DEFAULTS[name]
        if name in ("log.dirs", "log.dir") and set_in_file:
            value = list(config.log_dirs)      # as resolved (relative to the file, ~ and $VARS expanded)
        secret = is_sensitive(name)
        out.append({"name": name, "value": None if secret else config_text(value), "secret": secret,
                    "source": "config file" if set_in_file else KAFKA_DEFAULT,
                    "kafka_default": None if secret else config_text(BROKER_DEFAULTS[name]),
                    "differs": set_in_file and value != BROKER_DEFAULTS[name]})
    return out


def _folder_figures(path: str) -> tuple[int, int, int]:
    """(bytes of live segment .log files, their number, bytes of .deleted files) of a partition folder."""
    size = segments = deleted = 0
    with os.scandir(path) as it:
        for entry in it:
            n = entry.name
            if n.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(n):
                size += entry.stat().st_size
                segments += 1
            elif n.endswith(layout.DELETED_SUFFIX):
                deleted += entry.stat().st_size
    return size, segments, deleted


def list_topics(config: StorageConfig) -> list[TopicSummary]:
    """The topics with a partition in a log dir, and those the config file declares without one yet (0
    partitions), by name; each with its size (every partition folder is listed and ``stat``-ed)."""
    found: dict[str, TopicSummary] = {}
    declared = _declared(config)
    for d in config.log_dirs:
        try:
            partitions = layout.partition_dirs(d)
        except OSError:
            continue            # an offline dir: the log dirs page says why
        for name, (topic, _partition) in partitions:
            row = found.get(topic)
            if row is None:
                row = found[topic] = _summary(config, topic, declared)
            try:
                size, segments, deleted = _folder_figures(os.path.join(d, name))
            except OSError:
                size = segments = deleted = 0    # removed while listing
            row["partitions"] += 1
            row["size_bytes"] += size
            row["segments"] += segments
            row["deleted_bytes"] += deleted
            if d not in row["log_dirs"]:
                row["log_dirs"].append(d)
    for topic in declared:
        if topic not in found:
            found[topic] = _summary(config, topic, declared)
    return [found[t] for t in sorted(found)]


def _summary(config: StorageConfig, topic: str, declared: set[str]) -> TopicSummary:
    return {"topic": topic, "internal": topic.startswith("__"), "partitions": 0, "size_bytes": 0, "segments": 0,
            "deleted_bytes": 0, "log_dirs": [], "cleanup_policy": ",".join(config.log_config(topic).cleanup_policy),
            "overrides": len(config.topic_overrides.get(topic, {})), "declared": topic in declared}


def _declared(config: StorageConfig) -> set[str]:
    """The topics the config file's ``topics:`` names (those set only over the wire are not declared)."""
    section = _file_section(config, "topics")
    if section is None:
        return {t for t in config.topic_overrides if t not in config.dynamic_topics}
    return {t for t in section if isinstance(t, str)}


def topic_detail(config: StorageConfig, topic: str, now_ms: int | None = None) -> TopicDetail:
    """One topic: its totals, every partition with its offsets (:func:`list_partition_status`) and every config
    with its source. A topic neither on disk nor in the config file: :class:`PartitionNotFoundError`."""
    layout.validate_topic(topic)
    page = list_partition_status(config, topics=[topic], limit=MAX_TOPIC_PARTITIONS, now_ms=now_ms)
    rows = page["partitions"]
    declared = _declared(config)
    if not rows and topic not in declared:
        raise PartitionNotFoundError(f"topic {topic!r} has no partition in any log dir {list(config.log_dirs)}")
    s = _summary(config, topic, declared)
    detail: TopicDetail = {"topic": s["topic"], "internal": s["internal"], "partitions": 0, "size_bytes": 0,
                           "segments": 0, "deleted_bytes": 0, "log_dirs": [], "cleanup_policy": s["cleanup_policy"],
                           "overrides": s["overrides"], "declared": s["declared"], "records": 0, "partition_list": rows,
                           "configs": topic_configs(config, topic)}
    for r in rows:
        detail["partitions"] += 1
        detail["size_bytes"] += r.get("size_bytes", 0)
        detail["segments"] += r.get("segments", 0)
        detail["deleted_bytes"] += r.get("deleted_bytes", 0)
        if r["log_dir"] not in detail["log_dirs"]:
            detail["log_dirs"].append(r["log_dir"])
        if "log_end_offset" in r and "log_start_offset" in r:
            detail["records"] += r["log_end_offset"] - r["log_start_offset"]
    return detail


def partition_figures(config: StorageConfig, topic: str) -> list[dict]:
    """What the live figures refresh: per partition its size and offsets now (the same reads as the topic page)."""
    layout.validate_topic(topic)
    page = list_partition_status(config, topics=[topic], limit=MAX_TOPIC_PARTITIONS)
    return [{"partition": r["partition"], "size_bytes": r.get("size_bytes", 0), "segments": r.get("segments", 0),
             "log_start_offset": r.get("log_start_offset"), "log_end_offset": r.get("log_end_offset"),
             "error": r.get("error")} for r in page["partitions"]]
