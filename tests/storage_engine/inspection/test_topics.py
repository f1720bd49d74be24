"""Topic facts (:mod:`storage_engine.inspection.topics`): sizes as the engine describes them, and every topic config
with the place its value comes from, told apart as Kafka's DescribeConfigs does."""
from __future__ import annotations

import pytest
import yaml

from storage_engine import topic_store
from storage_engine.config_file import load_config
from storage_engine.config_keys import TOPIC_KEYS
from storage_engine.errors import PartitionNotFoundError
from storage_engine.inspection import topics
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit


@pytest.fixture
def config_path(tmp_path):
    path = tmp_path / "storage.yaml"
    path.write_text(yaml.safe_dump({
        "broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")], "log.segment.bytes": 1024,
                   "log.retention.hours": 72, "log.retention.minutes": 90, "log.cleaner.min.cleanable.ratio": 0.5,
                   "ssl.key.password": "s3cret"},
        "topics": {"kv": {"cleanup.policy": "compact", "segment.bytes": 2048}, "declared-only": {"retention.ms": 1000}},
    }))
    config = load_config(path)
    with LogManager.open(config) as mgr:
        for topic, partitions in (("kv", 3), ("plain", 1), ("__consumer_offsets", 2)):
            for p in range(partitions):
                log = mgr.get_or_create_log(topic, p)
                for i in range(40):
                    log.append_records([SimpleRecord(f"k{i % 5}".encode(), b"x" * 60)])
    return path


def configs(config, topic: str) -> dict:
    return {c["name"]: c for c in topics.topic_configs(config, topic)}


def test_every_topic_config_names_its_source(config_path):
    config = load_config(config_path)
    kv = configs(config, "kv")
    assert list(kv) == list(TOPIC_KEYS)
    assert (kv["segment.bytes"]["value"], kv["segment.bytes"]["source"], kv["segment.bytes"]["set_by"],
            kv["segment.bytes"]["kafka_source"]) == ("2048", "topic override", "config file", "DYNAMIC_TOPIC_CONFIG")
    # the highest broker synonym set wins and is named: log.retention.minutes over log.retention.hours
    assert (kv["retention.ms"]["value"], kv["retention.ms"]["source"], kv["retention.ms"]["set_by"]) == (
        str(90 * 60_000), "broker override", "log.retention.minutes")
    # set in the file to Kafka's own default: still the broker's value (as Kafka's STATIC_BROKER_CONFIG), unchanged
    ratio = kv["min.cleanable.dirty.ratio"]
    assert (ratio["source"], ratio["set_by"], ratio["differs"]) == ("broker override", "log.cleaner.min.cleanable.ratio", False)
    assert (kv["segment.ms"]["source"], kv["segment.ms"]["set_by"], kv["segment.ms"]["differs"]) == ("Kafka default", None, False)
    assert kv["cleanup.policy"]["differs"] and kv["cleanup.policy"]["kafka_default"] == "delete"
    # a value set over the wire overrides the file's and says so
    topic_store.save(list(config.log_dirs), {"kv": {"segment.bytes": "4096"}, "wired": {"retention.ms": "5000"}})
    config = load_config(config_path)
    kv = configs(config, "kv")
    assert (kv["segment.bytes"]["value"], kv["segment.bytes"]["set_by"]) == ("4096", "set over the wire")
    assert kv["cleanup.policy"]["set_by"] == "config file"
    assert configs(config, "wired")["retention.ms"]["set_by"] == "set over the wire"


def test_without_the_file_the_source_comes_from_the_values(config_path):
    import dataclasses
    config = dataclasses.replace(load_config(config_path), source=None)
    kv = configs(config, "kv")
    assert kv["retention.ms"]["source"] == "broker override" and kv["retention.ms"]["set_by"] is None
    assert kv["min.cleanable.dirty.ratio"]["source"] == "Kafka default"      # equal to Kafka's: cannot tell


def test_topics_with_their_sizes_as_the_engine_describes_them(config_path):
    config = load_config(config_path)
    with LogManager.open(config) as mgr:
        truth = {tp: log.describe() for tp, log in mgr.logs.items()}
    rows = {r["topic"]: r for r in topics.list_topics(config)}
    assert list(rows) == ["__consumer_offsets", "declared-only", "kv", "plain"]
    for topic in ("kv", "plain", "__consumer_offsets"):
        mine = [d for (t, _), d in truth.items() if t == topic]
        assert (rows[topic]["partitions"], rows[topic]["size_bytes"], rows[topic]["segments"]) == (
            len(mine), sum(d["size_bytes"] for d in mine), sum(len(d["segments"]) for d in mine))
    assert rows["__consumer_offsets"]["internal"] and not rows["kv"]["internal"]
    assert rows["declared-only"]["partitions"] == 0 and rows["declared-only"]["declared"]
    assert not rows["plain"]["declared"] and rows["kv"]["cleanup_policy"] == "compact"
    detail = topics.topic_detail(config, "kv")
    assert detail["records"] == 120 and [p["partition"] for p in detail["partition_list"]] == [0, 1, 2]
    assert detail["size_bytes"] == rows["kv"]["size_bytes"]
    assert [f["log_end_offset"] for f in topics.partition_figures(config, "kv")] == [40, 40, 40]
    assert topics.topic_detail(config, "declared-only")["partitions"] == 0
    with pytest.raises(PartitionNotFoundError, match="nope"):
        topics.topic_detail(config, "nope")


def test_broker_configs_say_what_the_file_sets_and_hide_secrets(config_path):
    config = load_config(config_path)
    rows = {c["name"]: c for c in topics.broker_configs(config)}
    assert (rows["log.segment.bytes"]["value"], rows["log.segment.bytes"]["source"], rows["log.segment.bytes"]["differs"]) == (
        "1024", "config file", True)
    assert rows["log.roll.hours"]["source"] == "Kafka default" and rows["log.roll.hours"]["value"] == "168"
    assert rows["ssl.key.password"]["value"] is None and rows["ssl.key.password"]["secret"]
    assert "s3cret" not in repr(topics.broker_configs(config))
