"""The producer and transaction admin APIs on the wire, with kafka-python's admin client (its KIP-664 tooling) and a
librdkafka transactional producer, and raw requests (tests/server/wire.py) for the error answers:

* ListTransactions and DescribeTransactions follow a transaction from Ongoing to CompleteCommit (state,
  producer id and epoch, timeout, start time, partitions), with the state, producer id and duration filters;
* DescribeProducers shows a partition's producers from the engine's producer state, the open transaction's first
  offset while it is open;
* a hanging transaction (written into the partition by another process, unknown to the coordinator) holds the
  last stable offset until ``abort_transaction`` (WriteTxnMarkers) writes its ABORT marker; a second abort with
  coordinator epoch -1 is then TRANSACTION_COORDINATOR_FENCED, as in Kafka;
* OffsetDelete (``delete_group_offsets``) removes an Empty group's offsets with tombstones, refuses the topics a
  live consumer group subscribes to (GROUP_SUBSCRIBED_TO_TOPIC), and answers GROUP_ID_NOT_FOUND and
  UNKNOWN_TOPIC_OR_PARTITION;
* the error answers: an invalid or unknown topic, an empty or unknown transactional id, an unknown state
  filter, a marker for a partition that does not exist;
* authorization as Kafka's KafkaApis checks it, in process with an authorizer of fixed rules (the broker's
  ``Authorizer`` interface): READ on the topic (DescribeProducers), DESCRIBE on the transactional id and its topics
  (DescribeTransactions, ListTransactions), ALTER or CLUSTER_ACTION on the cluster (WriteTxnMarkers), DELETE on
  the group and READ on the topic (OffsetDelete), with Kafka's error codes.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import AbortTransactionSpec, NewTopic
from kafka.errors import GroupIdNotFoundError, InvalidRequestError, NoError, TransactionalIdNotFoundError, TransactionCoordinatorFencedError
from kafka.structs import OffsetAndMetadata

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.server.broker import Broker
from storage_engine.server.catalog import create_topic
from storage_engine.server.groups import records as grec
from storage_engine.server.groups.store import OFFSETS_TOPIC
from storage_engine.server.handlers import APIS
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.protocol import Request
from tests.server import wire
from tests.server.broker_proc import wait_until
from tests.typed import present

HANGING_PID = 777_777


def _committed_end(bootstrap: str, tp: TopicPartition) -> int:
    """The read_committed end offset (the last stable offset) kafka-python's consumer is told."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


