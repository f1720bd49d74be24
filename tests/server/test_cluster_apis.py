"""The cluster and topic APIs of a one-broker Kafka 4.x through real clients on the wire: kafka-python 3
(AlterConfigs, ElectLeaders, Alter/ListPartitionReassignments, DescribeQuorum, DescribeCluster, ListConfigResources,
DescribeTopicPartitions, CreateTopics/CreatePartitions with replica assignments), confluent-kafka's AdminClient
(alter_configs, describe_cluster, elect_leaders, create_topics with replica assignments), aiokafka's
``alter_configs``, kafkajs (alterConfigs, createTopics/createPartitions with assignments), and raw requests (tests/server/wire.py) for what no Python client sends: OffsetForLeaderEpoch,
the CreateTopics response's ``configs``, DescribeTopicPartitions paging with its cursor, and a produce larger than
the topic's segment.bytes (RECORD_LIST_TOO_LARGE). One broker serves the whole module; each test uses its own
topics."""
from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidReplicationAssignmentError, MessageSizeTooLargeError, RecordListTooLargeError

from tests.server import test_clients_kafkajs as kafkajs
from tests.server import wire
from tests.server.broker_proc import BrokerProcess, wait_until

pytestmark = pytest.mark.e2e
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("cluster-apis"), log_dirs=1,
                      broker={"node.id": 3, "auto.create.topics.enable": False})
    b.start()
    yield b
    b.close()


@pytest.fixture(scope="module")
def bootstrap(broker) -> str:
    return broker.address("PLAINTEXT")


@pytest.fixture
def kadmin(bootstrap):
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    yield client
    client.close()


@pytest.fixture
def cadmin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def raw(bootstrap: str, key: int, version: int, **fields):
    conn = wire.Conn(bootstrap)
    try:
        return conn.request(wire.build_request(key, version, **fields))
    finally:
        conn.close()


def create(kadmin: KafkaAdminClient, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    kadmin.create_topics([KNewTopic(name, partitions, 1, topic_configs=configs or {})])


SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "DEFAULT_CONFIG": 5}


def described(kadmin: KafkaAdminClient, topic: str) -> dict[str, tuple[str, int]]:
    """{config name: (value, config source)} of ``topic`` as DescribeConfigs answers."""
    result = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return {k: (c["value"], SOURCES[c["config_source"]]) for k, c in result["topic"][topic].items()}


# -- CreateTopics / CreatePartitions -------------------------------------------------------------------------------

