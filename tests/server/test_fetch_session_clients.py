"""Real clients against fetch sessions. kafka-python asks for a session (epoch 0) and then fetches incrementally:
the broker's counters show the session made and incremental fetches, and the consumer reads every record of six
partitions, those written before it started and those written while it runs. librdkafka (confluent-kafka) never
asks for one (its Fetch carries session 0 / epoch -1: rdkafka_fetcher.c): its fetches are sessionless and it too
reads every record."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from tests.server.fetch_wire import status
from tests.server.fuzz_campaign import create_topic
from tests.typed import present

pytestmark = pytest.mark.e2e

PARTITIONS = 6


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5, "batch.num.messages": 20})
    for i, v in enumerate(values):
        producer.produce(topic, value=v.encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _kafka_python_read(consumer: KafkaConsumer, want: set[str], seen: set[str]) -> None:
    deadline = time.monotonic() + 60
    while not want <= seen and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=200).values():
            seen.update(r.value.decode() for r in batch)
    assert want <= seen, f"{len(want - seen)} records never read"


def test_kafka_python_uses_a_session_and_librdkafka_full_fetches_and_both_read_everything(broker_factory):
    broker = broker_factory()
    topic = "sessions"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    before = [f"before-{i}" for i in range(600)]
    _produce(broker.bootstrap, topic, before)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100, max_partition_fetch_bytes=512)   # many fetches
    tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    seen: set[str] = set()
    try:
        _kafka_python_read(consumer, set(before), seen)
        during = [f"during-{i}" for i in range(120)]
        _produce(broker.bootstrap, topic, during)       # while the consumer's session lives
        _kafka_python_read(consumer, set(during), seen)
        assert len(seen) == len(before) + len(during)
    finally:
        consumer.close()

    rd = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rd-sessions", "log_level": 0,
                   "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: list[str] = []
    try:
        rd.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(got) < len(seen) and time.monotonic() < deadline:
            for msg in rd.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                got.append(present(msg.value()).decode())
    finally:
        rd.close()
    assert sorted(got) == sorted(seen)

    assert broker.stop() == 0
    counted = status(broker)
    assert counted["fetch_sessions_created"] >= 1, counted
    assert counted["fetch_incremental"] >= 5, counted          # kafka-python fetched incrementally
    assert counted["fetch_session_errors"] == 0, counted
    assert counted["fetch_sessionless"] >= 1, counted          # librdkafka's fetches
