"""Kafka's own producer and consumer (kafka-clients 3.9.1, through java/Driver.java: one JVM for the file) against
one broker: the idempotent producer with every codec (what it wrote read back by the Java consumer and by
librdkafka), transactions committed and aborted as read_committed and read_uncommitted consumers see them (and the
last stable offset of an open one), fencing by a new producer and by the Admin, consume-transform-produce with the
group's offsets in the transaction, consumer groups sharing and handing over partitions (eager and cooperative),
resuming at the committed offset, and a static member (KIP-345) restarted without a rebalance."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess, wait_until
from tests.server.java.driver import JavaDriver, serving
from tests.typed import present

pytestmark = pytest.mark.e2e

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    broker_conf = {"auto.create.topics.enable": False, "group.initial.rebalance.delay.ms": 0}
    with serving(tmp_path_factory.mktemp("java-clients"), broker=broker_conf) as kafka:
        yield kafka


def make_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)


def java_consumer(java: JavaDriver, broker: BrokerProcess, name: str, **config: str) -> None:
    java.call("consumer", name=name, config={"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                                             "enable.auto.commit": "false", **config})


def librdkafka_read(broker: BrokerProcess, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rd-{topic}", "log_level": 0,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(count - len(got), 0.5):
                assert msg.error() is None, msg.error()
                got.append(present(msg.value()))
        return got
    finally:
        consumer.close()


def settle_position(java: JavaDriver, consumer: str, partition: str, expected: int) -> None:
    """Polls until the consumer's position is ``expected``; no record may come meanwhile."""
    def there() -> bool:
        assert java.call("poll", name=consumer, count=0, timeout_ms=200) == []
        return bool(java.call("position", name=consumer, partition=partition) == expected)
    wait_until(f"{consumer}'s position at {expected}", there, 60)


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_producer_with_each_codec(kafka, codec):
    broker, java = kafka
    topic = f"java-codec-{codec}"
    make_topic(broker, topic, 2)
    java.call("producer", name=f"p-{codec}", config={
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": "true", "acks": "all",
        "compression.type": codec, "linger.ms": "20", "batch.size": "16384",
        "max.in.flight.requests.per.connection": "5"})
    values = [f"{codec}-{i}-" + "x" * (i % 50) for i in range(2000)]
    sent = java.call("send", name=f"p-{codec}", topic=topic, partition=1, values=values,
                     keys=[str(i) for i in range(len(values))])
    assert [s["offset"] for s in sent] == list(range(len(values)))     # no gap, no duplicate, in order
    java.call("close", name=f"p-{codec}")
    java_consumer(java, broker, f"c-{codec}")
    java.call("assign", name=f"c-{codec}", partitions=[f"{topic}:1"])
    records = java.call("poll", name=f"c-{codec}", count=len(values), timeout_ms=60000)
    java.call("close", name=f"c-{codec}")
    assert [r["value"] for r in records] == values
    assert [r["key"] for r in records] == [str(i) for i in range(len(values))]
    assert [r["offset"] for r in records] == list(range(len(values)))
    assert [v.decode() for v in librdkafka_read(broker, topic, 1, len(values))] == values


def test_transactions_committed_and_aborted_as_each_isolation_level_sees_them(kafka):
    broker, java = kafka
    make_topic(broker, "java-txn", 1)
    java.call("producer", name="txn", config={"bootstrap.servers": broker.bootstrap,
                                              "transactional.id": "java-txn-1", "compression.type": "lz4"})
    java.call("init_transactions", name="txn")
    java.call("begin", name="txn")
    java.call("send", name="txn", topic="java-txn", values=["c0", "c1", "c2"])
    java.call("commit", name="txn")
    java.call("begin", name="txn")
    java.call("send", name="txn", topic="java-txn", values=["a0", "a1"])
    java.call("abort", name="txn")
    java.call("begin", name="txn")
    java.call("send", name="txn", topic="java-txn", values=["c3"])
    java.call("commit", name="txn")
    java.call("close", name="txn")
    java_consumer(java, broker, "committed", **{"isolation.level": "read_committed"})
    java_consumer(java, broker, "uncommitted", **{"isolation.level": "read_uncommitted"})
    for name in ("committed", "uncommitted"):
        java.call("assign", name=name, partitions=["java-txn:0"])
    # Offsets: c0-c2 at 0-2, their commit marker at 3, a0-a1 at 4-5, the abort marker at 6, c3 at 7, a marker 8.
    committed = java.call("poll", name="committed", count=4, timeout_ms=60000)
    assert [(r["offset"], r["value"]) for r in committed] == [(0, "c0"), (1, "c1"), (2, "c2"), (7, "c3")]
    uncommitted = java.call("poll", name="uncommitted", count=6, timeout_ms=60000)
    assert [(r["offset"], r["value"]) for r in uncommitted] == \
        [(0, "c0"), (1, "c1"), (2, "c2"), (4, "a0"), (5, "a1"), (7, "c3")]
    settle_position(java, "committed", "java-txn:0", 9)        # past the last marker
    for name in ("committed", "uncommitted"):
        java.call("close", name=name)