def test_a_created_topics_answer_lists_its_configs_as_kafka_does(bootstrap):
    """v5+ answers carry every topic config by name (the Java client reads them when the config error code is 0,
    and failed with a NullPointerException without them): the request's overrides as DYNAMIC_TOPIC_CONFIG (1),
    the others as DEFAULT_CONFIG (5); validate_only answers the same and creates nothing."""
    name = topic_name("configs")
    fields: dict[str, Any] = {
        "topics": [{"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "3600000"}]}],
        "timeout": datetime.timedelta(seconds=30), "validate_only": True}
    checked = raw(bootstrap, 19, 7, **fields).topics[0]
    created = raw(bootstrap, 19, 7, **{**fields, "validate_only": False}).topics[0]
    for answer in (checked, created):
        assert answer.error_code == 0 and answer.topic_config_error_code == 0, answer
        assert (answer.num_partitions, answer.replication_factor) == (2, 1)
        names = [c.name for c in answer.configs]
        assert names == sorted(names) and {"cleanup.policy", "segment.bytes", "max.message.bytes"} <= set(names)
        by_name = {c.name: c for c in answer.configs}
        assert (by_name["retention.ms"].value, by_name["retention.ms"].config_source) == ("3600000", 1)
        assert (by_name["cleanup.policy"].value, by_name["cleanup.policy"].config_source) == ("delete", 5)
        assert not any(c.is_sensitive or c.read_only for c in answer.configs)
    assert checked.topic_id is None and created.topic_id is not None     # kio reads the all-zero id as None
    # the create after validate_only succeeded: validate_only created nothing; a second create is refused
    assert raw(bootstrap, 19, 7, **{**fields, "validate_only": False}).topics[0].error_code == 36   # TOPIC_ALREADY_EXISTS
    # v4 has no configs: the same request answers without them
    v4 = raw(bootstrap, 19, 4, **{**fields, "topics": [{**fields["topics"][0], "name": name + "-v4"}],
                                 "validate_only": False}).topics[0]
    assert v4.error_code == 0 and "configs" not in type(v4).__dataclass_fields__


def test_replica_assignments_naming_this_broker_are_accepted(kadmin, cadmin, bootstrap):
    """Node 3 is the only broker: an assignment naming it alone is what every partition has, so CreateTopics and
    CreatePartitions accept it (kafka-python and confluent-kafka); any other broker, a broker twice, a replication
    factor beside an assignment, a gap in the partition indexes or a count that does not match are refused with
    Kafka's controller's codes and messages, and nothing is created."""
    k_topic, c_topic = topic_name("assign-k"), topic_name("assign-c")
    answer = kadmin.create_topics([KNewTopic(k_topic, replica_assignments={0: [3], 1: [3]})])
    assert answer["topics"][0]["error_code"] == 0 and answer["topics"][0]["num_partitions"] == 2
    futures = cadmin.create_topics([NewTopic(c_topic, 3, replica_assignment=[[3], [3], [3]])])
    futures[c_topic].result(TIMEOUT)
    assert len(kadmin.describe_topics([k_topic])[0]["partitions"]) == 2
    assert sorted(p["partition_index"] for p in kadmin.describe_topics([c_topic])[0]["partitions"]) == [0, 1, 2]

    refused = {"other": KNewTopic(topic_name("other"), replica_assignments={0: [4]}),
               "twice": KNewTopic(topic_name("twice"), replica_assignments={0: [3, 3]}),
               "gap": KNewTopic(topic_name("gap"), replica_assignments={0: [3], 2: [3]})}
    answer = kadmin.create_topics(list(refused.values()), raise_errors=False)
    results = {t["name"]: (t["error_code"], t["error_message"]) for t in answer["topics"]}
    assert results[refused["other"].name] == (39, "The manual partition assignment includes broker 4, but no such "
                                                   "broker is registered.")
    assert results[refused["twice"].name] == (39, "The manual partition assignment includes the broker 3 more "
                                                   "than once.")
    assert results[refused["gap"].name] == (39, "partitions should be a consecutive 0-based integer sequence")
    with_factor = raw(bootstrap, 19, 7, topics=[{"name": topic_name("rf"), "num_partitions": -1,
                                                 "replication_factor": 1, "configs": [],
                                                 "assignments": [{"partition_index": 0, "broker_ids": [3]}]}],
                      timeout=datetime.timedelta(seconds=30), validate_only=False).topics[0]
    assert (with_factor.error_code, with_factor.error_message) == (42, "A manual partition assignment was "
                                                                   "specified, but replication factor was not set to -1.")
    metadata_topic = raw(bootstrap, 19, 7, topics=[{"name": "__cluster_metadata", "num_partitions": 1,
                                                    "replication_factor": 1, "configs": [], "assignments": []}],
                         timeout=datetime.timedelta(seconds=30), validate_only=False).topics[0]
    assert (metadata_topic.error_code, metadata_topic.error_message) == (
        42, "Creation of internal topic __cluster_metadata is prohibited.")
    listed = set(kadmin.list_topics())
    assert "__cluster_metadata" not in listed
    assert not listed & ({t.name for t in refused.values()} | {with_factor.name})

    kadmin.create_partitions({k_topic: KNewPartitions(3, [[3]])})
    futures = cadmin.create_partitions([NewPartitions(c_topic, 4, replica_assignment=[[3]])])
    futures[c_topic].result(TIMEOUT)
    answer = kadmin.create_partitions({k_topic: KNewPartitions(5, [[3], [7]])}, raise_errors=False)
    assert (answer.results[0].error_code, answer.results[0].error_message) == (
        39, "The manual partition assignment includes broker 7, but no such broker is registered.")
    answer = kadmin.create_partitions({k_topic: KNewPartitions(5, [[3]])}, raise_errors=False)
    assert (answer.results[0].error_code, answer.results[0].error_message) == (
        39, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    with pytest.raises(InvalidReplicationAssignmentError):
        kadmin.create_partitions({k_topic: KNewPartitions(4, [[3, 3]])})
    counts = {t["name"]: len(t["partitions"]) for t in kadmin.describe_topics([k_topic, c_topic])}
    assert counts == {k_topic: 3, c_topic: 4}


# -- AlterConfigs --------------------------------------------------------------------------------------------------

def test_alter_configs_replaces_the_whole_config(kadmin, cadmin, bootstrap):
    """AlterConfigs (33) sets exactly the given configs: a key set before and not given returns to its default.
    Three clients send it: aiokafka's alter_configs, kafka-python's (incremental=False) and confluent-kafka's."""
    name = topic_name("alter")
    create(kadmin, name, configs={"retention.ms": "3600000", "segment.ms": "7200000"})

    async def aio_alter(resources):
        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        try:
            return await client.alter_configs(resources)
        finally:
            await client.close()

    answer = asyncio.run(aio_alter([AioConfigResource(AioConfigResourceType.TOPIC, name,
                                                      configs={"cleanup.policy": "compact"})]))
    assert [r[0] for r in answer[0].resources] == [0], answer
    configs = described(kadmin, name)
    assert configs["cleanup.policy"] == ("compact", 1)
    assert configs["retention.ms"] == ("604800000", 5) and configs["segment.ms"] == ("604800000", 5)

    # kafka-python re-sends the other keys it finds set (its documented way around the replace): both stay
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "1000"})],
                         incremental=False)
    configs = described(kadmin, name)
    assert configs["retention.ms"] == ("1000", 1) and configs["cleanup.policy"] == ("compact", 1)

    futures = cadmin.alter_configs([ConfigResource("topic", name, set_config={"segment.ms": "600000"})])
    assert [f.result(TIMEOUT) for f in futures.values()] == [None]
    configs = described(kadmin, name)
    assert configs["segment.ms"] == ("600000", 1)
    assert configs["retention.ms"] == ("604800000", 5) and configs["cleanup.policy"] == ("delete", 5)


