"""Idempotent producers lose nothing and duplicate nothing while the broker is killed with SIGKILL and restarted.

librdkafka producers (``enable.idempotence``, ``acks=all``, retries without limit, a long ``message.timeout.ms``;
the settings of :func:`torture.producer.config`) send numbered values ``<producer>:<seq>`` to a 3-partition topic
while the broker process dies several times at random moments, and once at the engine's ``append.written`` step (a
batch is in the log, its producer never got the response): the restarted broker, on the same port, must answer
the resent batch with the offsets it got the first time. At the end every record was delivered, is in the log
exactly once at the offset its delivery report gave, and each producer's records rise with the offsets within a
partition (:func:`torture.server.check_records`); this is checked on what a Kafka consumer reads from offset 0
and on what the engine reads in another process after a clean stop, which ``verify`` must pass.

An aiokafka idempotent producer does the same across one kill and one death at ``append.written``.
``python -m torture --server`` runs many such trials with child-process producers (RELIABILITY.md).
"""
from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from storage_engine import crashpoints
from torture.producer import config as producer_config
from torture.server import RETRIED, check_records
from tests.typed import present

pytestmark = [pytest.mark.e2e, pytest.mark.kills]

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "numbered"
PARTITIONS = 3
DEADLINE_S = 180.0      # a bound for waits on processes and clients, far above what any step needs


def engine(broker, *args: str) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(60)


