"""A config's value reads the same in the console (:mod:`storage_engine.inspection.topics`, the topic and broker
pages) and over the wire (DescribeConfigs, as any Kafka client sees it): both print through
:func:`storage_engine.config_keys.config_text`, and this checks every topic and broker key, with values of every
kind (list, boolean, double, int, long, string) set in the config file, set over the wire, and left at Kafka's
default."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from storage_engine.config_file import load_config
from storage_engine.config_keys import BROKER_KEYS, TOPIC_KEYS
from storage_engine.inspection import topics

pytestmark = pytest.mark.e2e
TIMEOUT = 60.0
# Broker keys of the log (the topics' defaults: "defaults" takes them) and of the listener (described as broker
# configs), of every kind.
BROKER_FILE = {"log.cleaner.min.cleanable.ratio": 0.25, "log.retention.hours": 72, "log.segment.bytes": 1 << 20,
               "log.preallocate": True, "log.cleanup.policy": ["compact", "delete"], "compression.type": "lz4",
               "log.roll.ms": 7_200_000, "auto.create.topics.enable": False, "num.partitions": 3,
               "sasl.enabled.mechanisms": ["PLAIN", "SCRAM-SHA-256"], "connections.max.idle.ms": 300_000}
SERVER_KEYS = {k.name for k in BROKER_KEYS.values() if k.feeds in ("server", "remote")}   # broker configs
TOPIC_FILE = {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.125, "preallocate": True,
              "segment.bytes": 4096, "retention.ms": 3_600_000, "message.timestamp.type": "LogAppendTime"}
OVER_THE_WIRE = {"min.cleanable.dirty.ratio": "0.375", "cleanup.policy": "delete", "max.message.bytes": "2048",
                 "preallocate": "false", "compression.type": "zstd", "delete.retention.ms": "60000"}


def _described(admin: AdminClient, resource: ConfigResource) -> dict[str, str | None]:
    [future] = admin.describe_configs([resource]).values()
    return {name: entry.value for name, entry in future.result(TIMEOUT).items()}


def test_the_console_and_describe_configs_print_every_config_alike(broker_factory):
    broker = broker_factory(broker=BROKER_FILE, topics={"from-file": TOPIC_FILE})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name in ("from-file", "over-the-wire", "defaults"):     # from-file takes the configs of the file's topics:
        [future] = admin.create_topics([NewTopic(name, 1, 1)]).values()
        future.result(TIMEOUT)
    [future] = admin.incremental_alter_configs([ConfigResource(
        "topic", "over-the-wire", incremental_configs=[ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                                                       for k, v in OVER_THE_WIRE.items()])]).values()
    future.result(TIMEOUT)
    config = load_config(str(broker.config_path))

    for topic in ("from-file", "over-the-wire", "defaults"):
        wire = _described(admin, ConfigResource("topic", topic))
        console = {c["name"]: c["value"] for c in topics.topic_configs(config, topic)}
        assert set(wire) == set(console) == set(TOPIC_KEYS)
        assert wire == console, topic
    described = {k: _described(admin, ConfigResource("topic", t))[k] for t, keys in
                 (("from-file", TOPIC_FILE), ("over-the-wire", OVER_THE_WIRE)) for k in keys}
    assert described["min.cleanable.dirty.ratio"] == "0.375" and described["preallocate"] == "false"
    assert described["cleanup.policy"] == "delete" and described["segment.bytes"] == "4096"
    assert described["message.timestamp.type"] == "LogAppendTime"

    defaults = _described(admin, ConfigResource("topic", "defaults"))
    assert (defaults["min.cleanable.dirty.ratio"], defaults["preallocate"], defaults["cleanup.policy"],
            defaults["retention.ms"]) == ("0.25", "true", "compact,delete", str(72 * 3_600_000))

    wire = _described(admin, ConfigResource("broker", "1"))
    console = {c["name"]: c["value"] for c in topics.broker_configs(config)}
    assert set(wire) == SERVER_KEYS and set(console) == set(BROKER_KEYS)
    assert wire == {k: console[k] for k in SERVER_KEYS}
    assert (wire["auto.create.topics.enable"], wire["num.partitions"], wire["sasl.enabled.mechanisms"],
            wire["connections.max.idle.ms"], wire["ssl.key.password"]) == ("false", "3", "PLAIN,SCRAM-SHA-256",
                                                                           "300000", None)