@pytest.mark.e2e
def test_transactions_listed_described_and_a_hanging_one_aborted(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("pay", 1, 1)])
    tp = TopicPartition("pay", 0)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "payer", "log_level": 0,
                         "transaction.timeout.ms": 45_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in (b"a", b"b"):
        producer.produce("pay", value, partition=0)
    assert producer.flush(30) == 0

    [listed] = [t for ts in admin.list_transactions().values() for t in ts if t.transactional_id == "payer"]
    pid = listed.producer_id
    assert listed.state.value == "Ongoing" and pid >= 0
    assert [t.transactional_id for ts in admin.list_transactions(state_filters=["Ongoing"]).values()
            for t in ts] == ["payer"]
    assert [t for ts in admin.list_transactions(state_filters=["CompleteCommit"]).values() for t in ts] == []
    assert [t.transactional_id for ts in admin.list_transactions(producer_id_filters=[pid]).values()
            for t in ts] == ["payer"]
    assert [t for ts in admin.list_transactions(producer_id_filters=[pid + 1]).values() for t in ts] == []
    assert [t for ts in admin.list_transactions(duration_filter_ms=3_600_000).values() for t in ts] == [], \
        "open for less than an hour"

    described = admin.describe_transactions(["payer"])["payer"]
    assert (described.state.value, described.producer_id, described.producer_epoch,
            described.transaction_timeout_ms, described.topic_partitions) == ("Ongoing", pid, 0, 45_000, {tp})
    assert described.transaction_start_time_ms > 0
    with pytest.raises(TransactionalIdNotFoundError):
        admin.describe_transactions(["nobody"])

    [state] = admin.describe_producers([tp])[tp].active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.current_transaction_start_offset) \
        == (pid, 0, 1, 0)
    assert _committed_end(broker.bootstrap, tp) == 0, "the open transaction holds the last stable offset"

    producer.commit_transaction(30)
    described = admin.describe_transactions(["payer"])["payer"]
    assert (described.state.value, described.transaction_start_time_ms, described.topic_partitions) == (
        "CompleteCommit", -1, set())
    [state] = admin.describe_producers([tp])[tp].active_producers
    assert (state.producer_id, state.current_transaction_start_offset, state.coordinator_epoch) == (pid, -1, 0)
    assert _committed_end(broker.bootstrap, tp) == 3

    # A hanging transaction: another process writes a transactional batch the coordinator knows nothing of.
    config = config_from_mapping({"broker": {"log.dirs": broker.log_dirs}})
    with LogManager.open(config) as mgr:
        present(mgr.get_log("pay", 0)).append_records([SimpleRecord(b"k", b"stuck")], producer_id=HANGING_PID,
                                                       producer_epoch=4, base_sequence=0, is_transactional=True)
    producers = {s.producer_id: s for s in admin.describe_producers([tp])[tp].active_producers}
    assert (producers[HANGING_PID].producer_epoch, producers[HANGING_PID].current_transaction_start_offset,
            producers[HANGING_PID].coordinator_epoch) == (4, 3, -1)
    assert _committed_end(broker.bootstrap, tp) == 3
    assert [t for ts in admin.list_transactions(state_filters=["Ongoing"]).values() for t in ts] == []

    admin.abort_transaction(AbortTransactionSpec(tp, HANGING_PID, 4))
    producers = {s.producer_id: s for s in admin.describe_producers([tp])[tp].active_producers}
    assert producers[HANGING_PID].current_transaction_start_offset == -1
    assert _committed_end(broker.bootstrap, tp) == 5, "the batch and its ABORT marker are below the LSO"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition("pay", 0, 0)])
        seen: list[bytes | None] = []

        def more() -> bool:
            seen.extend(m.value() for m in consumer.consume(10, 1) if m.error() is None)
            return len(seen) >= 2

        wait_until("the committed records", more)
        assert seen == [b"a", b"b"], "the aborted record is not read"
    finally:
        consumer.close()
    with pytest.raises(TransactionCoordinatorFencedError):
        admin.abort_transaction(AbortTransactionSpec(tp, HANGING_PID, 4))   # its marker has epoch 0 now
    admin.close()
    producer.flush(10)


@pytest.mark.e2e
def test_offset_delete_of_empty_and_live_groups(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("seen", 1, 1), NewTopic("other", 1, 1)])
    seen, other = TopicPartition("seen", 0), TopicPartition("other", 0)
    admin.alter_group_offsets("quiet", {seen: OffsetAndMetadata(4, "", -1), other: OffsetAndMetadata(7, "", -1)})
    assert admin.delete_group_offsets("quiet", [seen]) == {seen: NoError}
    left = admin.list_group_offsets("quiet")["quiet"]
    assert {tp: o.offset for tp, o in left.items() if o.offset >= 0} == {other: 7}
    tombstones = []
    config = config_from_mapping({"broker": {"log.dirs": broker.log_dirs}})
    with LogManager.open(config) as mgr:
        for p in range(50):
            log = mgr.get_log(OFFSETS_TOPIC, p)
            if log is not None:
                tombstones += [grec.parse_key(present(r.key)) for r in log.read_records() if r.value is None]
    assert tombstones == [grec.OffsetKey("quiet", "seen", 0)], "one tombstone, for the deleted offset"
    codes = admin.delete_group_offsets("quiet", [TopicPartition("seen", 5), TopicPartition("nothing", 0)])
    assert {tp: e.__name__ for tp, e in codes.items()} == {
        TopicPartition("seen", 5): "UnknownTopicOrPartitionError",
        TopicPartition("nothing", 0): "UnknownTopicOrPartitionError"}
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets("no-such-group", [seen])

    # a live consumer group subscribed to "seen": its offsets there stay, the others may go
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["seen"])
        wait_until("an assignment", lambda: consumer.poll(0.2) is None and bool(consumer.assignment()))
        consumer.commit(offsets=[confluent_kafka.TopicPartition("seen", 0, 2),
                                 confluent_kafka.TopicPartition("other", 0, 3)], asynchronous=False)
        codes = admin.delete_group_offsets("live", [seen, other])
        assert {tp: e.__name__ for tp, e in codes.items()} == {seen: "GroupSubscribedToTopicError",
                                                                other: "NoError"}
        left = admin.list_group_offsets("live")["live"]
        assert {tp: o.offset for tp, o in left.items() if o.offset >= 0} == {seen: 2}
    finally:
        consumer.close()
    admin.close()


