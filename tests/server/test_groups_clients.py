"""Consumer groups with kcat, aiokafka, kafka-python and kafkajs against a real broker process: each consumes as
a group member, commits, and a later member of the same group resumes at the committed offsets after a restart
of the broker (what it reads is exactly what was not committed: nothing re-read, nothing skipped).

* kcat ``-G`` (the balanced KafkaConsumer; librdkafka 2.0 auto-commits what it read, and commits on close);
  the broker is killed with SIGKILL before the second run.
* aiokafka: two AIOKafkaConsumer members share a topic, process the first half of each partition committing
  as they go, then a new member resumes after a clean restart.
* kafka-python: a KafkaConsumer commits the first half with metadata; after a restart ``committed()`` returns
  offset and metadata and a new member resumes there.
* kafkajs (``js/consume_group.js``): a first run processes N messages and commits them; after a restart a second
  run of the same group resumes after them.

The committed offsets are also read with kafka-python's admin client (OffsetFetch) and from what the broker
stored in ``__consumer_offsets``.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import aiokafka
import pytest

from tests.server.broker_proc import wait_until as _wait_until
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import CommitFailedError, IllegalGenerationError, RebalanceInProgressError
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from storage_engine.server.groups import records as rec
from tests.typed import present

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
JS = Path(__file__).resolve().parent / "js"
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
NODE = shutil.which("node")
NODE_MODULES = ROOT / "var" / "node" / "node_modules"
TIMEOUT = 60.0
OFFSETS_PARTITIONS = 3
BROKER = {"offsets.topic.num.partitions": OFFSETS_PARTITIONS, "group.initial.rebalance.delay.ms": 300}


# -- the engine, the broker and the data ---------------------------------------------------------------------------

def engine(broker, *args: str) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def stored_commits(broker, group: str) -> dict[tuple[str, int], tuple[int, str] | None]:
    """The last (offset, metadata) per partition that ``__consumer_offsets`` holds for ``group``, read by the
    engine in another process; None where a tombstone is last."""
    out: dict[tuple[str, int], tuple[int, str] | None] = {}
    partition = rec.partition_for(group, OFFSETS_PARTITIONS)
    for r in engine(broker, "consume", "--topic", "__consumer_offsets", "--partition", str(partition),
                    "--encoding", "base64"):
        key = rec.parse_key(base64.b64decode(r["key"]))
        if isinstance(key, rec.OffsetKey) and key.group == group:
            value = None if r["value"] is None else rec.parse_offset_value(base64.b64decode(r["value"]))
            out[(key.topic, key.partition)] = None if value is None else (value.offset, value.metadata)
    return out


def committed(broker, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as kafka-python's admin client lists them (OffsetFetch)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        return {(tp.topic, tp.partition): om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def create_topic(broker, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(broker, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """(partition, key, value) records in order, acks=all, every one acknowledged."""
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for f in [p.send(topic, key=k, value=v, partition=part) for part, k, v in records]:
            f.get(TIMEOUT)
    finally:
        p.close()


def wait_until(what: str, check, timeout: float = TIMEOUT):
    return _wait_until(what, check, timeout)


# -- kcat -G -------------------------------------------------------------------------------------------------------

def kcat_group(broker, group: str, topic: str) -> list[dict]:
    """``kcat -G group topic -e -J``: a balanced consumer that exits at the end of every assigned partition."""
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
                           "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", "-e", "-J", topic],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kcat -G: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert f"Group {group} rebalanced" in proc.stderr, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.kills
@pytest.mark.skipif(not Path(KCAT).exists(), reason="kcat is not installed (make clients)")
def test_kcat_balanced_consumer_commits_and_resumes_after_sigkill(broker_factory):
    broker = broker_factory(broker=BROKER)
    create_topic(broker, "kg", 2)
    produce(broker, "kg", [(i % 2, b"k%d" % i, b"first-%d" % i) for i in range(10)])

    first = kcat_group(broker, "kcat-readers", "kg")
    assert sorted((r["partition"], r["offset"]) for r in first) == [(p, o) for p in (0, 1) for o in range(5)]
    assert committed(broker, "kcat-readers") == {("kg", 0): 5, ("kg", 1): 5}

    produce(broker, "kg", [(i % 2, b"k%d" % i, b"second-%d" % i) for i in range(4)])
    broker.kill()
    broker.restart()
    assert committed(broker, "kcat-readers") == {("kg", 0): 5, ("kg", 1): 5}
    second = kcat_group(broker, "kcat-readers", "kg")
    assert sorted((r["partition"], r["offset"], r["payload"]) for r in second) == \
        [(0, 5, "second-0"), (0, 6, "second-2"), (1, 5, "second-1"), (1, 6, "second-3")]
    assert committed(broker, "kcat-readers") == {("kg", 0): 7, ("kg", 1): 7}
    assert stored_commits(broker, "kcat-readers") == {("kg", 0): (7, ""), ("kg", 1): (7, "")}
    # A group that committed everything reads nothing more.
    assert kcat_group(broker, "kcat-readers", "kg") == []


# -- aiokafka ------------------------------------------------------------------------------------------------------

def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 3 * TIMEOUT))


AIO_MEMBER = {"enable_auto_commit": False, "auto_offset_reset": "earliest", "session_timeout_ms": 6000,
              "heartbeat_interval_ms": 500, "max_poll_interval_ms": 10000, "rebalance_timeout_ms": 10000}


class AioMember:
    """An AIOKafkaConsumer in the group: it reads until stopped; records below ``process_below`` count as
    processed and their offsets are committed after each batch (a commit a rebalance refused is retried while
    the member still owns the partition)."""

    def __init__(self, broker, group: str, topic: str, name: str, process_below: int | None):
        self.consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, client_id=name,
                                         **AIO_MEMBER)
        self.process_below = process_below
        self.read: list[tuple[int, int]] = []
        self.assignment: list[int] = []
        self.failures: list[str] = []
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        c = self.consumer
        await c.start()
        pending: dict[aiokafka.TopicPartition, int] = {}
        try:
            while not self.stopping.is_set():
                batches = await c.getmany(timeout_ms=100)
                for tp, records in batches.items():
                    for r in records:
                        self.read.append((tp.partition, r.offset))
                        if self.process_below is not None and r.offset < self.process_below:
                            pending[tp] = r.offset + 1
                owned = c.assignment()
                self.assignment = sorted(tp.partition for tp in owned)
                pending = {tp: o for tp, o in pending.items() if tp in owned}
                if pending:
                    try:
                        await c.commit({tp: o for tp, o in pending.items()})
                        pending = {}
                    except (CommitFailedError, RebalanceInProgressError, IllegalGenerationError) as exc:
                        self.failures.append(repr(exc))
        finally:
            await c.stop()


def test_aiokafka_two_members_commit_half_and_a_new_member_resumes_after_restart(broker_factory):
    broker = broker_factory(broker=BROKER)
    topic, group, parts, n, half = "aio-groups", "aio-readers", 4, 8, 4
    create_topic(broker, topic, parts)
    produce(broker, topic, [(p, b"k", b"%d/%d" % (p, i)) for i in range(n) for p in range(parts)])
    want = {(topic, p): half for p in range(parts)}

    async def first_pair():
        members = [AioMember(broker, group, topic, f"aio-{i}", half) for i in range(2)]
        tasks = [asyncio.create_task(m.run()) for m in members]
        balanced = False
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                a, b = (m.assignment for m in members)
                balanced = balanced or (bool(a) and bool(b) and sorted(a + b) == list(range(parts)))
                if balanced and await asyncio.to_thread(committed, broker, group) == want:
                    break
                assert time.monotonic() < deadline, f"assignments {a} {b}, read {[m.read for m in members]}"
                for t in tasks:
                    if t.done():
                        t.result()
                await asyncio.sleep(0.2)
        finally:
            for m in members:
                m.stopping.set()
            await asyncio.gather(*tasks)
        return members

    members = run(first_pair())
    assert all(m.read for m in members)         # both members read records
    assert committed(broker, group) == want
    assert stored_commits(broker, group) == {tp: (half, "") for tp in want}

    assert broker.stop() == 0
    broker.restart()

    async def resumer():
        m = AioMember(broker, group, topic, "aio-resumer", None)
        task = asyncio.create_task(m.run())
        try:
            deadline = time.monotonic() + TIMEOUT
            while not all({o for q, o in m.read if q == p} >= set(range(half, n)) for p in range(parts)):
                assert time.monotonic() < deadline, f"read {m.read}"
                if task.done():
                    task.result()
                await asyncio.sleep(0.1)
            tps = [aiokafka.TopicPartition(topic, p) for p in range(parts)]
            seen = {p: await m.consumer.committed(tp) for p, tp in enumerate(tps)}
        finally:
            m.stopping.set()
            await task
        return m, seen

    m, seen = run(resumer())
    assert seen == {p: half for p in range(parts)}
    read = {p: [o for q, o in m.read if q == p] for p in range(parts)}
    assert read == {p: list(range(half, n)) for p in range(parts)}, read


# -- kafka-python --------------------------------------------------------------------------------------------------

def kp_consumer(broker, group: str, topic: str) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                         max_poll_interval_ms=10000)


def kp_read(c: KafkaConsumer, until) -> list[tuple[int, int]]:
    """Poll until ``until(read)`` holds; (partition, offset) of every record read."""
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + TIMEOUT
    while not until(read):
        assert time.monotonic() < deadline, f"read {read}, assignment {c.assignment()}"
        for tp, records in c.poll(timeout_ms=200).items():
            read += [(tp.partition, r.offset) for r in records]
    return read


def test_kafka_python_commits_with_metadata_and_a_new_member_resumes_after_restart(broker_factory):
    broker = broker_factory(broker=BROKER)
    topic, group, parts, n, half = "kp-groups", "kp-readers", 3, 6, 3
    create_topic(broker, topic, parts)
    produce(broker, topic, [(p, b"k", b"%d/%d" % (p, i)) for i in range(n) for p in range(parts)])

    c = kp_consumer(broker, group, topic)
    try:
        read = kp_read(c, lambda got: all({(p, o) for o in range(half)} <= set(got) for p in range(parts)))
        assert {tp.partition for tp in c.assignment()} == set(range(parts))
        assert all(o in range(n) for _, o in read)
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(half, f"done up to {half - 1}", -1)
                  for p in range(parts)})
        assert c.committed(TopicPartition(topic, 0)) == half
    finally:
        c.close()                     # LeaveGroup; autocommit is off, so nothing else is committed
    assert committed(broker, group) == {(topic, p): half for p in range(parts)}
    assert stored_commits(broker, group) == {(topic, p): (half, f"done up to {half - 1}") for p in range(parts)}

    assert broker.stop() == 0
    broker.restart()

    c = kp_consumer(broker, group, topic)
    try:
        meta = c.committed(TopicPartition(topic, 1), metadata=True)
        assert (meta.offset, meta.metadata) == (half, f"done up to {half - 1}")
        read = kp_read(c, lambda got: len(got) >= parts * (n - half))
        assert sorted(read) == [(p, o) for p in range(parts) for o in range(half, n)]
        c.commit()                     # everything read: the positions
    finally:
        c.close()
    assert committed(broker, group) == {(topic, p): n for p in range(parts)}


# -- kafkajs -------------------------------------------------------------------------------------------------------

def node(script: str, broker, spec: dict) -> dict:
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    proc = subprocess.run([present(NODE), str(JS / script), json.dumps({"brokers": [broker.bootstrap], **spec})],
                          cwd=JS, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{script}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(NODE is None or not (NODE_MODULES / "kafkajs").is_dir(),
                    reason="node and kafkajs are needed (make clients)")
def test_kafkajs_group_commits_what_it_processed_and_a_second_run_resumes_after_it(broker_factory):
    broker = broker_factory(broker=BROKER)
    topic, group, parts, n = "js-groups", "js-readers", 2, 12
    create_topic(broker, topic, parts)
    produce(broker, topic, [(i % parts, b"k%d" % i, b"record-%d" % i) for i in range(n)])
    spec = {"groupId": group, "topic": topic, "timeoutMs": 60000}

    first = node("consume_group.js", broker, {**spec, "count": 7})
    assert first["fetchedAtStart"] == [{"partition": p, "offset": -1} for p in range(parts)]
    done = {(m["partition"], m["offset"]) for m in first["processed"]}
    assert len(first["processed"]) == len(done) == 7
    ends = {c["partition"]: c["offset"] for c in first["committed"]}
    # Per partition, what was processed is a prefix, and what was committed is the offset after it.
    for p in range(parts):
        mine = sorted(o for q, o in done if q == p)
        assert mine == list(range(len(mine)))
        assert ends.get(p, 0) == len(mine)
    assert committed(broker, group) == {(topic, p): o for p, o in ends.items()}

    assert broker.stop() == 0
    broker.restart()

    second = node("consume_group.js", broker, {**spec, "count": n - 7})
    assert second["fetchedAtStart"] == [{"partition": p, "offset": ends.get(p, -1)} for p in range(parts)]
    again = {(m["partition"], m["offset"]) for m in second["processed"]}
    assert len(second["processed"]) == len(again) == n - 7
    assert done | again == {(p, o) for p in range(parts) for o in range(n // parts)}     # every record once
    assert not done & again
    assert committed(broker, group) == {(topic, p): n // parts for p in range(parts)}
    assert stored_commits(broker, group) == {(topic, p): (n // parts, "") for p in range(parts)}