def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one(kafka):
    broker, java = kafka
    make_topic(broker, "java-fence", 1)
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": "java-fence-1"}
    java.call("producer", name="old", config=conf)
    java.call("init_transactions", name="old")
    java.call("begin", name="old")
    java.call("send", name="old", topic="java-fence", values=["old"])
    java.call("producer", name="new", config=conf)
    java.call("init_transactions", name="new")            # aborts the old one's open transaction
    assert java.error("commit", name="old").kind == "ProducerFencedException"
    java.call("begin", name="new")
    java.call("send", name="new", topic="java-fence", values=["new"])
    java.call("commit", name="new")
    for name in ("old", "new"):
        java.call("close", name=name)
    java_consumer(java, broker, "fence-reader", **{"isolation.level": "read_committed"})
    java.call("assign", name="fence-reader", partitions=["java-fence:0"])
    assert [r["value"] for r in java.call("poll", name="fence-reader", count=1, timeout_ms=30000)] == ["new"]
    java.call("close", name="fence-reader")


def test_the_admin_fences_the_producers_of_a_transactional_id(kafka):
    broker, java = kafka
    make_topic(broker, "java-admin-fence", 1)
    java.call("admin", name="fencer", config={"bootstrap.servers": broker.bootstrap})
    java.call("producer", name="fenced", config={"bootstrap.servers": broker.bootstrap,
                                                 "transactional.id": "java-admin-fence"})
    java.call("init_transactions", name="fenced")
    java.call("begin", name="fenced")
    java.call("send", name="fenced", topic="java-admin-fence", values=["open"])
    java.call("fenceProducers", client="fencer", ids=["java-admin-fence"])   # bumps the epoch, aborts the open txn
    assert java.error("commit", name="fenced").kind == "ProducerFencedException"
    java.call("close", name="fenced")
    java.call("close", name="fencer")
    java_consumer(java, broker, "fence-check", **{"isolation.level": "read_committed"})
    java.call("assign", name="fence-check", partitions=["java-admin-fence:0"])
    settle_position(java, "fence-check", "java-admin-fence:0", 2)   # past the aborted record and its marker
    java.call("close", name="fence-check")


def test_consume_transform_produce_commits_the_group_offsets_in_the_transaction(kafka):
    broker, java = kafka
    make_topic(broker, "java-ctp-in", 2)
    make_topic(broker, "java-ctp-out", 2)
    java.call("producer", name="ctp-feed", config={"bootstrap.servers": broker.bootstrap})
    for p in range(2):
        java.call("send", name="ctp-feed", topic="java-ctp-in", partition=p, values=[f"{p}:{i}" for i in range(20)])
    java.call("close", name="ctp-feed")
    java_consumer(java, broker, "ctp-in", **{"group.id": "java-ctp", "isolation.level": "read_committed"})
    java.call("subscribe", name="ctp-in", topics=["java-ctp-in"])
    java.call("producer", name="ctp", config={"bootstrap.servers": broker.bootstrap, "transactional.id": "java-ctp"})
    java.call("init_transactions", name="ctp")
    records = java.call("poll", name="ctp-in", count=40, timeout_ms=60000)
    assert len(records) == 40
    java.call("begin", name="ctp")
    for r in records:
        java.call("send", name="ctp", topic="java-ctp-out", partition=r["partition"], values=[r["value"].upper()])
    java.call("send_offsets", name="ctp", consumer="ctp-in", offsets={"java-ctp-in:0": 20, "java-ctp-in:1": 20})
    java.call("commit", name="ctp")
    java.call("close", name="ctp")
    java.call("close", name="ctp-in")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("java-ctp")])["java-ctp"].result(60)
    assert {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions} == \
        {("java-ctp-in", 0): 20, ("java-ctp-in", 1): 20}
    java_consumer(java, broker, "ctp-out", **{"isolation.level": "read_committed"})
    java.call("assign", name="ctp-out", partitions=["java-ctp-out:0", "java-ctp-out:1"])
    out = java.call("poll", name="ctp-out", count=40, timeout_ms=60000)
    java.call("close", name="ctp-out")
    assert sorted(r["value"] for r in out) == sorted(f"{p}:{i}".upper() for p in range(2) for i in range(20))


