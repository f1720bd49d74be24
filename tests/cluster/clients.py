"""The data side of tests/cluster: :class:`Kafka` (confluent-kafka against the cluster's broker), the background
threads that run during a step (:class:`LiveWriter`, a producer; :class:`SocketWatch`, a sampler of the services'
listening sockets), and the records the tests write and check (:func:`keyed`, :func:`latest_per_key`,
:func:`compare`, :func:`segment_hashes`).
"""
from __future__ import annotations

import functools
import hashlib
import threading
import time
import uuid
from pathlib import Path
from typing import cast

from include.cluster.run import Cluster
from tests.airflow.test_local_airflow import listening_sockets
from tests.cluster.harness import service_pids
from tests.typed import present


class Kafka:
    """confluent-kafka (librdkafka) against the cluster's broker."""

    def __init__(self, port: int):
        self.bootstrap = f"127.0.0.1:{port}"

    def create_topic(self, name: str, partitions: int, config: dict) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
            future.result(60)

    def producer(self):
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": False,
                         "linger.ms": 20, "batch.size": 65536, "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "message.timeout.ms": 300_000})

    def produce(self, topic: str, partition: int, records: list[tuple[bytes, bytes]]) -> list[int]:
        """Send every (key, value) with acks=all; the offset each was acknowledged at, in order. Fails on any
        record not acknowledged."""
        producer = self.producer()
        offsets: list[int | None] = [None] * len(records)
        errors: list[str] = []

        def delivered(i, err, msg):
            if err is None:
                offsets[i] = msg.offset()
            else:
                errors.append(str(err))

        for i, (key, value) in enumerate(records):
            while True:
                try:
                    producer.produce(topic, key=key, value=value, partition=partition,
                                     on_delivery=functools.partial(delivered, i))
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(300)
        assert left == 0 and not errors and None not in offsets, (
            f"{topic}-{partition}: {left} record(s) unsent, errors {errors[:5]}")
        return cast(list[int], offsets)   # None is not among them (asserted above)

    def read(self, topic: str, partition: int, timeout: float = 300) -> dict[int, tuple[bytes, bytes]]:
        """Every record of the partition, from its start to its end as of the read: {offset: (key, value)}."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"cluster-test-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "auto.offset.reset": "earliest"})
        out: dict[int, tuple[bytes, bytes]] = {}
        try:
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            deadline = time.monotonic() + timeout
            while True:
                assert time.monotonic() < deadline, f"{topic}-{partition}: read {len(out)} records in {timeout} s"
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    if present(msg.error()).code() == KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"reading {topic}-{partition}: {msg.error()}")
                out[present(msg.offset())] = (present(msg.key()), present(msg.value()))
        finally:
            consumer.close()


class LiveWriter(threading.Thread):
    """Writes one record every 20 ms to a partition through the broker (acks=all) until stopped; ``acked``:
    {offset: (key, value)} of what the broker acknowledged."""

    def __init__(self, kafka: Kafka, topic: str, partition: int, prefix: str):
        super().__init__(daemon=True)
        self.kafka, self.topic, self.partition, self.prefix = kafka, topic, partition, prefix
        self.acked: dict[int, tuple[bytes, bytes]] = {}
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        producer = self.kafka.producer()

        def delivered(err, msg):
            if err is None:
                self.acked[msg.offset()] = (msg.key(), msg.value())
            else:
                self.errors.append(str(err))

        i = 0
        try:
            while not self.halt.is_set():
                key = f"{self.prefix}-{i:07d}".encode()
                producer.produce(self.topic, key=key, value=key + b":live", partition=self.partition,
                                 on_delivery=delivered)
                producer.poll(0.02)
                i += 1
        except Exception as exc:      # noqa: BLE001 - reported by the test, which checks ``errors``
            self.errors.append(repr(exc))
        left = producer.flush(300)
        if left:
            self.errors.append(f"{left} record(s) never acknowledged")

    def stop(self) -> None:
        self.halt.set()
        self.join(330)


class SocketWatch(threading.Thread):
    """Samples, every second until stopped, the listening TCP sockets of every process of the cluster's services
    (:func:`service_pids`). ``seen``: {(address, port): command}."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.seen: dict[tuple[str, int], str] = {}
        self.halt = threading.Event()

    def sample(self) -> None:
        for pid, address, port in listening_sockets(service_pids(self.cluster)):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                command = "?"
            self.seen.setdefault((address, port), command)

    def run(self) -> None:
        while not self.halt.wait(1.0):
            self.sample()

    def stop(self) -> dict[tuple[str, int], str]:
        self.halt.set()
        self.join(60)
        return self.seen


# -- the data --------------------------------------------------------------------------------------------------------

def keyed(prefix: str, keys: int, versions: int, size: int) -> list[tuple[bytes, bytes]]:
    """``versions`` rounds over ``keys`` keys (the last round holds every key's latest value), each value
    ``size`` bytes and naming its key and version."""
    out = []
    for version in range(versions):
        for k in range(keys):
            key = f"{prefix}-{k:07d}"
            head = f"{key}@{version}:"
            out.append((key.encode(), (head + "x" * (size - len(head))).encode()))
    return out


def latest_per_key(records: list[tuple[bytes, bytes]], offsets: list[int]) -> dict[int, tuple[bytes, bytes]]:
    """{offset: (key, value)} of the last record of each key: what compaction must leave."""
    last: dict[bytes, tuple[int, bytes]] = {}
    for (key, value), offset in zip(records, offsets):
        last[key] = (offset, value)
    return {offset: (key, value) for key, (offset, value) in last.items()}


def compare(what: str, read: dict, expected: dict) -> None:
    missing = sorted(set(expected) - set(read))
    extra = sorted(set(read) - set(expected))
    changed = sorted(o for o in set(read) & set(expected) if read[o] != expected[o])
    assert not (missing or extra or changed), (
        f"{what}: {len(missing)} record(s) missing (first offsets {missing[:5]}), {len(extra)} not expected "
        f"(first {extra[:5]}: {[read[o][0] for o in extra[:5]]}), {len(changed)} changed (first {changed[:5]})")


def segment_hashes(partition_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(partition_dir.glob("*.log"))}