@pytest.mark.e2e
def test_error_answers_on_the_wire(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("t", 1, 1)])
    # (kio's reader, the raw client here, refuses the -1 start time these answers carry, so kafka-python asks)
    with pytest.raises(InvalidRequestError):
        admin.describe_transactions([""])
    admin.close()
    conn = wire.Conn(broker.bootstrap)
    try:
        topic_req = wire.nested(wire.req(61, 0, topics=()).__class__, "topics")
        answer = conn.request(wire.req(61, 0, topics=(topic_req(name="bad name!", partition_indexes=(0,)),
                                                      topic_req(name="missing", partition_indexes=(0,)),
                                                      topic_req(name="t", partition_indexes=(0, 9)))))
        codes = [[(p.partition_index, p.error_code.value) for p in t.partitions] for t in answer.topics]
        assert codes == [[(0, 17)], [(0, 3)], [(0, 0), (9, 3)]]   # INVALID_TOPIC, UNKNOWN_TOPIC_OR_PARTITION
        assert answer.topics[0].partitions[0].error_message and answer.topics[2].partitions[0].active_producers == ()

        answer = conn.request(wire.req(66, 1, state_filters=("Ongoing", "Sleeping"), producer_id_filters=(),
                                       duration_filter=-1))
        assert (answer.error_code.value, answer.unknown_state_filters, answer.transaction_states) == (
            0, ("Sleeping",), ())

        marker_cls = wire.nested(wire.req(27, 1, markers=()).__class__, "markers")
        mtopic_cls = wire.nested(marker_cls, "topics")
        answer = conn.request(wire.req(27, 1, markers=(marker_cls(
            producer_id=5, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=(mtopic_cls(name="t", partition_indexes=(3,)),)),)))
        assert [(t.name, [(p.partition_index, p.error_code.value) for p in t.partitions])
                for m in answer.markers for t in m.topics] == [("t", [(3, 3)])]
    finally:
        conn.close()


# -- authorization, in process ---------------------------------------------------------------------------------

class Rules:
    """An authorizer allowing exactly the (principal, operation, resource type, name) it is given."""

    def __init__(self, allowed: set[tuple[str, Operation, ResourceType, str]]):
        self.allowed = allowed

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        return (principal, operation, resource_type, name) in self.allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        return 0

    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        return any(p == principal and o == operation and t == resource_type for p, o, t, _ in self.allowed)


ALICE = "User:alice"
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID


def _in_process(tmp_path, scenario: Callable[[Broker, Callable[[int, int, Any], Any]], Coroutine[Any, Any, None]]
                ) -> None:
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "logs")], "offsets.topic.num.partitions": 1,
                                             "transaction.state.log.num.partitions": 1}})
    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)

        async def ask(key: int, version: int, body: Any) -> Any:
            request = Request(key, version, 1, "authz-test", body, 0)
            return await APIS[key].handler(Ctx(broker, request, "localhost", 9092, "127.0.0.1:1", ALICE,  # type: ignore[misc]
                                               "127.0.0.1"), body)
        try:
            create_topic(broker, "t", 1, {})
            create_topic(broker, "secret", 1, {})
            asyncio.run(scenario(broker, ask))
        finally:
            broker.close()


