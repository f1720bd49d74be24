"""The broker as the long-lived writer while maintenance acts on the same log dirs from other processes.

Topics are created and configured over the wire (the configs land where the maintenance jobs read them); the
compaction and retention jobs and ``delete-records`` then run as ``python -m storage_engine`` processes next to
the serving broker, and real Kafka clients check what they see afterwards: the latest value per key at its old
offset after compaction, OFFSET_OUT_OF_RANGE only below the new log start after retention (with producers
succeeding throughout), and the log start that ListOffsets reports after DeleteRecords and the CLI. The real
Airflow ``log_compaction`` DAG (``dag.test()`` in a process of its own, with its own metadata DB) compacts a
served topic too (marked ``airflow``).
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   OffsetSpec, ResourceType)
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from tests.typed import present

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
MIN = 60_000
HOUR = 60 * MIN


def engine(broker, *args: str, stdin: str | None = None) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def create_topic(admin: AdminClient, name: str, configs: dict[str, str], partitions: int = 1) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=configs)]).values():
        future.result(TIMEOUT)


def earliest(admin: AdminClient, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset


def latest(admin: AdminClient, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(TIMEOUT).offset


def segment_bases(broker, topic: str, partition: int = 0) -> list[int]:
    """Base offsets of the live segments of ``topic-partition`` on disk."""
    found = [p for d in broker.log_dirs for p in Path(d, f"{topic}-{partition}").glob("*.log")]
    return sorted(int(p.stem) for p in found)


class Delivered:
    """Delivery reports of a confluent producer: every error, and the offsets of the records stored."""

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []
        self.offsets: list[int] = []
        self.values: dict[int, bytes | None] = {}

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.offsets.append(msg.offset())
            self.values[msg.offset()] = msg.value()


def read_to_end(bootstrap: str, topic: str, *, isolation: str = "read_uncommitted") -> list:
    """Every record of ``topic-0`` from the beginning to the high watermark, read by a confluent consumer
    (assign, no group membership)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "maintenance-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if present(msg.error()).code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append(msg)
        raise AssertionError(f"did not reach the end of {topic}-0 in {TIMEOUT} s; read {len(out)} records")
    finally:
        consumer.close()


# -- (1) compaction ------------------------------------------------------------------------------------------------

# segment.bytes as Kafka's smallest segment, far above what the tests write: segment.ms rolls their segments.
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": str(1024 * 1024), "segment.ms": str(MIN),
             "min.cleanable.dirty.ratio": "0.01"}


def write_rounds(broker, topic: str, keys: list[bytes], rounds: int) -> tuple[Producer, Delivered, int]:
    """``rounds`` rounds of a value per key, each round stamped two minutes after the last so that it starts a new
    segment (segment.ms counts record time), then one marker record later still, which seals the last round
    and stays alone in the active segment. The last round's first key gets a tombstone."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    delivered = Delivered()
    base = int(time.time() * 1000) - HOUR
    for rnd in range(rounds):
        for i, key in enumerate(keys):
            value = None if (rnd == rounds - 1 and i == 0) else f"round-{rnd}:{key.decode()}:".encode() + b"p" * 200
            producer.produce(topic, key=key, value=value, partition=0, timestamp=base + rnd * 2 * MIN,
                             on_delivery=delivered)
        assert producer.flush(TIMEOUT) == 0
    producer.produce(topic, key=b"marker", value=b"end-of-rounds", partition=0, timestamp=base + 20 * MIN,
                     on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == []
    n = rounds * len(keys)
    assert sorted(delivered.offsets) == list(range(n + 1))
    assert segment_bases(broker, topic) == [r * len(keys) for r in range(rounds + 1)]
    return producer, delivered, base


def test_topic_created_compacted_over_the_wire_is_compacted_by_the_cli_job_while_the_broker_serves(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "profiles", COMPACTED)
    keys = [f"user-{i}".encode() for i in range(20)]
    producer, delivered, base = write_rounds(broker, "profiles", keys, 4)
    before = read_to_end(broker.bootstrap, "profiles")
    assert len(before) == 81

    report = engine(broker, "compact", "--topic", "profiles")[0]
    assert report["failed"] == [], report
    [result] = report["results"]
    assert (result["topic"], result["partition"]) == ("profiles", 0)
    assert result["stats"]["records_removed"] == 60

    # Latest value per key, each at the offset the producer was told; the tombstone is kept (this is the first
    # cleaning) and the active segment is untouched.
    after = read_to_end(broker.bootstrap, "profiles")
    expected = {60 + i: (key, delivered.values[60 + i]) for i, key in enumerate(keys)}
    expected[80] = (b"marker", b"end-of-rounds")
    assert {m.offset(): (m.key(), m.value()) for m in after} == expected
    assert [m.offset() for m in after] == sorted(expected)
    assert after[0].value() is None and after[0].key() == b"user-0"
    assert all(m.timestamp()[1] == base + 3 * 2 * MIN for m in after[:20])
    # What is stored: the same records, read by the engine in another process.
    stored = engine(broker, "consume", "--topic", "profiles", "--partition", "0")
    assert [(r["offset"], r["key"]) for r in stored] == [(o, k.decode()) for o, (k, _) in sorted(expected.items())]
    assert earliest(admin, "profiles") == 0

    # The broker keeps writing after the swap: the next offset follows on, and a reader sees it.
    producer.produce("profiles", key=b"user-1", value=b"after-cleaning", partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == [] and max(delivered.offsets) == 81
    tail = read_to_end(broker.bootstrap, "profiles")
    assert [(m.offset(), m.value()) for m in tail][-2:] == [(80, b"end-of-rounds"), (81, b"after-cleaning")]


_DAG_RUN = """
import datetime, json, os, sys
sys.path.append(os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"])
from airflow.utils import db
db.resetdb()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], "log_compaction.py"))
assert not bag.import_errors, bag.import_errors
run = bag.get_dag("log_compaction").test(logical_date=datetime.datetime.fromisoformat(sys.argv[1]),
                                         run_conf={"map_strategy": "local"})
