"""Kafka's authorization on the cluster and topic APIs (AlterConfigs, ElectLeaders, reassignments, DescribeQuorum,
DescribeCluster, ListConfigResources, DescribeTopicPartitions, the CreateTopics answer's configs), with
StandardAuthorizer on and kafka-python 3 over SASL/SCRAM. alice is a super user and grants through CreateAcls
(confluent-kafka's AdminClient); bob may DESCRIBE the cluster, DESCRIBE and ALTER_CONFIGS the topic ``seen`` and
CREATE topics prefixed ``bob-``; a client of the PLAINTEXT listener (User:ANONYMOUS) may DESCRIBE ``seen``
(OffsetForLeaderEpoch, which no Python client sends, is asked raw there); carol has no ACL (and ``allow.everyone.if.no.acl.found`` is false). The codes are
the ones Kafka answers: CLUSTER_AUTHORIZATION_FAILED (31) for the cluster operations, TOPIC_AUTHORIZATION_FAILED
(29) per topic, and a topic bob may not describe is never said to exist or not."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import ClusterAuthorizationFailedError

from tests.server import wire
from tests.server.broker_proc import BrokerProcess
from tests.server.test_security import PASSWORDS, sasl_conf, write_users

pytestmark = pytest.mark.e2e
TIMEOUT = 30.0
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MECHANISM = {"alice": "SCRAM-SHA-256", "bob": "SCRAM-SHA-256", "carol": "SCRAM-SHA-512"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("cluster-apis-acl")
    users = write_users(tmp / "users.yaml")
    b = BrokerProcess(tmp, log_dirs=1, listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                      broker={"node.id": 3, "sasl.credentials.file": str(users), "authorizer.class.name": STANDARD,
                              "super.users": "User:alice", "auto.create.topics.enable": False})
    b.start()
    alice = AdminClient(sasl_conf(b, "SASL_PLAINTEXT", "PLAIN", "alice", PASSWORDS["alice"]))
    for future in alice.create_topics([NewTopic("seen", 2, 1), NewTopic("hidden", 1, 1)]).values():
        future.result(TIMEOUT)
    grants = [(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, AclOperation.DESCRIBE),
              (ResourceType.TOPIC, "seen", ResourcePatternType.LITERAL, AclOperation.DESCRIBE),
              (ResourceType.TOPIC, "seen", ResourcePatternType.LITERAL, AclOperation.ALTER_CONFIGS),
              (ResourceType.TOPIC, "bob-", ResourcePatternType.PREFIXED, AclOperation.CREATE)]
    bindings = [AclBinding(rt, name, pattern, "User:bob", "*", op, AclPermissionType.ALLOW)
                for rt, name, pattern, op in grants]
    bindings.append(AclBinding(ResourceType.TOPIC, "seen", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                               AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    for future in alice.create_acls(bindings).values():
        future.result(TIMEOUT)
    yield b
    b.close()


def client(server: BrokerProcess, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=server.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism=MECHANISM[user], sasl_plain_username=user,
                            sasl_plain_password=PASSWORDS[user], request_timeout_ms=int(TIMEOUT * 1000))


@pytest.fixture(scope="module")
def bob(server) -> Iterator[KafkaAdminClient]:
    c = client(server, "bob")
    yield c
    c.close()


@pytest.fixture(scope="module")
def carol(server) -> Iterator[KafkaAdminClient]:
    c = client(server, "carol")
    yield c
    c.close()


def test_cluster_operations_need_their_cluster_acl(bob, carol):
    """DESCRIBE on the cluster lets bob describe the quorum and list reassignments; ALTER (which he lacks) is
    needed to elect leaders and move replicas; carol may do none of them."""
    assert bob.describe_metadata_quorum()["topics"][0]["partitions"][0]["leader_id"] == 3
    assert bob.list_partition_reassignments() == {}
    for admin in (bob, carol):
        answer = admin.elect_leaders(0, {"seen": [0]}, raise_errors=False)
        assert answer.error_code == 31
        assert [p.error_code for r in answer.replica_election_results for p in r.partition_result] == [31]
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.alter_partition_reassignments({TopicPartition("seen", 0): [3]})
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.list_config_resources()       # DESCRIBE_CONFIGS on the cluster
    with pytest.raises(ClusterAuthorizationFailedError):
        carol.describe_metadata_quorum()
    with pytest.raises(ClusterAuthorizationFailedError):
        carol.list_partition_reassignments()


def test_describe_cluster_reports_the_principals_own_cluster_operations(bob, carol):
    """Everyone may describe the cluster; its authorized operations are the principal's (bob: DESCRIBE), and 0
    for one who may not DESCRIBE it."""
    assert bob.describe_cluster()["authorized_operations"] == ["DESCRIBE"]
    cluster = carol.describe_cluster()
    assert cluster["controller_id"] == 3 and not cluster["authorized_operations"]


def test_alter_configs_needs_alter_configs_on_its_resource(bob, carol):
    resources = [ConfigResource(ConfigResourceType.TOPIC, "seen", configs={"retention.ms": "3600000"}),
                 ConfigResource(ConfigResourceType.TOPIC, "hidden", configs={"retention.ms": "3600000"}),
                 ConfigResource(ConfigResourceType.BROKER, "3", configs={})]
    answer = bob.alter_configs(resources, incremental=False, raise_on_unknown=False)
    assert answer == {"topic": {"seen": "OK",
                                "hidden": "[Error 29] TopicAuthorizationFailedError: Topic authorization failed."},
                      "broker": {"3": "[Error 31] ClusterAuthorizationFailedError: Cluster authorization failed."}}
    refused = carol.alter_configs(resources[:1], incremental=False, raise_on_unknown=False)
    assert refused == {"topic": {"seen": "[Error 29] TopicAuthorizationFailedError: Topic authorization failed."}}
    configs = bob.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "seen")], config_filter="all")
    assert configs["topic"]["seen"]["retention.ms"]["value"] == "3600000"


def test_describe_topic_partitions_hides_what_the_principal_may_not_describe(bob):
    named = bob.describe_topic_partitions(["seen", "hidden", "no-such-topic"])
    codes = {t["name"]: t["error_code"] for t in named["topics"]}
    assert codes == {"seen": 0, "hidden": 29, "no-such-topic": 29}
    assert all(t["topic_id"] is None for t in named["topics"] if t["name"] != "seen")
    seen = next(t for t in named["topics"] if t["name"] == "seen")
    # DESCRIBE, ALTER_CONFIGS and DESCRIBE_CONFIGS, which ALTER_CONFIGS implies
    assert seen["topic_authorized_operations"] == (1 << 8) | (1 << 11) | (1 << 10)
    every = bob.describe_topic_partitions([])
    assert [t["name"] for t in every["topics"]] == ["seen"]


def test_a_created_topics_configs_need_describe_configs(bob):
    """bob may create ``bob-*`` topics but not describe their configs: created, with the answer's
    topic_config_error_code TOPIC_AUTHORIZATION_FAILED and no configs, as Kafka's controller answers."""
    answer = bob.create_topics([KNewTopic("bob-made", 1, 1)], raise_errors=False)["topics"][0]
    assert answer["error_code"] == 0 and answer["topic_config_error_code"] == 29
    assert not answer.get("configs") and answer["num_partitions"] == -1


def test_offset_for_leader_epoch_needs_describe_on_the_topic(server):
    """KIP-320: without CLUSTER_ACTION (a follower's right) DESCRIBE on each topic is enough; a topic the principal
    may not describe is TOPIC_AUTHORIZATION_FAILED on each of its partitions, existing or not."""
    conn = wire.Conn(server.address("PLAINTEXT"))
    try:
        answer = conn.request(wire.build_request(23, 4, replica_id=-1, topics=[
            {"topic": t, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
            for t in ("seen", "hidden", "no-such-topic")]))
        quorum = conn.request(wire.build_request(55, 2, topics=[
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]), correlation_id=2)
    finally:
        conn.close()
    assert {t.topic: int(t.partitions[0].error_code) for t in answer.topics} == {
        "seen": 0, "hidden": 29, "no-such-topic": 29}
    assert quorum.error_code == 31 and quorum.topics == ()