def engine_records(broker, partitions: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record, read by the engine's ``consume`` (the broker stopped)."""
    return [(p, r["offset"], r["value"].encode())
            for p in range(partitions) for r in engine(broker, "consume", "--topic", TOPIC, "--partition", str(p))]


def consumer_records(bootstrap: str, partitions: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record, as a Kafka consumer reads them from offset 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idempotent-restart-check",
                         "enable.auto.commit": False, "log_level": 4})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=60)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, bytes]] = []
        last = {p: -1 for p in range(partitions)}
        deadline = time.monotonic() + DEADLINE_S
        while any(last[p] + 1 < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, f"the consumer stopped short: read up to {last}, ends {ends}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None or present(msg.error()).code() == KafkaError._PARTITION_EOF, msg.error()
            if msg.error() is None:
                out.append((present(msg.partition()), present(msg.offset()), present(msg.value())))
                last[present(msg.partition())] = present(msg.offset())
        return out
    finally:
        consumer.close()


class NumberedProducer(threading.Thread):
    """A librdkafka idempotent producer sending ``<name>:0`` .. ``<name>:<count-1>`` to random partitions at about
    ``rate`` records a second, then waiting for every delivery report."""

    def __init__(self, name: str, bootstrap: str, count: int, rate: float, seed: int):
        super().__init__(name=f"producer-{name}", daemon=True)
        self.label, self.count, self.rate = name, count, rate
        self.rng = random.Random(seed)
        self.producer = Producer(producer_config(bootstrap, 60_000) | {"log_level": 3})
        self.acked: dict[int, tuple[int, int]] = {}
        self.failed: list[tuple[int, str]] = []
        self.remaining = -1

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        seq = int(present(msg.value()).decode().rsplit(":", 1)[1])
        if err is None:
            self.acked[seq] = (present(msg.partition()), present(msg.offset()))
        else:
            self.failed.append((seq, err.name()))

    def run(self) -> None:
        started = time.monotonic()
        for seq in range(self.count):
            value = f"{self.label}:{seq}".encode()
            partition = self.rng.randrange(PARTITIONS)
            while True:
                try:
                    self.producer.produce(TOPIC, value=value, partition=partition, on_delivery=self._report)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
            ahead = (seq + 1) / self.rate - (time.monotonic() - started)
            if ahead > 0.005:
                self.producer.poll(ahead)
        self.remaining = self.producer.flush(90)


def wait_for_own_death(broker, step: str) -> None:
    """The broker was started armed to die at ``step``: wait until it has (``CRASHPOINT <step>`` in its log)."""
    assert broker.proc is not None
    rc = broker.proc.wait(DEADLINE_S)
    assert rc == -9 and f"CRASHPOINT {step}" in broker.log_text(), (rc, broker.log_text()[-3000:])
    broker.proc = None


def restart_armed(broker, monkeypatch, step: str) -> None:
    monkeypatch.setenv(crashpoints.ENV_VAR, step)
    try:
        broker.restart()
    finally:
        monkeypatch.delenv(crashpoints.ENV_VAR)


def test_idempotent_librdkafka_producers_lose_and_duplicate_nothing_across_broker_kills(broker_factory,
                                                                                        monkeypatch):
    seed = random.randrange(2**31)
    rng = random.Random(seed)
    where = f"(seed {seed})"
    broker = broker_factory(log_dirs=2, broker={"log.segment.bytes": 256 * 1024})
    create_topic(broker.bootstrap, PARTITIONS)
    # at about 800 records a second each, the producers send for at least 5 s: the first deaths come meanwhile
    producers = [NumberedProducer(name, broker.bootstrap, 4000, 800, rng.randrange(2**31)) for name in "abc"]
    for p in producers:
        p.start()
    kills = 0
    time.sleep(rng.uniform(0.3, 1.0))
    broker.kill()
    kills += 1
    # the next start dies after its n-th append is in the log, before the producer hears of it
    restart_armed(broker, monkeypatch, f"append.written:{rng.randint(5, 40)}")
    wait_for_own_death(broker, "append.written")
    time.sleep(rng.uniform(0.0, 0.5))
    broker.restart()
    for _ in range(3):
        time.sleep(rng.uniform(0.1, 1.2))
        broker.kill()
        kills += 1
        time.sleep(rng.uniform(0.0, 0.5))
        broker.restart()
    for p in producers:
        p.join(DEADLINE_S)
        assert not p.is_alive(), f"producer {p.label} did not finish {where}"
    for p in producers:
        assert p.failed == [] and p.remaining == 0, f"{p.label}: {p.failed[:5]}, {p.remaining} queued {where}"
        assert len(p.acked) == p.count, f"{p.label}: {len(p.acked)} of {p.count} delivered {where}"
    acked = {p.label: p.acked for p in producers}
    produced = {p.label: p.count for p in producers}
    assert broker.log_text().count(RETRIED) >= 1, "the batch written before the append.written death was resent"

    read = consumer_records(broker.bootstrap, PARTITIONS)
    assert check_records(acked, produced, read) == [], where
    assert len(read) == sum(produced.values())

    assert broker.stop() == 0
    stored = engine_records(broker, PARTITIONS)
    assert check_records(acked, produced, stored) == [], where
    assert sorted(stored) == sorted(read)
    engine(broker, "verify")
    assert kills == 4


def test_aiokafka_idempotent_producer_loses_and_duplicates_nothing_across_a_kill_and_a_death_mid_append(
        broker_factory, monkeypatch):
    from aiokafka import AIOKafkaProducer
    broker = broker_factory(log_dirs=1)
    create_topic(broker.bootstrap, 2)
    count = 3000
    acked: dict[int, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def deaths() -> None:
        time.sleep(0.5)
        broker.kill()
        restart_armed(broker, monkeypatch, "append.written:10")
        wait_for_own_death(broker, "append.written")
        broker.restart()

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all",
                                    retry_backoff_ms=50, linger_ms=5, request_timeout_ms=60_000)
        await producer.start()
        try:
            sent = []
            started = time.monotonic()
            for seq in range(count):
                sent.append(await producer.send(TOPIC, value=f"aio:{seq}".encode(), partition=seq % 2))
                ahead = (seq + 1) / 600 - (time.monotonic() - started)   # about 5 s of sending
                if ahead > 0.005:
                    await asyncio.sleep(ahead)
            for seq, result in enumerate(await asyncio.gather(*sent, return_exceptions=True)):
                if isinstance(result, BaseException):
                    errors.append(result)
                else:
                    acked[seq] = (result.partition, result.offset)
        finally:
            await producer.stop()

    killer = threading.Thread(target=deaths, daemon=True)
    killer.start()
    asyncio.run(asyncio.wait_for(produce(), DEADLINE_S))
    killer.join(DEADLINE_S)
    assert not killer.is_alive()
    assert errors == [] and len(acked) == count
    assert broker.log_text().count(RETRIED) >= 1
    read = consumer_records(broker.bootstrap, 2)
    assert check_records({"aio": acked}, {"aio": count}, read) == []
    assert broker.stop() == 0
    stored = engine_records(broker, 2)
    assert check_records({"aio": acked}, {"aio": count}, stored) == []
    assert sorted(stored) == sorted(read)
    engine(broker, "verify")
