"""Transactions with real clients against a real broker process.

* confluent-kafka (librdkafka): a transactional producer commits, aborts and commits again across two partitions;
  a ``read_committed`` consumer sees exactly the committed records, a ``read_uncommitted`` one every record, and
  the store (read by the engine after a clean stop) holds a COMMIT, ABORT, COMMIT marker per partition and one
  aborted transaction per partition in the ``.txnindex``, over the aborted records.
* Fencing: a second producer with the same ``transactional.id`` fences the first, whose Ongoing transaction is
  aborted with the epoch bumped (its records stay invisible to ``read_committed``); the fenced producer's next
  commit fails with a fatal fenced error, after a produce (the Produce path) and after none (the EndTxn path). The
  markers carry the epochs Kafka gives: the abort of a fenced transaction one above its producer's, the new
  producer one more.
* Exactly-once consume-transform-produce under kills: a worker process (txn_worker.py: a static group member,
  ``read_committed``, a transaction per 50 records with ``send_offsets_to_transaction``) turns 3,000 numbered
  input records on 3 partitions into output records while the test kills it with SIGKILL and restarts it (same
  ``transactional.id``), kills the broker with SIGKILL and restarts it, and once kills both (the worker restarted
  while the broker is down), at moments drawn from a fixed seed. At the end ``read_committed`` shows every input
  record exactly once in the output, in input order per partition (the engine's own ``read_committed`` read
  agrees), the group's committed offsets are the input's ends, and the extra records ``read_uncommitted`` shows
  all lie in aborted transactions of the ``.txnindex``, each ending at an ABORT marker. The figures of the run
  are printed (``-s``). The worker's clients do not re-bootstrap (``metadata.recovery.strategy=none``, see
  txn_worker.py): librdkafka 2.16 otherwise hangs in ``send_offsets_to_transaction`` after the only broker
  restarts.
* kafka-python, aiokafka and kafkajs (js/transactions.js) each commit a transaction, abort one and commit another,
  sending group offsets within the first two: a confluent ``read_committed`` consumer sees exactly the committed
  values, and the group's offsets are those of the committed transaction.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import aiokafka
import kafka
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.structs import OffsetAndMetadata

from tests.server.broker_proc import wait_until as _wait_until
from tests.typed import present

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")
NODE_MODULES = ROOT / "var" / "node" / "node_modules"
needs_kafkajs = pytest.mark.skipif(NODE is None or not (NODE_MODULES / "kafkajs").is_dir(),
                                   reason="node and kafkajs are needed (make clients)")
TIMEOUT = 60.0
# Few partitions of the internal topics, and no wait before a group's first rebalance.
BROKER = {"transaction.state.log.num.partitions": 5, "offsets.topic.num.partitions": 5,
          "group.initial.rebalance.delay.ms": 0}
# What librdkafka's fencing errors look like: _FENCED once it has taken PRODUCER_FENCED or an old epoch as such.
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


# -- the engine, the broker and the clients ------------------------------------------------------------------------

def wait_until(what: str, check, timeout: float = TIMEOUT):
    return _wait_until(what, check, timeout)


def engine(broker, *args: str) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def stored(broker, topic: str, partition: int) -> tuple[list[tuple[int, str, int, int]], list[dict]]:
    """What the engine stored in ``topic-partition`` (the broker stopped): (offset, kind, producer id, producer
    epoch) per record, kind ``data`` or the marker's ``COMMIT``/``ABORT``; and the ``.txnindex`` entries."""
    folder = [Path(d, f"{topic}-{partition}") for d in broker.log_dirs if Path(d, f"{topic}-{partition}").is_dir()]
    assert len(folder) == 1, folder
    files = sorted(map(str, folder[0].glob("*.log"))) + sorted(map(str, folder[0].glob("*.txnindex")))
    records, aborted, batch = [], [], None
    for line in engine(broker, "dump-log", "--files", *files, "--json", "--deep-iteration"):
        if line["type"] == "batch":
            batch = line
        elif line["type"] == "record":
            records.append((line["offset"], line.get("control_type", "data"), present(batch)["producer_id"],
                            present(batch)["producer_epoch"]))
        elif line["type"] == "aborted_txn":
            aborted.append(line)
    return records, aborted