def test_alter_configs_refusals_change_nothing(kadmin, bootstrap):
    name = topic_name("alter-bad")
    create(kadmin, name, configs={"retention.ms": "3600000"})

    def alter(resources, validate_only=False):
        answer = raw(bootstrap, 33, 2, resources=resources, validate_only=validate_only)
        return [(r.error_code, r.error_message) for r in answer.responses]

    def topic(configs, resource=name):
        return {"resource_type": 2, "resource_name": resource,
                "configs": [{"name": k, "value": v} for k, v in configs.items()]}

    assert alter([topic({"retention.ms": "soon"})]) == [(40, "retention.ms = 'soon': must be an integer")]
    assert alter([topic({"no.such.key": "1"})])[0][0] == 40
    assert alter([topic({"retention.ms": None})]) == [(42, "Null value not supported for : retention.ms")]
    assert alter([topic({"segment.ms": "600000"})], validate_only=True) == [(0, None)]
    assert alter([topic({}, topic_name("missing"))])[0][0] == 3
    assert alter([topic({}), topic({"segment.ms": "1000"})]) == [(42, "Duplicate resource.")] * 2
    broker = {"resource_type": 4, "resource_name": "3", "configs": []}
    assert alter([broker]) == [(0, None)]
    keyed = alter([{**broker, "configs": [{"name": "log.retention.ms", "value": "1"}]}])
    assert keyed[0][0] == 42 and keyed[0][1].startswith("Cannot update these configs dynamically: log.retention.ms")
    assert alter([{**broker, "resource_name": "9"}])[0][0] == 42
    assert alter([{"resource_type": 8, "resource_name": "3", "configs": []}]) == [
        (42, "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER")]
    assert described(kadmin, name)["retention.ms"] == ("3600000", 1)
    assert described(kadmin, name)["segment.ms"] == ("604800000", 5)


# -- ElectLeaders, reassignments, DescribeQuorum, DescribeCluster ------------------------------------------------

