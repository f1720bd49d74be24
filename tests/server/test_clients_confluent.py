"""confluent-kafka (librdkafka) against a real broker process: produce in every codec and acks level, idempotent
producers, consuming from earliest, latest and a timestamp, read_committed over transactions the engine's CLI
writes, the admin APIs, Metadata with and without auto-creation, and MESSAGE_TOO_LARGE.

Consumers use ``assign()`` with a group.id but no commits (groups have their own tests, test_groups_*.py); librdkafka
only looks for a coordinator when it has offsets to fetch or commit. What the clients see is checked against
what the engine stored, read by ``python -m storage_engine`` in another process.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, Consumer, IsolationLevel,
                             KafkaError, KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, OffsetSpec, ResourceType)

from storage_engine import topic_store
from storage_engine.server.handlers import APIS
from tests.typed import present

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("0", "1", "all")
# librdkafka compresses with LZ4 only for a broker that lists FindCoordinator in ApiVersions (its
# RD_KAFKA_FEATURE_LZ4 stands for Kafka >= 0.8.2, rdkafka_feature.c); until consumer groups are served it sends
# those batches uncompressed ("Broker does not support compression type lz4: not compressing batch").
FIND_COORDINATOR = 10
STORED_CODEC = {c: c for c in CODECS} | {"lz4": "lz4" if FIND_COORDINATOR in APIS else "none"}


# -- the engine and the clients ------------------------------------------------------------------------------------

def engine(broker, *args: str, stdin: str | None = None) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def partition_dirs(broker, topic: str) -> list[Path]:
    """The partition folders of ``topic`` in every log dir, by partition."""
    found = [p for d in broker.log_dirs for p in Path(d).glob(f"{topic}-*") if p.name[len(topic) + 1:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(topic) + 1:]))


def stored_batches(broker, topic: str, partition: int = 0) -> list[dict]:
    """The record batches of ``topic-partition`` as ``dump-log`` prints them."""
    segments = sorted(p for d in broker.log_dirs for p in Path(d, f"{topic}-{partition}").glob("*.log"))
    assert segments, f"no segment of {topic}-{partition}"
    return [line for line in engine(broker, "dump-log", "--files", *map(str, segments), "--json")
            if line.get("type") == "batch"]


def stored_records(broker, topic: str, partition: int = 0, *, isolation: str = "read_uncommitted") -> list[dict]:
    return engine(broker, "consume", "--topic", topic, "--partition", str(partition), "--isolation-level", isolation)


def create_topic(admin: AdminClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})]).values():
        future.result(TIMEOUT)


def list_offset(admin: AdminClient, topic: str, spec: OffsetSpec, partition: int = 0, **kwargs) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: spec}, **kwargs)[tp].result(TIMEOUT).offset


def wait_for_high_watermark(admin: AdminClient, topic: str, expected: int) -> None:
    """acks=0 gets no answer: wait until the broker has the records, so the next producer appends after them."""
    deadline = time.monotonic() + TIMEOUT
    while list_offset(admin, topic, OffsetSpec.latest()) != expected:
        assert time.monotonic() < deadline, f"high watermark of {topic}-0 never reached {expected}"
        time.sleep(0.05)


def consumer(broker, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "client-tests", "enable.auto.commit": False,
                     "enable.partition.eof": True, **conf})


def consume_until_eof(c: Consumer, *, at_least: int = 0) -> list:
    """Messages until the end of the partition is reported after at least ``at_least`` of them (records that
    arrive in several batches may each be followed by an end); any other error fails."""
    out: list = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if present(msg.error()).code() == KafkaError._PARTITION_EOF:
                if len(out) >= at_least:
                    return out
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        out.append(msg)
    raise AssertionError(f"no end of partition within {TIMEOUT} s; got {[m.offset() for m in out]}")


class Delivered:
    def __init__(self) -> None:
        self.errors: list[KafkaError] = []
        self.offsets: list[int] = []

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.offsets.append(msg.offset())


# -- produce and consume -------------------------------------------------------------------------------------------

def test_every_codec_and_acks_level_round_trips_keys_values_headers_and_timestamps(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "codecs")
    base = int(time.time() * 1000) - 10 * 60_000
    expected: list[tuple] = []      # (key, value, headers, timestamp, codec) in offset order
    for codec in CODECS:
        for acks in ACKS:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "acks": acks,
                                 "enable.idempotence": False, "linger.ms": 20})
            delivered = Delivered()
            for i in range(3):
                key = f"{codec}/{acks}/{i}".encode()
                value = (f"value {codec} acks={acks} #{i} " * 8).encode()
                headers = [("codec", codec.encode()), ("acks", acks.encode()), ("empty", None)]
                ts = base + len(expected) * 1000
                producer.produce("codecs", key=key, value=value, headers=headers, timestamp=ts, partition=0,  # type: ignore[arg-type]  # a None header value, which librdkafka sends as a null header
                                 on_delivery=delivered)
                expected.append((key, value, headers, ts, codec))
            assert producer.flush(TIMEOUT) == 0
            assert delivered.errors == []
            if acks != "0":      # acks=0 gets no offsets back
                assert delivered.offsets == list(range(len(expected) - 3, len(expected)))
            wait_for_high_watermark(admin, "codecs", len(expected))

    c = consumer(broker)
    c.assign([TopicPartition("codecs", 0, OFFSET_BEGINNING)])
    got = consume_until_eof(c)
    c.close()
    assert [m.offset() for m in got] == list(range(len(expected)))
    for msg, (key, value, headers, ts, _) in zip(got, expected):
        assert (msg.key(), msg.value(), msg.headers(), msg.timestamp()) == \
            (key, value, headers, (TIMESTAMP_CREATE_TIME, ts))

    # Stored: the same records, and every batch in the codec its producer chose.
    records = stored_records(broker, "codecs")
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in records] == \
        [(o, k.decode(), v.decode(), ts) for o, (k, v, _, ts, _) in enumerate(expected)]
    assert records[0]["headers"] == {"codec": "none", "acks": "0", "empty": None}
    batches = stored_batches(broker, "codecs")
    for batch in batches:
        codecs = {STORED_CODEC[expected[o][4]] for o in range(batch["base_offset"], batch["last_offset"] + 1)}
        assert codecs == {batch["compression"]}, batch
        assert batch["producer_id"] == -1 and batch["is_transactional"] is False
    assert {b["compression"] for b in batches} == set(STORED_CODEC.values())


def test_idempotent_producer_batches_carry_its_producer_id_and_consecutive_sequences(broker):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "compression.type": "zstd"})
    delivered = Delivered()
    for flush in range(3):
        for i in range(4):
            producer.produce("idempotent", key=b"k%d" % i, value=b"flush %d record %d" % (flush, i), partition=0,
                             on_delivery=delivered)
        assert producer.flush(TIMEOUT) == 0
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False})
    plain.produce("idempotent", value=b"not idempotent", partition=0, on_delivery=delivered)
    assert plain.flush(TIMEOUT) == 0
    assert delivered.errors == [] and delivered.offsets == list(range(13))

    batches = stored_batches(broker, "idempotent")
    idem, last = batches[:-1], batches[-1]
    assert sum(b["count"] for b in idem) == 12
    assert len({b["producer_id"] for b in idem}) == 1 and idem[0]["producer_id"] >= 0
    assert {b["producer_epoch"] for b in idem} == {0}
    sequence = 0
    for b in idem:
        assert (b["base_sequence"], b["last_sequence"]) == (sequence, sequence + b["count"] - 1)
        assert b["base_offset"] == sequence          # one producer from offset 0: sequence = offset
        sequence += b["count"]
    assert (last["producer_id"], last["base_sequence"], last["base_offset"]) == (-1, -1, 12)

    c = consumer(broker)
    c.assign([TopicPartition("idempotent", 0, OFFSET_BEGINNING)])
    assert [m.value() for m in consume_until_eof(c)][-2:] == [b"flush 2 record 3", b"not idempotent"]
    c.close()


def test_consume_from_latest_sees_only_new_records_and_from_a_timestamp_its_first_offset(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    delivered = Delivered()
    base = int(time.time() * 1000) - 60_000
    for i in range(5):
        producer.produce("timeline", value=b"old-%d" % i, timestamp=base + i * 1000, partition=0,
                         on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0 and delivered.errors == []

    # ListOffsets: earliest, latest, the first offset at or after a time, none after the last one.
    assert list_offset(admin, "timeline", OffsetSpec.earliest()) == 0
    assert list_offset(admin, "timeline", OffsetSpec.latest()) == 5
    assert list_offset(admin, "timeline", OffsetSpec.for_timestamp(base + 2500)) == 3
    assert list_offset(admin, "timeline", OffsetSpec.for_timestamp(base)) == 0
    assert list_offset(admin, "timeline", OffsetSpec.for_timestamp(base + 3_600_000)) == -1

    # From a timestamp.
    c = consumer(broker)
    [found] = c.offsets_for_times([TopicPartition("timeline", 0, base + 2000)], timeout=TIMEOUT)
    assert found.offset == 2
    c.assign([found])
    assert [(m.offset(), m.value()) for m in consume_until_eof(c)] == [(2, b"old-2"), (3, b"old-3"), (4, b"old-4")]
    c.close()

    # From the latest offset: the end is reported first (the position is resolved), then only what comes after.
    c = consumer(broker)
    c.assign([TopicPartition("timeline", 0, OFFSET_END)])
    assert consume_until_eof(c) == []
    for i in range(2):
        producer.produce("timeline", value=b"new-%d" % i, partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0 and delivered.errors == []
    assert [(m.offset(), m.value()) for m in consume_until_eof(c, at_least=2)] == [(5, b"new-0"), (6, b"new-1")]
    c.close()


def test_read_committed_never_sees_aborted_records_and_waits_for_an_open_transaction(broker):
    """Transactions written by the engine's CLI (as a coordinator would) next to the serving broker."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    delivered = Delivered()

    def plain(value: bytes) -> None:
        producer.produce("payments", value=value, partition=0, on_delivery=delivered)
        assert producer.flush(TIMEOUT) == 0 and delivered.errors == []

    def txn_records(pid: int, *values: str) -> None:
        lines = "".join(json.dumps({"key": "txn", "value": v}) + "\n" for v in values)
        engine(broker, "produce", "--topic", "payments", "--partition", "0", "--producer-id", str(pid),
               "--epoch", "0", "--transactional", stdin=lines)

    def end_txn(pid: int, outcome: str) -> None:
        engine(broker, "end-txn", "--topic", "payments", "--partition", "0", "--producer-id", str(pid),
               "--epoch", "0", f"--{outcome}")

    plain(b"plain-0")                                  # 0
    plain(b"plain-1")                                  # 1
    txn_records(4000, "aborted-0", "aborted-1")        # 2, 3
    end_txn(4000, "abort")                             # 4: ABORT marker
    txn_records(4001, "committed-0")                   # 5
    end_txn(4001, "commit")                            # 6: COMMIT marker
    plain(b"plain-2")                                  # 7
    txn_records(4002, "open-0")                        # 8: a transaction still open
    plain(b"plain-3")                                  # 9
    assert delivered.offsets == [0, 1, 7, 9]

    committed = consumer(broker, **{"isolation.level": "read_committed"})
    committed.assign([TopicPartition("payments", 0, OFFSET_BEGINNING)])
    assert [(m.offset(), m.value()) for m in consume_until_eof(committed)] == \
        [(0, b"plain-0"), (1, b"plain-1"), (5, b"committed-0"), (7, b"plain-2")]
    uncommitted = consumer(broker, **{"isolation.level": "read_uncommitted"})
    uncommitted.assign([TopicPartition("payments", 0, OFFSET_BEGINNING)])
    assert [(m.offset(), m.value()) for m in consume_until_eof(uncommitted)] == \
        [(0, b"plain-0"), (1, b"plain-1"), (2, b"aborted-0"), (3, b"aborted-1"), (5, b"committed-0"),
         (7, b"plain-2"), (8, b"open-0"), (9, b"plain-3")]
    uncommitted.close()
    # The last stable offset stops at the open transaction; the high watermark does not.
    assert list_offset(admin, "payments", OffsetSpec.latest(), isolation_level=IsolationLevel.READ_COMMITTED) == 8
    assert list_offset(admin, "payments", OffsetSpec.latest()) == 10

    # Committing it lets the waiting read_committed consumer go on.
    end_txn(4002, "commit")                            # 10: COMMIT marker
    assert [(m.offset(), m.value()) for m in consume_until_eof(committed, at_least=2)] == \
        [(8, b"open-0"), (9, b"plain-3")]
    committed.close()
    assert [r["offset"] for r in stored_records(broker, "payments", isolation="read_committed")] == [0, 1, 5, 7, 8, 9]
    batches = stored_batches(broker, "payments")
    assert [(b["base_offset"], b["is_control"], b["is_transactional"]) for b in batches if b["is_control"]] == \
        [(4, True, True), (6, True, True), (10, True, True)]


