"""aiokafka 0.14 and kafka-python 3.0 against a real broker process: produce in every codec (both compress all five)
and acks level, idempotent producers, consuming from earliest, latest and a timestamp, read_committed over
transactions the engine's CLI writes while the broker is stopped, the admin APIs kafka-python has (topics,
configs, partitions, DescribeLogDirs, AlterReplicaLogDirs, DeleteRecords, ListOffsets) and MESSAGE_TOO_LARGE.

Consumers have ``group_id=None`` and ``assign()`` (groups have their own tests, test_groups_*.py). What the clients see is
checked against what the engine stored, read by ``python -m storage_engine`` in another process.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition, TopicPartitionReplica
from kafka.admin import (AlterConfigOp, ConfigResource, ConfigResourceType, NewPartitions, NewTopic, OffsetSpec)
from kafka.errors import (InvalidPartitionsError, InvalidReplicationFactorError, LogDirNotFoundError,
                          MessageSizeTooLargeError, NoError, OffsetOutOfRangeError, TopicAlreadyExistsError)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
CODECS = (None, "gzip", "snappy", "lz4", "zstd")
ACKS = (0, 1, "all")


# -- the engine and the clients ------------------------------------------------------------------------------------

def engine(broker, *args: str, stdin: str | None = None) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def stored_batches(broker, topic: str, partition: int = 0) -> list[dict]:
    """The record batches of ``topic-partition`` as ``dump-log`` prints them."""
    segments = sorted(p for d in broker.log_dirs for p in Path(d, f"{topic}-{partition}").glob("*.log"))
    assert segments, f"no segment of {topic}-{partition}"
    return [b for b in engine(broker, "dump-log", "--files", *map(str, segments), "--json") if b.get("type") == "batch"]


def stored_records(broker, topic: str, partition: int = 0) -> list[dict]:
    return engine(broker, "consume", "--topic", topic, "--partition", str(partition))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 3 * TIMEOUT))


async def aio_read(bootstrap: str, topic: str, *, isolation: str = "read_uncommitted",
                   start: int | None = None) -> list:
    """Records of ``topic-0`` from ``start`` (default: the beginning) up to its end for ``isolation``."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", isolation_level=isolation)
    await c.start()
    try:
        tp = aiokafka.TopicPartition(topic, 0)
        c.assign([tp])
        if start is None:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, start)
        end = (await c.end_offsets([tp]))[tp]     # the last stable offset under read_committed
        out = []
        deadline = time.monotonic() + TIMEOUT
        while await c.position(tp) < end:
            assert time.monotonic() < deadline, f"stuck at {await c.position(tp)} of {end}"
            for records in (await c.getmany(tp, timeout_ms=200)).values():
                out += records
        return out
    finally:
        await c.stop()