def test_elect_leaders_is_never_needed(kadmin, cadmin, bootstrap):
    """This node leads every partition: a named partition is ELECTION_NOT_NEEDED (kafka-python and confluent-kafka
    take it as success), an unknown one UNKNOWN_TOPIC_OR_PARTITION, an election over all partitions answers no
    partition; an unknown election type is INVALID_REQUEST on each partition and at the top."""
    name = topic_name("elect")
    create(kadmin, name, partitions=2)
    answer = kadmin.elect_leaders(0, {name: [0, 1], "no-such-topic": [0]}, raise_errors=False)
    codes = {(r.topic, p.partition_id): p.error_code for r in answer.replica_election_results
             for p in r.partition_result}
    assert answer.error_code == 0
    assert codes == {(name, 0): 84, (name, 1): 84, ("no-such-topic", 0): 3}
    assert kadmin.elect_leaders(1, {name: [1]}).replica_election_results[0].partition_result[0].error_code == 84

    result = cadmin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition(name, 0),
                                                           CTopicPartition("no-such-topic", 0)]).result(TIMEOUT)
    errors = {tp.topic: err.code() for tp, err in result.items()}
    assert errors[name] == 84 and errors["no-such-topic"] == 3
    assert cadmin.elect_leaders(ElectionType.UNCLEAN, None).result(TIMEOUT) == {}

    every = raw(bootstrap, 43, 2, election_type=0, topic_partitions=None, timeout=datetime.timedelta(seconds=5))
    assert every.error_code == 0 and all(not r.partition_result for r in every.replica_election_results)
    assert name in {r.topic for r in every.replica_election_results}
    odd = raw(bootstrap, 43, 2, election_type=5, topic_partitions=[{"topic": name, "partitions": [0]}],
              timeout=datetime.timedelta(seconds=5))
    assert odd.error_code == 42
    assert [(p.error_code, p.error_message) for p in odd.replica_election_results[0].partition_result] == [
        (42, "Unknown election type 5")]


def test_reassignments_to_this_broker_are_no_ops_and_none_is_ever_listed(kadmin, bootstrap):
    name = topic_name("reassign")
    create(kadmin, name, partitions=3)
    answer = kadmin.alter_partition_reassignments({TopicPartition(name, 0): [3], TopicPartition(name, 1): [1],
                                                   TopicPartition(name, 2): None,
                                                   TopicPartition("no-such-topic", 0): [3]})
    assert answer[TopicPartition(name, 0)] is None
    assert {tp.partition: err.__name__ for tp, err in answer.items() if err is not None and tp.topic == name} == {
        1: "InvalidReplicationAssignmentError", 2: "NoReassignmentInProgressError"}
    assert answer[TopicPartition("no-such-topic", 0)].__name__ == "UnknownTopicOrPartitionError"
    assert kadmin.list_partition_reassignments() == {}
    assert kadmin.list_partition_reassignments([TopicPartition(name, 0)]) == {}
    bad = raw(bootstrap, 45, 0, timeout=datetime.timedelta(seconds=5),
              topics=[{"name": name, "partitions": [{"partition_index": 0, "replicas": []},
                                                    {"partition_index": 1, "replicas": [3, 4]}]}])
    assert [(p.error_code, p.error_message) for p in bad.responses[0].partitions] == [
        (39, "The manual partition assignment includes an empty replica list."),
        (39, "The manual partition assignment includes broker 4, but no such broker is registered.")]


def test_describe_quorum_names_this_node_the_only_voter(kadmin, bootstrap):
    quorum = kadmin.describe_metadata_quorum()
    partition = quorum["topics"][0]["partitions"][0]
    assert quorum["topics"][0]["topic_name"] == "__cluster_metadata" and partition["error"] is None
    assert partition["leader_id"] == 3 and [v["replica_id"] for v in partition["current_voters"]] == [3]
    assert partition["observers"] == []
    assert partition["current_voters"][0]["replica_directory_id"] != "00000000-0000-0000-0000-000000000000"
    host, port = bootstrap.rsplit(":", 1)
    assert quorum["nodes"] == [{"node_id": 3, "listeners": [{"name": "PLAINTEXT", "host": host, "port": int(port)}]}]
    other = raw(bootstrap, 55, 2, topics=[{"topic_name": "t", "partitions": [{"partition_index": 0}]}])
    assert other.error_code == 0 and other.topics[0].partitions[0].error_code == 3


