"""Kafka's own AdminClient (kafka-clients 3.9.1, through java/Driver.java: one JVM for the file) against one broker
without authentication or authorizer: topics (created with configs and with replica assignments, described with
authorized operations, deleted), configs (describe, incremental and whole-config alter), partitions, records and
offsets, log dirs, consumer groups and their offsets, the cluster, the metadata quorum and features, leader
elections and reassignments, the ACL calls (SECURITY_DISABLED), and the calls for APIs the broker does not serve,
which the client must refuse with UnsupportedVersionException. Each expected answer is what a one-broker Kafka 4.x
cluster (node 1) answers."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess, wait_until
from tests.server.java.driver import JavaDriver, serving

pytestmark = pytest.mark.e2e

NODE = 1
# AclEntry.supportedOperations in Kafka: what an authorized-operations answer holds when nothing is refused.
GROUP_OPS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}   # Kafka 4.x: group configs
TOPIC_OPS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    broker_conf = {"auto.create.topics.enable": False, "group.initial.rebalance.delay.ms": 0}
    with serving(tmp_path_factory.mktemp("java-admin"), broker=broker_conf) as (broker, java):
        java.call("admin", name="admin", config={"bootstrap.servers": broker.bootstrap})
        java.call("producer", name="producer", config={"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        yield broker, java


def make_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    """Made with librdkafka's admin, so that tests of other calls do not rest on the Java client's createTopics."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)


@pytest.fixture
def java(kafka: tuple[BrokerProcess, JavaDriver]) -> JavaDriver:
    return kafka[1]


def test_create_partitions(kafka):
    broker, java = kafka
    make_topic(broker, "adm-grow", 1)
    java.call("createPartitions", topic="adm-grow", count=3)
    assert len(java.call("describeTopics", topics=["adm-grow"])["adm-grow"]["partitions"]) == 3
    assert java.error("createPartitions", topic="adm-grow", count=2).kind == "InvalidPartitionsException"
    assert java.error("createPartitions", topic="adm-none", count=2).kind == "UnknownTopicOrPartitionException"


