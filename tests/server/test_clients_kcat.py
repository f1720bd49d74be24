"""Debian's kcat (librdkafka 2.0 underneath) against a real broker process: producing in every codec and acks
level with keys and headers, an idempotent producer, consuming from the beginning, a relative end offset and a
timestamp (``-o s@<ts>``), offset queries (``-Q``), Metadata (``-L``) with and without auto-creation, and a
clean SIGTERM stop (exit 0) or a SIGKILL after which a restart serves the same data.

kcat consumes with ``-C`` (a simple consumer: assign, no consumer group). What kcat sees is checked against what
the engine stored, read by ``python -m storage_engine`` in another process.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage_engine.server.handlers import APIS

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not Path(KCAT).exists(), reason="kcat is not installed (make clients)")]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("0", "1", "all")
# The codec kcat's batches are stored in. librdkafka 2.0 (rd_kafka_msgset_writer_select_MsgVersion) compresses
# with gzip, snappy or lz4 only if the broker serves Produce v0, which this broker, like Kafka 4.0 (KIP-896),
# does not: "Broker does not support compression type gzip: not compressing batch". zstd needs Produce v7 and
# is compressed. LZ4 also needs FindCoordinator listed (librdkafka's stand-in for Kafka >= 0.8.2).
PRODUCE_V0 = APIS[0].min_version == 0
STORED_CODEC = {"none": "none", "zstd": "zstd", "gzip": "gzip" if PRODUCE_V0 else "none",
                "snappy": "snappy" if PRODUCE_V0 else "none", "lz4": "lz4" if PRODUCE_V0 and 10 in APIS else "none"}


def kcat(broker, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, text=True,
                          timeout=120)
    if check:
        assert proc.returncode == 0, f"kcat {args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def kcat_json(broker, *args: str) -> list[dict]:
    return [json.loads(line) for line in kcat(broker, *args).stdout.splitlines() if line.strip()]


def consume(broker, topic: str, offset: str = "beginning") -> list[dict]:
    """``kcat -C -o <offset> -e -J``: partition 0 from ``offset`` to its end, one JSON object per record."""
    return kcat_json(broker, "-C", "-t", topic, "-p", "0", "-o", offset, "-e", "-J")


def query_offset(broker, topic: str, timestamp: int) -> int:
    """``kcat -Q``: the offset for ``timestamp`` (-1 latest, -2 earliest) of partition 0."""
    out = kcat(broker, "-Q", "-t", f"{topic}:0:{timestamp}").stdout
    return int(out.split("offset")[1].split()[0])


def engine(broker, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def stored_batches(broker, topic: str) -> list[dict]:
    segments = sorted(p for d in broker.log_dirs for p in Path(d, f"{topic}-0").glob("*.log"))
    assert segments, f"no segment of {topic}-0"
    return [b for b in engine(broker, "dump-log", "--files", *map(str, segments), "--json") if b.get("type") == "batch"]


def wait_for_end(broker, topic: str, expected: int) -> None:
    """acks=0 gets no answer: wait until the broker has the records before the next producer appends."""
    deadline = time.monotonic() + TIMEOUT
    while query_offset(broker, topic, -1) != expected:
        assert time.monotonic() < deadline, f"{topic}-0 never reached offset {expected}"
        time.sleep(0.05)


def test_kcat_produces_every_codec_and_acks_level_and_consumes_from_beginning_end_and_time(broker):
    expected: list[tuple[str, str, list[str] | None, str]] = []      # (key, value, headers, codec) in offset order
    for codec in CODECS:
        for acks in ACKS:
            lines = []
            for i in range(2):
                key, value = f"{codec}-{acks}-{i}", f"kcat {codec} acks={acks} record {i} " * 6
                lines.append(f"{key}\t{value}")
                expected.append((key, value, ["codec", codec, "acks", acks], codec))
            kcat(broker, "-P", "-t", "kc", "-p", "0", "-z", codec, "-X", f"acks={acks}", "-K", "\t",
                 "-H", f"codec={codec}", "-H", f"acks={acks}", stdin="\n".join(lines) + "\n")
            wait_for_end(broker, "kc", len(expected))
    # An idempotent producer too.
    kcat(broker, "-P", "-t", "kc", "-p", "0", "-X", "enable.idempotence=true", "-K", "\t",
         stdin="idem-0\tfirst\nidem-1\tsecond\n")
    expected += [("idem-0", "first", None, "none"), ("idem-1", "second", None, "none")]

    records = consume(broker, "kc")
    assert [r["offset"] for r in records] == list(range(len(expected)))
    for r, (key, value, headers, _) in zip(records, expected):
        assert (r["key"], r["payload"], r.get("headers"), r["tstype"]) == (key, value, headers, "create")
    assert all(r["ts"] > 0 for r in records)

    # Stored: the same records; each batch in its producer's codec; the idempotent one with a producer id.
    stored = engine(broker, "consume", "--topic", "kc", "--partition", "0")
    assert [(s["offset"], s["key"], s["value"], s["timestamp"]) for s in stored] == \
        [(r["offset"], r["key"], r["payload"], r["ts"]) for r in records]
    assert stored[0]["headers"] == {"codec": "none", "acks": "0"}
    batches = stored_batches(broker, "kc")
    for b in batches[:-1]:
        codecs = {STORED_CODEC[expected[o][3]] for o in range(b["base_offset"], b["last_offset"] + 1)}
        assert codecs == {b["compression"]} and b["producer_id"] == -1, b
    assert {b["compression"] for b in batches} == set(STORED_CODEC.values())
    idem = batches[-1]
    assert (idem["base_offset"], idem["count"], idem["base_sequence"]) == (len(expected) - 2, 2, 0)
    assert idem["producer_id"] >= 0

    # Relative to the end, and the offsets -Q reports.
    assert [r["key"] for r in consume(broker, "kc", "-3")] == [e[0] for e in expected[-3:]]
    assert query_offset(broker, "kc", -2) == 0
    assert query_offset(broker, "kc", -1) == len(expected)

    # From a timestamp: records written after the clock moved past the last one.
    last_ts = records[-1]["ts"]
    deadline = time.monotonic() + TIMEOUT
    while int(time.time() * 1000) <= last_ts + 1:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    kcat(broker, "-P", "-t", "kc", "-p", "0", "-K", "\t", stdin="later-0\tx\nlater-1\ty\n")
    later = consume(broker, "kc", "-2")
    assert [r["key"] for r in later] == ["later-0", "later-1"] and later[0]["ts"] > last_ts
    from_time = consume(broker, "kc", f"s@{later[0]['ts']}")
    assert [(r["offset"], r["key"]) for r in from_time] == [(len(expected), "later-0"), (len(expected) + 1, "later-1")]
    assert query_offset(broker, "kc", later[0]["ts"]) == len(expected)


def test_kcat_metadata_creates_on_first_mention_or_reports_an_unknown_topic(broker_factory):
    auto = broker_factory(broker={"num.partitions": 2})
    [md] = kcat_json(auto, "-L", "-J", "-t", "mentioned")
    assert md["controllerid"] == 1 and [b["id"] for b in md["brokers"]] == [1]
    [topic] = md["topics"]
    assert topic["topic"] == "mentioned" and "error" not in topic
    assert [(p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in topic["partitions"]] == \
        [(0, 1, [{"id": 1}], [{"id": 1}]), (1, 1, [{"id": 1}], [{"id": 1}])]
    assert sorted(p.name for d in auto.log_dirs for p in Path(d).glob("mentioned-*")) == ["mentioned-0", "mentioned-1"]

    manual = broker_factory(broker={"auto.create.topics.enable": False})
    [md] = kcat_json(manual, "-L", "-J", "-t", "unmentionable")
    [topic] = md["topics"]
    assert topic["error"] == "Broker: Unknown topic or partition" and topic["partitions"] == []
    refused = kcat(manual, "-P", "-t", "unmentionable", "-X", "message.timeout.ms=2000", stdin="lost\n", check=False)
    assert refused.returncode != 0 and "Delivery failed" in refused.stderr
    assert not [p for d in manual.log_dirs for p in Path(d).glob("unmentionable-*")]
    [md] = kcat_json(manual, "-L", "-J")
    assert md["topics"] == []


@pytest.mark.kills
def test_sigterm_stops_clean_and_a_restart_serves_the_same_data_as_after_a_sigkill(broker):
    kcat(broker, "-P", "-t", "durable", "-p", "0", "-z", "gzip", "-X", "acks=all", "-K", ":",
         stdin="".join(f"k{i}:value-{i}\n" for i in range(20)))
    before = consume(broker, "durable")
    assert [r["offset"] for r in before] == list(range(20))

    assert broker.stop() == 0
    assert "stopped; logs closed clean" in broker.log_text()
    broker.restart()
    assert consume(broker, "durable") == before
    kcat(broker, "-P", "-t", "durable", "-p", "0", "-K", ":", "-X", "acks=all", stdin="k20:after-restart\n")
    assert query_offset(broker, "durable", -1) == 21

    # SIGKILL: no clean close; the next start recovers the logs and serves every acknowledged record.
    broker.kill()
    broker.restart()
    after = consume(broker, "durable")
    assert after[:20] == before
    assert [(r["offset"], r["key"], r["payload"]) for r in after[20:]] == [(20, "k20", "after-restart")]
    kcat(broker, "-P", "-t", "durable", "-p", "0", "-K", ":", "-X", "acks=all", stdin="k21:after-kill\n")
    assert [r["payload"] for r in consume(broker, "durable", "-1")] == ["after-kill"]
    assert broker.stop() == 0