def test_describe_cluster_answers_this_broker_and_its_authorized_operations(kadmin, cadmin, bootstrap):
    cluster = kadmin.describe_cluster()
    host, port = bootstrap.rsplit(":", 1)
    assert cluster["controller_id"] == 3
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(3, host, int(port))]
    # no authorizer: every cluster operation (Kafka's AclEntry.supportedOperations for CLUSTER), never bit 31
    assert sorted(cluster["authorized_operations"]) == sorted(
        ["CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"])
    described_cluster = cadmin.describe_cluster().result(TIMEOUT)
    assert described_cluster.controller.id == 3 and [n.id for n in described_cluster.nodes] == [3]
    assert described_cluster.cluster_id == cluster["cluster_id"]
    not_asked = raw(bootstrap, 60, 1, include_cluster_authorized_operations=False, endpoint_type=1)
    assert not_asked.cluster_authorized_operations == -2147483648
    assert raw(bootstrap, 60, 1, include_cluster_authorized_operations=True,
               endpoint_type=2).error_code == 114     # MISMATCHED_ENDPOINT_TYPE
    assert raw(bootstrap, 60, 1, include_cluster_authorized_operations=True,
               endpoint_type=7).error_code == 115     # UNSUPPORTED_ENDPOINT_TYPE


# -- ListConfigResources, DescribeTopicPartitions ------------------------------------------------------------------

def test_list_config_resources_lists_topics_and_this_broker(kadmin, bootstrap):
    name = topic_name("listed")
    create(kadmin, name)
    listed = kadmin.list_config_resources()
    assert name in listed["topic"] and listed["broker"] == ["3"]
    assert not listed.get("group") and not listed.get("client_metrics")
    assert kadmin.list_config_resources(["broker"]) == {"broker": ["3"]}
    v0 = raw(bootstrap, 74, 0)
    assert v0.error_code == 0 and v0.config_resources == ()
    assert raw(bootstrap, 74, 1, resource_types=[3]).error_code == 35      # not a type Kafka lists: UNSUPPORTED_VERSION