def test_describe_and_incrementally_alter_topic_configs(kafka):
    broker, java = kafka
    make_topic(broker, "adm-conf", 1)
    java.call("incrementalAlterConfigs", resource="adm-conf", ops=[
        ["retention.ms", "7200000", "SET"], ["cleanup.policy", "compact", "SET"]])
    conf = java.call("describeConfigs", resource="adm-conf")
    assert conf["retention.ms"]["value"] == "7200000" and conf["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert conf["cleanup.policy"]["value"] == "compact"
    java.call("incrementalAlterConfigs", resource="adm-conf", ops=[["cleanup.policy", "delete", "APPEND"],
                                                                   ["retention.ms", "", "DELETE"]])
    conf = java.call("describeConfigs", resource="adm-conf")
    assert conf["cleanup.policy"]["value"] == "compact,delete"
    assert conf["retention.ms"] == {"value": "604800000", "source": "DEFAULT_CONFIG", "read_only": False,
                                    "sensitive": False}
    bad = java.error("incrementalAlterConfigs", resource="adm-conf", ops=[["retention.ms", "soon", "SET"]])
    assert bad.kind == "InvalidConfigurationException", bad
    assert java.call("describeConfigs", resource="adm-conf")["retention.ms"]["value"] == "604800000"
    assert java.error("describeConfigs", resource="adm-none").kind == "UnknownTopicOrPartitionException"


def test_describe_broker_configs(java):
    conf = java.call("describeConfigs", type="BROKER", resource=str(NODE))
    assert conf["node.id"]["value"] == str(NODE)
    assert conf["auto.create.topics.enable"]["value"] == "false"        # as this broker's config file says
    assert conf["num.partitions"]["value"] == "1"


def test_records_offsets_and_delete_records(kafka):
    broker, java = kafka
    make_topic(broker, "adm-rec", 1)
    sent = java.call("send", name="producer", topic="adm-rec", partition=0, values=[f"v{i}" for i in range(10)])
    assert [s["offset"] for s in sent] == list(range(10))
    got = java.call("listOffsets", specs={"adm-rec:0": "earliest"})["adm-rec:0"]
    assert got["offset"] == 0
    assert java.call("listOffsets", specs={"adm-rec:0": "latest"})["adm-rec:0"]["offset"] == 10
    newest = java.call("listOffsets", specs={"adm-rec:0": "max_timestamp"})["adm-rec:0"]
    assert 0 <= newest["offset"] < 10 and newest["timestamp"] > 0
    by_time = java.call("listOffsets", specs={"adm-rec:0": str(newest["timestamp"])})["adm-rec:0"]
    assert by_time["offset"] <= newest["offset"] and by_time["timestamp"] == newest["timestamp"]
    future = java.call("listOffsets", specs={"adm-rec:0": str(newest["timestamp"] + 86_400_000)})["adm-rec:0"]
    assert future["offset"] == -1                              # no record that late: Kafka's -1
    assert java.call("deleteRecords", before={"adm-rec:0": 4}) == {"adm-rec:0": 4}
    assert java.call("listOffsets", specs={"adm-rec:0": "earliest"})["adm-rec:0"]["offset"] == 4
    assert java.error("deleteRecords", before={"adm-rec:0": 11}).kind == "OffsetOutOfRangeException"


def test_log_dirs_describe_and_move_a_replica(kafka):
    broker, java = kafka
    make_topic(broker, "adm-dirs", 2)
    java.call("send", name="producer", topic="adm-dirs", partition=0, values=["x" * 100] * 5)
    dirs = java.call("describeLogDirs", brokers=[NODE])[str(NODE)]
    assert set(dirs) == set(broker.log_dirs)
    holders = {d: r for d, desc in dirs.items() for r in desc["replicas"] if r.startswith("adm-dirs:")}
    assert sorted(holders.values()) == ["adm-dirs:0", "adm-dirs:1"]
    for desc in dirs.values():
        assert desc["error"] is None and desc["total_bytes"] >= desc["usable_bytes"] > 0
    here = next(d for d, r in holders.items() if r == "adm-dirs:0")
    assert dirs[here]["replicas"]["adm-dirs:0"]["size"] > 500
    there = next(d for d in broker.log_dirs if d != here)
    assert java.call("describeReplicaLogDirs", partitions=["adm-dirs:0"], broker=NODE)["adm-dirs:0"]["current"] == here
    java.call("alterReplicaLogDirs", moves={"adm-dirs:0": there}, broker=NODE)

    def moved() -> bool:
        return java.call("describeReplicaLogDirs", partitions=["adm-dirs:0"], broker=NODE)["adm-dirs:0"] == \
            {"current": there, "future": None}
    wait_until("the replica's move to the other log dir", moved, 60)
    assert java.call("listOffsets", specs={"adm-dirs:0": "latest"})["adm-dirs:0"]["offset"] == 5


def consume_as_group(java: JavaDriver, bootstrap: str, name: str, group: str, topic: str, count: int,
                     **config: str) -> list[dict]:
    java.call("consumer", name=name, config={"bootstrap.servers": bootstrap, "group.id": group,
                                             "auto.offset.reset": "earliest", "enable.auto.commit": "false",
                                             **config})
    java.call("subscribe", name=name, topics=[topic])
    records = java.call("poll", name=name, count=count, timeout_ms=60000)
    java.call("commit_sync", name=name)
    return records


def test_consumer_groups_and_their_offsets(kafka):
    broker, java = kafka
    make_topic(broker, "adm-grp", 2)
    for p in range(2):
        java.call("send", name="producer", topic="adm-grp", partition=p, values=[f"{p}-{i}" for i in range(5)])
    assert len(consume_as_group(java, broker.bootstrap, "adm-c1", "adm-group", "adm-grp", 10)) == 10
    assert java.call("listConsumerGroups")["adm-group"] == "STABLE"
    described = java.call("describeConsumerGroups", groups=["adm-group"])["adm-group"]
    assert described["state"] == "STABLE" and described["coordinator"] == NODE and described["simple"] is False
    assert described["assignor"] == "range" or described["assignor"] == "cooperative-sticky", described
    assert [m["assignment"] for m in described["members"]] == [["adm-grp:0", "adm-grp:1"]]
    assert java.call("listConsumerGroupOffsets", group="adm-group") == {"adm-grp:0": 5, "adm-grp:1": 5}
    # Offsets of a group with members cannot be altered (Kafka: UNKNOWN_MEMBER_ID from the coordinator).
    assert java.error("alterConsumerGroupOffsets", group="adm-group", offsets={"adm-grp:0": 1}).kind == \
        "UnknownMemberIdException"
    assert java.error("deleteConsumerGroups", groups=["adm-group"]).kind == "GroupNotEmptyException"
    java.call("close", name="adm-c1")
    assert java.call("listConsumerGroups")["adm-group"] == "EMPTY"
    java.call("alterConsumerGroupOffsets", group="adm-group", offsets={"adm-grp:0": 1, "adm-grp:1": 2})
    assert java.call("listConsumerGroupOffsets", group="adm-group") == {"adm-grp:0": 1, "adm-grp:1": 2}
    java.call("deleteConsumerGroups", groups=["adm-group"])
    assert "adm-group" not in java.call("listConsumerGroups")
    assert java.error("deleteConsumerGroups", groups=["adm-group"]).kind == "GroupIdNotFoundException"


def test_remove_a_static_member_from_its_group(kafka):
    broker, java = kafka
    make_topic(broker, "adm-static", 1)
    java.call("send", name="producer", topic="adm-static", values=["a", "b"])
    consume_as_group(java, broker.bootstrap, "adm-s1", "adm-static-group", "adm-static", 2,
                     **{"group.instance.id": "adm-instance"})
    members = java.call("describeConsumerGroups", groups=["adm-static-group"])["adm-static-group"]["members"]
    assert [m["instance"] for m in members] == ["adm-instance"]
    java.call("removeMembersFromConsumerGroup", group="adm-static-group", instances=["adm-instance"])
    assert java.call("describeConsumerGroups", groups=["adm-static-group"])["adm-static-group"]["members"] == []
    refused = java.error("removeMembersFromConsumerGroup", group="adm-static-group", instances=["adm-instance"])
    assert "UnknownMemberIdException" in refused.kind or "UNKNOWN_MEMBER_ID" in refused.message, refused
    java.call("close", name="adm-s1", timeout_ms=5000)


def test_describe_features_is_answered(java):
    features = java.call("describeFeatures")
    assert set(features) == {"finalized", "supported", "epoch"}


@pytest.mark.parametrize("call", [
    "describeClientQuotas", "alterClientQuotas",                                    # 48, 49
    "createDelegationToken", "renewDelegationToken", "expireDelegationToken", "describeDelegationToken",  # 38-41
    "alterUserScramCredentials",                                                    # 51
    "updateFeatures", "unregisterBroker", "addRaftVoter", "removeRaftVoter"])       # 57, 64, 80, 81
def test_calls_for_apis_not_served_fail_with_unsupported_version(java, call):
    refused = java.error(call)
    assert refused.kind == "UnsupportedVersionException", refused


def test_acl_calls_without_an_authorizer_are_security_disabled(java):
    assert java.error("describeAcls").kind == "SecurityDisabledException"
    rule = {"resource_type": "TOPIC", "name": "t", "principal": "User:a", "operation": "READ"}
    assert java.error("createAcls", acls=[rule]).kind == "SecurityDisabledException"
    assert java.error("deleteAcls", filters=[{}]).kind == "SecurityDisabledException"


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


def test_elect_leaders_is_not_needed_with_one_broker(kafka):
    broker, java = kafka
    make_topic(broker, "adm-elect", 2)
    assert java.call("electLeaders", partitions=["adm-elect:0", "adm-elect:1"]) == \
        {"adm-elect:0": "ElectionNotNeededException", "adm-elect:1": "ElectionNotNeededException"}
    assert java.call("electLeaders", type="UNCLEAN", partitions=["adm-elect:0"]) == \
        {"adm-elect:0": "ElectionNotNeededException"}
    assert java.call("electLeaders", partitions=["adm-none:0"]) == \
        {"adm-none:0": "UnknownTopicOrPartitionException"}


def test_reassignments_to_this_broker_are_no_ops_and_none_is_listed(kafka):
    broker, java = kafka
    make_topic(broker, "adm-move", 1)
    java.call("alterPartitionReassignments", reassignments={"adm-move:0": [NODE]})
    assert java.call("listPartitionReassignments") == {}
    refused = java.error("alterPartitionReassignments", reassignments={"adm-move:0": [NODE + 1]})
    assert refused.kind == "InvalidReplicaAssignmentException", refused
    refused = java.error("alterPartitionReassignments", reassignments={"adm-move:0": None})
    assert refused.kind == "NoReassignmentInProgressException", refused
    assert java.call("describeTopics", topics=["adm-move"])["adm-move"]["partitions"][0]["replicas"] == [NODE]


def test_describe_metadata_quorum_names_this_node_the_only_voter(java):
    quorum = java.call("describeMetadataQuorum")
    assert quorum["leader"] == NODE and [v["id"] for v in quorum["voters"]] == [NODE]
    assert quorum["observers"] == 0


def test_delete_consumer_group_offsets(kafka):
    broker, java = kafka
    make_topic(broker, "adm-odel", 2)
    java.call("alterConsumerGroupOffsets", group="adm-odel-group", offsets={"adm-odel:0": 3, "adm-odel:1": 4})
    java.call("deleteConsumerGroupOffsets", group="adm-odel-group", partitions=["adm-odel:0"])
    assert java.call("listConsumerGroupOffsets", group="adm-odel-group") == {"adm-odel:1": 4}


def test_describe_producers_of_a_partition(kafka):
    broker, java = kafka
    make_topic(broker, "adm-prod", 1)
    java.call("producer", name="adm-idem", config={"bootstrap.servers": broker.bootstrap,
                                                    "enable.idempotence": "true"})
    java.call("send", name="adm-idem", topic="adm-prod", values=[f"v{i}" for i in range(7)])
    [state] = java.call("describeProducers", partitions=["adm-prod:0"])["adm-prod:0"]
    assert state["producer_id"] >= 0 and state["epoch"] == 0 and state["last_sequence"] == 6
    assert state["txn_start_offset"] is None and state["last_timestamp"] > 0
    java.call("close", name="adm-idem")


def test_describe_and_list_transactions(kafka):
    broker, java = kafka
    make_topic(broker, "adm-txn", 2)
    java.call("producer", name="adm-tx", config={"bootstrap.servers": broker.bootstrap,
                                                  "transactional.id": "adm-tx", "transaction.timeout.ms": "60000"})
    java.call("init_transactions", name="adm-tx")
    java.call("begin", name="adm-tx")
    java.call("send", name="adm-tx", topic="adm-txn", partition=1, values=["a", "b"])
    described = java.call("describeTransactions", ids=["adm-tx"])["adm-tx"]
    assert described["state"] == "ONGOING" and described["coordinator"] == NODE
    assert described["partitions"] == ["adm-txn:1"] and described["timeout_ms"] == 60000
    assert described["start_ms"] is not None
    pid = described["producer_id"]
    assert java.call("listTransactions", states=["ONGOING"])["adm-tx"] == {"producer_id": pid, "state": "ONGOING"}
    assert "adm-tx" in java.call("listTransactions", producer_ids=[pid])
    assert java.call("listTransactions", producer_ids=[pid + 1000]) == {}
    [state] = java.call("describeProducers", partitions=["adm-txn:1"])["adm-txn:1"]
    assert state["producer_id"] == pid and state["txn_start_offset"] == 0
    java.call("commit", name="adm-tx")
    assert java.call("describeTransactions", ids=["adm-tx"])["adm-tx"]["state"] == "COMPLETE_COMMIT"
    assert "adm-tx" not in java.call("listTransactions", states=["ONGOING"])
    assert java.error("describeTransactions", ids=["adm-unknown"]).kind == "TransactionalIdNotFoundException"
    java.call("close", name="adm-tx")


def test_abort_a_hanging_transaction_with_the_admin(kafka):
    broker, java = kafka
    make_topic(broker, "adm-hang", 1)
    java.call("producer", name="adm-hang", config={"bootstrap.servers": broker.bootstrap,
                                                    "transactional.id": "adm-hang"})
    java.call("init_transactions", name="adm-hang")
    java.call("begin", name="adm-hang")
    java.call("send", name="adm-hang", topic="adm-hang", values=["x", "y", "z"])
    [state] = java.call("describeProducers", partitions=["adm-hang:0"])["adm-hang:0"]
    assert state["txn_start_offset"] == 0
    lso = java.call("listOffsets", specs={"adm-hang:0": "latest"}, isolation="READ_COMMITTED")["adm-hang:0"]
    assert lso["offset"] == 0                                   # the open transaction holds the LSO
    # No marker was written for this producer yet: no coordinator epoch, and kafka-transactions.sh's abort
    # then passes 0, as here.
    assert state["coordinator_epoch"] is None
    java.call("abortTransaction", partition="adm-hang:0", producer_id=state["producer_id"], epoch=state["epoch"],
              coordinator_epoch=0)
    # The abort marker follows the three records: the LSO is the log end again and nothing is left open.
    after = java.call("listOffsets", specs={"adm-hang:0": "latest"}, isolation="READ_COMMITTED")["adm-hang:0"]
    assert after["offset"] == 4
    assert java.call("describeProducers", partitions=["adm-hang:0"])["adm-hang:0"][0]["txn_start_offset"] is None
    java.call("close", name="adm-hang", timeout_ms=1000)


def test_describe_groups_with_authorized_operations_and_no_authorizer_is_every_group_operation(kafka):
    broker, java = kafka
    make_topic(broker, "adm-gops", 1)
    java.call("alterConsumerGroupOffsets", group="adm-gops-group", offsets={"adm-gops:0": 0})
    got = java.call("describeConsumerGroups", groups=["adm-gops-group"], authorized_operations=True)
    assert set(got["adm-gops-group"]["authorized_operations"]) == GROUP_OPS


def test_describe_and_delete_topics_by_id(kafka):
    broker, java = kafka
    make_topic(broker, "adm-byid", 2)
    topic_id = java.call("describeTopics", topics=["adm-byid"])["adm-byid"]["topic_id"]
    assert java.call("describeTopicsById", ids=[topic_id]) == {topic_id: {"name": "adm-byid", "partitions": 2}}
    java.call("deleteTopicsById", ids=[topic_id])
    assert "adm-byid" not in java.call("listTopics")
    assert java.error("describeTopicsById", ids=[topic_id]).kind == "UnknownTopicIdException"
    assert java.error("deleteTopicsById", ids=[topic_id]).kind == "UnknownTopicIdException"
