"""Tests of Kafka's own Java client (through java/Driver.java) for pieces of the broker still being built when
they were written: Metadata by topic id, and Metadata's part of the authorizer (topics a user may not describe
hidden from it) in the test of a user allowed by ACLs, one with none and a super user. Not collected by the suite
(the name does not start with test_); run with ``pytest tests/server/java/pending_java_tests.py``. Each test moves
into tests/server/test_java_*.py once it passes. The expected answers are a one-broker Kafka 4.x cluster's
(node 1)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess
from tests.server.java import acl_setup
from tests.server.java.driver import JavaDriver, serving

pytestmark = pytest.mark.e2e

NODE = 1
TOPIC_OPS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}   # Kafka 4.x: group configs
CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
               "DESCRIBE"}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    broker_conf = {"auto.create.topics.enable": False, "group.initial.rebalance.delay.ms": 0}
    with serving(tmp_path_factory.mktemp("java-pending"), broker=broker_conf) as (broker, java):
        java.call("admin", name="admin", config={"bootstrap.servers": broker.bootstrap})
        java.call("producer", name="producer", config={"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        yield broker, java


@pytest.fixture
def java(kafka: tuple[BrokerProcess, JavaDriver]) -> JavaDriver:
    return kafka[1]


def make_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)


def java_consumer(java: JavaDriver, bootstrap: str, name: str, **config: str) -> None:
    java.call("consumer", name=name, config={"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                                             "enable.auto.commit": "false", **config})


# -- group authorized operations, OffsetDelete, topics by id ------------------------------------------------------

def test_describe_and_delete_topics_by_id(kafka):
    broker, java = kafka
    make_topic(broker, "adm-byid", 2)
    topic_id = java.call("describeTopics", topics=["adm-byid"])["adm-byid"]["topic_id"]
    assert java.call("describeTopicsById", ids=[topic_id]) == {topic_id: {"name": "adm-byid", "partitions": 2}}
    java.call("deleteTopicsById", ids=[topic_id])
    assert "adm-byid" not in java.call("listTopics")
    assert java.error("describeTopicsById", ids=[topic_id]).kind == "UnknownTopicIdException"
    assert java.error("deleteTopicsById", ids=[topic_id]).kind == "UnknownTopicIdException"


# -- producers and transactions (DescribeProducers 61, DescribeTransactions 65, ListTransactions 66, 27) ---------

# -- static membership (KIP-345) -----------------------------------------------------------------------------------

# -- the ACL authorizer on every API (Produce, Fetch, Metadata, InitProducerId, groups, DescribeCluster) ------------
# The broker, users and helpers are those of tests/server/test_java_acls.py (java/acl_setup.py).

@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    with acl_setup.secured_broker(tmp_path_factory.mktemp("java-acl")) as kafka:
        yield kafka


def test_acls_allow_a_user_deny_another_and_a_super_user_does_anything(secured):
    broker, java = secured
    acl_setup.make_topics(broker, "alice-t", "other-t")
    acls = [acl_setup.allow("User:alice", "TOPIC", "alice-", "WRITE", "PREFIXED"),
            acl_setup.allow("User:alice", "TOPIC", "alice-", "READ", "PREFIXED"),
            acl_setup.allow("User:alice", "GROUP", "alice-group", "READ")]
    java.call("createAcls", client="admin", acls=acls)
    listed = java.call("describeAcls", client="admin", filter={"principal": "User:alice"})
    assert sorted(map(str, listed)) == sorted(map(str, acls))
    # alice sees only her topics; bob sees none; the super user every one
    assert java.call("listTopics", client="alice") == ["alice-t"]
    assert java.call("listTopics", client="bob") == []
    assert {"alice-t", "other-t"} <= set(java.call("listTopics", client="admin"))
    java.call("producer", name="alice-p", config={**acl_setup.sasl(broker, "alice", "SCRAM-SHA-256"), "acks": "all"})
    assert [s["offset"] for s in java.call("send", name="alice-p", topic="alice-t", values=["a", "b"])] == [0, 1]
    assert java.error("send", name="alice-p", topic="other-t", values=["x"]).kind == "TopicAuthorizationException"
    alice = acl_setup.sasl(broker, "alice", "SCRAM-SHA-256")
    java_consumer(java, alice["bootstrap.servers"], "alice-c", **alice, **{"group.id": "alice-group"})
    java.call("subscribe", name="alice-c", topics=["alice-t"])
    assert [r["value"] for r in java.call("poll", name="alice-c", count=2, timeout_ms=60000)] == ["a", "b"]
    java.call("commit_sync", name="alice-c")
    java.call("close", name="alice-c")
    java.call("producer", name="bob-p", config={**acl_setup.sasl(broker, "bob"), "enable.idempotence": "false",
                                                "max.block.ms": "10000"})
    assert java.error("send", name="bob-p", topic="alice-t", values=["b"]).kind == "TopicAuthorizationException"
    java.call("close", name="bob-p")
    assert java.error("describeConsumerGroups", client="bob", groups=["alice-group"]).kind == \
        "GroupAuthorizationException"
    assert java.error("deleteTopics", client="alice", topics=["other-t"]).kind == "TopicAuthorizationException"
    assert java.error("createTopics", client="alice", topics=[{"name": "alice-new", "partitions": 1}]).kind == \
        "TopicAuthorizationException"
    assert java.error("describeAcls", client="alice").kind == "ClusterAuthorizationException"
    assert java.error("createAcls", client="bob", acls=[acl_setup.allow("User:bob", "TOPIC", "*", "ALL")]).kind == \
        "ClusterAuthorizationException"
    # a DENY wins over the prefixed ALLOW
    deny = acl_setup.allow("User:alice", "TOPIC", "alice-t", "WRITE", permission="DENY")
    java.call("createAcls", client="admin", acls=[deny])
    assert java.error("send", name="alice-p", topic="alice-t", values=["c"]).kind == "TopicAuthorizationException"
    assert java.call("deleteAcls", client="admin", filters=[{"principal": "User:alice", "permission": "DENY"}]) == \
        [deny]
    assert [s["offset"] for s in java.call("send", name="alice-p", topic="alice-t", values=["d"])] == [2]
    java.call("close", name="alice-p")
    ops = java.call("describeTopics", client="alice", topics=["alice-t"], authorized_operations=True)
    assert set(ops["alice-t"]["authorized_operations"]) == {"READ", "WRITE", "DESCRIBE"}
    assert java.call("describeCluster", client="alice", authorized_operations=True)["authorized_operations"] == []
    assert set(java.call("describeCluster", client="admin", authorized_operations=True)["authorized_operations"]) \
        == CLUSTER_OPS