@pytest.mark.unit
def test_each_api_checks_kafkas_operation_and_answers_its_code(tmp_path):
    async def scenario(broker: Broker, ask: Callable[[int, int, Any], Any]) -> None:
        rules = Rules(set())
        broker.authorizer = rules
        txns = broker.transactions
        for txn_id in ("x", "y"):
            code, pid, epoch = await txns.init_producer_id(txn_id, 60_000, -1, -1, 4)
            assert code == 0
            assert set((await txns.add_partitions(txn_id, pid, epoch, [("t", 0), ("secret", 0)], 3)).values()) == {0}

        topic_req = wire.nested(type(wire.req(61, 0, topics=())), "topics")
        producers = wire.req(61, 0, topics=(topic_req(name="t", partition_indexes=(0,)),))
        assert (await ask(61, 0, producers))["topics"][0]["partitions"][0]["error_code"] == 29
        rules.allowed.add((ALICE, Operation.READ, TOPIC, "t"))
        assert (await ask(61, 0, producers))["topics"][0]["partitions"][0]["error_code"] == 0

        described = await ask(65, 0, wire.req(65, 0, transactional_ids=("x",)))
        assert described["transaction_states"][0]["error_code"] == 53     # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        rules.allowed |= {(ALICE, Operation.DESCRIBE, TXN, "x"), (ALICE, Operation.DESCRIBE, TOPIC, "t")}
        [state] = (await ask(65, 0, wire.req(65, 0, transactional_ids=("x",))))["transaction_states"]
        assert (state["error_code"], state["transaction_state"], state["topics"]) == (
            0, "Ongoing", ({"topic": "t", "partitions": (0,)},)), "the topic it may not describe is left out"

        listed = await ask(66, 1, wire.req(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1))
        assert [t["transactional_id"] for t in listed["transaction_states"]] == ["x"], "y is not listed"

        marker_cls = wire.nested(type(wire.req(27, 1, markers=())), "markers")
        marker = wire.req(27, 1, markers=(marker_cls(
            producer_id=txns.txns["y"].producer_id, producer_epoch=txns.txns["y"].epoch, transaction_result=False,
            coordinator_epoch=0, topics=(wire.nested(marker_cls, "topics")(name="t", partition_indexes=(0,)),)),))

        def marker_codes(answer: Any) -> list[int]:
            return [p["error_code"] for m in answer["markers"] for t in m["topics"] for p in t["partitions"]]

        assert marker_codes(await ask(27, 1, marker)) == [31]             # CLUSTER_AUTHORIZATION_FAILED
        assert present(broker.manager.get_log("t", 0)).log_end_offset == 0, "nothing written"
        rules.allowed.add((ALICE, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME))
        assert marker_codes(await ask(27, 1, marker)) == [0]
        rules.allowed = {(ALICE, Operation.ALTER, CLUSTER, CLUSTER_NAME)}
        assert marker_codes(await ask(27, 1, marker)) == [0]
        assert present(broker.manager.get_log("t", 0)).log_end_offset == 2, "two ABORT markers"

        await broker.groups.commit("g", -1, "", [("t", 0, 5, -1, ""), ("secret", 0, 6, -1, "")])
        part_cls = wire.nested(wire.nested(type(wire.req(47, 0, group_id="g", topics=())), "topics"), "partitions")
        topic_cls = wire.nested(type(wire.req(47, 0, group_id="g", topics=())), "topics")
        delete = wire.req(47, 0, group_id="g", topics=tuple(
            topic_cls(name=n, partitions=(part_cls(partition_index=0),)) for n in ("t", "secret")))
        answer = await ask(47, 0, delete)
        assert (answer["error_code"], answer["topics"]) == (30, ())       # GROUP_AUTHORIZATION_FAILED
        rules.allowed |= {(ALICE, Operation.DELETE, GROUP, "g"), (ALICE, Operation.READ, TOPIC, "t")}
        answer = await ask(47, 0, delete)
        assert answer["error_code"] == 0
        assert {t["name"]: t["partitions"][0]["error_code"] for t in answer["topics"]} == {"t": 0, "secret": 29}
        assert set(broker.groups.groups["g"].offsets) == {("secret", 0)}

    _in_process(tmp_path, scenario)


