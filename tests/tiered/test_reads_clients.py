"""Real clients read a topic whose first segments exist only in the object store (a real SeaweedFS): a broker
process serves it while another process (this test's, as an Airflow task runs the tiering job) copies its sealed
segments and deletes their local copies. librdkafka (confluent-kafka) and Kafka's own Java client consume it from
offset 0 and get every record in order; the Java Admin client's earliestLocal() and latestTiered() (ListOffsets
v8/v9) and the raw wire get Kafka 3.9's answers (-4: the local log start; -5: the highest tiered offset; both
refused as UNSUPPORTED_VERSION by versions that do not know them); the CLI's consume reads the same records; and
a remote object deleted behind the store's back is an error with its offsets for the client, never data."""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from storage_engine.config_file import load_config
from tests.server import wire
from tests.server.broker_proc import BrokerProcess
from tests.server.java import build
from tests.typed import present
from tests.tiered.conftest import s3_client
from tests.tiered.tiering import tier_partition

pytestmark = [pytest.mark.tiered, pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "tiered"
RECORDS = 3000
TIMEOUT = 90.0


def remote_keys(weed, bucket) -> dict:
    return {"remote.log.storage.system.enable": True, "rsm.config.storage.s3.endpoint.url": weed.endpoint_url,
            "rsm.config.storage.s3.bucket.name": bucket, "rsm.config.storage.aws.access.key.id": weed.access_key,
            "rsm.config.storage.aws.secret.access.key": weed.secret_key}


def value(i: int) -> bytes:
    return b"record-%05d-" % i + b"p" * (i % 50)


HALF = RECORDS // 2
T0 = 1_700_000_000_000
ABORTED = [b"aborted-%d" % j for j in range(20)]
COMMITTED = [b"committed-%d" % j for j in range(20)]
# What a consumer reads, in order: the plain records around an aborted and a committed transaction (both within the
# part that ends up remote only).
READ_COMMITTED = [value(i) for i in range(HALF)] + COMMITTED + [value(i) for i in range(HALF, RECORDS)]
READ_UNCOMMITTED = [value(i) for i in range(HALF)] + ABORTED + COMMITTED + [value(i) for i in range(HALF, RECORDS)]
LOG_END = len(READ_UNCOMMITTED) + 2            # and the two transaction markers


def produce(bootstrap: str) -> None:
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 50})
    for i in range(HALF):
        plain.produce(TOPIC, value(i), key=b"k%d" % (i % 10), timestamp=T0 + i)
    assert plain.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tiered-writer"})
    txn.init_transactions(30)
    for values, commit in ((ABORTED, False), (COMMITTED, True)):
        txn.begin_transaction()
        for v in values:
            txn.produce(TOPIC, v, timestamp=T0 + HALF)
        assert txn.flush(30) == 0
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)
    for i in range(HALF, RECORDS):
        plain.produce(TOPIC, value(i), key=b"k%d" % (i % 10), timestamp=T0 + i)
    assert plain.flush(30) == 0


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory, weed):
    """A broker serving ``tiered`` (:data:`READ_UNCOMMITTED` in ~25 segments), whose sealed segments were then copied
    to the object store and deleted locally by another process. Shared by the module's tests (the last one damages
    the bucket)."""
    bucket = f"clients-{uuid.uuid4().hex[:12]}"
    s3_client(weed).create_bucket(Bucket=bucket)
    broker = BrokerProcess(tmp_path_factory.mktemp("broker"), broker=remote_keys(weed, bucket), log_dirs=1, topics={
        TOPIC: {"segment.bytes": 16384, "remote.storage.enable": True, "local.retention.ms": 1, "retention.ms": -1}})
    broker.start()
    try:
        produce(broker.bootstrap)
        assert tier_partition(load_config(broker.config_path), TOPIC, 0) > HALF + 42
        yield broker, bucket
    finally:
        broker.close()


def offsets(broker, version: int = 9) -> dict[int, tuple[int, int, int]]:
    """{special timestamp: (error code, offset, leader epoch)} of ``tiered``-0 over the raw wire."""
    conn = wire.Conn(broker.bootstrap)
    try:
        out = {}
        for ts in (-1, -2, -4, -5):
            part = conn.request(wire.list_offsets_request(version, TOPIC, [0], ts)).topics[0].partitions[0]
            out[ts] = (part.error_code, part.offset, part.leader_epoch)
        return out
    finally:
        conn.close()


def test_list_offsets_answers_as_kafka_3_9(tiered_broker):
    broker, _ = tiered_broker
    got = offsets(broker)
    latest, earliest, local, tiered = (got[t][1] for t in (-1, -2, -4, -5))
    assert all(got[t][0] == 0 for t in got), got
    assert (earliest, latest) == (0, LOG_END)
    assert 0 < local <= tiered + 1 <= latest, got          # the first segments are remote only
    assert got[-5][2] == 0 and got[-4][2] == 0
    conn = wire.Conn(broker.bootstrap)                    # a timestamp is found in the remote part
    try:
        for ts, offset in ((T0, 0), (T0 + 5, 5), (T0 + HALF - 1, HALF - 1)):
            part = conn.request(wire.list_offsets_request(9, TOPIC, [0], ts)).topics[0].partitions[0]
            assert (part.error_code, part.offset) == (0, offset), ts
    finally:
        conn.close()
    v7 = offsets(broker, version=7)               # -4 needs v8, -5 needs v9: per partition, not fatal
    assert v7[-4] == (35, -1, -1) and v7[-5] == (35, -1, -1) and v7[-2][1] == 0
    assert offsets(broker, version=8)[-5] == (35, -1, -1)


