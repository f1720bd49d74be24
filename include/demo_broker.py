"""The demo's Kafka side: the store served over Kafka's protocol while the DAGs maintain it.

:func:`start` runs ``python -m storage_engine --config CFG serve`` on a free loopback port; :func:`produce_live`
writes with a real Kafka client (librdkafka through confluent-kafka): a keyed topic created over the wire with
``cleanup.policy=compact`` (so the ``log_compaction`` DAG compacts it like any topic of the config file) and more
records on a sample topic, idempotently, in every codec; :func:`read_back` reads everything back with the same
client after the DAGs ran; :func:`transactions` commits one transaction and aborts another with a transactional
producer and reads the topic back both ways; :func:`stop` stops the broker with SIGTERM (a clean close of every
log).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from include.broker_launcher import BrokerLauncher

LIVE_TOPIC = "demo-live-prices"
TXN_TOPIC = "demo-orders"
LIVE_KEYS = 50
LIVE_ROUNDS = 20
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Broker(BrokerLauncher):
    """The demo's broker (:class:`include.broker_launcher.BrokerLauncher`) on a free loopback port."""


def start(config_path: Path, log_path: Path, repo: Path) -> Broker:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")           # this demo's broker only
    broker = Broker(config_path, log_path, listeners="PLAINTEXT://127.0.0.1:0", cwd=repo)
    try:
        return broker.start()
    except RuntimeError as exc:
        raise RuntimeError(f"the broker did not start; see {log_path}") from exc


def _check(futures: dict[str, Any]) -> None:
    for future in futures.values():
        future.result(30)


def produce_live(broker: Broker, sample_topic: str) -> dict[str, Any]:
    """Create the live compacted topic over the wire and write to it and to ``sample_topic``; returns counts."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _check(admin.create_topics([NewTopic(LIVE_TOPIC, 2, 1, config={"cleanup.policy": "compact",
                                                                   "segment.bytes": "65536"})]))
    delivered: list[Any] = []
    errors: list[str] = []

    def done(err: Any, msg: Any) -> None:
        (errors.append(str(err)) if err else delivered.append(msg))

    started = time.monotonic()
    for i, codec in enumerate(CODECS):
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "compression.type": codec,
                      "linger.ms": 5})
        for rnd in range(i * LIVE_ROUNDS // len(CODECS), (i + 1) * LIVE_ROUNDS // len(CODECS)):
            for k in range(LIVE_KEYS):
                p.produce(LIVE_TOPIC, key=f"sku-{k:03d}".encode(), value=f"{100 + rnd}.{k:02d}".encode(),
                          on_delivery=done)
            p.produce(sample_topic, key=f"live-{rnd}".encode(), value=f"live event {rnd} ({codec})".encode(),
                      on_delivery=done)
        p.flush(60)
    return {"delivered": len(delivered), "errors": errors, "seconds": round(time.monotonic() - started, 2)}


def read_back(broker: Broker, topics: list[str]) -> dict[str, dict[str, Any]]:
    """Every record of ``topics`` from the log start, through the Kafka client: count, first and last offsets,
    and the latest value per key of the live topic."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    meta = admin.list_topics(timeout=30)
    out: dict[str, dict[str, Any]] = {}
    for topic in topics:
        parts = sorted(meta.topics[topic].partitions)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "demo-read-back",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in parts}
        consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _) in ends.items()])
        want = sum(hi - lo for lo, hi in ends.values())
        seen, latest, positions = 0, {}, {p: lo for p, (lo, _) in ends.items()}
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p][1] for p in parts) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen += 1
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None, "a record without an error has its position"
            positions[partition] = offset + 1
            latest[msg.key()] = msg.value()
        consumer.close()
        out[topic] = {"records": seen, "offset_span": want, "partitions": len(parts), "keys": len(latest),
                      "latest": latest}
    return out


def _read_all(broker: Broker, topic: str, isolation: str) -> list[bytes | None]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"demo-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, lo)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if consumer.position([TopicPartition(topic, 0)])[0].offset >= hi:
                    break       # at the end: the markers (and, read_committed, the aborted records) were skipped
                continue
            if not msg.error():
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def transactions(broker: Broker) -> dict[str, Any]:
    """A transactional producer commits 10 orders and aborts 5 cancellations in ``demo-orders``; returns what a
    ``read_committed`` and a ``read_uncommitted`` consumer read."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _check(admin.create_topics([NewTopic(TXN_TOPIC, 1, 1)]))
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "demo-orders-writer"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(10):
        p.produce(TXN_TOPIC, key=f"order-{i}".encode(), value=f"order {i} confirmed".encode())
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(5):
        p.produce(TXN_TOPIC, key=f"order-{i}".encode(), value=f"order {i} cancelled".encode())
    p.flush(60)
    p.abort_transaction(60)
    del p
    return {"committed": _read_all(broker, TXN_TOPIC, "read_committed"),
            "uncommitted": _read_all(broker, TXN_TOPIC, "read_uncommitted")}


def stop(broker: Broker) -> int | None:
    """SIGTERM: a clean close of every log (exit 0); None if it did not stop within 60 s (then killed)."""
    return broker.stop(60)
