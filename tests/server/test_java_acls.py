"""Kafka's own Java client (kafka-clients 3.9.1, one JVM for the file: java/Driver.java) on a SASL broker with
Kafka's StandardAuthorizer (java/acl_setup.py: admin is a super user, alice and bob are not). The ACL APIs: the
super user creates, describes with Kafka's filters (LITERAL, PREFIXED, ANY, MATCH) and deletes ACLs, which survive a
restart; the others are refused with ClusterAuthorizationException; bad bindings are InvalidRequestException
(without an authorizer the calls are SecurityDisabledException: test_java_admin). The ACLs at work: a user allowed
by prefixed ACLs produces, consumes in her group and sees only her topics, one with no ACL is refused
(TopicAuthorizationException, GroupAuthorizationException) and sees none, a DENY wins over an ALLOW, the super user
does anything, authorized operations of a topic and of the cluster come from the ACLs; a transactional id needs
WRITE on it; a consumer needs READ on its topic and its group; configs, records, partitions, log dirs and the
broker's configs need their operations."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.broker_proc import BrokerProcess
from tests.server.java import acl_setup
from tests.server.java.acl_setup import allow, secured_broker
from tests.server.java.driver import JavaDriver

pytestmark = pytest.mark.e2e

CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
               "DESCRIBE"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    with secured_broker(tmp_path_factory.mktemp("java-acls")) as kafka:
        yield kafka


def java_consumer(java: JavaDriver, bootstrap: str, name: str, **config: str) -> None:
    java.call("consumer", name=name, config={"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                                             "enable.auto.commit": "false", **config})


def key(acl: dict) -> tuple:
    return tuple(sorted(acl.items()))


def test_create_describe_with_filters_and_delete(secured):
    broker, java = secured
    literal = allow("User:carol", "TOPIC", "orders", "READ")
    wildcard = allow("User:carol", "TOPIC", "*", "DESCRIBE")
    prefixed = allow("User:carol", "TOPIC", "ord", "WRITE", "PREFIXED")
    other = allow("User:carol", "TOPIC", "payments", "READ", host="10.0.0.1")
    group = allow("User:carol", "GROUP", "carol-", "READ", "PREFIXED", permission="DENY")
    cluster = allow("User:carol", "CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")
    made = [literal, wildcard, prefixed, other, group, cluster]
    java.call("createAcls", client="admin", acls=made)

    def described(**flt: str) -> set:
        return {key(a) for a in java.call("describeAcls", client="admin", filter={"principal": "User:carol", **flt})}
    assert described() == {key(a) for a in made}
    assert described(resource_type="TOPIC", name="orders", pattern="LITERAL") == {key(literal)}
    # MATCH: every binding that applies to the topic "orders": the literal, the wildcard and the prefix
    assert described(resource_type="TOPIC", name="orders", pattern="MATCH") == {key(literal), key(wildcard),
                                                                                key(prefixed)}
    assert described(pattern="PREFIXED") == {key(prefixed), key(group)}
    assert described(resource_type="CLUSTER") == {key(cluster)}
    assert described(permission="DENY") == {key(group)}
    assert described(host="10.0.0.1") == {key(other)}
    assert described(operation="WRITE") == {key(prefixed)}
    java.call("createAcls", client="admin", acls=[literal])                  # again: nothing new
    assert len(described()) == len(made)

    deleted = java.call("deleteAcls", client="admin", filters=[{"principal": "User:carol", "resource_type": "TOPIC",
                                                                 "name": "orders", "pattern": "MATCH"}])
    assert {key(a) for a in deleted} == {key(literal), key(wildcard), key(prefixed)}
    assert described() == {key(other), key(group), key(cluster)}
    assert java.call("deleteAcls", client="admin", filters=[{"principal": "User:nobody"}]) == []
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:carol"}])
    assert described() == set()


def test_only_a_super_user_may_create_describe_or_delete_acls_here(secured):
    broker, java = secured
    for user in ("alice", "bob"):
        assert java.error("describeAcls", client=user).kind == "ClusterAuthorizationException"
        assert java.error("createAcls", client=user, acls=[allow(f"User:{user}", "TOPIC", "*", "ALL")]).kind == \
            "ClusterAuthorizationException"
        assert java.error("deleteAcls", client=user, filters=[{}]).kind == "ClusterAuthorizationException"
    assert java.call("describeAcls", client="admin", filter={"principal": "User:alice"}) == []


def test_a_user_given_alter_and_describe_on_the_cluster_manages_acls(secured):
    broker, java = secured
    grants = [allow("User:alice", "CLUSTER", "kafka-cluster", "ALTER"),
              allow("User:alice", "CLUSTER", "kafka-cluster", "DESCRIBE")]
    java.call("createAcls", client="admin", acls=grants)
    rule = allow("User:bob", "TOPIC", "bob-topic", "READ")
    java.call("createAcls", client="alice", acls=[rule])
    assert key(rule) in {key(a) for a in java.call("describeAcls", client="alice", filter={"principal": "User:bob"})}
    assert java.call("deleteAcls", client="alice", filters=[{"principal": "User:bob"}]) == [rule]
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:alice"}])
    assert java.error("describeAcls", client="alice").kind == "ClusterAuthorizationException"


def test_bad_bindings_are_invalid_requests(secured):
    broker, java = secured
    for bad in (allow("User:carol", "TOPIC", "", "READ"),                       # an empty name
                allow("carol", "TOPIC", "t", "READ"),                            # a principal without its type
                allow("User:carol", "CLUSTER", "my-cluster", "ALTER")):          # the cluster is kafka-cluster
        refused = java.error("createAcls", client="admin", acls=[bad])
        assert refused.kind == "InvalidRequestException", (bad, refused)
    assert java.call("describeAcls", client="admin", filter={"principal": "User:carol"}) == []


def test_acls_survive_a_broker_restart(secured):
    broker, java = secured
    rule = allow("User:bob", "TOPIC", "bob-", "DESCRIBE", "PREFIXED")
    java.call("createAcls", client="admin", acls=[rule])
    assert broker.stop() == 0
    broker.restart()
    assert java.call("describeAcls", client="admin", filter={"principal": "User:bob"}) == [rule]
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:bob"}])


def test_transactional_id_needs_its_acl(secured):
    broker, java = secured
    acl_setup.make_topics(broker, "alice-tx-t")
    conf = {**acl_setup.sasl(broker, "alice", "SCRAM-SHA-256"), "transactional.id": "alice-tx",
            "max.block.ms": "10000"}
    java.call("producer", name="alice-tx", config=conf)
    assert java.error("init_transactions", name="alice-tx").kind == "TransactionalIdAuthorizationException"
    java.call("close", name="alice-tx", timeout_ms=1000)
    java.call("createAcls", client="admin", acls=[
        acl_setup.allow("User:alice", "TRANSACTIONAL_ID", "alice-tx", "WRITE"),
        acl_setup.allow("User:alice", "TOPIC", "alice-", "WRITE", "PREFIXED")])
    java.call("producer", name="alice-tx2", config=conf)
    java.call("init_transactions", name="alice-tx2")
    java.call("begin", name="alice-tx2")
    java.call("send", name="alice-tx2", topic="alice-tx-t", values=["t"])
    java.call("commit", name="alice-tx2")
    java.call("close", name="alice-tx2")
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:alice"}])


def test_consumers_and_admin_calls_refused_by_acls(secured):
    broker, java = secured
    acl_setup.make_topics(broker, "alice-read", "secret-t")
    java.call("createAcls", client="admin", acls=[
        acl_setup.allow("User:alice", "TOPIC", "alice-read", "READ"),
        acl_setup.allow("User:alice", "GROUP", "alice-g2", "READ")])
    alice = acl_setup.sasl(broker, "alice", "SCRAM-SHA-256")
    # a topic she may not read: the consumer's poll raises TopicAuthorizationException
    java_consumer(java, alice["bootstrap.servers"], "alice-secret", **alice)
    java.call("assign", name="alice-secret", partitions=["secret-t:0"])
    assert java.error("poll", name="alice-secret", count=1, timeout_ms=10000).kind == "TopicAuthorizationException"
    java.call("close", name="alice-secret")
    # a group she may not use: GroupAuthorizationException
    java_consumer(java, alice["bootstrap.servers"], "alice-badgroup", **alice, **{"group.id": "not-hers"})
    java.call("subscribe", name="alice-badgroup", topics=["alice-read"])
    assert java.error("poll", name="alice-badgroup", count=1, timeout_ms=10000).kind == "GroupAuthorizationException"
    java.call("close", name="alice-badgroup")
    # configs need DESCRIBE_CONFIGS / ALTER_CONFIGS; records DELETE; offsets DESCRIBE
    assert java.error("describeConfigs", client="alice", resource="alice-read").kind == "TopicAuthorizationException"
    assert java.error("incrementalAlterConfigs", client="alice", resource="alice-read",
                      ops=[["retention.ms", "1000", "SET"]]).kind == "TopicAuthorizationException"
    assert java.error("deleteRecords", client="alice", before={"alice-read:0": 0}).kind == \
        "TopicAuthorizationException"
    assert java.error("createPartitions", client="alice", topic="alice-read", count=2).kind == \
        "TopicAuthorizationException"
    assert java.call("listOffsets", client="alice", specs={"alice-read:0": "latest"})["alice-read:0"]["offset"] == 0
    assert java.error("describeConfigs", client="alice", type="BROKER", resource="1").kind == \
        "ClusterAuthorizationException"
    assert java.error("describeLogDirs", client="alice", brokers=[1]).kind == "ClusterAuthorizationException"
    # the super user may do all of it
    java.call("incrementalAlterConfigs", client="admin", resource="alice-read", ops=[["retention.ms", "1000", "SET"]])
    assert java.call("describeConfigs", client="admin", resource="alice-read")["retention.ms"]["value"] == "1000"
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:alice"}])


def test_acls_allow_a_user_deny_another_and_a_super_user_does_anything(secured):
    broker, java = secured
    acl_setup.make_topics(broker, "alice-t", "other-t")
    assert java.call("describeAcls", client="admin", filter={"principal": "User:alice"}) == []
    acls = [acl_setup.allow("User:alice", "TOPIC", "alice-", "WRITE", "PREFIXED"),
            acl_setup.allow("User:alice", "TOPIC", "alice-", "READ", "PREFIXED"),
            acl_setup.allow("User:alice", "GROUP", "alice-group", "READ")]
    java.call("createAcls", client="admin", acls=acls)
    listed = java.call("describeAcls", client="admin", filter={"principal": "User:alice"})
    assert sorted(map(str, listed)) == sorted(map(str, acls))
    # alice sees only her topics (those her prefix names); bob sees none; the super user every one
    every = set(java.call("listTopics", client="admin"))
    assert {"alice-t", "other-t"} <= every
    assert set(java.call("listTopics", client="alice")) == {t for t in every if t.startswith("alice-")}
    assert java.call("listTopics", client="bob") == []
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
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:alice"}])