def test_a_group_shares_the_partitions_and_hands_them_over_when_a_member_leaves(kafka):
    broker, java = kafka
    make_topic(broker, "java-group", 4)
    java.call("producer", name="g-feed", config={"bootstrap.servers": broker.bootstrap})
    for p in range(4):
        java.call("send", name="g-feed", topic="java-group", partition=p, values=[f"{p}-{i}" for i in range(5)])
    java.call("close", name="g-feed")
    conf = {"group.id": "java-group", "session.timeout.ms": "10000", "heartbeat.interval.ms": "500"}
    java_consumer(java, broker, "g1", **conf)
    java_consumer(java, broker, "g2", **conf)
    for name in ("g1", "g2"):
        java.call("subscribe", name=name, topics=["java-group"])
    seen: dict[str, list] = {"g1": [], "g2": []}

    def settled() -> bool:
        # Both members poll in turn until the group has assigned each of them two partitions.
        for name in ("g1", "g2"):
            seen[name] += java.call("poll", name=name, count=0, timeout_ms=300)
        a1, a2 = java.call("assignment", name="g1"), java.call("assignment", name="g2")
        return len(a1) == 2 and len(a2) == 2
    wait_until("the group to give each member two partitions", settled, 90)
    a1, a2 = set(java.call("assignment", name="g1")), set(java.call("assignment", name="g2"))
    assert a1 | a2 == {f"java-group:{p}" for p in range(4)} and not a1 & a2
    g1 = java.call("group_metadata", name="g1")
    assert g1["generation"] == java.call("group_metadata", name="g2")["generation"] and g1["generation"] > 0
    for name in ("g1", "g2"):
        java.call("commit_sync", name=name)
    java.call("close", name="g1")                         # a dynamic member leaves the group: g2 takes all
    wait_until("g2 to own every partition", lambda: (java.call("poll", name="g2", count=0, timeout_ms=300) or True)
               and len(java.call("assignment", name="g2")) == 4, 90)
    assert java.call("group_metadata", name="g2")["generation"] > g1["generation"]
    java.call("close", name="g2")


def test_read_committed_stops_at_an_open_transaction_until_it_commits(kafka):
    broker, java = kafka
    make_topic(broker, "java-lso", 1)
    java.call("producer", name="lso-plain", config={"bootstrap.servers": broker.bootstrap})
    java.call("send", name="lso-plain", topic="java-lso", values=["before"])
    java.call("producer", name="lso-tx", config={"bootstrap.servers": broker.bootstrap, "transactional.id": "java-lso"})
    java.call("init_transactions", name="lso-tx")
    java.call("begin", name="lso-tx")
    java.call("send", name="lso-tx", topic="java-lso", values=["t0", "t1"])
    java.call("send", name="lso-plain", topic="java-lso", values=["after"])    # behind the open transaction
    java_consumer(java, broker, "lso-c", **{"isolation.level": "read_committed"})
    java.call("assign", name="lso-c", partitions=["java-lso:0"])
    assert [r["value"] for r in java.call("poll", name="lso-c", count=1, timeout_ms=30000)] == ["before"]
    assert java.call("poll", name="lso-c", count=1, timeout_ms=1000) == []
    assert java.call("position", name="lso-c", partition="java-lso:0") == 1        # the last stable offset
    java.call("commit", name="lso-tx")
    got = java.call("poll", name="lso-c", count=3, timeout_ms=30000)
    assert [(r["offset"], r["value"]) for r in got] == [(1, "t0"), (2, "t1"), (3, "after")]
    for name in ("lso-c", "lso-tx", "lso-plain"):
        java.call("close", name=name)