def test_describe_topic_partitions_pages_with_its_cursor(kadmin, bootstrap):
    """Partitions by topic name then index, at most response_partition_limit per answer; the cursor resumes
    exactly where the last answer stopped, inside a topic or at the next one."""
    prefix = topic_name("pages")
    topics = {f"{prefix}-a": 3, f"{prefix}-b": 2, f"{prefix}-c": 1}
    for name, count in topics.items():
        create(kadmin, name, partitions=count)
    expected = [(name, p) for name in sorted(topics) for p in range(topics[name])]
    for limit in (1, 2, 4, 6):
        seen, cursors, cursor = [], [], None
        while True:
            answer = kadmin.describe_topic_partitions(sorted(topics), response_partition_limit=limit, cursor=cursor)
            assert all(t["error_code"] == 0 and t["topic_authorized_operations"] > 0 for t in answer["topics"])
            page = [(t["name"], p["partition_index"]) for t in answer["topics"] for p in t["partitions"]]
            assert 0 < len(page) <= limit and all(p["leader_id"] == 3 for t in answer["topics"]
                                                  for p in t["partitions"])
            seen += page
            cursor = answer["next_cursor"]
            if cursor is None:
                break
            cursors.append((cursor["topic_name"], cursor["partition_index"]))
        assert seen == expected, limit
        assert len(cursors) == -(-len(expected) // limit) - 1
    # a limit ending exactly at a topic's end points the cursor at the next topic's partition 0
    first = kadmin.describe_topic_partitions(sorted(topics), response_partition_limit=3)
    assert first["next_cursor"] == {"topic_name": f"{prefix}-b", "partition_index": 0}
    # named topics that do not exist, or cannot, are named as such; a cursor outside the list is INVALID_REQUEST
    odd = kadmin.describe_topic_partitions([f"{prefix}-zz", "bad/name"])
    assert {t["name"]: t["error_code"] for t in odd["topics"]} == {f"{prefix}-zz": 3, "bad/name": 17}
    out = raw(bootstrap, 75, 0, topics=[{"name": f"{prefix}-a"}], response_partition_limit=10,
              cursor={"topic_name": f"{prefix}-b", "partition_index": 0})
    assert [t.error_code for t in out.topics] == [42]
    # no topic named: every topic, this module's among them
    everything = kadmin.describe_topic_partitions([], response_partition_limit=2000)
    assert set(topics) <= {t["name"] for t in everything["topics"]}


# -- OffsetForLeaderEpoch ------------------------------------------------------------------------------------------

def end_offsets(bootstrap: str, topic: str, asks: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(error code, leader epoch, end offset) for each (partition, current leader epoch, leader epoch) asked."""
    answer = raw(bootstrap, 23, 4, replica_id=-1, topics=[{"topic": topic, "partitions": [
        {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch} for p, current, epoch in asks]}])
    return [(int(p.error_code), p.leader_epoch, p.end_offset) for p in answer.topics[0].partitions]


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> int:
    answer = raw(bootstrap, 0, 9, **{"transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=5),
                                     "topic_data": [{"name": topic, "partition_data": [
                                         {"index": partition, "records": wire.batch(values)}]}]})
    return int(answer.responses[0].partition_responses[0].error_code)


def test_offset_for_leader_epoch_answers_from_the_leader_epoch_cache(broker_factory):
    """Three records at leader epoch 0, then (restarted with ``log.partition.leader.epoch: 2``) two at epoch 2:
    Kafka's endOffsetFor answers the start of the next epoch for an older one, the log end for the latest, -1 for
    a newer one or an empty partition; a current leader epoch other than Metadata's is UNKNOWN_LEADER_EPOCH."""
    b = broker_factory(log_dirs=1)
    bootstrap = b.address("PLAINTEXT")
    created = raw(bootstrap, 19, 7, topics=[{"name": "epochs", "num_partitions": 2, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                  timeout=datetime.timedelta(seconds=30), validate_only=False)
    assert created.topics[0].error_code == 0
    assert produce(bootstrap, "epochs", 0, [b"a", b"b", b"c"]) == 0
    assert end_offsets(bootstrap, "epochs", [(0, 0, 0), (0, -1, 0)]) == [(0, 0, 3), (0, 0, 3)]
    b.stop()
    conf = yaml.safe_load(b.config_path.read_text())
    conf["broker"]["log.partition.leader.epoch"] = 2
    b.config_path.write_text(yaml.safe_dump(conf))
    b.restart()
    bootstrap = b.address("PLAINTEXT")
    assert produce(bootstrap, "epochs", 0, [b"d", b"e"]) == 0
    assert end_offsets(bootstrap, "epochs", [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, -1, 3), (1, 0, 0), (9, 0, 0),
                                             (0, 1, 2)]) == [
        (0, 0, 3), (0, 0, 3), (0, 2, 5), (0, -1, -1), (0, -1, -1), (3, -1, -1), (75, -1, -1)]
    unknown = raw(bootstrap, 23, 4, replica_id=-1, topics=[{"topic": "no-such-topic", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}])
    assert unknown.topics[0].partitions[0].error_code == 3


# -- RECORD_LIST_TOO_LARGE -----------------------------------------------------------------------------------------

def test_an_append_larger_than_the_segment_is_record_list_too_large(kadmin, bootstrap):
    """Kafka's two rules, in Kafka's order: a batch over max.message.bytes is MESSAGE_TOO_LARGE (10), checked
    first; then an append over segment.bytes (it could not fit in one segment) is RECORD_LIST_TOO_LARGE (18).
    Raw and through kafka-python's producer; nothing of a refused append is stored."""
    name = topic_name("segment")
    create(kadmin, name, configs={"segment.bytes": "1024", "max.message.bytes": "1500"})
    assert produce(bootstrap, name, 0, [b"x" * 1200]) == 18       # over the segment, within max.message.bytes
    assert produce(bootstrap, name, 0, [b"x" * 2000]) == 10       # over both: the batch's size is checked first
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0, max_request_size=10_000)
    try:
        with pytest.raises(RecordListTooLargeError):
            producer.send(name, b"v" * 1200).get(TIMEOUT)
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(name, b"v" * 2000).get(TIMEOUT)
        producer.send(name, b"fits").get(TIMEOUT)
    finally:
        producer.close()
    latest = raw(bootstrap, 2, 9, replica_id=-1, isolation_level=0, topics=[
        {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    assert latest.topics[0].partitions[0].offset == 1


def test_a_failed_produce_with_acks_0_closes_its_connection(kadmin, bootstrap, broker):
    """A client that asked for no answer learns of a failure by its connection closing (KafkaApis closes it on
    any error of an acks=0 Produce); a successful one keeps the connection and is stored."""
    name = topic_name("acks0")
    create(kadmin, name, configs={"segment.bytes": "1024", "max.message.bytes": "1500"})
    conn = wire.Conn(bootstrap)
    try:
        conn.send(wire.request_frame(wire.produce_request(9, name, 0, wire.batch([b"ok"]), acks=0), 1))
        assert int(conn.request(wire.api_versions(), 2).error_code) == 0, "answered after the stored acks=0 batch"
        conn.send(wire.request_frame(wire.produce_request(9, name, 0, wire.batch([b"x" * 1200]), acks=0), 3))
        assert conn.expect_closed(TIMEOUT) == b"", "RECORD_LIST_TOO_LARGE with acks=0: closed, no answer"
    finally:
        conn.close()
    conn = wire.Conn(bootstrap)
    try:
        conn.send(wire.request_frame(wire.produce_request(9, "absent-" + name, 0, wire.batch([b"v"]), acks=0), 1))
        assert conn.expect_closed(TIMEOUT) == b"", "UNKNOWN_TOPIC_OR_PARTITION with acks=0: closed"
    finally:
        conn.close()
    latest = raw(bootstrap, 2, 9, replica_id=-1, isolation_level=0, topics=[
        {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    assert latest.topics[0].partitions[0].offset == 1, "the good batch stored, the refused one not"
    wait_until("the closing line naming the failure",
               lambda: "a Produce with acks=0 failed: RECORD_LIST_TOO_LARGE" in broker.log_text(), TIMEOUT)


# -- kafkajs ------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(kafkajs.NODE is None or not (kafkajs.NODE_MODULES / "kafkajs").is_dir(),
                    reason="node and kafkajs are needed (make clients)")
def test_kafkajs_alter_configs_and_replica_assignments(broker, kadmin):
    """kafkajs's alterConfigs is AlterConfigs (33): the given configs replace the topic's; its createTopics and
    createPartitions with replica assignments naming this broker are accepted, naming another one refused."""
    name, other = topic_name("js"), topic_name("js-other")
    results = kafkajs.node("admin.js", broker, {"calls": [
        {"call": "createTopics", "args": [{"topics": [
            {"topic": name, "replicaAssignment": [{"partition": 0, "replicas": [3]}, {"partition": 1, "replicas": [3]}],
             "configEntries": [{"name": "retention.ms", "value": "3600000"}]}]}]},
        {"call": "createTopics", "args": [{"topics": [
            {"topic": other, "replicaAssignment": [{"partition": 0, "replicas": [1]}]}]}]},
        {"call": "createPartitions", "args": [{"topicPartitions": [{"topic": name, "count": 3,
                                                                    "assignments": [[3]]}]}]},
        {"call": "alterConfigs", "args": [{"validateOnly": False, "resources": [
            {"type": 2, "name": name, "configEntries": [{"name": "segment.ms", "value": "600000"}]}]}]},
    ]})
    assert results[0] == {"ok": True}
    # kafkajs wraps the topic's INVALID_REPLICA_ASSIGNMENT (checked with the other clients above) in one error
    assert (results[1]["error"]["name"], results[1]["error"]["message"]) == ("KafkaJSAggregateError",
                                                                            "Topic creation errors"), results[1]
    assert results[2] == {"ok": None}
    assert results[3]["ok"]["resources"][0]["errorCode"] == 0, results[3]
    configs = described(kadmin, name)
    assert configs["segment.ms"] == ("600000", 1) and configs["retention.ms"] == ("604800000", 5)
    assert len(kadmin.describe_topics([name])[0]["partitions"]) == 3
    assert other not in kadmin.list_topics()
