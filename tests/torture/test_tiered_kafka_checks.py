"""The checks of the tiered torture's Kafka client (:mod:`torture.tiered_kafka`) can fail: against a real broker,
a round over both topics from offset 0 passes on intact records, follows an OFFSET_OUT_OF_RANGE answer past the
log start of ``tiered-retained`` (records deleted through DeleteRecords, as remote retention deletes them), and
reports a ``BAD`` reason when ``tiered``, where nothing may expire, answers out of range, or when a value is not an
intact self-checking payload.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.server.broker_proc import BrokerProcess
from torture.child import Stop, payload
from torture.tiered_child import RETAINED, TIERED, TOPICS
from torture.tiered_kafka import Reader

pytestmark = pytest.mark.slow


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0


def _delete_records(bootstrap: str, topic: str, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, before)]).values():
        fut.result(30)


def test_a_round_follows_retention_of_the_retained_topic_and_reports_what_it_must(tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture[str]
                                                                                  ) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    broker = BrokerProcess(tmp_path, log_dirs=1).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            fut.result(30)
        rng = random.Random(7)
        for topic in TOPICS:
            _produce(broker.bootstrap, topic, [payload("t", n, rng, 50) for n in range(100)])
        _delete_records(broker.bootstrap, RETAINED, 40)
        stop = Stop(str(tmp_path / "stop"), 60)
        reader = Reader(broker.bootstrap, "test")
        try:
            assert reader.round(Path(broker.log_dirs[0]), stop) is None
            out = capsys.readouterr().out
            assert f"RESET {RETAINED} 0 40" in out, out
            assert "ROUND 160 0" in out, out       # 100 of tiered, 60 of tiered-retained, none remote

            # a value that is not an intact payload is reported, with its offset
            _produce(broker.bootstrap, TIERED, [b"not a payload of the torture"])
            bad = reader.round(Path(broker.log_dirs[0]), stop)
            assert bad == f"{TIERED}: damaged value at offset 100", bad

            # in tiered nothing may expire: an out-of-range answer there is reported
            _delete_records(broker.bootstrap, TIERED, 10)
            bad = reader.round(Path(broker.log_dirs[0]), stop)
            assert bad is not None and bad.startswith(f"{TIERED}: offset 0 answered OFFSET_OUT_OF_RANGE"), bad
        finally:
            reader.consumer.close()
    finally:
        broker.close()
