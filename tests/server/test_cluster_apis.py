"""The cluster and topic APIs of a one-broker Kafka 4.x through real clients on the wire: kafka-python 3
(AlterConfigs, ElectLeaders, Alter/ListPartitionReassignments, DescribeQuorum, DescribeCluster, ListConfigResources,
DescribeTopicPartitions, CreateTopics/CreatePartitions with replica assignments), confluent-kafka's AdminClient
(alter_configs, describe_cluster, elect_leaders, create_topics with replica assignments), aiokafka's
``alter_configs``, and raw requests (tests/server/wire.py) for what no Python client sends: OffsetForLeaderEpoch,
the CreateTopics response's ``configs``, DescribeTopicPartitions paging with its cursor, and a produce larger than
the topic's segment.bytes (RECORD_LIST_TOO_LARGE). One broker serves the whole module; each test uses its own
topics."""
from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import ElectionType, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidReplicationAssignmentError

from tests.server import wire
from tests.server.broker_proc import BrokerProcess

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
    fields = {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
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
    assert v4.error_code == 0 and not hasattr(v4, "configs")


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
    listed = set(kadmin.list_topics())
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
