"""Tests of Kafka's own Java client (through java/Driver.java) for pieces of the broker still being built when
they were written: the CreateTopics answer with configs, replica assignments naming this broker, AlterConfigs,
DescribeCluster, ListConfigResources, authorized operations without an authorizer, Metadata by topic id,
OffsetDelete, static membership (KIP-345), DescribeProducers/DescribeTransactions/ListTransactions/WriteTxnMarkers,
ElectLeaders, the reassignment APIs, DescribeQuorum, and the ACL authorizer on every API. Not collected by the
suite (the name does not start with test_); run with ``pytest tests/server/java/pending_java_tests.py``. Each test
moves into tests/server/test_java_*.py once it passes. The expected answers are a one-broker Kafka 4.x cluster's
(node 1)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess, wait_until
from tests.server.java import acl_setup
from tests.server.java.driver import JavaDriver, serving

pytestmark = pytest.mark.e2e

NODE = 1
TOPIC_OPS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPS = {"READ", "DESCRIBE", "DELETE"}
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


# -- topics, configs, cluster (CreateTopics configs, assignments, AlterConfigs, DescribeCluster, 74) -------------

def test_create_describe_list_and_delete_topics(java):
    created = java.call("createTopics", topics=[
        {"name": "adm-a", "partitions": 3, "replication": 1, "configs": {"retention.ms": "3600000"}},
        {"name": "adm-b"}])                                  # broker defaults for partitions and replication
    assert created["adm-a"]["partitions"] == 3 and created["adm-a"]["replication"] == 1
    assert created["adm-b"]["partitions"] == 1 and created["adm-b"]["replication"] == 1
    # The answer carries the topic's configs (Kafka's CreateTopics v5+): the one set and the defaults.
    assert created["adm-a"]["configs"]["retention.ms"]["value"] == "3600000"
    assert created["adm-a"]["configs"]["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert created["adm-b"]["configs"]["cleanup.policy"] == {"value": "delete", "source": "DEFAULT_CONFIG",
                                                            "read_only": False, "sensitive": False}
    assert {"adm-a", "adm-b"} <= set(java.call("listTopics"))
    described = java.call("describeTopics", topics=["adm-a"])["adm-a"]
    assert described["topic_id"] == created["adm-a"]["topic_id"] and described["internal"] is False
    assert described["partitions"] == [{"partition": p, "leader": NODE, "replicas": [NODE], "isr": [NODE]}
                                       for p in range(3)]
    assert described["authorized_operations"] is None          # not asked for
    assert java.error("createTopics", topics=[{"name": "adm-a", "partitions": 1}]).kind == "TopicExistsException"
    java.call("deleteTopics", topics=["adm-a", "adm-b"])
    assert not {"adm-a", "adm-b"} & set(java.call("listTopics"))
    assert java.error("describeTopics", topics=["adm-a"]).kind == "UnknownTopicOrPartitionException"
    assert java.error("deleteTopics", topics=["adm-a"]).kind == "UnknownTopicOrPartitionException"


def test_create_topics_and_partitions_with_assignments_naming_this_broker(java):
    created = java.call("createTopics", topics=[{"name": "adm-assigned", "assignments": {"0": [NODE], "1": [NODE]}}])
    assert created["adm-assigned"]["partitions"] == 2
    java.call("createPartitions", topic="adm-assigned", count=4, assignments=[[NODE], [NODE]])
    parts = java.call("describeTopics", topics=["adm-assigned"])["adm-assigned"]["partitions"]
    assert [p["replicas"] for p in parts] == [[NODE]] * 4
    # Another broker is not registered: Kafka's INVALID_REPLICA_ASSIGNMENT, and nothing is created.
    refused = java.error("createTopics", topics=[{"name": "adm-elsewhere", "assignments": {"0": [NODE + 1]}}])
    assert refused.kind == "InvalidReplicaAssignmentException", refused
    assert "adm-elsewhere" not in java.call("listTopics")
    refused = java.error("createPartitions", topic="adm-assigned", count=5, assignments=[[NODE + 1]])
    assert refused.kind == "InvalidReplicaAssignmentException", refused
    assert len(java.call("describeTopics", topics=["adm-assigned"])["adm-assigned"]["partitions"]) == 4


def test_describe_topics_with_authorized_operations_and_no_authorizer_is_every_topic_operation(kafka):
    broker, java = kafka
    make_topic(broker, "adm-ops", 1)
    got = java.call("describeTopics", topics=["adm-ops"], authorized_operations=True)["adm-ops"]
    assert set(got["authorized_operations"]) == TOPIC_OPS


def test_alter_configs_replaces_the_whole_topic_config(kafka):
    broker, java = kafka
    make_topic(broker, "adm-whole", 1)
    java.call("incrementalAlterConfigs", resource="adm-whole", ops=[
        ["retention.ms", "7200000", "SET"], ["cleanup.policy", "compact", "SET"]])
    java.call("alterConfigs", resource="adm-whole", configs={"segment.bytes": "1048576"})
    conf = java.call("describeConfigs", resource="adm-whole")
    assert conf["segment.bytes"]["value"] == "1048576" and conf["segment.bytes"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    # AlterConfigs sets the topic's config to exactly what it names: the keys left out return to their defaults.
    assert conf["retention.ms"]["source"] == "DEFAULT_CONFIG" and conf["retention.ms"]["value"] == "604800000"
    assert conf["cleanup.policy"]["value"] == "delete"
    bad = java.error("alterConfigs", resource="adm-whole", configs={"segment.bytes": "many"})
    assert bad.kind == "InvalidConfigurationException", bad
    assert java.call("describeConfigs", resource="adm-whole")["segment.bytes"]["value"] == "1048576"


def test_describe_groups_with_authorized_operations_and_no_authorizer_is_every_group_operation(kafka):
    broker, java = kafka
    make_topic(broker, "adm-gops", 1)
    java.call("alterConsumerGroupOffsets", group="adm-gops-group", offsets={"adm-gops:0": 0})
    got = java.call("describeConsumerGroups", groups=["adm-gops-group"], authorized_operations=True)
    assert set(got["adm-gops-group"]["authorized_operations"]) == GROUP_OPS


def test_delete_consumer_group_offsets(kafka):
    broker, java = kafka
    make_topic(broker, "adm-odel", 2)
    java.call("alterConsumerGroupOffsets", group="adm-odel-group", offsets={"adm-odel:0": 3, "adm-odel:1": 4})
    java.call("deleteConsumerGroupOffsets", group="adm-odel-group", partitions=["adm-odel:0"])
    assert java.call("listConsumerGroupOffsets", group="adm-odel-group") == {"adm-odel:1": 4}


def test_describe_cluster(kafka):
    broker, java = kafka
    cluster = java.call("describeCluster", authorized_operations=True)
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    assert cluster["nodes"] == [{"id": NODE, "host": "127.0.0.1", "port": port, "rack": None}]
    assert cluster["controller"]["id"] == NODE
    assert cluster["cluster_id"] and len(cluster["cluster_id"]) == 22
    assert set(cluster["authorized_operations"]) == {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                                                    "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}


def test_list_client_metrics_resources_is_empty(java):
    assert java.call("listClientMetricsResources") == "[]"



def test_describe_and_delete_topics_by_id(kafka):
    broker, java = kafka
    make_topic(broker, "adm-byid", 2)
    topic_id = java.call("describeTopics", topics=["adm-byid"])["adm-byid"]["topic_id"]
    assert java.call("describeTopicsById", ids=[topic_id]) == {topic_id: {"name": "adm-byid", "partitions": 2}}
    java.call("deleteTopicsById", ids=[topic_id])
    assert "adm-byid" not in java.call("listTopics")
    assert java.error("describeTopicsById", ids=[topic_id]).kind == "UnknownTopicIdException"
    assert java.error("deleteTopicsById", ids=[topic_id]).kind == "UnknownTopicIdException"


# -- leader elections, reassignments, the quorum ------------------------------------------------------------------

def test_elect_leaders_is_not_needed_with_one_broker(kafka):
    broker, java = kafka
    make_topic(broker, "pend-elect", 2)
    assert java.call("electLeaders", partitions=["pend-elect:0", "pend-elect:1"]) == \
        {"pend-elect:0": "ElectionNotNeededException", "pend-elect:1": "ElectionNotNeededException"}
    assert java.call("electLeaders", type="UNCLEAN", partitions=["pend-elect:0"]) == \
        {"pend-elect:0": "ElectionNotNeededException"}
    assert java.call("electLeaders", partitions=["pend-none:0"]) == \
        {"pend-none:0": "UnknownTopicOrPartitionException"}


def test_reassignments_to_this_broker_are_no_ops_and_none_is_listed(kafka):
    broker, java = kafka
    make_topic(broker, "pend-move", 1)
    java.call("alterPartitionReassignments", reassignments={"pend-move:0": [NODE]})
    assert java.call("listPartitionReassignments") == {}
    refused = java.error("alterPartitionReassignments", reassignments={"pend-move:0": [NODE + 1]})
    assert refused.kind == "InvalidReplicaAssignmentException", refused
    refused = java.error("alterPartitionReassignments", reassignments={"pend-move:0": None})
    assert refused.kind == "NoReassignmentInProgressException", refused
    assert java.call("describeTopics", topics=["pend-move"])["pend-move"]["partitions"][0]["replicas"] == [NODE]


def test_describe_metadata_quorum_names_this_node_the_only_voter(java):
    quorum = java.call("describeMetadataQuorum")
    assert quorum["leader"] == NODE and [v["id"] for v in quorum["voters"]] == [NODE]
    assert quorum["observers"] == 0


# -- producers and transactions (DescribeProducers 61, DescribeTransactions 65, ListTransactions 66, 27) ---------

def test_describe_producers_of_a_partition(kafka):
    broker, java = kafka
    make_topic(broker, "pend-prod", 1)
    java.call("producer", name="pend-idem", config={"bootstrap.servers": broker.bootstrap,
                                                    "enable.idempotence": "true"})
    java.call("send", name="pend-idem", topic="pend-prod", values=[f"v{i}" for i in range(7)])
    [state] = java.call("describeProducers", partitions=["pend-prod:0"])["pend-prod:0"]
    assert state["producer_id"] >= 0 and state["epoch"] == 0 and state["last_sequence"] == 6
    assert state["txn_start_offset"] is None and state["last_timestamp"] > 0
    java.call("close", name="pend-idem")


def test_describe_and_list_transactions(kafka):
    broker, java = kafka
    make_topic(broker, "pend-txn", 2)
    java.call("producer", name="pend-tx", config={"bootstrap.servers": broker.bootstrap,
                                                  "transactional.id": "pend-tx", "transaction.timeout.ms": "60000"})
    java.call("init_transactions", name="pend-tx")
    java.call("begin", name="pend-tx")
    java.call("send", name="pend-tx", topic="pend-txn", partition=1, values=["a", "b"])
    described = java.call("describeTransactions", ids=["pend-tx"])["pend-tx"]
    assert described["state"] == "ONGOING" and described["coordinator"] == NODE
    assert described["partitions"] == ["pend-txn:1"] and described["timeout_ms"] == 60000
    assert described["start_ms"] is not None
    pid = described["producer_id"]
    assert java.call("listTransactions", states=["ONGOING"])["pend-tx"] == {"producer_id": pid, "state": "ONGOING"}
    assert "pend-tx" in java.call("listTransactions", producer_ids=[pid])
    assert java.call("listTransactions", producer_ids=[pid + 1000]) == {}
    [state] = java.call("describeProducers", partitions=["pend-txn:1"])["pend-txn:1"]
    assert state["producer_id"] == pid and state["txn_start_offset"] == 0
    java.call("commit", name="pend-tx")
    assert java.call("describeTransactions", ids=["pend-tx"])["pend-tx"]["state"] == "COMPLETE_COMMIT"
    assert "pend-tx" not in java.call("listTransactions", states=["ONGOING"])
    assert java.error("describeTransactions", ids=["pend-unknown"]).kind == "TransactionalIdNotFoundException"
    java.call("close", name="pend-tx")


def test_abort_a_hanging_transaction_with_the_admin(kafka):
    broker, java = kafka
    make_topic(broker, "pend-hang", 1)
    java.call("producer", name="pend-hang", config={"bootstrap.servers": broker.bootstrap,
                                                    "transactional.id": "pend-hang"})
    java.call("init_transactions", name="pend-hang")
    java.call("begin", name="pend-hang")
    java.call("send", name="pend-hang", topic="pend-hang", values=["x", "y", "z"])
    [state] = java.call("describeProducers", partitions=["pend-hang:0"])["pend-hang:0"]
    assert state["txn_start_offset"] == 0
    lso = java.call("listOffsets", specs={"pend-hang:0": "latest"}, isolation="READ_COMMITTED")["pend-hang:0"]
    assert lso["offset"] == 0                                   # the open transaction holds the LSO
    # No marker was written for this producer yet: no coordinator epoch, and kafka-transactions.sh's abort
    # then passes 0, as here.
    assert state["coordinator_epoch"] is None
    java.call("abortTransaction", partition="pend-hang:0", producer_id=state["producer_id"], epoch=state["epoch"],
              coordinator_epoch=0)
    # The abort marker follows the three records: the LSO is the log end again and nothing is left open.
    after = java.call("listOffsets", specs={"pend-hang:0": "latest"}, isolation="READ_COMMITTED")["pend-hang:0"]
    assert after["offset"] == 4
    assert java.call("describeProducers", partitions=["pend-hang:0"])["pend-hang:0"][0]["txn_start_offset"] is None
    java.call("close", name="pend-hang", timeout_ms=1000)


# -- static membership (KIP-345) -----------------------------------------------------------------------------------

def test_a_static_member_restarted_gets_its_assignment_back_without_a_rebalance(kafka):
    broker, java = kafka
    make_topic(broker, "pend-static", 4)
    conf = {"group.id": "pend-static", "session.timeout.ms": "30000", "heartbeat.interval.ms": "500"}
    java_consumer(java, broker.bootstrap, "s1", **conf, **{"group.instance.id": "i1"})
    java_consumer(java, broker.bootstrap, "s2", **conf, **{"group.instance.id": "i2"})
    for name in ("s1", "s2"):
        java.call("subscribe", name=name, topics=["pend-static"])

    def settled() -> bool:
        for name in ("s1", "s2"):
            java.call("poll", name=name, count=0, timeout_ms=300)
        return len(java.call("assignment", name="s1")) == 2 and len(java.call("assignment", name="s2")) == 2
    wait_until("each static member to own two partitions", settled, 90)
    before = {n: (java.call("assignment", name=n), java.call("group_metadata", name=n)) for n in ("s1", "s2")}
    generation = before["s1"][1]["generation"]
    assert before["s2"][1]["generation"] == generation
    java.call("close", name="s1")                      # a static member sends no LeaveGroup: its place is kept
    java_consumer(java, broker.bootstrap, "s1b", **conf, **{"group.instance.id": "i1"})
    java.call("subscribe", name="s1b", topics=["pend-static"])

    def rejoined() -> bool:
        # Both poll (a broker that rebalanced instead would need s2 to rejoin too): then the generation tells.
        for name in ("s1b", "s2"):
            java.call("poll", name=name, count=0, timeout_ms=300)
        return bool(java.call("assignment", name="s1b"))
    wait_until("the restarted member's assignment", rejoined, 60)
    assert java.call("assignment", name="s1b") == before["s1"][0]
    again = java.call("group_metadata", name="s1b")
    assert again["generation"] == generation and again["member"] != before["s1"][1]["member"]
    for _ in range(5):                                  # the other member keeps polling: nothing changes for it
        java.call("poll", name="s2", count=0, timeout_ms=300)
    assert java.call("assignment", name="s2") == before["s2"][0]
    assert java.call("group_metadata", name="s2")["generation"] == generation
    members = java.call("describeConsumerGroups", groups=["pend-static"])["pend-static"]["members"]
    assert sorted(m["instance"] for m in members) == ["i1", "i2"]
    for name in ("s1b", "s2"):
        java.call("close", name=name)


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
