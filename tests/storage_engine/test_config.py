"""storage_engine.config_keys, config and config_file: Kafka's defaults, precedence and constraints, YAML loading
and log-dir resolution."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re

import pytest

from tests.paths import REPO
from storage_engine import config_file, config_keys
from storage_engine.config import CleanerConfig, LogConfig, StorageConfig
from storage_engine.config_file import config_from_mapping, load_config
from storage_engine.errors import ConfigError, InvalidTopicError

pytestmark = pytest.mark.unit

LONG_MAX = 2**63 - 1


def with_broker(keys: dict, topics: dict | None = None) -> StorageConfig:
    """A config of ``keys`` (log.dirs defaults to a path that is never created: these tests write nothing)."""
    return config_from_mapping({"broker": {"log.dirs": "/nonexistent-logs", **keys}, "topics": topics or {}},
                               base_dir="/")


def write_yaml(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- defaults

# Section 8 of the reference, written out literally (not read from the table under test).
KAFKA_TOPIC_DEFAULTS = {
    "segment_bytes": 1073741824,
    "segment_ms": 604800000,
    "segment_jitter_ms": 0,
    "segment_index_bytes": 10485760,
    "index_interval_bytes": 4096,
    "flush_messages": LONG_MAX,
    "flush_ms": LONG_MAX,
    "retention_bytes": -1,
    "retention_ms": 604800000,
    "delete_retention_ms": 86400000,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": LONG_MAX,
    "min_cleanable_dirty_ratio": 0.5,
    "file_delete_delay_ms": 60000,
    "cleanup_policy": ("delete",),
    "max_message_bytes": 1048588,
    "preallocate": False,
    "compression_type": "producer",
    "message_timestamp_type": "CreateTime",
    "remote_storage_enable": False,
    "local_retention_ms": -2,       # -2: follow retention.ms
    "local_retention_bytes": -2,
    "remote_log_copy_disable": False,
    "remote_log_delete_on_disable": False,
    "partition_leader_epoch": 0,    # the engine's log.partition.leader.epoch: what a single-leader broker stamps
}


def test_defaults_equal_kafkas():
    c = with_broker({})
    assert dataclasses.asdict(c.default_log) == KAFKA_TOPIC_DEFAULTS
    assert c.cleaner == CleanerConfig(enable=True, threads=1, dedupe_buffer_size=134217728, io_buffer_size=524288,
                                      io_buffer_load_factor=0.9, io_max_bytes_per_second=1.7976931348623157e308,
                                      backoff_ms=15000)
    assert c.log_retention_check_interval_ms == 300000
    assert c.log_flush_scheduler_interval_ms == LONG_MAX
    assert c.log_flush_offset_checkpoint_interval_ms == 60000
    assert c.log_flush_start_offset_checkpoint_interval_ms == 60000
    assert c.num_recovery_threads_per_data_dir == 1
    assert c.producer_id_expiration_ms == 86400000
    assert c.default_log.delete and not c.default_log.compact


def test_dataclass_defaults_are_kafkas():
    assert LogConfig() == with_broker({}).default_log
    assert CleanerConfig() == with_broker({}).cleaner


def test_key_tables_cover_the_config_objects():
    assert {f.name for f in dataclasses.fields(LogConfig)} == {k.attr for k in config_keys.TOPIC_KEYS.values()} | {
        k.name.removeprefix("log.").replace(".", "_") for k in config_keys.BROKER_KEYS.values() if k.feeds == "leader"}
    assert {f.name for f in dataclasses.fields(CleanerConfig)} == {
        k.attr for k in config_keys.BROKER_KEYS.values() if k.feeds == "cleaner"}
    synonyms = {name for k in config_keys.TOPIC_KEYS.values() for name, _ in k.chain()}
    assert {k.name for k in config_keys.BROKER_KEYS.values() if k.feeds == "log"} <= synonyms
    assert synonyms <= set(config_keys.BROKER_KEYS)
    storage_fields = {f.name for f in dataclasses.fields(StorageConfig) if f.init}
    assert {k.attr for k in config_keys.BROKER_KEYS.values() if k.feeds == "storage"} <= storage_fields


# ---------------------------------------------------------------------------------------------- precedence

@pytest.mark.parametrize("keys, expected", [
    ({}, 168 * 3600000),
    ({"log.retention.hours": 1}, 3600000),
    ({"log.retention.minutes": 2, "log.retention.hours": 1}, 120000),
    ({"log.retention.ms": 5, "log.retention.minutes": 2, "log.retention.hours": 1}, 5),
    ({"log.retention.ms": 5, "log.retention.hours": 1}, 5),
    ({"log.retention.minutes": 3}, 180000),
    ({"log.retention.ms": -1}, -1),
    ({"log.retention.ms": -7}, -1),          # any negative broker value means unlimited
    ({"log.retention.hours": -1}, -1),
    ({"log.retention.minutes": -3, "log.retention.hours": 5}, -1),
])
def test_retention_ms_beats_minutes_beats_hours(keys, expected):
    assert with_broker(keys).default_log.retention_ms == expected


@pytest.mark.parametrize("keys, segment_ms, jitter_ms", [
    ({}, 604800000, 0),
    ({"log.roll.hours": 2}, 7200000, 0),
    ({"log.roll.ms": 1000, "log.roll.hours": 2}, 1000, 0),
    ({"log.roll.jitter.hours": 1}, 604800000, 3600000),
    ({"log.roll.jitter.ms": 10, "log.roll.jitter.hours": 1}, 604800000, 10),
])
def test_roll_ms_beats_hours(keys, segment_ms, jitter_ms):
    log = with_broker(keys).default_log
    assert (log.segment_ms, log.segment_jitter_ms) == (segment_ms, jitter_ms)


def test_flush_ms_falls_back_to_scheduler_interval():
    assert with_broker({"log.flush.scheduler.interval.ms": 2000}).default_log.flush_ms == 2000
    both = with_broker({"log.flush.scheduler.interval.ms": 2000, "log.flush.interval.ms": 300})
    assert both.default_log.flush_ms == 300
    assert both.log_flush_scheduler_interval_ms == 2000


def test_topic_override_beats_broker_key_beats_default():
    c = with_broker({"log.segment.bytes": 5000, "log.retention.hours": 1},
                    {"t1": {"segment.bytes": 100, "retention.ms": 10}, "t2": {}})
    assert (c.log_config("t1").segment_bytes, c.log_config("t1").retention_ms) == (100, 10)
    assert (c.log_config("t2").segment_bytes, c.log_config("t2").retention_ms) == (5000, 3600000)
    assert c.log_config("not-listed") == c.default_log
    assert c.log_config("t1").index_interval_bytes == 4096


@pytest.mark.parametrize("policy, expected", [
    ("compact", ("compact",)),
    ("delete,compact", ("compact", "delete")),
    (" compact , delete ", ("compact", "delete")),
    (["delete", "compact"], ("compact", "delete")),
    ("delete,delete", ("delete",)),
])
def test_cleanup_policy_forms(policy, expected):
    log = with_broker({}, {"t": {"cleanup.policy": policy}}).log_config("t")
    assert log.cleanup_policy == expected
    assert log.compact == ("compact" in expected) and log.delete == ("delete" in expected)
    assert with_broker({"log.cleanup.policy": policy}).default_log.cleanup_policy == expected


def test_properties_style_strings_are_accepted():
    c = with_broker({"log.segment.bytes": "2048", "log.preallocate": "TRUE", "log.cleaner.enable": "false",
                     "log.cleaner.min.cleanable.ratio": "0.25", "log.retention.bytes": " -1 "})
    assert c.default_log.segment_bytes == 2048 and c.default_log.preallocate is True
    assert c.cleaner.enable is False and c.default_log.min_cleanable_dirty_ratio == 0.25
    assert c.default_log.retention_bytes == -1


# ---------------------------------------------------------------------------------------------- constraints

# (section, key, value, what the message must say about the allowed values)
INVALID = [
    ("broker", "log.segment.bytes", 5, "must be >= 14"),
    ("broker", "log.segment.bytes", 2**31, "must be <= 2147483647"),
    ("broker", "log.segment.bytes", 1.5, "must be an integer"),
    ("broker", "log.segment.bytes", 1024.0, "must be an integer"),
    ("broker", "log.segment.bytes", "1.5", "must be an integer"),
    ("broker", "log.segment.bytes", True, "must be an integer"),
    ("broker", "log.segment.bytes", None, "must be an integer"),
    ("broker", "log.segment.bytes", [1], "must be an integer"),
    ("broker", "log.roll.ms", 0, "must be >= 1"),
    ("broker", "log.roll.hours", 0, "must be >= 1"),
    ("broker", "log.roll.jitter.ms", -1, "must be >= 0"),
    ("broker", "log.roll.jitter.hours", -1, "must be >= 0"),
    ("broker", "log.index.size.max.bytes", 4, "must be >= 12"),
    ("broker", "log.index.interval.bytes", -1, "must be >= 0"),
    ("broker", "log.flush.interval.messages", 0, "must be >= 1"),
    ("broker", "log.flush.interval.messages", 2**63, "must be <= 9223372036854775807"),
    ("broker", "log.flush.interval.ms", -1, "must be >= 0"),
    ("broker", "log.flush.scheduler.interval.ms", -1, "must be >= 0"),
    ("broker", "log.flush.offset.checkpoint.interval.ms", -1, "must be >= 0"),
    ("broker", "log.flush.start.offset.checkpoint.interval.ms", -1, "must be >= 0"),
    ("broker", "log.retention.ms", 0, "must be >= 1, or negative for unlimited"),
    ("broker", "log.retention.minutes", 0, "must be >= 1, or negative for unlimited"),
    ("broker", "log.retention.hours", 0, "must be >= 1, or negative for unlimited"),
    ("broker", "log.retention.check.interval.ms", 0, "must be >= 1"),
    ("broker", "log.cleanup.policy", "compact,foo", "must be a non-empty list of compact, delete"),
    ("broker", "log.cleanup.policy", "", "must be a non-empty list of compact, delete"),
    ("broker", "log.cleaner.delete.retention.ms", -1, "must be >= 0"),
    ("broker", "log.cleaner.min.compaction.lag.ms", -1, "must be >= 0"),
    ("broker", "log.cleaner.max.compaction.lag.ms", 0, "must be >= 1"),
    ("broker", "log.cleaner.min.cleanable.ratio", 1.5, "must be in [0, 1]"),
    ("broker", "log.cleaner.min.cleanable.ratio", -0.1, "must be in [0, 1]"),
    ("broker", "log.cleaner.min.cleanable.ratio", "half", "must be a number"),
    ("broker", "log.cleaner.min.cleanable.ratio", float("nan"), "must be a number"),
    ("broker", "log.segment.delete.delay.ms", -1, "must be >= 0"),
    ("broker", "message.max.bytes", -1, "must be >= 0"),
    ("broker", "log.preallocate", "yes", "must be true or false"),
    ("broker", "log.preallocate", 1, "must be true or false"),
    ("broker", "compression.type", "brotli", "must be one of uncompressed, producer, gzip, snappy, lz4, zstd"),
    ("broker", "compression.type", "none", "must be one of"),
    ("broker", "compression.type", 3, "must be a string"),
    ("broker", "log.message.timestamp.type", "createtime", "must be one of CreateTime, LogAppendTime"),
    ("broker", "num.recovery.threads.per.data.dir", 0, "must be >= 1"),
    ("broker", "log.cleaner.enable", "on", "must be true or false"),
    ("broker", "log.cleaner.threads", 0, "must be >= 1"),
    ("broker", "log.cleaner.dedupe.buffer.size", 1048576, "must be > 1048576 per cleaner thread"),
    ("broker", "log.cleaner.io.buffer.size", 0, "must be >= 1"),
    ("broker", "log.cleaner.io.buffer.load.factor", 0, "must be in (0, 1]"),
    ("broker", "log.cleaner.io.buffer.load.factor", 1.01, "must be in (0, 1]"),
    ("broker", "log.cleaner.io.max.bytes.per.second", 0, "must be > 0"),
    ("broker", "log.cleaner.backoff.ms", -1, "must be >= 0"),
    ("broker", "log.dirs", [], "must name at least one directory"),
    ("broker", "log.dirs", "a,,b", "has an empty entry"),
    ("broker", "log.dirs", 7, "must be a list or a comma-separated string"),
    ("broker", "log.dir", "", "must name at least one directory"),
    ("topic", "segment.bytes", 13, "must be >= 14"),
    ("topic", "segment.bytes", "lots", "must be an integer"),
    ("topic", "segment.ms", 0, "must be >= 1"),
    ("topic", "segment.jitter.ms", -1, "must be >= 0"),
    ("topic", "segment.index.bytes", 11, "must be >= 12"),
    ("topic", "index.interval.bytes", -1, "must be >= 0"),
    ("topic", "flush.messages", 0, "must be >= 1"),
    ("topic", "flush.ms", -1, "must be >= 0"),
    ("topic", "retention.bytes", 2**63, "must be <= 9223372036854775807"),
    ("topic", "retention.ms", -2, "must be >= -1"),
    ("topic", "retention.ms", 1.5, "must be an integer"),
    ("topic", "delete.retention.ms", -1, "must be >= 0"),
    ("topic", "min.compaction.lag.ms", -1, "must be >= 0"),
    ("topic", "max.compaction.lag.ms", 0, "must be >= 1"),
    ("topic", "min.cleanable.dirty.ratio", 1.0001, "must be in [0, 1]"),
    ("topic", "file.delete.delay.ms", -1, "must be >= 0"),
    ("topic", "cleanup.policy", ["compact", "remove"], "must be a non-empty list of compact, delete"),
    ("topic", "cleanup.policy", [], "must be a non-empty list of compact, delete"),
    ("topic", "cleanup.policy", {"compact": 1}, "must be a list or a comma-separated string"),
    ("topic", "max.message.bytes", -1, "must be >= 0"),
    ("topic", "max.message.bytes", 2**31, "must be <= 2147483647"),
    ("topic", "preallocate", "maybe", "must be true or false"),
    ("topic", "compression.type", "GZIP", "must be one of"),
    ("topic", "message.timestamp.type", "AppendTime", "must be one of CreateTime, LogAppendTime"),
]


@pytest.mark.parametrize("section, key, value, allowed", INVALID, ids=[f"{s}:{k}={v!r}" for s, k, v, _ in INVALID])
def test_invalid_value_is_rejected_naming_key_value_and_range(section, key, value, allowed):
    data = {"broker": {key: value}} if section == "broker" else {"topics": {"t": {key: value}}}
    with pytest.raises(ConfigError) as err:
        config_from_mapping(data, base_dir="/")
    message = str(err.value)
    shown = repr(value) if isinstance(value, str) else str(value)
    assert f"{key} = {shown}" in message
    assert allowed in message
    if section == "topic":
        assert "topic 't'" in message
        with pytest.raises(ConfigError, match=re.escape(allowed)):
            LogConfig().with_overrides({key: value})


def test_example_message_is_exact():
    with pytest.raises(ConfigError) as err:
        with_broker({"log.segment.bytes": 5})
    assert str(err.value) == "log.segment.bytes = 5: must be >= 14"


def test_min_compaction_lag_must_not_exceed_max():
    with pytest.raises(ConfigError, match=r"log.cleaner.min.compaction.lag.ms = 10: must be <= "
                                          r"log.cleaner.max.compaction.lag.ms = 5"):
        with_broker({"log.cleaner.min.compaction.lag.ms": 10, "log.cleaner.max.compaction.lag.ms": 5})
    # A topic's override is checked against the broker-level value it is combined with.
    with pytest.raises(ConfigError, match=r"topic 't': min.compaction.lag.ms = 10: must be <= "
                                          r"max.compaction.lag.ms = 5"):
        with_broker({"log.cleaner.max.compaction.lag.ms": 5}, {"t": {"min.compaction.lag.ms": 10}})
    ok = with_broker({"log.cleaner.max.compaction.lag.ms": 5}, {"t": {"min.compaction.lag.ms": 10,
                                                                     "max.compaction.lag.ms": 20}})
    assert ok.log_config("t").min_compaction_lag_ms == 10


def test_dedupe_buffer_is_per_thread():
    with pytest.raises(ConfigError, match=r"log.cleaner.dedupe.buffer.size = 4194304: must be > 1048576 per "
                                          r"cleaner thread \(log.cleaner.threads = 4\)"):
        with_broker({"log.cleaner.dedupe.buffer.size": 4 * 1048576, "log.cleaner.threads": 4})
    assert with_broker({"log.cleaner.dedupe.buffer.size": 1048577}).cleaner.dedupe_buffer_size == 1048577


def test_int_range_boundaries_are_accepted():
    c = with_broker({"log.segment.bytes": 14, "log.flush.interval.messages": LONG_MAX},
                    {"t": {"segment.bytes": 2**31 - 1, "retention.ms": -1, "min.cleanable.dirty.ratio": 0}})
    assert c.default_log.segment_bytes == 14 and c.default_log.flush_messages == LONG_MAX
    assert c.log_config("t").segment_bytes == 2**31 - 1 and c.log_config("t").retention_ms == -1


# ---------------------------------------------------------------------------------------------- unknown keys

@pytest.mark.parametrize("data, expected", [
    ({"broker": {"log.segment.byte": 1}}, "unknown broker key 'log.segment.byte'; did you mean log.segment.bytes"),
    ({"broker": {"log.retention.hour": 1}}, "did you mean log.retention.hours"),
    ({"broker": {"segment.bytes": 1}}, "segment.bytes is a topic key, its broker key is log.segment.bytes"),
    ({"broker": {"retention.ms": 1}}, "its broker key is log.retention.ms"),
    ({"topics": {"t": {"retention.msec": 1}}}, "unknown topic key 'retention.msec'; did you mean retention.ms, "),
    ({"topics": {"t": {"segment_bytes": 1}}}, "did you mean segment.bytes, "),
    ({"topics": {"t": {"log.retention.hours": 1}}}, "log.retention.hours is a broker key, its topic key is retention.ms"),
    ({"topics": {"t": {"log.cleaner.threads": 1}}}, "log.cleaner.threads is a broker key and cannot be set per topic"),
    ({"topics": {"t": {"zzz": 1}}}, "unknown topic key 'zzz'"),
    ({"brokers": {}}, "unknown top-level key 'brokers'; did you mean broker?"),
    ({"log.dirs": "/x"}, "broker keys go under 'broker:'"),
    ({"broker": {1: 2}}, "broker key 1 is not a string"),
])
def test_unknown_key_is_rejected_with_suggestion(data, expected):
    with pytest.raises(ConfigError) as err:
        config_from_mapping(data, base_dir="/")
    assert expected in str(err.value)


def test_with_overrides_validates_and_returns_a_new_config():
    base = LogConfig()
    changed = base.with_overrides({"segment.bytes": "4096", "cleanup.policy": "compact"})
    assert changed.segment_bytes == 4096 and changed.cleanup_policy == ("compact",)
    assert base.segment_bytes == 1073741824
    assert base.with_overrides({}) is base and base.with_overrides(None) is base
    with pytest.raises(ConfigError, match="did you mean segment.ms"):
        base.with_overrides({"segment.mss": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.segment_bytes = 1  # type: ignore[misc]  # the frozen field the test tries to set


# ---------------------------------------------------------------------------------------------- topics

@pytest.mark.parametrize("name", ["../x", "a b", "", ".", "..", "x" * 250, "a/b"])
def test_illegal_topic_name_in_topics_is_rejected(name):
    with pytest.raises(ConfigError, match="topics:"):
        with_broker({}, {name: {"segment.bytes": 100}})


def test_non_string_topic_name_gets_a_quoting_hint(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", "topics:\n  2024:\n    segment.bytes: 100\n")
    with pytest.raises(ConfigError, match="quote it in YAML"):
        load_config(path)


def test_topic_overrides_are_parsed_and_read_only():
    c = with_broker({}, {"t": {"segment.bytes": "100", "cleanup.policy": "delete,compact"}, "empty": None})
    assert dict(c.topic_overrides["t"]) == {"segment.bytes": 100, "cleanup.policy": ("compact", "delete")}
    assert dict(c.topic_overrides["empty"]) == {}
    with pytest.raises(TypeError):
        c.topic_overrides["t"]["segment.bytes"] = 1  # type: ignore[index]  # the read-only mapping the test tries to change
    with pytest.raises(TypeError):
        c.topic_overrides["u"] = {}  # type: ignore[index]  # the read-only mapping the test tries to change


def test_topic_overrides_must_be_a_mapping():
    with pytest.raises(ConfigError, match="topic 't': overrides must be a mapping"):
        with_broker({}, {"t": ["segment.bytes", 1]})
    with pytest.raises(ConfigError, match="'topics:' must be a mapping"):
        config_from_mapping({"topics": ["t"]})


def test_log_config_rejects_hostile_topic():
    c = with_broker({})
    with pytest.raises(InvalidTopicError):
        c.log_config("../etc")


# ---------------------------------------------------------------------------------------------- log dirs

def test_relative_log_dirs_resolve_against_the_yaml_directory(tmp_path, monkeypatch):
    conf_dir = tmp_path / "include" / "config"
    conf_dir.mkdir(parents=True)
    path = write_yaml(conf_dir / "s.yaml", "broker:\n  log.dirs: [../../var/a, ../../var/b, /abs/c]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    c = load_config(str(path))
    assert c.log_dirs == (str(tmp_path / "var" / "a"), str(tmp_path / "var" / "b"), "/abs/c")
    assert c.source == str(path)


def test_log_dirs_as_comma_separated_string_and_log_dir_fallback(tmp_path):
    c = config_from_mapping({"broker": {"log.dirs": "a, b"}}, base_dir=str(tmp_path))
    assert c.log_dirs == (str(tmp_path / "a"), str(tmp_path / "b"))
    c = config_from_mapping({"broker": {"log.dir": "single"}}, base_dir=str(tmp_path))
    assert c.log_dirs == (str(tmp_path / "single"),)
    c = config_from_mapping({"broker": {"log.dir": "ignored", "log.dirs": ["wins"]}}, base_dir=str(tmp_path))
    assert c.log_dirs == (str(tmp_path / "wins"),)


def test_log_dirs_expand_variables_and_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SE_TEST_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    c = config_from_mapping({"broker": {"log.dirs": ["$SE_TEST_ROOT/a", "${SE_TEST_ROOT}/b", "~/c"]}}, base_dir="/")
    assert c.log_dirs == (str(tmp_path / "root" / "a"), str(tmp_path / "root" / "b"), str(tmp_path / "home" / "c"))


def test_log_dirs_unset_variable_is_an_error(monkeypatch):
    monkeypatch.delenv("SE_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError, match=r"log.dirs = '\$SE_TEST_UNSET/a': environment variable "
                                          r"\$SE_TEST_UNSET is not set"):
        config_from_mapping({"broker": {"log.dirs": ["$SE_TEST_UNSET/a"]}}, base_dir="/")


@pytest.mark.parametrize("dirs", [["a", "a"], ["a", "./a"], ["a", "b/../a"], ["/x/a", "/x//a/"]])
def test_duplicate_log_dirs_are_rejected(tmp_path, dirs):
    with pytest.raises(ConfigError, match="are the same directory"):
        config_from_mapping({"broker": {"log.dirs": dirs}}, base_dir=str(tmp_path))


def test_duplicate_log_dirs_through_a_symlink_are_rejected(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="are the same directory"):
        config_from_mapping({"broker": {"log.dirs": ["real", "link"]}}, base_dir=str(tmp_path))


def test_replace_log_dirs(tmp_path, monkeypatch):
    c = with_broker({"log.segment.bytes": 100}, {"t": {"segment.bytes": 50}})
    monkeypatch.chdir(tmp_path)
    d = c.replace_log_dirs([tmp_path / "x", "rel"])
    assert d.log_dirs == (str(tmp_path / "x"), str(tmp_path / "rel"))
    assert d.default_log == c.default_log and d.log_config("t").segment_bytes == 50
    assert c.log_dirs == ("/nonexistent-logs",)
    with pytest.raises(ConfigError):
        c.replace_log_dirs([])


# ---------------------------------------------------------------------------------------------- files

def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=f"config file not found: {missing}"):
        load_config(str(missing))


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write_yaml(tmp_path / "bad.yaml", "broker:\n  log.segment.bytes: 1024\n  log.dirs: [a, b\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and "invalid YAML at line" in str(err.value)

    path = write_yaml(tmp_path / "tab.yaml", "broker:\n\tlog.segment.bytes: 1024\n")
    with pytest.raises(ConfigError, match="invalid YAML at line 2"):
        load_config(path)


def test_duplicate_yaml_key_names_the_line(tmp_path):
    path = write_yaml(tmp_path / "dup.yaml",
                      "broker:\n  log.retention.hours: 1\n  log.segment.bytes: 100\n  log.retention.hours: 2\n")
    with pytest.raises(ConfigError, match=r"line 4.*duplicate key 'log.retention.hours'"):
        load_config(path)


def test_error_in_file_names_the_file(tmp_path):
    path = write_yaml(tmp_path / "s.yaml", "broker:\n  log.segment.bytes: 5\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: log.segment.bytes = 5: must be >= 14"


@pytest.mark.parametrize("text, expected", [
    ("- broker\n", "the top level must be a mapping"),
    ("broker: 5\n", "'broker:' must be a mapping"),
])
def test_wrong_shape_is_rejected(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(write_yaml(tmp_path / "s.yaml", text))


def test_a_file_without_log_dirs_is_refused_rather_than_writing_to_kafkas_default(tmp_path):
    """Kafka would use /tmp/kafka-logs; an empty or truncated file must not send data where nobody asked."""
    for text in ("# nothing set\n", "", "broker:\n  log.segment.bytes: 1024\n"):
        path = write_yaml(tmp_path / "s.yaml", text)
        with pytest.raises(ConfigError, match="no log.dirs .or log.dir. is set.*'/tmp/kafka-logs'"):
            load_config(path)
    path = write_yaml(tmp_path / "s.yaml", "broker:\n  log.dirs: [d]\n")
    assert load_config(path).default_log == LogConfig()


def test_non_utf8_file_is_rejected(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"broker:\n  log.dirs: \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8 text at line 2"):
        load_config(path)


def test_directory_as_config_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path)


def test_env_var_selects_the_file(tmp_path, monkeypatch):
    a = write_yaml(tmp_path / "a.yaml", "broker:\n  log.dirs: d\n  log.segment.bytes: 111\n")
    b = write_yaml(tmp_path / "b.yaml", "broker:\n  log.dirs: d\n  log.segment.bytes: 222\n")
    monkeypatch.setenv(config_file.ENV_VAR, str(a))
    assert load_config().default_log.segment_bytes == 111
    assert load_config(str(b)).default_log.segment_bytes == 222     # an explicit path wins
    monkeypatch.setenv(config_file.ENV_VAR, str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError, match=r"gone.yaml \(named by \$STORAGE_ENGINE_CONFIG\)"):
        load_config()
    monkeypatch.delenv(config_file.ENV_VAR)
    assert load_config().source == config_file.DEFAULT_CONFIG_PATH


def test_default_storage_yaml_loads():
    assert config_file.DEFAULT_CONFIG_PATH == str(REPO / "include" / "config" / "storage.yaml")
    c = load_config(config_file.DEFAULT_CONFIG_PATH)
    assert c.log_dirs == (str(REPO / "var" / "logs" / "dir-a"), str(REPO / "var" / "logs" / "dir-b"))
    assert c.default_log.segment_bytes == 1048576
    assert c.default_log.retention_ms == 168 * 3600000
    assert c.default_log.file_delete_delay_ms == 60000

    emails = c.log_config("user-emails")
    assert emails.cleanup_policy == ("compact",) and emails.min_cleanable_dirty_ratio == 0.3
    assert emails.delete_retention_ms == 86400000 and emails.segment_bytes == 262144

    access = c.log_config("access-log")
    assert access.cleanup_policy == ("delete",) and access.retention_ms == 3 * 86400000
    assert access.segment_bytes == 262144

    sessions = c.log_config("user-sessions")
    assert sessions.compact and sessions.delete and sessions.retention_ms == 5 * 86400000
    assert sessions.segment_bytes == 262144


def test_config_objects_are_frozen_and_comparable():
    a, b = with_broker({"log.segment.bytes": 100}, {"t": {"segment.ms": 5}}), \
        with_broker({"log.segment.bytes": 100}, {"t": {"segment.ms": 5}})
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.log_dirs = ("/x",)  # type: ignore[misc]  # the frozen field the test tries to set
    assert os.path.isabs(a.log_dirs[0])


def test_partition_leader_epoch_is_a_broker_key_every_topic_inherits():
    c = with_broker({"log.partition.leader.epoch": 7}, {"t": {"retention.ms": 5}})
    assert c.default_log.partition_leader_epoch == 7 and c.log_config("t").partition_leader_epoch == 7
    assert with_broker({"log.partition.leader.epoch": -1}).default_log.partition_leader_epoch == -1
    with pytest.raises(ConfigError, match="log.partition.leader.epoch = -2: must be >= -1"):
        with_broker({"log.partition.leader.epoch": -2})
    with pytest.raises(ConfigError, match="producer.id.expiration.ms = 0: must be >= 1"):
        with_broker({"producer.id.expiration.ms": 0})