def kp_read(bootstrap: str, topic: str, *, isolation: str = "read_uncommitted") -> list:
    """kafka-python: every record of ``topic-0`` from the beginning to its end for ``isolation``."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level=isolation)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out = []
        deadline = time.monotonic() + TIMEOUT
        end = None
        while end is None or c.position(tp) < end:
            assert time.monotonic() < deadline, f"stuck at {c.position(tp)} of {end}"
            for records in c.poll(timeout_ms=200).values():
                out += records
            end = c.highwater(tp) if isolation == "read_uncommitted" else c.end_offsets([tp])[tp]
        return out
    finally:
        c.close()


# -- aiokafka ------------------------------------------------------------------------------------------------------

def test_aiokafka_every_codec_and_acks_level_idempotence_and_reading_from_earliest_latest_and_time(broker):
    base = int(time.time() * 1000) - 10 * 60_000
    expected: list[tuple] = []      # (key, value, headers, timestamp, codec) in offset order

    async def scenario():
        reader = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
        await reader.start()
        tp = aiokafka.TopicPartition("aio", 0)
        try:
            for codec in CODECS:
                for acks in ACKS:
                    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                                                acks=acks, linger_ms=20)
                    await producer.start()
                    futures = []
                    for i in range(3):
                        key = f"{codec}/{acks}/{i}".encode()
                        value = f"aiokafka {codec} acks={acks} record {i} ".encode() * 8
                        headers = [("codec", str(codec).encode()), ("i", b"%d" % i)]
                        ts = base + len(expected) * 1000
                        futures.append(await producer.send("aio", value, key=key, partition=0, timestamp_ms=ts,
                                                           headers=headers))
                        expected.append((key, value, headers, ts, codec or "none"))
                    metadata = await asyncio.gather(*futures)
                    await producer.stop()
                    if acks != 0:
                        assert [m.offset for m in metadata] == list(range(len(expected) - 3, len(expected)))
                    deadline = time.monotonic() + TIMEOUT     # acks=0: no answer; wait for the records to land
                    while (await reader.end_offsets([tp]))[tp] != len(expected):
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.05)
            idempotent = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                                          compression_type="lz4")
            await idempotent.start()
            for i in range(2):
                md = await idempotent.send_and_wait("aio", b"idempotent-%d" % i, key=b"idem", partition=0,
                                                    timestamp_ms=base + len(expected) * 1000)
                assert md.offset == len(expected)
                expected.append((b"idem", b"idempotent-%d" % i, [], base + len(expected) * 1000, "lz4"))
            await idempotent.stop()

            got = await aio_read(broker.bootstrap, "aio")
            assert [r.offset for r in got] == list(range(len(expected)))
            for r, (key, value, headers, ts, _) in zip(got, expected):
                assert (r.key, r.value, list(r.headers), r.timestamp, r.timestamp_type) == (key, value, headers, ts, 0)

            # ListOffsets through the consumer: earliest, latest, by time.
            assert (await reader.beginning_offsets([tp]))[tp] == 0
            assert (await reader.end_offsets([tp]))[tp] == len(expected)
            found = (await reader.offsets_for_times({tp: base + 4500}))[tp]
            assert (found.offset, found.timestamp) == (5, base + 5000)
            assert (await reader.offsets_for_times({tp: base + 3_600_000}))[tp] is None
            # From a timestamp.
            assert [r.offset for r in await aio_read(broker.bootstrap, "aio", start=found.offset)] == \
                list(range(5, len(expected)))
            # From the latest offset: only records produced after the position was resolved.
            latest = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
            await latest.start()
            try:
                latest.assign([tp])
                await latest.seek_to_end(tp)
                assert await latest.position(tp) == len(expected)
                producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
                await producer.start()
                await producer.send_and_wait("aio", b"new", partition=0)
                await producer.stop()
                new: list = []
                deadline = time.monotonic() + TIMEOUT
                while not new and time.monotonic() < deadline:
                    for records in (await latest.getmany(tp, timeout_ms=200)).values():
                        new += records
                assert [(r.offset, r.value) for r in new] == [(len(expected), b"new")]
            finally:
                await latest.stop()
        finally:
            await reader.stop()

    run(scenario())
    # Stored: the same records; every batch in its producer's codec (aiokafka compresses all five); the
    # idempotent producer's batches carry its producer id and consecutive sequences.
    stored = stored_records(broker, "aio")[:len(expected)]
    assert [(r["offset"], r["key"], r["timestamp"]) for r in stored] == \
        [(o, k.decode(), ts) for o, (k, _, _, ts, _) in enumerate(expected)]
    batches = stored_batches(broker, "aio")
    for b in batches:
        if b["base_offset"] < len(expected):
            assert {expected[o][4] for o in range(b["base_offset"], b["last_offset"] + 1)} == {b["compression"]}, b
    idem = [b for b in batches if b["producer_id"] >= 0]
    assert [(b["base_offset"], b["base_sequence"], b["count"]) for b in idem] == \
        [(len(expected) - 2, 0, 1), (len(expected) - 1, 1, 1)]
    assert len({b["producer_id"] for b in idem}) == 1


@pytest.mark.kills
def test_read_committed_skips_a_transaction_aborted_while_the_broker_was_stopped(broker):
    """The CLI writes the transactions as a coordinator would, with the broker stopped (SIGTERM, exit 0); after
    the restart read_committed consumers of both libraries never see the aborted records, read_uncommitted ones do."""
    async def produce(*values: bytes) -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            return [(await producer.send_and_wait("ledger", v, partition=0)).offset for v in values]
        finally:
            await producer.stop()

    assert run(produce(b"plain-0", b"plain-1")) == [0, 1]
    assert broker.stop() == 0

    def txn(pid: int, outcome: str, *values: str) -> None:
        lines = "".join(json.dumps({"key": f"pid-{pid}", "value": v}) + "\n" for v in values)
        [written] = engine(broker, "produce", "--topic", "ledger", "--partition", "0", "--producer-id", str(pid),
                           "--epoch", "0", "--transactional", stdin=lines)
        assert written["count"] == len(values)
        engine(broker, "end-txn", "--topic", "ledger", "--partition", "0", "--producer-id", str(pid),
               "--epoch", "0", f"--{outcome}")

    txn(5000, "abort", "aborted-0", "aborted-1")       # 2, 3 and the ABORT marker at 4
    txn(5001, "commit", "committed-0")                 # 5 and the COMMIT marker at 6
    broker.restart()
    assert run(produce(b"plain-2")) == [7]

    committed = [(0, b"plain-0"), (1, b"plain-1"), (5, b"committed-0"), (7, b"plain-2")]
    everything = committed[:2] + [(2, b"aborted-0"), (3, b"aborted-1")] + committed[2:]
    assert [(r.offset, r.value) for r in run(aio_read(broker.bootstrap, "ledger", isolation="read_committed"))] \
        == committed
    assert [(r.offset, r.value) for r in run(aio_read(broker.bootstrap, "ledger"))] == everything
    assert [(r.offset, r.value) for r in kp_read(broker.bootstrap, "ledger", isolation="read_committed")] == committed
    assert [(r.offset, r.value) for r in kp_read(broker.bootstrap, "ledger")] == everything


# -- kafka-python ---------------------------------------------------------------------------------------------------

def test_kafka_python_every_codec_and_acks_level_with_idempotence_and_offset_lookups(broker):
    base = int(time.time() * 1000) - 10 * 60_000
    expected: list[tuple] = []      # (key, value, headers, timestamp, codec, idempotent)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition("kp", 0)
    try:
        for codec in CODECS:
            for acks in ACKS:
                idempotent = acks == "all"          # idempotence needs acks=all
                producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, acks=acks,
                                         enable_idempotence=idempotent, linger_ms=20)
                futures = []
                for i in range(3):
                    key = f"{codec}/{acks}/{i}".encode()
                    value = f"kafka-python {codec} acks={acks} record {i} ".encode() * 8
                    headers = [("codec", str(codec).encode())]
                    ts = base + len(expected) * 1000
                    futures.append(producer.send("kp", value=value, key=key, partition=0, timestamp_ms=ts,
                                                 headers=headers))
                    expected.append((key, value, headers, ts, codec or "none", idempotent))
                producer.flush(TIMEOUT)
                offsets = [f.get(TIMEOUT).offset for f in futures]
                producer.close(TIMEOUT)
                if acks != 0:
                    assert offsets == list(range(len(expected) - 3, len(expected)))
                deadline = time.monotonic() + TIMEOUT       # acks=0: wait for the records to land
                while admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset != len(expected):
                    assert time.monotonic() < deadline
                    time.sleep(0.05)

        got = kp_read(broker.bootstrap, "kp")
        assert [r.offset for r in got] == list(range(len(expected)))
        for r, (key, value, headers, ts, _, _) in zip(got, expected):
            assert (r.key, r.value, list(r.headers), r.timestamp, r.timestamp_type) == (key, value, headers, ts, 0)

        assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
        by_time = admin.list_partition_offsets({tp: base + 7000})[tp]
        assert (by_time.offset, by_time.timestamp) == (7, base + 7000)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
        assert consumer.offsets_for_times({tp: base + 6500})[tp].offset == 7
        assert consumer.beginning_offsets([tp])[tp] == 0 and consumer.end_offsets([tp])[tp] == len(expected)
        consumer.close()
    finally:
        admin.close()

    batches = stored_batches(broker, "kp")
    pids = set()
    for b in batches:
        [(codec, idempotent)] = {expected[o][4:] for o in range(b["base_offset"], b["last_offset"] + 1)}
        assert b["compression"] == codec, b
        assert (b["producer_id"] >= 0) == idempotent, b
        if idempotent:
            assert b["base_sequence"] == 0
            pids.add(b["producer_id"])
    assert len(pids) == len(CODECS)         # a producer id per idempotent producer
    assert {b["compression"] for b in batches} == {"none", "gzip", "snappy", "lz4", "zstd"}


def test_kafka_python_admin_topics_configs_partitions_log_dirs_and_delete_records(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("inventory", 2, 1, topic_configs={"retention.bytes": "1048576",
                                                                        "compression.type": "gzip"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("inventory", 1, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("tripled", 1, 3)])

        resource = ConfigResource(ConfigResourceType.TOPIC, "inventory")
        [described] = admin.describe_configs([resource]).values()
        configs = described["inventory"]
        assert configs["retention.bytes"]["value"] == "1048576"
        assert configs["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["compression.type"]["value"] == "gzip"
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "inventory", configs={
            "retention.bytes": (AlterConfigOp.SET, "2097152"), "compression.type": (AlterConfigOp.DELETE, None),
            "segment.ms": (AlterConfigOp.SET, "600000")})])
        configs = admin.describe_configs([resource])["topic"]["inventory"]
        assert configs["retention.bytes"]["value"] == "2097152"
        assert configs["segment.ms"]["value"] == "600000"
        assert "compression.type" not in configs          # only modified configs are listed by default

        admin.create_partitions({"inventory": NewPartitions(3)})
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"inventory": NewPartitions(2)})
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        for p in range(3):
            for i in range(10):
                producer.send("inventory", value=b"item-%d-%d" % (p, i), partition=p)
        producer.flush(TIMEOUT)
        producer.close(TIMEOUT)

        # DescribeLogDirs: both log dirs, each partition in one of them with its size on disk.
        def placement() -> dict[int, tuple[str, int]]:
            [node] = admin.describe_log_dirs()
            out = {}
            for d in node["log_dirs"]:
                assert d["error_code"] == 0 and d["total_bytes"] > 0
                for t in d["topics"]:
                    if t["name"] == "inventory":
                        for part in t["partitions"]:
                            out[part["partition_index"]] = (d["log_dir"], part["partition_size"])
            return out

        where = placement()
        assert sorted(where) == [0, 1, 2]
        assert {d for d, _ in where.values()} <= set(broker.log_dirs)
        for p, (d, size) in where.items():
            assert size == sum(f.stat().st_size for f in Path(d, f"inventory-{p}").glob("*.log")) > 0

        # AlterReplicaLogDirs: partition 0 moves to the other log dir while the broker serves it.
        source = where[0][0]
        target = next(d for d in broker.log_dirs if d != source)
        result = admin.alter_replica_log_dirs({TopicPartitionReplica("inventory", 0, 1): target})
        assert list(result.values()) == [NoError]
        deadline = time.monotonic() + TIMEOUT
        while placement()[0][0] != target or Path(source, "inventory-0").exists():
            assert time.monotonic() < deadline, "partition 0 never moved"
            time.sleep(0.1)
        assert Path(target, "inventory-0").is_dir()
        result = admin.alter_replica_log_dirs({TopicPartitionReplica("inventory", 1, 1): "/no/such/log/dir"})
        assert list(result.values()) == [LogDirNotFoundError]
        assert [r["value"] for r in stored_records(broker, "inventory", 0)] == [f"item-0-{i}" for i in range(10)]

        # DeleteRecords, and the log start ListOffsets reports.
        tp = TopicPartition("inventory", 0)
        admin.delete_records({tp: 4})
        assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 4
        assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 10
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({tp: 11})
        assert [r.offset for r in kp_read(broker.bootstrap, "inventory")] == list(range(4, 10))

        admin.delete_topics(["inventory"])
        assert "inventory" not in admin.list_topics()
        assert not [p for d in broker.log_dirs for p in Path(d).glob("inventory-[0-9]")]
    finally:
        admin.close()


def test_kafka_python_record_above_max_message_bytes_is_refused_and_nothing_is_stored(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("capped", 1, 1, topic_configs={"max.message.bytes": "2000"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, retries=0, enable_idempotence=False)
    try:
        with pytest.raises(MessageSizeTooLargeError, match="max.message.bytes"):
            producer.send("capped", key=b"big", value=b"z" * 5000, partition=0).get(TIMEOUT)
        assert producer.send("capped", key=b"small", value=b"z" * 100, partition=0).get(TIMEOUT).offset == 0
    finally:
        producer.close(TIMEOUT)
    assert [(r["offset"], r["key"]) for r in stored_records(broker, "capped")] == [(0, "small")]
    assert [b["count"] for b in stored_batches(broker, "capped")] == [1]