# -- admin ---------------------------------------------------------------------------------------------------------

def _configs(admin: AdminClient, resource: ConfigResource) -> dict:
    [future] = admin.describe_configs([resource]).values()
    return future.result(TIMEOUT)


def test_admin_creates_describes_alters_extends_and_deletes_topics(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"retention.ms": "3600000", "max.message.bytes": "2048"}

    # validate_only creates nothing.
    for future in admin.create_topics([NewTopic("orders", 2, 1, config=configs)], validate_only=True).values():
        future.result(TIMEOUT)
    assert partition_dirs(broker, "orders") == []
    create_topic(admin, "orders", 2, configs)
    assert [p.name for p in partition_dirs(broker, "orders")] == ["orders-0", "orders-1"]

    for topic, error in ((NewTopic("orders", 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
                         (NewTopic("replicated", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
                         (NewTopic("badconf", 1, 1, config={"retention.ms": "soon"}), KafkaError.INVALID_CONFIG),
                         (NewTopic("badkey", 1, 1, config={"no.such.key": "1"}), KafkaError.INVALID_CONFIG)):
        [future] = admin.create_topics([topic]).values()
        with pytest.raises(KafkaException) as info:
            future.result(TIMEOUT)
        assert info.value.args[0].code() == error, info.value
    assert partition_dirs(broker, "replicated") == partition_dirs(broker, "badconf") == []

    config_topic = ConfigResource(ResourceType.TOPIC, "orders")
    described = _configs(admin, config_topic)
    assert described["retention.ms"].value == "3600000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "delete" and described["cleanup.policy"].is_default
    assert described["max.message.bytes"].value == "2048"

    alter = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([alter]).values():
        future.result(TIMEOUT)
    described = _configs(admin, config_topic)
    assert described["retention.ms"].value == "7200000"
    assert described["cleanup.policy"].value == "compact"
    assert described["max.message.bytes"].is_default
    # Stored where the maintenance jobs read topic configs.
    assert topic_store.read(broker.log_dirs[0])["orders"] == {"retention.ms": "7200000", "cleanup.policy": "compact"}

    broker_configs = _configs(admin, ConfigResource(ResourceType.BROKER, "1"))
    assert broker_configs["auto.create.topics.enable"].value == "true"
    assert broker_configs["auto.create.topics.enable"].is_read_only

    for future in admin.create_partitions([NewPartitions("orders", 4)]).values():
        future.result(TIMEOUT)
    assert len(admin.list_topics("orders", timeout=TIMEOUT).topics["orders"].partitions) == 4
    assert [p.name for p in partition_dirs(broker, "orders")] == [f"orders-{i}" for i in range(4)]
    [future] = admin.create_partitions([NewPartitions("orders", 2)]).values()
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    for future in admin.delete_topics(["orders"]).values():
        future.result(TIMEOUT)
    assert "orders" not in admin.list_topics(timeout=TIMEOUT).topics
    assert partition_dirs(broker, "orders") == []
    assert "orders" not in topic_store.read(broker.log_dirs[0])
    [future] = admin.delete_topics(["orders"]).values()
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_metadata_auto_creates_topics_when_enabled_and_answers_unknown_topic_when_not(broker_factory):
    auto = broker_factory(broker={"num.partitions": 3})
    admin = AdminClient({"bootstrap.servers": auto.bootstrap})
    md = admin.list_topics("first-mention", timeout=TIMEOUT)
    assert md.topics["first-mention"].error is None
    assert sorted(md.topics["first-mention"].partitions) == [0, 1, 2]
    assert [b.id for b in md.brokers.values()] == [1] and md.controller_id == 1
    assert len(partition_dirs(auto, "first-mention")) == 3
    producer = Producer({"bootstrap.servers": auto.bootstrap})
    delivered = Delivered()
    producer.produce("first-produce", value=b"hello", partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.errors == [] and delivered.offsets == [0]
    assert [r["value"] for r in stored_records(auto, "first-produce")] == ["hello"]

    manual = broker_factory(broker={"auto.create.topics.enable": False})
    admin = AdminClient({"bootstrap.servers": manual.bootstrap})
    md = admin.list_topics("never-created", timeout=TIMEOUT)
    assert present(md.topics["never-created"].error).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    producer = Producer({"bootstrap.servers": manual.bootstrap, "message.timeout.ms": 3000})
    delivered = Delivered()
    producer.produce("never-created", value=b"lost", on_delivery=delivered)
    producer.flush(TIMEOUT)
    assert len(delivered.errors) == 1 and delivered.offsets == []
    assert partition_dirs(manual, "never-created") == []
    assert "never-created" not in admin.list_topics(timeout=TIMEOUT).topics


def test_record_above_max_message_bytes_is_refused_and_nothing_is_stored(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "small", configs={"max.message.bytes": "1024"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "enable.idempotence": False})
    delivered = Delivered()
    producer.produce("small", key=b"big", value=b"x" * 4000, partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert [e.code() for e in delivered.errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert list_offset(admin, "small", OffsetSpec.latest()) == 0
    producer.produce("small", key=b"fits", value=b"y" * 100, partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert delivered.offsets == [0]
    assert [(r["offset"], r["key"]) for r in stored_records(broker, "small")] == [(0, "fits")]