@pytest.mark.e2e
def test_with_the_standard_authorizer_a_user_without_acls_is_refused_and_an_acl_lets_it_describe(broker_factory,
                                                                                                   tmp_path):
    """The broker's StandardAuthorizer on, bob (SCRAM) without ACLs, ANONYMOUS (PLAINTEXT) a super user: bob's
    kafka-python admin is refused each API with Kafka's error, and sees a transaction once an ACL lets him
    DESCRIBE its transactional id (by prefix)."""
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern,
                             ResourcePatternFilter)
    from kafka.admin import ResourceType as KpType
    from kafka.errors import (ClusterAuthorizationFailedError, GroupAuthorizationFailedError,
                              TopicAuthorizationFailedError)

    from tests.server.test_security import PASSWORDS, write_users

    users = write_users(tmp_path / "users.yaml")
    server = broker_factory(broker={"sasl.credentials.file": str(users), "super.users": "User:ANONYMOUS",
                                    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
                            listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    plain = server.address("PLAINTEXT")
    root = KafkaAdminClient(bootstrap_servers=plain)
    root.create_topics([NewTopic("pay", 1, 1)])
    producer = Producer({"bootstrap.servers": plain, "transactional.id": "payer", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("pay", b"a", partition=0)
    assert producer.flush(30) == 0
    root.alter_group_offsets("quiet", {TopicPartition("pay", 0): OffsetAndMetadata(1, "", -1)})
    [state] = root.describe_producers([TopicPartition("pay", 0)])[TopicPartition("pay", 0)].active_producers

    bob = KafkaAdminClient(bootstrap_servers=server.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                           sasl_plain_password=PASSWORDS["bob"])
    try:
        assert [t for ts in bob.list_transactions().values() for t in ts] == [], "ids bob may not describe are hidden"
        # kafka-python finds a partition's leader through Metadata first, which hides a topic bob may not DESCRIBE:
        # for a while bob may see the topic, not READ it, so DescribeProducers itself is what refuses
        sees_pay = ResourcePattern(KpType.TOPIC, "pay", ACLResourcePatternType.LITERAL)
        root.create_acls([ACL("User:bob", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW, sees_pay)])
        with pytest.raises(TopicAuthorizationFailedError):
            bob.describe_producers([TopicPartition("pay", 0)])
        with pytest.raises(ClusterAuthorizationFailedError):
            bob.abort_transaction(AbortTransactionSpec(TopicPartition("pay", 0), state.producer_id, 0))
        root.delete_acls([ACLFilter("User:bob", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                                    ResourcePatternFilter(KpType.TOPIC, "pay", ACLResourcePatternType.LITERAL))])
        with pytest.raises(GroupAuthorizationFailedError):
            bob.delete_group_offsets("quiet", [TopicPartition("pay", 0)])
        assert [t.transactional_id for ts in root.list_transactions().values() for t in ts] == ["payer"]

        root.create_acls([ACL("User:bob", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                              ResourcePattern(KpType.TRANSACTIONAL_ID, "pay", ACLResourcePatternType.PREFIXED))])
        wait_until("bob's ACL", lambda: [t.transactional_id for ts in bob.list_transactions().values()
                                         for t in ts] == ["payer"])
        described = bob.describe_transactions(["payer"])["payer"]
        assert (described.state.value, described.topic_partitions) == ("Ongoing", set()), \
            "the partitions of a topic bob may not describe are left out"
    finally:
        bob.close()
        root.close()
        producer.abort_transaction(30)