def librdkafka_read(bootstrap: str, isolation: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of ``tiered``-0 from offset 0, small fetches (many remote reads)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "remote-readers", "enable.auto.commit": False,
                         "enable.partition.eof": True, "check.crcs": True, "isolation.level": isolation,
                         "fetch.max.bytes": 65536, "message.max.bytes": 65536, "max.partition.fetch.bytes": 32768})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                if got and got[-1][0] >= LOG_END - 2:
                    return got
                continue
            got.append((present(msg.offset()), present(msg.value())))
    finally:
        consumer.close()
    raise AssertionError(f"the end of the partition was not reached within {TIMEOUT} s: {len(got)} records")


@pytest.mark.parametrize("isolation, expected", [("read_committed", READ_COMMITTED),
                                                 ("read_uncommitted", READ_UNCOMMITTED)])
def test_librdkafka_consumes_from_offset_0(tiered_broker, isolation, expected):
    broker, _ = tiered_broker
    assert offsets(broker)[-4][1] > HALF + 42            # the transactions are in the remote part
    got = librdkafka_read(broker.bootstrap, isolation)
    assert [v for _, v in got] == expected
    assert [o for o, _ in got] == sorted({o for o, _ in got}) and got[0][0] == 0


def test_the_java_client_consumes_from_offset_0_and_lists_tiered_offsets(tiered_broker):
    broker, _ = tiered_broker
    try:
        cmd = build.command("RemoteReader", broker.bootstrap, TOPIC, "0")
    except build.JavaUnavailable as exc:        # `make clients` installs the JDK: missing is a failure
        pytest.fail(str(exc))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    listed = json.loads(lines[0])
    wire_offsets = offsets(broker)
    assert listed == {"earliest": 0, "earliest_local": wire_offsets[-4][1], "latest_tiered": wire_offsets[-5][1],
                      "latest": LOG_END}
    assert listed["earliest_local"] > 0
    assert json.loads(lines[-1]) == {"done": len(READ_UNCOMMITTED)}
    records = [line.split("\t", 1) for line in lines[1:-1]]
    assert [v.encode() for _, v in records] == READ_UNCOMMITTED         # its default: read_uncommitted
    assert [int(o) for o, _ in records][:HALF] == list(range(HALF))


def test_the_cli_consumes_the_remote_part(tiered_broker):
    broker, _ = tiered_broker
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path),
                           "consume", "--topic", TOPIC, "--partition", "0", "--from-offset", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["value"].encode() for r in rows] == READ_UNCOMMITTED and rows[0]["offset"] == 0


def fetch(broker, offset: int, isolation: int = 0):
    """One Fetch v12 of ``tiered``-0 at ``offset`` over the raw wire: (error code, records bytes)."""
    conn = wire.Conn(broker.bootstrap)
    try:
        body = wire.build_request(1, 12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1,
                                  max_bytes=1 << 20, isolation_level=isolation, session_id=0, session_epoch=-1,
                                  rack_id="", forgotten_topics_data=[],
                                  topics=[{"topic": TOPIC, "partitions": [
                                      {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                       "last_fetched_epoch": -1, "log_start_offset": -1,
                                       "partition_max_bytes": 1 << 20}]}])
        part = conn.request(body).responses[0].partitions[0]
        return int(part.error_code), part.records or b""
    finally:
        conn.close()


def test_a_remote_object_deleted_or_damaged_behind_the_store_is_an_error_never_data(tiered_broker, weed):
    broker, bucket = tiered_broker
    s3 = s3_client(weed)
    logs = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"] if o["Key"].endswith(".log"))
    assert len(logs) >= 3
    code, data = fetch(broker, 0)
    assert code == 0 and data
    cache = Path(broker.log_dirs[0], "remote-log-index-cache")     # the clients above read everything: the
    for entry in cache.glob("*.entry"):                              # broker must go to the store again (as
        entry.unlink()                                               # after an eviction by another process)
    s3.delete_object(Bucket=bucket, Key=logs[1])
    raw = bytearray(s3.get_object(Bucket=bucket, Key=logs[2])["Body"].read())
    raw[len(raw) // 2] ^= 0x04
    s3.put_object(Bucket=bucket, Key=logs[2], Body=bytes(raw))
    second = int(logs[1].rsplit("/", 1)[1][:20])
    third = int(logs[2].rsplit("/", 1)[1][:20])
    assert fetch(broker, second) == (56, b"")     # KAFKA_STORAGE_ERROR, as a local loss
    code, data = fetch(broker, third)
    while code == 0:                                     # the batches before the damaged one are whole
        assert data
        last = wire_last_offset(data)
        code, data = fetch(broker, last + 1)
    assert (code, data) == (2, b"")                      # CORRUPT_MESSAGE, as local damage
    log = broker.log_path.read_text()
    assert f"fetch of {TOPIC}-0 at offset {second} from remote storage failed" in log
    assert f"remote object {logs[1]} is missing (offsets {second} to {third - 1})" in log
    assert f"remote object {logs[2]} is damaged (offsets {third} to" in log


def wire_last_offset(data: bytes) -> int:
    from storage_engine.record.record_batch import RecordBatch
    pos, last = 0, -1
    while pos < len(data):
        batch = RecordBatch(data, pos)
        last, pos = batch.last_offset, pos + batch.size_in_bytes
    return last