def test_a_consumer_restarted_in_its_group_resumes_at_the_committed_offset(kafka):
    broker, java = kafka
    make_topic(broker, "java-resume", 1)
    java.call("producer", name="resume-p", config={"bootstrap.servers": broker.bootstrap})
    java.call("send", name="resume-p", topic="java-resume", values=[f"r{i}" for i in range(6)])
    conf = {"group.id": "java-resume", "max.poll.records": "4"}
    java_consumer(java, broker, "resume-1", **conf)
    java.call("subscribe", name="resume-1", topics=["java-resume"])
    first = java.call("poll", name="resume-1", count=4, timeout_ms=60000)
    assert [r["value"] for r in first] == ["r0", "r1", "r2", "r3"]
    java.call("commit_sync", name="resume-1")
    java.call("close", name="resume-1")
    java_consumer(java, broker, "resume-2", **conf)
    java.call("subscribe", name="resume-2", topics=["java-resume"])
    assert [r["value"] for r in java.call("poll", name="resume-2", count=2, timeout_ms=60000)] == ["r4", "r5"]
    java.call("close", name="resume-2")
    java.call("close", name="resume-p")


def test_cooperative_sticky_members_share_the_partitions(kafka):
    broker, java = kafka
    make_topic(broker, "java-coop", 6)
    conf = {"group.id": "java-coop", "heartbeat.interval.ms": "300",
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}
    names = ["coop-1", "coop-2", "coop-3"]
    for name in names:
        java_consumer(java, broker, name, **conf)
        java.call("subscribe", name=name, topics=["java-coop"])

    def balanced() -> bool:
        for name in names:
            java.call("poll", name=name, count=0, timeout_ms=200)
        return [len(java.call("assignment", name=n)) for n in names] == [2, 2, 2]
    wait_until("three cooperative members with two partitions each", balanced, 90)
    owned = [set(java.call("assignment", name=n)) for n in names]
    assert set.union(*owned) == {f"java-coop:{p}" for p in range(6)} and sum(map(len, owned)) == 6
    java.call("admin", name="coop-admin", config={"bootstrap.servers": broker.bootstrap})
    described = java.call("describeConsumerGroups", client="coop-admin", groups=["java-coop"])["java-coop"]
    java.call("close", name="coop-admin")
    assert described["assignor"] == "cooperative-sticky" and described["state"] == "STABLE"
    assert sorted(tuple(m["assignment"]) for m in described["members"]) == sorted(tuple(sorted(o)) for o in owned)
    for name in names:
        java.call("close", name=name)


def test_a_static_member_restarted_gets_its_assignment_back_without_a_rebalance(kafka):
    broker, java = kafka
    make_topic(broker, "java-static", 4)
    conf = {"group.id": "java-static", "session.timeout.ms": "30000", "heartbeat.interval.ms": "500"}
    java_consumer(java, broker, "s1", **conf, **{"group.instance.id": "i1"})
    java_consumer(java, broker, "s2", **conf, **{"group.instance.id": "i2"})
    for name in ("s1", "s2"):
        java.call("subscribe", name=name, topics=["java-static"])

    def settled() -> bool:
        for name in ("s1", "s2"):
            java.call("poll", name=name, count=0, timeout_ms=300)
        return len(java.call("assignment", name="s1")) == 2 and len(java.call("assignment", name="s2")) == 2
    wait_until("each static member to own two partitions", settled, 90)
    before = {n: (java.call("assignment", name=n), java.call("group_metadata", name=n)) for n in ("s1", "s2")}
    generation = before["s1"][1]["generation"]
    assert before["s2"][1]["generation"] == generation
    java.call("close", name="s1")                      # a static member sends no LeaveGroup: its place is kept
    java_consumer(java, broker, "s1b", **conf, **{"group.instance.id": "i1"})
    java.call("subscribe", name="s1b", topics=["java-static"])

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
    java.call("admin", name="static-admin", config={"bootstrap.servers": broker.bootstrap})
    group = java.call("describeConsumerGroups", client="static-admin", groups=["java-static"])["java-static"]
    java.call("close", name="static-admin")
    assert group["state"] == "STABLE" and sorted(m["instance"] for m in group["members"]) == ["i1", "i2"]
    for name in ("s1b", "s2"):
        java.call("close", name=name)