def engine_values(broker, topic: str, partition: int, isolation: str) -> list[str]:
    return [r["value"] for r in engine(broker, "consume", "--topic", topic, "--partition", str(partition),
                                       "--isolation-level", isolation)]


def create_topics(broker, **partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()]).values():
        future.result(TIMEOUT)


def read_all(broker, topic: str, partitions: int, isolation: str) -> dict[int, list[tuple[int, str]]]:
    """(offset, value) of every record of every partition of ``topic`` a confluent consumer with ``isolation``
    reads from the beginning until the end (the last stable offset under ``read_committed``)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{isolation}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True,
                  "log_level": 3})
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: only partitions {sorted(at_end)} read to the end"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert present(msg.error()).code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(present(msg.partition()))
                continue
            at_end.discard(msg.partition())
            out[present(msg.partition())].append((present(msg.offset()), present(msg.value()).decode()))
    finally:
        c.close()
    return out


def values(read: dict[int, list[tuple[int, str]]]) -> dict[int, list[str]]:
    return {p: [v for _, v in recs] for p, recs in read.items()}


def group_offsets(broker, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.error is None}


def txn_producer(broker, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "log_level": 3})
    p.init_transactions(TIMEOUT)
    return p


def in_transaction(p: Producer, topic: str, records: list[tuple[int, str]], *, commit: bool) -> None:
    """One transaction of ``records`` ((partition, value)), flushed (so that they are stored) and then committed
    or aborted."""
    p.begin_transaction()
    for partition, value in records:
        p.produce(topic, value=value.encode(), partition=partition)
    assert p.flush(TIMEOUT) == 0
    if commit:
        p.commit_transaction(TIMEOUT)
    else:
        p.abort_transaction(TIMEOUT)


def close_quietly(p: Producer) -> None:
    """Close ``p`` (so it stops reconnecting once the broker is gone); a fenced producer's close cannot abort
    its transaction and says so, by an exception or a warning."""
    with warnings.catch_warnings(), contextlib.suppress(KafkaException):
        warnings.simplefilter("ignore", RuntimeWarning)
        p.close()


def fenced_error(fn) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        fn()
    return info.value.args[0]


# -- confluent-kafka: commit, abort, fencing -------------------------------------------------------------------------

def test_confluent_committed_records_are_read_committed_and_aborted_ones_only_read_uncommitted(broker_factory):
    broker = broker_factory(broker=BROKER)
    create_topics(broker, tx=2)
    p = txn_producer(broker, "tx-a")
    first = [(n % 2, f"first-{n}") for n in range(6)]
    aborted = [(n % 2, f"aborted-{n}") for n in range(4)]
    third = [(n % 2, f"third-{n}") for n in range(2)]
    in_transaction(p, "tx", first, commit=True)
    in_transaction(p, "tx", aborted, commit=False)
    in_transaction(p, "tx", third, commit=True)

    def of(records, partition):
        return [v for q, v in records if q == partition]
    committed = {q: of(first, q) + of(third, q) for q in (0, 1)}
    everything = {q: of(first, q) + of(aborted, q) + of(third, q) for q in (0, 1)}
    assert values(read_all(broker, "tx", 2, "read_committed")) == committed
    uncommitted = read_all(broker, "tx", 2, "read_uncommitted")
    assert values(uncommitted) == everything
    p.close()

    assert broker.stop() == 0
    for q in (0, 1):
        records, index = stored(broker, "tx", q)
        # 3 + COMMIT, 2 aborted + ABORT, 1 + COMMIT; all from one producer id at epoch 0
        assert [kind for _, kind, _, _ in records] == ["data"] * 3 + ["COMMIT"] + ["data"] * 2 + ["ABORT"] + \
            ["data", "COMMIT"]
        assert [o for o, _, _, _ in records] == list(range(9))
        assert {(pid, epoch) for _, _, pid, epoch in records} == {(records[0][2], 0)}
        # the .txnindex: the aborted transaction from its first record to its marker
        assert [(e["producer_id"], e["first_offset"], e["last_offset"]) for e in index] == [(records[0][2], 4, 6)]
        assert [o for o, v in uncommitted[q] if v.startswith("aborted")] == [4, 5]
        assert engine_values(broker, "tx", q, "read_committed") == committed[q]
        assert engine_values(broker, "tx", q, "read_uncommitted") == everything[q]


def test_confluent_second_producer_of_a_transactional_id_fences_the_first_and_aborts_its_open_transaction(
        broker_factory):
    broker = broker_factory(broker=BROKER)
    create_topics(broker, fence=1)
    first = txn_producer(broker, "fenced")
    in_transaction(first, "fence", [(0, "first-committed")], commit=True)
    first.begin_transaction()
    for n in range(3):
        first.produce("fence", value=f"first-open-{n}".encode(), partition=0)
    assert first.flush(TIMEOUT) == 0
    # Open: its records are stored, but read_committed stops before them (the last stable offset).
    assert values(read_all(broker, "fence", 1, "read_uncommitted"))[0] == \
        ["first-committed", "first-open-0", "first-open-1", "first-open-2"]
    assert values(read_all(broker, "fence", 1, "read_committed"))[0] == ["first-committed"]

    second = txn_producer(broker, "fenced")          # fences the first, aborting its open transaction
    assert values(read_all(broker, "fence", 1, "read_committed"))[0] == ["first-committed"]
    in_transaction(second, "fence", [(0, "second-committed")], commit=True)
    assert values(read_all(broker, "fence", 1, "read_committed"))[0] == ["first-committed", "second-committed"]

    # The fenced producer's next produce and commit fail, fatally.
    first.produce("fence", value=b"first-late", partition=0)
    err = fenced_error(lambda: first.commit_transaction(TIMEOUT))
    assert err.fatal() and err.code() in FENCED, err

    # Fenced again with no produce after the fencing: the commit itself (EndTxn) is refused.
    second.begin_transaction()
    second.produce("fence", value=b"second-open", partition=0)
    assert second.flush(TIMEOUT) == 0
    third = txn_producer(broker, "fenced")
    err = fenced_error(lambda: second.commit_transaction(TIMEOUT))
    assert err.fatal() and err.code() in FENCED, err
    in_transaction(third, "fence", [(0, "third-committed")], commit=True)

    assert values(read_all(broker, "fence", 1, "read_committed"))[0] == \
        ["first-committed", "second-committed", "third-committed"]
    assert values(read_all(broker, "fence", 1, "read_uncommitted"))[0] == \
        ["first-committed", "first-open-0", "first-open-1", "first-open-2", "second-committed", "second-open",
         "third-committed"]
    for producer in (first, second, third):
        close_quietly(producer)

    assert broker.stop() == 0
    records, index = stored(broker, "fence", 0)
    pid = records[0][2]
    # Epoch 0: the first producer; the fencing abort of its transaction at 1; the second producer at 2; the
    # abort fencing it at 3; the third producer at 4. Nothing of first-late was stored.
    assert [(kind, p, epoch) for _, kind, p, epoch in records] == [
        ("data", pid, 0), ("COMMIT", pid, 0), ("data", pid, 0), ("data", pid, 0), ("data", pid, 0),
        ("ABORT", pid, 1), ("data", pid, 2), ("COMMIT", pid, 2), ("data", pid, 2), ("ABORT", pid, 3),
        ("data", pid, 4), ("COMMIT", pid, 4)]
    assert [(e["first_offset"], e["last_offset"]) for e in index] == [(2, 5), (8, 9)]


# -- exactly-once consume-transform-produce under kills ----------------------------------------------------------

EOS_SEED = 20261126
EOS_PARTITIONS = 3
EOS_RECORDS = 3000
EOS_COMMIT_EVERY = 50
EOS_WORK_S = 0.004       # the worker's time per record: the run lasts long enough for every kill to land in it
# Kills of the worker alone, of the broker alone, and of both (the worker while the broker is down).
EOS_KILLS = {"worker": 4, "broker": 3, "both": 1}
EOS_DEADLINE_S = 600.0   # for the whole run; far above what it needs


class WorkerProcess:
    """txn_worker.py in a child process; its stdout events collected by a thread, its stderr in a file per run."""

    def __init__(self, spec: dict, tmp: Path):
        self.spec = spec
        self.tmp = tmp
        self.proc: subprocess.Popen[str] | None = None
        self.events: list[dict] = []            # of every run, in order
        self.runs = 0
        self.committed: dict[int, int] = {}     # partition -> highest offset committed by any run

    def start(self) -> None:
        self.runs += 1
        with open(self.tmp / f"worker-{self.runs}.err", "w") as err:
            self.proc = subprocess.Popen([sys.executable, str(HERE / "txn_worker.py"), json.dumps(self.spec)],
                                         cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        threading.Thread(target=self._read, args=(self.proc, self.runs), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str], run: int) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = {**json.loads(line), "run": run}
            if event["event"] == "committed":
                for p, o in event["offsets"].items():
                    self.committed[int(p)] = max(self.committed.get(int(p), 0), o)
            self.events.append(event)

    @property
    def progress(self) -> int:
        """Input records committed so far, by every run."""
        return sum(self.committed.values())

    def alive(self) -> bool:
        code = None if self.proc is None else self.proc.poll()
        assert code is None, f"the worker exited with {code} by itself: {self.report()}"
        return True

    def kill(self) -> None:
        assert self.proc is not None and self.alive()
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def report(self) -> str:
        tail = [e for e in self.events if e["event"] != "committed"][-10:]
        err = (self.tmp / f"worker-{self.runs}.err").read_text()[-3000:]
        return f"last events {tail}; stderr of run {self.runs}:\n{err}"

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def fill_input(broker, topic: str) -> dict[int, int]:
    """Records 0..EOS_RECORDS-1, record n (key and value ``n``) to partition n % EOS_PARTITIONS; the end offsets."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 20, "log_level": 3})
    for n in range(EOS_RECORDS):
        p.produce(topic, key=str(n).encode(), value=str(n).encode(), partition=n % EOS_PARTITIONS)
    assert p.flush(TIMEOUT) == 0
    return {q: EOS_RECORDS // EOS_PARTITIONS for q in range(EOS_PARTITIONS)}


@pytest.mark.kills
def test_consume_transform_produce_is_exactly_once_across_worker_and_broker_kills(broker_factory, tmp_path):
    rng = random.Random(EOS_SEED)
    broker = broker_factory(broker=BROKER)
    create_topics(broker, **{"eos-in": EOS_PARTITIONS, "eos-out": EOS_PARTITIONS})
    ends = fill_input(broker, "eos-in")
    worker = WorkerProcess({"bootstrap": broker.bootstrap, "input": "eos-in", "output": "eos-out",
                            "ends": ends, "group": "eos", "instance": "eos-worker", "transactional_id": "eos-worker",
                            "commit_every": EOS_COMMIT_EVERY, "work_s": EOS_WORK_S}, tmp_path)
    # Each kill once the committed progress has passed a point drawn from the seed, plus up to half a second (so
    # that it lands anywhere in a transaction, or in a start); at least 450 records are left after the last one.
    plan = sorted((rng.randrange(150, EOS_RECORDS - 450), what) for what, n in EOS_KILLS.items() for _ in range(n))
    kills = []          # (kind, progress when killed)
    deadline = time.monotonic() + EOS_DEADLINE_S
    worker.start()
    try:
        for at, what in plan:
            wait_until(f"progress {at} for a kill of the {what}", lambda: worker.alive() and worker.progress >= at,
                       deadline - time.monotonic())
            time.sleep(rng.uniform(0, 0.5))
            kills.append((what, worker.progress))
            if what in ("broker", "both"):
                broker.kill()
            if what in ("worker", "both"):
                worker.kill()
                worker.start()          # while the broker is down for "both": it waits for the coordinator
            if what in ("broker", "both"):
                time.sleep(rng.uniform(0, 1.0))
                broker.restart()
        wait_until("the worker to finish", lambda: worker.exited() is not None, deadline - time.monotonic())
        assert worker.exited() == 0, f"the worker exited with {worker.exited()}: {worker.report()}"
    finally:
        worker.close()
    assert [what for what, _ in kills] == [what for _, what in plan]
    assert worker.runs == 1 + EOS_KILLS["worker"] + EOS_KILLS["both"]
    assert broker.runs == 1 + EOS_KILLS["broker"] + EOS_KILLS["both"]
    assert [e for e in worker.events if e["event"] == "fatal"] == []
    assert worker.events[-1]["event"] == "done"

    # Every input record exactly once, in input order per partition; the group's offsets at the ends.
    expected = {q: [f"{q}:{o}:{o * EOS_PARTITIONS + q}" for o in range(ends[q])] for q in range(EOS_PARTITIONS)}
    committed = read_all(broker, "eos-out", EOS_PARTITIONS, "read_committed")
    for q in range(EOS_PARTITIONS):
        got = [v for _, v in committed[q]]
        lost = [v for v in expected[q] if v not in set(got)]
        duplicated = len(got) - len(set(got))
        assert (len(lost), duplicated) == (0, 0), f"partition {q}: lost {lost[:5]}..., {duplicated} duplicated"
        assert got == expected[q]
    assert group_offsets(broker, "eos") == {("eos-in", q): ends[q] for q in range(EOS_PARTITIONS)}
    uncommitted = read_all(broker, "eos-out", EOS_PARTITIONS, "read_uncommitted")

    # What read_uncommitted shows beyond the committed output are records of aborted transactions, and only
    # those: each lies within an aborted transaction of the .txnindex (its first record to its ABORT marker).
    assert broker.stop() == 0
    extra, aborted = 0, 0
    for q in range(EOS_PARTITIONS):
        kept = {o for o, _ in committed[q]}
        rest = [(o, v) for o, v in uncommitted[q] if o not in kept]
        assert {v for _, v in rest} <= set(expected[q])
        records, index = stored(broker, "eos-out", q)
        ranges = [(e["first_offset"], e["last_offset"]) for e in index]
        assert [o for o, _ in rest if not any(first <= o <= last for first, last in ranges)] == []
        # An ABORT marker ends an indexed aborted transaction when records of the transaction precede it; one
        # with none (the partition was added, its records never sent) is not indexed, as in Kafka.
        ends_of_ranges, written = [], False      # written: records since the last marker (one producer here)
        for o, kind, _, _ in records:
            if kind == "data":
                written = True
                continue
            if kind == "ABORT" and written:
                ends_of_ranges.append(o)
            written = False
        assert [last for _, last in ranges] == ends_of_ranges
        assert engine_values(broker, "eos-out", q, "read_committed") == expected[q]
        extra += len(rest)
        aborted += len(ranges)
    # The kills left transactions open with records in them, which were aborted.
    assert extra > 0 and aborted > 0
    worker_aborts = [e for e in worker.events if e["event"] == "aborted"]
    print(f"\nexactly-once: {EOS_RECORDS} input records, kills at progress {kills}, {worker.runs} worker runs, "
          f"{broker.runs} broker runs, {sum(e['event'] == 'committed' for e in worker.events)} commits, "
          f"{len(worker_aborts)} aborts by the worker ({sorted({e['reason'][:60] for e in worker_aborts})}), "
          f"{aborted} aborted transaction(s) over {EOS_PARTITIONS} partitions in the .txnindex, holding {extra} "
          f"records that only read_uncommitted shows")


# -- kafka-python, aiokafka, kafkajs ----------------------------------------------------------------------------

def check_commit_abort_commit(broker, topic: str, group: str) -> None:
    """After a client's commit (``c1``, ``c2``; offset 3 of ``src-0`` for ``group``), abort (``a1``, ``a2``;
    offset 30) and commit (``c3``) on ``topic-0``."""
    assert values(read_all(broker, topic, 1, "read_committed")) == {0: ["c1", "c2", "c3"]}
    assert values(read_all(broker, topic, 1, "read_uncommitted")) == {0: ["c1", "c2", "a1", "a2", "c3"]}
    assert group_offsets(broker, group) == {("src", 0): 3}


def test_kafka_python_commits_and_aborts_transactions(broker_factory):
    broker = broker_factory(broker=BROKER)
    create_topics(broker, kp=1, src=1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn")
    try:
        p.init_transactions()
        for vals, offset, commit in ((["c1", "c2"], 3, True), (["a1", "a2"], 30, False), (["c3"], None, True)):
            p.begin_transaction()
            for v in vals:
                p.send("kp", v.encode(), partition=0)
            p.flush()
            if offset is not None:
                p.send_offsets_to_transaction({kafka.TopicPartition("src", 0): OffsetAndMetadata(offset, "", -1)},
                                              "kp-group")
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()
    check_commit_abort_commit(broker, "kp", "kp-group")


def test_aiokafka_commits_and_aborts_transactions(broker_factory):
    broker = broker_factory(broker=BROKER)
    create_topics(broker, aio=1, src=1)

    class Abort(Exception):
        pass

    async def scenario():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-txn")
        await p.start()
        try:
            for vals, offset, commit in ((["c1", "c2"], 3, True), (["a1", "a2"], 30, False), (["c3"], None, True)):
                try:
                    async with p.transaction():
                        for v in vals:
                            await p.send_and_wait("aio", v.encode(), partition=0)
                        if offset is not None:
                            await p.send_offsets_to_transaction({aiokafka.TopicPartition("src", 0): offset},
                                                                "aio-group")
                        if not commit:
                            raise Abort()       # leaving the block by an exception aborts
                except Abort:
                    pass
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(scenario(), 3 * TIMEOUT))
    check_commit_abort_commit(broker, "aio", "aio-group")


@needs_kafkajs
def test_kafkajs_commits_and_aborts_transactions(broker_factory):
    broker = broker_factory(broker=BROKER)
    create_topics(broker, js=1, src=1)

    def txn(vals: list[str], offset: int | None, end: str) -> dict:
        t: dict[str, object] = {"end": end, "topic": "js", "messages": [{"key": v, "value": v, "partition": 0} for v in vals]}
        if offset is not None:
            t["offsets"] = {"groupId": "js-group", "topic": "src", "partitions": [{"partition": 0, "offset": offset}]}
        return t
    spec = {"brokers": [broker.bootstrap], "transactionalId": "js-txn",
            "transactions": [txn(["c1", "c2"], 3, "commit"), txn(["a1", "a2"], 30, "abort"),
                             txn(["c3"], None, "commit")]}
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    proc = subprocess.run([present(NODE), str(HERE / "js" / "transactions.js"), json.dumps(spec)], cwd=HERE / "js", env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n{broker.log_text()[-3000:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert [r.get("ended") for r in results] == ["commit", "abort", "commit"], results
    # The records of a transaction follow the previous one's marker: offsets 0-1, marker 2, 3-4, marker 5, 6.
    assert [[(p["errorCode"], p["baseOffset"]) for p in r["sent"]] for r in results] == \
        [[(0, "0")], [(0, "3")], [(0, "6")]]
    check_commit_abort_commit(broker, "js", "js-group")
