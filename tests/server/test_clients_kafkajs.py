"""kafkajs 2.2.4 (``node``, scripts in tests/server/js/) against a real broker process: producing without
compression and with gzip at acks -1, 1 and 0, an idempotent producer, MESSAGE_TOO_LARGE, and the admin calls
createTopics (with configs), describeConfigs, fetchTopicOffsets, fetchTopicOffsetsByTimestamp and deleteTopics.

kafkajs compresses with gzip out of the box; snappy, lz4 and zstd need codec plugins (kafkajs-snappy,
kafkajs-lz4, @kafkajs/zstd), which are not installed. Its consumer always joins a consumer group, and groups are
not served yet, so what kafkajs produced is read back with kafka-python (``group_id=None``) and checked against
what the engine stored.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from storage_engine import topic_store
from tests.typed import present

ROOT = Path(__file__).resolve().parents[2]
JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")
NODE_MODULES = ROOT / "var" / "node" / "node_modules"
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(NODE is None or not (NODE_MODULES / "kafkajs").is_dir(),
                                 reason="node and kafkajs are needed (make clients)")]
TIMEOUT = 60.0


def node(script: str, broker, spec: dict) -> list[dict]:
    """Run ``js/<script>`` with ``spec`` (plus the broker address); the per-request or per-call results."""
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    proc = subprocess.run([present(NODE), str(JS / script), json.dumps({"brokers": [broker.bootstrap], **spec})],
                          cwd=JS, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{script}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])["results"]


def engine(broker, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def stored_batches(broker, topic: str, partition: int = 0) -> list[dict]:
    segments = sorted(p for d in broker.log_dirs for p in Path(d, f"{topic}-{partition}").glob("*.log"))
    assert segments, f"no segment of {topic}-{partition}"
    return [b for b in engine(broker, "dump-log", "--files", *map(str, segments), "--json") if b.get("type") == "batch"]


def read_back(broker, topic: str, partition: int = 0) -> list:
    """kafka-python, no group: every record of ``topic-partition`` up to its high watermark."""
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + TIMEOUT
        while c.position(tp) < end:
            assert time.monotonic() < deadline, f"stuck at {c.position(tp)} of {end}"
            for records in c.poll(timeout_ms=200).values():
                out += records
        return out
    finally:
        c.close()


def test_kafkajs_produces_uncompressed_and_gzip_at_every_acks_level_idempotently_and_within_max_message_bytes(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("js-events", 2, 1), NewTopic("js-capped", 1, 1,
                                                              topic_configs={"max.message.bytes": "1024"})])
    admin.close()
    base = int(time.time() * 1000) - 10 * 60_000
    expected: list[tuple] = []          # (key, value, headers, timestamp, codec) of js-events-0 in offset order
    requests = []
    for codec in ("none", "gzip"):
        for acks in (-1, 1, 0):
            messages = []
            for i in range(3):
                key, value = f"{codec}/{acks}/{i}", f"kafkajs {codec} acks={acks} record {i} " * 8
                headers = {"codec": codec, "acks": str(acks)}
                ts = base + len(expected) * 1000
                messages.append({"key": key, "value": value, "headers": headers, "timestamp": ts, "partition": 0})
                expected.append((key, value, headers, ts, codec))
            requests.append({"topic": "js-events", "acks": acks, "compression": codec, "messages": messages})
    requests.append({"topic": "js-events", "acks": -1, "compression": "gzip",
                     "messages": [{"key": "p1", "value": "to partition 1", "partition": 1}]})
    requests.append({"topic": "js-capped", "acks": -1, "compression": "none",
                     "messages": [{"key": "big", "value": "x" * 4000, "partition": 0}]})
    requests.append({"topic": "js-capped", "acks": -1, "compression": "none",
                     "messages": [{"key": "small", "value": "y" * 100, "partition": 0}]})
    results = node("produce.js", broker, {"requests": requests})

    # One producer, one connection: requests are appended in order, acks=0 ones too (they get no answer).
    for n, (req, res) in enumerate(zip(requests[:6], results[:6])):
        if req["acks"] == 0:
            assert res == {"ok": []}
        else:
            [part] = res["ok"]
            assert (part["partition"], part["errorCode"], int(part["baseOffset"])) == (0, 0, 3 * n)
    assert [(p["partition"], p["baseOffset"]) for p in results[6]["ok"]] == [(1, "0")]
    assert results[7]["error"]["type"] == "MESSAGE_TOO_LARGE" and results[7]["error"]["code"] == 10
    assert [(p["errorCode"], p["baseOffset"]) for p in results[8]["ok"]] == [(0, "0")]

    # The idempotent producer: InitProducerId, then sequences from 0.
    idempotent = node("produce.js", broker, {"idempotent": True, "requests": [
        {"topic": "js-events", "acks": -1, "compression": "gzip",
         "messages": [{"key": f"idem-{i}", "value": f"idempotent {i}", "partition": 0, "timestamp": base}]}
        for i in range(2)]})
    assert [int(r["ok"][0]["baseOffset"]) for r in idempotent] == [len(expected), len(expected) + 1]
    expected += [(f"idem-{i}", f"idempotent {i}", {}, base, "gzip") for i in range(2)]

    got = read_back(broker, "js-events")
    assert [r.offset for r in got] == list(range(len(expected)))
    for r, (key, value, headers, ts, _) in zip(got, expected):
        assert (r.key.decode(), r.value.decode(), {k: v.decode() for k, v in r.headers}, r.timestamp) == \
            (key, value, headers, ts)
    assert [(r.key, r.value) for r in read_back(broker, "js-events", 1)] == [(b"p1", b"to partition 1")]
    assert [(r.offset, r.key) for r in read_back(broker, "js-capped")] == [(0, b"small")]

    batches = stored_batches(broker, "js-events")
    for b in batches:
        assert {expected[o][4] for o in range(b["base_offset"], b["last_offset"] + 1)} == {b["compression"]}, b
    assert {b["compression"] for b in batches} == {"none", "gzip"}
    plain, idem = batches[:-2], batches[-2:]
    assert all(b["producer_id"] == -1 for b in plain)
    assert [(b["base_offset"], b["base_sequence"]) for b in idem] == [(len(expected) - 2, 0), (len(expected) - 1, 1)]
    assert idem[0]["producer_id"] == idem[1]["producer_id"] >= 0
    assert [b["count"] for b in stored_batches(broker, "js-capped")] == [1]


def test_kafkajs_admin_creates_describes_lists_offsets_and_deletes_topics(broker):
    configs = [{"name": "retention.ms", "value": "86400000"}, {"name": "max.message.bytes", "value": "65536"}]
    created = node("admin.js", broker, {"calls": [
        {"call": "createTopics", "args": [{"topics": [{"topic": "js-admin", "numPartitions": 2,
                                                       "configEntries": configs}]}]},
        {"call": "createTopics", "args": [{"topics": [{"topic": "js-admin"}]}]},
        {"call": "describeConfigs", "args": [{"includeSynonyms": False, "resources": [
            {"type": 2, "name": "js-admin", "configNames": ["retention.ms", "max.message.bytes", "cleanup.policy"]}]}]},
    ]})
    assert created[0] == {"ok": True}
    assert created[1] == {"ok": False}             # kafkajs: false when the topic already exists
    [resource] = created[2]["ok"]["resources"]
    assert resource["errorCode"] == 0
    entries = {e["configName"]: (e["configValue"], e["configSource"], e["isDefault"])
               for e in resource["configEntries"]}
    assert entries == {"retention.ms": ("86400000", 1, False), "max.message.bytes": ("65536", 1, False),
                       "cleanup.policy": ("delete", 5, True)}
    assert topic_store.read(broker.log_dirs[0])["js-admin"] == {"retention.ms": "86400000",
                                                                 "max.message.bytes": "65536"}
    assert sorted(p.name for d in broker.log_dirs for p in Path(d).glob("js-admin-*")) == ["js-admin-0", "js-admin-1"]

    base = int(time.time() * 1000) - 60_000
    node("produce.js", broker, {"requests": [{"topic": "js-admin", "acks": -1, "messages": [
        {"key": f"k{i}", "value": f"v{i}", "partition": 0, "timestamp": base + i * 1000} for i in range(5)] + [
        {"key": "p1", "value": "v", "partition": 1, "timestamp": base + 10_000}]}]})

    listed = node("admin.js", broker, {"calls": [
        {"call": "fetchTopicOffsets", "args": ["js-admin"]},
        {"call": "fetchTopicOffsetsByTimestamp", "args": ["js-admin", base + 2500]},
        {"call": "fetchTopicOffsetsByTimestamp", "args": ["js-admin", base + 3_600_000]},
        {"call": "deleteTopics", "args": [{"topics": ["js-admin"]}]},
        {"call": "listTopics"},
    ]})
    offsets = sorted(listed[0]["ok"], key=lambda p: p["partition"])
    assert offsets == [{"partition": 0, "offset": "5", "high": "5", "low": "0"},
                       {"partition": 1, "offset": "1", "high": "1", "low": "0"}]
    by_time = {p["partition"]: p["offset"] for p in listed[1]["ok"]}
    assert by_time == {0: "3", 1: "0"}
    # No record at or after the time: kafkajs answers the high watermark.
    assert {p["partition"]: p["offset"] for p in listed[2]["ok"]} == {0: "5", 1: "1"}
    assert listed[3] == {"ok": None}
    assert "js-admin" not in listed[4]["ok"]
    assert not [p for d in broker.log_dirs for p in Path(d).glob("js-admin-[0-9]")]
    assert "js-admin" not in topic_store.read(broker.log_dirs[0])