print("RESULT " + json.dumps({"state": str(run.state)}))
"""


@pytest.mark.airflow
def test_the_log_compaction_dag_compacts_a_topic_the_broker_serves(broker, tmp_path):
    """The real Airflow DAG (dag.test(), key maps built in process) in its own process, with its own AIRFLOW_HOME
    and metadata DB, on the log dirs of the running broker."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "accounts", COMPACTED)
    keys = [f"acct-{i}".encode() for i in range(10)]
    producer, delivered, _ = write_rounds(broker, "accounts", keys, 3)

    home = tmp_path / "airflow-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "STORAGE_MAINTENANCE_ALERT")) and k != "STORAGE_ENGINE_CONFIG"}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "AIRFLOW__API__BASE_URL": "http://airflow.test:8080",
                "STORAGE_ENGINE_CONFIG": str(broker.config_path)})
    # "Now" for the run is its data interval end: the next full hour, after every record written.
    end = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).replace(
        minute=0, second=0, microsecond=0)
    proc = subprocess.run([sys.executable, "-c", _DAG_RUN, end.isoformat()], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert json.loads(results[-1][len("RESULT "):])["state"] == "success"

    after = read_to_end(broker.bootstrap, "accounts")
    expected = {20 + i: (key, delivered.values[20 + i]) for i, key in enumerate(keys)}
    expected[30] = (b"marker", b"end-of-rounds")
    assert {m.offset(): (m.key(), m.value()) for m in after} == expected
    assert [r["offset"] for r in engine(broker, "consume", "--topic", "accounts", "--partition", "0")] == \
        sorted(expected)
    producer.produce("accounts", key=b"acct-1", value=b"after-the-dag", partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0 and delivered.errors == [] and max(delivered.offsets) == 31


# -- (2) retention -------------------------------------------------------------------------------------------------

def test_retention_in_another_process_resets_only_consumers_below_the_new_log_start(broker, caplog):
    caplog.set_level(logging.INFO, logger="kafka.consumer.fetcher")     # it logs each out-of-range reset
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "clicks", {"segment.ms": str(MIN)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    delivered = Delivered()
    now = int(time.time() * 1000)
    # Three old segments (records three hours old, two minutes apart per segment), then a current one.
    for rnd in range(3):
        for i in range(10):
            producer.produce("clicks", key=b"k%d" % i, value=b"old-%d-%d" % (rnd, i), partition=0,
                             timestamp=now - 3 * HOUR + rnd * 2 * MIN, on_delivery=delivered)
        assert producer.flush(TIMEOUT) == 0
    for i in range(10):
        producer.produce("clicks", key=b"k%d" % i, value=b"new-%d" % i, partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == [] and sorted(delivered.offsets) == list(range(40))
    assert segment_bases(broker, "clicks") == [0, 10, 20, 30]

    # A consumer behind: one batch per fetch (KIP-74 sends the first batch whole), so it holds at most the
    # first two old batches when retention runs.
    behind = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                           auto_offset_reset="earliest", max_partition_fetch_bytes=1, fetch_max_wait_ms=100)
    tp = KpTopicPartition("clicks", 0)
    behind.assign([tp])
    behind.seek(tp, 0)
    seen: list[int] = []
    deadline = time.monotonic() + TIMEOUT
    while len(seen) < 10 and time.monotonic() < deadline:
        for records in behind.poll(timeout_ms=200, max_records=10 - len(seen)).values():
            seen += [r.offset for r in records]
    assert seen == list(range(10))

    # A consumer at the start of the current segment, which retention keeps: it must never be out of range.
    current = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "maintenance-current",
                        "enable.auto.commit": False, "auto.offset.reset": "error"})
    current.assign([TopicPartition("clicks", 0, 30)])
    current_seen: list[int] = []
    current_errors: list[KafkaError] = []

    def drain_current(until: float) -> None:
        while time.monotonic() < until:
            msg = current.poll(0.2)
            if msg is None:
                return
            if msg.error():
                current_errors.append(present(msg.error()))
            else:
                current_seen.append(present(msg.offset()))

    # Producers keep producing while the retention job runs in its own process.
    stop = threading.Event()
    live = Delivered()

    def keep_producing() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        n = 0
        while not stop.is_set() or n < 5:
            p.produce("clicks", key=b"live", value=b"live-%d" % n, partition=0, on_delivery=live)
            p.flush(TIMEOUT)
            n += 1
        assert p.flush(TIMEOUT) == 0

    writer = threading.Thread(target=keep_producing)
    writer.start()
    try:
        alter = ConfigResource(ResourceType.TOPIC, "clicks", incremental_configs=[
            ConfigEntry("retention.ms", str(HOUR), incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([alter]).values():
            future.result(TIMEOUT)
        [report] = engine(broker, "retention", "--topic", "clicks")
        assert report["segments_deleted"] == 3, report
        drain_current(time.monotonic() + 2)
    finally:
        stop.set()
        writer.join(TIMEOUT)
    assert not writer.is_alive()
    assert live.errors == []
    assert sorted(live.offsets) == list(range(40, 40 + len(live.offsets)))
    assert segment_bases(broker, "clicks")[0] == 30
    assert earliest(admin, "clicks") == 30
    end = latest(admin, "clicks")
    assert end == 40 + len(live.offsets)

    # The consumer behind resets to the new log start and reads on to the end.
    deadline = time.monotonic() + TIMEOUT
    while (not seen or seen[-1] < end - 1) and time.monotonic() < deadline:
        for records in behind.poll(timeout_ms=200).values():
            seen += [r.offset for r in records]
    behind.close()
    resets = [r.args[0] for r in caplog.records if "is out of range" in r.getMessage()]
    assert resets and all(offset < 30 for offset in resets), resets
    assert seen[:10] == list(range(10))
    after_reset = seen[seen.index(30):]
    assert after_reset == list(range(30, end))
    assert set(seen[10:seen.index(30)]) <= set(range(10, 20))     # at most the batch it held before
    # The consumer that never fell below the log start got no error and every record from 30 on.
    deadline = time.monotonic() + TIMEOUT
    while (not current_seen or current_seen[-1] < end - 1) and time.monotonic() < deadline:
        drain_current(deadline)
    current.close()
    assert current_errors == []
    assert current_seen == list(range(30, end))
    # A consumer that starts below the log start now is told so (auto.offset.reset=error).
    late = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "maintenance-late",
                     "enable.auto.commit": False, "auto.offset.reset": "error"})
    late.assign([TopicPartition("clicks", 0, 12)])
    try:
        deadline = time.monotonic() + TIMEOUT
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = late.poll(0.5)
        assert msg is not None and msg.error() is not None
        assert present(msg.error()).code() == KafkaError._AUTO_OFFSET_RESET
        assert "Offset out of range" in present(msg.error()).str()
    finally:
        late.close()


# -- (3) delete-records --------------------------------------------------------------------------------------------

def test_delete_records_over_the_wire_and_by_the_cli_move_the_log_start_list_offsets_reports(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "ledger", {})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    delivered = Delivered()
    for i in range(30):
        producer.produce("ledger", value=b"entry-%d" % i, partition=0, on_delivery=delivered)
        if i % 10 == 9:
            assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == [] and sorted(delivered.offsets) == list(range(30))
    assert earliest(admin, "ledger") == 0

    # DeleteRecords over the wire.
    [future] = admin.delete_records([TopicPartition("ledger", 0, 7)]).values()
    assert future.result(TIMEOUT).low_watermark == 7
    assert earliest(admin, "ledger") == 7
    assert [m.offset() for m in read_to_end(broker.bootstrap, "ledger")] == list(range(7, 30))
    # Above the high watermark: OFFSET_OUT_OF_RANGE, and the log start stays.
    [future] = admin.delete_records([TopicPartition("ledger", 0, 31)]).values()
    with pytest.raises(Exception) as info:
        future.result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert earliest(admin, "ledger") == 7

    # The CLI in another process, while the broker serves.
    [out] = engine(broker, "delete-records", "--topic", "ledger", "--partition", "0", "--offset", "18")
    assert (out["log_start_offset_before"], out["log_start_offset"]) == (7, 18)
    assert earliest(admin, "ledger") == 18
    assert latest(admin, "ledger") == 30
    assert [m.value() for m in read_to_end(broker.bootstrap, "ledger")] == [b"entry-%d" % i for i in range(18, 30)]
    stored = engine(broker, "consume", "--topic", "ledger", "--partition", "0")
    assert [r["offset"] for r in stored] == list(range(18, 30))
    # Writes go on after it.
    producer.produce("ledger", value=b"entry-30", partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == [] and max(delivered.offsets) == 30
