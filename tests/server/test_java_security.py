"""Kafka's own Java client (kafka-clients 3.9.1, through java/Driver.java: one JVM for the file) on a SASL_PLAINTEXT
listener: with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 its AdminClient, idempotent producer and group consumer
work (alice has a password; carol only a stored SCRAM-SHA-512 credential, so the broker never saw her password);
a wrong password or an unknown user is the client's SaslAuthenticationException, and nothing reaches the log;
describeUserScramCredentials lists each user's SCRAM mechanisms and iterations."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess
from tests.server.java.driver import JavaDriver, serving
from tests.server.test_security import stored_scram

pytestmark = pytest.mark.e2e

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORDS = {"alice": "alice-secret", "carol": "carol-secret"}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    tmp = tmp_path_factory.mktemp("java-sasl")
    users = tmp / "users.yaml"
    users.write_text(yaml.safe_dump({"users": {
        "alice": {"password": PASSWORDS["alice"]},
        "carol": {"scram-sha-512": stored_scram(PASSWORDS["carol"], "SCRAM-SHA-512", iterations=8192)}}}))
    with serving(tmp, broker={"auto.create.topics.enable": False, "group.initial.rebalance.delay.ms": 0,
                         "sasl.credentials.file": str(users)},
                 listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0") as kafka:
        yield kafka


def sasl(broker: BrokerProcess, mechanism: str, user: str, password: str) -> dict[str, str]:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN" else
              "org.apache.kafka.common.security.scram.ScramLoginModule")
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{module} required username="{user}" password="{password}";'}


def make_topic(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT"), "log_level": 0})
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def log_end(broker: BrokerProcess, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.address("PLAINTEXT"), "group.id": "ends", "log_level": 0})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_admin_producer_and_group_consumer_over_sasl(kafka, mechanism):
    broker, java = kafka
    topic = f"java-sasl-{mechanism.lower()}"
    make_topic(broker, topic)
    conf = sasl(broker, mechanism, "alice", PASSWORDS["alice"])
    name = f"sasl-{mechanism}"
    java.call("admin", name=f"{name}-admin", config=conf)
    assert topic in java.call("listTopics", client=f"{name}-admin")
    assert java.call("describeTopics", client=f"{name}-admin", topics=[topic])[topic]["partitions"][0]["leader"] == 1
    java.call("producer", name=f"{name}-p", config={**conf, "enable.idempotence": "true", "acks": "all"})
    values = [f"{mechanism}-{i}" for i in range(20)]
    assert [s["offset"] for s in java.call("send", name=f"{name}-p", topic=topic, values=values)] == list(range(20))
    java.call("consumer", name=f"{name}-c", config={**conf, "group.id": f"g-{mechanism}",
                                                     "auto.offset.reset": "earliest", "enable.auto.commit": "false"})
    java.call("subscribe", name=f"{name}-c", topics=[topic])
    assert [r["value"] for r in java.call("poll", name=f"{name}-c", count=20, timeout_ms=60000)] == values
    java.call("commit_sync", name=f"{name}-c")
    assert java.call("listConsumerGroupOffsets", client=f"{name}-admin", group=f"g-{mechanism}") == {f"{topic}:0": 20}
    for client in (f"{name}-c", f"{name}-p", f"{name}-admin"):
        java.call("close", name=client)


def test_a_user_known_only_by_stored_scram_keys(kafka):
    broker, java = kafka
    java.call("admin", name="carol", config=sasl(broker, "SCRAM-SHA-512", "carol", PASSWORDS["carol"]))
    assert isinstance(java.call("listTopics", client="carol"), list)
    java.call("close", name="carol")
    java.call("admin", name="carol-256", config={**sasl(broker, "SCRAM-SHA-256", "carol", PASSWORDS["carol"]),
                                                 "default.api.timeout.ms": "15000", "request.timeout.ms": "10000"})
    # carol has no SCRAM-SHA-256 credential: that mechanism cannot authenticate her
    assert java.error("listTopics", client="carol-256").kind == "SaslAuthenticationException"
    java.call("close", name="carol-256")


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "anything")])
def test_wrong_credentials_are_an_authentication_error_and_store_nothing(kafka, mechanism, user, password):
    broker, java = kafka
    topic = "java-sasl-refused"
    make_topic(broker, topic)
    conf = {**sasl(broker, mechanism, user, password), "max.block.ms": "15000", "default.api.timeout.ms": "15000",
            "request.timeout.ms": "10000"}
    java.call("admin", name="refused-admin", config=conf)
    assert java.error("listTopics", client="refused-admin").kind == "SaslAuthenticationException"
    java.call("close", name="refused-admin")
    java.call("producer", name="refused-p", config={**conf, "enable.idempotence": "false"})
    assert java.error("send", name="refused-p", topic=topic, values=["nope"]).kind == "SaslAuthenticationException"
    java.call("close", name="refused-p", timeout_ms=1000)
    assert log_end(broker, topic) == 0


def test_describe_user_scram_credentials(kafka):
    broker, java = kafka
    java.call("admin", name="scram-admin", config=sasl(broker, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]))
    got = java.call("describeUserScramCredentials", client="scram-admin")
    assert got["carol"] == [["SCRAM_SHA_512", 8192]]                       # only her stored key
    assert sorted(m for m, _ in got["alice"]) == ["SCRAM_SHA_256", "SCRAM_SHA_512"]   # from her password
    assert java.call("describeUserScramCredentials", client="scram-admin", users=["carol"]) == \
        {"carol": [["SCRAM_SHA_512", 8192]]}
    assert java.call("describeUserScramCredential", client="scram-admin", user="carol") == [["SCRAM_SHA_512", 8192]]
    # an unknown user is RESOURCE_NOT_FOUND, which description(user) raises (all() leaves it with no credential)
    refused = java.error("describeUserScramCredential", client="scram-admin", user="mallory")
    assert refused.kind == "ResourceNotFoundException", refused
    java.call("close", name="scram-admin")
