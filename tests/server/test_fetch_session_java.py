"""Kafka's own Java consumer (kafka-clients 3.9.1, through java/Driver.java) uses fetch sessions (KIP-227) when the
broker offers them: a full fetch makes the session, later fetches are incremental (Fetch v13+: by topic id), and
it reads every record of four partitions, those written before it started and while it ran. Then the same with
``max.incremental.fetch.session.cache.slots = 0``: the broker offers no session and the consumer reads everything
with full fetches."""
from __future__ import annotations

import pytest

from tests.server.broker_proc import BrokerProcess
from tests.server.fetch_wire import status
from tests.server.fuzz_campaign import create_topic
from tests.server.java.driver import JavaDriver, serving

pytestmark = pytest.mark.e2e

PARTITIONS = 4


def _read_everything(broker: BrokerProcess, java: JavaDriver, topic: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    java.call("producer", name=f"p-{topic}", config={"bootstrap.servers": broker.bootstrap, "acks": "all",
                                                      "linger.ms": "5", "batch.size": "512"})
    before = [f"before-{i}" for i in range(400)]
    for p in range(PARTITIONS):
        java.call("send", name=f"p-{topic}", topic=topic, partition=p, values=before[p::PARTITIONS])
    java.call("consumer", name=f"c-{topic}", config={
        "bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": "false",
        "group.id": f"g-{topic}", "fetch.max.wait.ms": "100", "max.partition.fetch.bytes": "600"})
    java.call("assign", name=f"c-{topic}", partitions=[f"{topic}:{p}" for p in range(PARTITIONS)])
    got = java.call("poll", name=f"c-{topic}", count=len(before), timeout_ms=60_000)
    during = [f"during-{i}" for i in range(80)]
    for p in range(PARTITIONS):
        java.call("send", name=f"p-{topic}", topic=topic, partition=p, values=during[p::PARTITIONS])
    got += java.call("poll", name=f"c-{topic}", count=len(during), timeout_ms=60_000)
    assert sorted(r["value"] for r in got) == sorted(before + during)
    java.call("close", name=f"c-{topic}")
    java.call("close", name=f"p-{topic}")


@pytest.mark.parametrize("slots", [1000, 0])
def test_the_java_consumer_fetches_incrementally_and_reads_every_record(tmp_path, slots):
    with serving(tmp_path, broker={"max.incremental.fetch.session.cache.slots": slots}) as (broker, java):
        _read_everything(broker, java, "java-sessions")
    counted = status(broker)           # written at the clean stop serving() checks
    assert counted["fetch_session_errors"] == 0, counted
    if slots:
        assert counted["fetch_sessions_created"] >= 1 and counted["fetch_incremental"] >= 5, counted
    else:
        assert counted["fetch_sessions_created"] == 0 and counted["fetch_incremental"] == 0, counted
        assert counted["fetch_full"] >= 5, counted
