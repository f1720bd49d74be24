"""Produce appends done on the broker's event loop: confluent-kafka's producers (idempotent and not) against a real
broker process whose partition rolls every 64 KiB. The broker counts where each partition append ran
(``produce_appends_inline`` / ``produce_appends_pooled`` in its status file): small appends are done on the event
loop, the ones that cannot be (the first, which reads the leader epoch checkpoint; each roll) in the thread pool,
and every record acknowledged reads back, in order, CRC-checked, at the offset it was acknowledged at. Compressed
batches over 16 KiB are appended in the thread pool."""
from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.server.broker_proc import BrokerProcess
from tests.server.fetch_wire import status
from tests.server.test_clients_confluent import TIMEOUT, Delivered, consume_until_eof, create_topic

pytestmark = pytest.mark.e2e

TOPIC = "inline"
SEGMENT_BYTES = 64 * 1024


def _produce(broker: BrokerProcess, values: list[bytes], **conf) -> list[int]:
    delivered = Delivered()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 10, **conf})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value, key=b"k%d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == []
    return delivered.offsets


def _read_back(broker: BrokerProcess, count: int) -> list:
    """The partition's records from offset 0, CRC-checked by librdkafka, until its end (at least ``count``)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "inline", "check.crcs": True,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        return consume_until_eof(consumer, at_least=count)
    finally:
        consumer.close()


def test_small_appends_run_on_the_event_loop_and_every_record_reads_back(tmp_path):
    broker = BrokerProcess(tmp_path, log_dirs=1)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(admin, TOPIC, configs={"segment.bytes": str(SEGMENT_BYTES)})
        first = [b"idempotent-%05d-" % i + b"x" * 150 for i in range(3000)]
        second = [b"plain-%05d-" % i + b"y" * 150 for i in range(1000)]
        third = [b"gzip-%05d-" % i + b"z" * 150 for i in range(500)]     # small compressed batches
        offsets = _produce(broker, first, **{"enable.idempotence": True})
        offsets += _produce(broker, second, acks="1")
        offsets += _produce(broker, third, **{"compression.type": "gzip"})
        assert offsets == list(range(len(first) + len(second) + len(third)))
        got = _read_back(broker, len(offsets))
        assert [m.value() for m in got] == first + second + third
        assert [m.offset() for m in got] == offsets
    finally:
        assert broker.stop() == 0
    counted = status(broker)
    inline, pooled = counted["produce_appends_inline"], counted["produce_appends_pooled"]
    rolls = len(first + second) * 150 // SEGMENT_BYTES
    # every partition append was tried on the event loop, and counted once where it ran
    assert inline + pooled == counted["produce_requests"], counted
    # the first append and each roll at least went to the pool; most small appends did not
    assert pooled > rolls and inline > pooled, counted


def test_large_compressed_batches_are_appended_in_the_thread_pool(tmp_path):
    """A compressed batch over 16 KiB is decompressed and checked in the broker's threads, not on its event loop
    (where its CPU time would hold up every other connection): here every append is counted as pooled, and every
    record reads back."""
    import os
    broker = BrokerProcess(tmp_path, log_dirs=1)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(admin, TOPIC)
        # half random: a batch of 40 gzips to ~25 kB (librdkafka sends a batch that gzip cannot shrink uncompressed)
        values = [os.urandom(500) + b"\0" * 500 for _ in range(400)]
        offsets = _produce(broker, values, **{"compression.type": "gzip", "batch.num.messages": 40,
                                              "linger.ms": 1000})
        assert offsets == list(range(len(values)))
        assert [m.value() for m in _read_back(broker, len(offsets))] == values
    finally:
        assert broker.stop() == 0
    counted = status(broker)
    assert counted["produce_requests"] >= 10, counted
    assert counted["produce_appends_inline"] == 0, {k: v for k, v in counted.items() if "produce" in k}
    assert counted["produce_appends_pooled"] == counted["produce_requests"], counted
