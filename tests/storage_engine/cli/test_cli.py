"""``python -m storage_engine``, end to end: every command run as a real subprocess on a temp config.

Each run checks that no Python traceback reaches stderr, whatever the exit code.
"""
from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Literal

import pytest

from tests.paths import REAL_KAFKA_FIXTURES, REPO
from storage_engine import layout
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from tests.storage_engine.helpers import present

pytestmark = pytest.mark.e2e

REAL_KAFKA = REAL_KAFKA_FIXTURES


class Cli:
    """Runs ``python -m storage_engine --config <cfg> ...`` in a subprocess."""

    def __init__(self, tmp_path: pathlib.Path, dirs=("logs-a", "logs-b"), broker=None, topics=None):
        self.tmp = tmp_path
        self.dirs = [str(tmp_path / d) for d in dirs]
        self.cfg = self.write_config(self.dirs, broker, topics)

    def write_config(self, dirs, broker=None, topics=None, name="storage.yaml") -> str:
        data = {"broker": {"log.dirs": list(dirs), **(broker or {})}, "topics": topics or {}}
        path = self.tmp / name
        path.write_text(json.dumps(data), encoding="utf-8")   # JSON is YAML
        return str(path)

    def run(self, *args, stdin: bytes | str | None = None, config: str | Literal[False] | None = None, expect: int | None = 0):
        cmd = [sys.executable, "-m", "storage_engine"]
        if config is not False:
            cmd += ["--config", config or self.cfg]
        data = stdin.encode() if isinstance(stdin, str) else stdin
        proc = subprocess.run(cmd + [str(a) for a in args], input=data, capture_output=True, cwd=str(REPO),
                              timeout=120)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert "Traceback" not in err, err
        if expect is not None:
            assert proc.returncode == expect, f"exit {proc.returncode}, expected {expect}\nstdout: {out}\nstderr: {err}"
        return proc.returncode, out, err

    def produce(self, topic, partition, lines, *extra, **kw):
        text = "".join(json.dumps(line) + "\n" for line in lines)
        rc, out, err = self.run("produce", "--topic", topic, "--partition", partition, *extra, stdin=text, **kw)
        return json.loads(out) if rc == 0 else (rc, err)

    def consume(self, topic, partition, *extra, **kw):
        rc, out, err = self.run("consume", "--topic", topic, "--partition", partition, *extra, **kw)
        return [json.loads(x) for x in out.splitlines()] if rc == 0 else (rc, err)

    def json(self, *args, **kw):
        _, out, _ = self.run(*args, **kw)
        return json.loads(out)

    def dump(self, *files, flags=(), expect=0):
        return self.run("dump-log", "--files", *files, *flags, config=False, expect=expect)

    def partition_dir(self, topic, partition) -> str:
        homes = [d for d in self.dirs if os.path.isdir(os.path.join(d, f"{topic}-{partition}"))]
        assert len(homes) == 1, f"{topic}-{partition} is in {homes}"
        return os.path.join(homes[0], f"{topic}-{partition}")

    def segment_logs(self, topic, partition) -> list[str]:
        d = self.partition_dir(topic, partition)
        return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(layout.LOG_SUFFIX)]


@pytest.fixture
def cli(tmp_path):
    return Cli(tmp_path, broker={"log.segment.bytes": 1024, "log.index.interval.bytes": 100})


def records(n, start=0, **extra):
    return [{"key": f"k{i}", "value": f"value {i} " + "x" * 40, "timestamp": 1_700_000_000_000 + i, **extra}
            for i in range(start, start + n)]


# -- produce / consume -------------------------------------------------------------------------------------------

def test_produce_then_consume_round_trips_keys_values_timestamps_and_headers(cli):
    lines = [{"key": "k1", "value": "v1", "timestamp": 1700000000000, "headers": {"h1": "a", "h2": None}},
             {"value": "no key", "timestamp": 1700000000001},
             {"key": "tomb", "value": None, "timestamp": 1700000000002, "headers": {}},
             {"key": "ünïcödé ✓", "value": "日本語"}]
    out = cli.produce("orders", 0, lines)
    assert out == {"topic": "orders", "partition": 0, "base_offset": 0, "last_offset": 3, "count": 4}
    got = cli.consume("orders", 0)
    assert [r["offset"] for r in got] == [0, 1, 2, 3]
    assert set(got[0]) == {"offset", "timestamp", "key", "value", "headers"}
    assert got[0] == {"offset": 0, "timestamp": 1700000000000, "key": "k1", "value": "v1",
                      "headers": {"h1": "a", "h2": None}}
    assert got[1]["key"] is None and got[1]["value"] == "no key" and got[1]["timestamp"] == 1700000000001
    assert got[2]["value"] is None and got[2]["headers"] == {}
    assert got[3]["key"] == "ünïcödé ✓" and got[3]["value"] == "日本語"
    assert got[3]["timestamp"] > 1700000000002          # no timestamp: the append time
    out = cli.produce("orders", 0, [{"key": "k5", "value": "v5"}])
    assert out["base_offset"] == 4 and out["last_offset"] == 4 and out["count"] == 1


def test_consume_from_offset_and_max_records(cli):
    cli.produce("t", 0, records(30))
    assert [r["offset"] for r in cli.consume("t", 0, "--from-offset", 7, "--max-records", 5)] == [7, 8, 9, 10, 11]
    assert [r["offset"] for r in cli.consume("t", 0, "--from-offset", 25)] == [25, 26, 27, 28, 29]
    assert [r["offset"] for r in cli.consume("t", 0, "--max-records", 2)] == [0, 1]
    assert cli.consume("t", 0, "--from-offset", 30) == []        # the log end: nothing yet, not an error
    assert [r["value"] for r in cli.consume("t", 0)] == [r["value"] for r in records(30)]
    assert len(cli.segment_logs("t", 0)) >= 3, "expected reads across segments with segment.bytes 1024"


def test_binary_data_round_trips_through_base64(cli):
    blobs = [bytes(range(256)), b"\x00" * 10, os.urandom(300), b"\xff\xfe\xfd", b""]
    lines = [{"key": base64.b64encode(b"\x00key\xff").decode(), "value": base64.b64encode(b).decode(),
              "headers": {"bin": base64.b64encode(b"\x80\x81").decode(), "null": None}} for b in blobs]
    out = cli.produce("bin", 0, lines, "--encoding", "base64")
    assert out["count"] == len(blobs)
    got = cli.consume("bin", 0, "--encoding", "base64")
    assert [base64.b64decode(r["value"]) for r in got] == blobs
    assert all(base64.b64decode(r["key"]) == b"\x00key\xff" for r in got)
    assert all(base64.b64decode(r["headers"]["bin"]) == b"\x80\x81" and r["headers"]["null"] is None for r in got)
    # The utf8 rendering of the same records still works (lossy for bytes that are not UTF-8).
    text = cli.consume("bin", 0)
    assert [r["offset"] for r in text] == [0, 1, 2, 3, 4] and text[1]["value"] == "\x00" * 10
    # And compressed batches carry the bytes unchanged too.
    cli.produce("bin", 1, lines, "--encoding", "base64", "--compression", "gzip")
    assert [base64.b64decode(r["value"]) for r in cli.consume("bin", 1, "--encoding", "base64")] == blobs


# -- describe / checkpoint / flush ---------------------------------------------------------------------------------

def test_describe_shows_dirs_partitions_segments_offsets_and_checkpoints(cli):
    cli.produce("t", 0, records(25))
    cli.produce("t", 1, records(3))
    # A cleaner checkpoint (written by compaction) is reported per partition.
    home = os.path.dirname(cli.partition_dir("t", 0))
    OffsetCheckpointFile(os.path.join(home, layout.CLEANER_OFFSET_CHECKPOINT)).write({("t", 0): 4})
    out = cli.json("describe")
    assert [d["path"] for d in out["log_dirs"]] == cli.dirs
    parts = {(p["topic"], p["partition"]): p for d in out["log_dirs"] for p in d["partitions"]}
    assert set(parts) == {("t", 0), ("t", 1)}
    p0 = parts[("t", 0)]
    assert p0["dir"] == cli.partition_dir("t", 0)
    assert p0["log_start_offset"] == 0 and p0["log_end_offset"] == 25 and p0["high_watermark"] == 25
    assert p0["recovery_point"] == 25
    assert p0["cleaner_checkpoint"] == 4 and parts[("t", 1)]["cleaner_checkpoint"] is None
    bases = [s["base_offset"] for s in p0["segments"]]
    assert bases == sorted(bases) and bases[0] == 0 and len(bases) == len(cli.segment_logs("t", 0))
    assert [s["size_bytes"] for s in p0["segments"]] == [os.path.getsize(f) for f in cli.segment_logs("t", 0)]
    assert p0["size_bytes"] == sum(s["size_bytes"] for s in p0["segments"])
    only = cli.json("describe", "--topic", "nope")
    assert all(d["partitions"] == [] for d in only["log_dirs"])


def checkpoint_text(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_checkpoint_writes_kafka_text_checkpoint_files(cli):
    cli.produce("t", 0, records(5))       # goes to logs-a (both empty, first wins)
    cli.produce("t", 1, records(3))       # goes to logs-b (fewest partitions)
    cli.produce("u", 0, records(2))       # logs-a again
    cli.run("delete-records", "--topic", "t", "--partition", 0, "--offset", 2)
    out = cli.json("checkpoint")
    a, b = cli.dirs
    assert out["checkpoints"][a]["recovery_points"] == {"t-0": 5, "u-0": 2}
    assert checkpoint_text(os.path.join(a, layout.RECOVERY_POINT_CHECKPOINT)) == "0\n2\nt 0 5\nu 0 2\n"
    assert checkpoint_text(os.path.join(b, layout.RECOVERY_POINT_CHECKPOINT)) == "0\n1\nt 1 3\n"
    assert checkpoint_text(os.path.join(a, layout.LOG_START_OFFSET_CHECKPOINT)) == "0\n1\nt 0 2\n"
    assert checkpoint_text(os.path.join(b, layout.LOG_START_OFFSET_CHECKPOINT)) == "0\n0\n"
    assert not [f for d in cli.dirs for f in os.listdir(d) if f.endswith(".tmp")]


def test_flush_advances_the_recovery_point(cli):
    config = load_config(cli.cfg)
    # This process keeps the log dirs open, so the producing process is not the last to leave and does not
    # flush on close: its records stay above the recovery point until `flush`.
    with LogManager.open(config) as holder:
        cli.produce("t", 0, records(10))
        log = holder.get_log("t", 0)
        assert log is not None
        assert log.lock.read_state().recovery_point < 10
        out = cli.json("flush")
        assert out["flushed"] == [{"topic": "t", "partition": 0, "recovery_point_before": 0, "recovery_point": 10}]
        assert log.lock.read_state().recovery_point == 10
        cli.produce("t", 0, records(4, start=10))
        out = cli.json("flush", "--topic", "t", "--due-only", "--now-ms", 0)
        assert out["flushed"] == []           # flush.ms (default: never due) has not elapsed
        out = cli.json("checkpoint", "--flush")
        assert out["checkpoints"][cli.dirs[0]]["recovery_points"] == {"t-0": 14}


# -- delete-records ------------------------------------------------------------------------------------------------

def test_delete_records_advances_the_log_start_and_reads_below_it_fail(cli):
    cli.produce("t", 0, records(20))
    out = cli.json("delete-records", "--topic", "t", "--partition", 0, "--offset", 12)
    assert out == {"topic": "t", "partition": 0, "log_start_offset_before": 0, "log_start_offset": 12}
    assert [r["offset"] for r in cli.consume("t", 0)] == list(range(12, 20))
    rc, out, err = cli.run("consume", "--topic", "t", "--partition", 0, "--from-offset", 5, expect=2)
    assert out == "" and "offset 5 is out of range" in err and "log start offset 12" in err
    assert cli.json("describe")["log_dirs"][0]["partitions"][0]["log_start_offset"] == 12
    # Lowering it is a no-op; -1 means the high watermark.
    assert cli.json("delete-records", "--topic", "t", "--partition", 0, "--offset", 3)["log_start_offset"] == 12
    assert cli.json("delete-records", "--topic", "t", "--partition", 0, "--offset", -1)["log_start_offset"] == 20
    assert cli.consume("t", 0) == []
    assert cli.produce("t", 0, records(1))["base_offset"] == 20


# -- verify ----------------------------------------------------------------------------------------------------------

def test_verify_passes_a_healthy_dir_and_names_the_file_and_position_of_a_flipped_byte(cli):
    for start in range(0, 24, 4):
        cli.produce("t", 0, records(4, start=start))    # one batch each, several batches per segment
    cli.produce("t", 1, records(2))
    report = cli.json("verify")
    assert report["damaged"] is False and report["problems"] == []
    assert {(p["topic"], p["partition"], p["records"]) for p in report["partitions"]} == {("t", 0, 24), ("t", 1, 2)}

    sealed = cli.segment_logs("t", 0)[0]
    # One process per batch, and still a sparse offset index (the byte count since the last entry survives).
    assert os.path.getsize(sealed[:-len(".log")] + ".index") > 0
    _, out, _ = cli.dump(sealed, flags=["--json"])
    batches = [json.loads(x) for x in out.splitlines() if json.loads(x)["type"] == "batch"]
    assert len(batches) >= 2
    target = batches[1]                                  # flip a byte inside the second batch's records
    with open(sealed, "r+b") as f:
        f.seek(target["position"] + target["size"] - 5)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x20]))
    rc, out, err = cli.run("verify", expect=1)
    report = json.loads(out)
    assert report["damaged"] is True
    problem = report["problems"][0]
    assert problem["file"] == sealed and problem["position"] == target["position"]
    assert "crc" in problem["message"]
    # dump-log sees the same damage.
    rc, out, err = cli.dump(sealed, expect=1)
    assert "isvalid: false" in out and f"position {target['position']}" in err


# -- log dirs -------------------------------------------------------------------------------------------------------

def test_new_partitions_go_to_the_log_dir_with_fewest_partitions_and_live_in_one(cli, tmp_path):
    a, b = cli.dirs
    only_a = cli.write_config([a], {"log.segment.bytes": 1024}, name="only-a.yaml")
    for p in range(3):
        cli.produce("seed", p, records(1), config=only_a)
    # Now with two dirs: a holds 3 partitions, b none.
    for p in range(3):
        cli.produce("new", p, records(1))
        assert os.path.isdir(os.path.join(b, f"new-{p}")), f"new-{p} did not go to the emptier dir"
    cli.produce("new", 3, records(1))                    # 3 and 3: the first dir wins the tie
    assert os.path.isdir(os.path.join(a, "new-3"))
    # An existing partition stays where it is, though b now has fewer.
    cli.produce("seed", 0, records(5, start=1))
    for p in range(3):
        assert cli.partition_dir("seed", p) == os.path.join(a, f"seed-{p}")
    assert len(cli.consume("seed", 0)) == 6
    desc = cli.json("describe")
    names = [f"{p['topic']}-{p['partition']}" for d in desc["log_dirs"] for p in d["partitions"]]
    assert len(names) == len(set(names)) == 7
    # A partition found in two dirs is refused, naming both.
    shutil.copytree(os.path.join(a, "seed-1"), os.path.join(b, "seed-1"))
    rc, out, err = cli.run("describe", expect=1)
    assert "seed-1" in err and a in err and b in err


def test_two_processes_creating_the_same_partition_pick_one_dir(cli):
    procs = [subprocess.Popen([sys.executable, "-m", "storage_engine", "--config", cli.cfg, "produce", "--topic",
                               "race", "--partition", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=str(REPO)) for _ in range(4)]
    for i, p in enumerate(procs):
        assert p.stdin is not None
        p.stdin.write((json.dumps({"key": str(i), "value": str(i)}) + "\n").encode())
        p.stdin.close()
    for p in procs:
        assert p.stderr is not None
        assert p.wait(120) == 0, p.stderr.read().decode()
    cli.partition_dir("race", 0)                          # exactly one home
    assert sorted(r["value"] for r in cli.consume("race", 0)) == ["0", "1", "2", "3"]


# -- dump-log ---------------------------------------------------------------------------------------------------------

def append_one_batch_each(cli, topic, partition, lines):
    """Many small batches quickly: through the library (the CLI would start a process per batch)."""
    with LogManager.open(load_config(cli.cfg)) as mgr:
        log = mgr.get_or_create_log(topic, partition)
        for line in lines:
            log.append_records([SimpleRecord(line["key"].encode(), line["value"].encode(), line["timestamp"])])


def test_dump_log_on_engine_written_segments(cli):
    cli.produce("t", 0, [{"key": f"k{i}", "value": f"payload-{i}", "timestamp": 1_700_000_000_000 + i,
                          "headers": {"h": "x"}} for i in range(12)])
    append_one_batch_each(cli, "t", 0, [{"key": f"k{i}", "value": f"payload-{i}", "timestamp": 1_700_000_000_000 + i}
                                        for i in range(12, 40)])
    cli.produce("t", 0, [{"key": "k40", "value": "payload-40", "timestamp": 1_700_000_000_040}])
    logs = cli.segment_logs("t", 0)
    assert len(logs) >= 2
    first = logs[0]

    _, out, _ = cli.dump(first)
    assert out.splitlines()[:2] == [f"Dumping {first}", "Log starting offset: 0"]
    assert "baseOffset: 0 lastOffset: 11 count: 12 baseSequence: -1" in out
    assert "compresscodec: none" in out and "isvalid: true" in out and "| offset" not in out

    _, deep, _ = cli.dump(first, flags=["--deep-iteration"])
    assert "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 9 sequence: -1 headerKeys: [h]" in deep
    assert "payload:" not in deep
    _, data, _ = cli.dump(first, flags=["--print-data-log"])
    assert "key: k3 payload: payload-3" in data

    _, js, _ = cli.dump(*logs, flags=["--json", "--print-data-log"])
    objs = [json.loads(x) for x in js.splitlines()]
    recs = [o for o in objs if o["type"] == "record"]
    assert [r["offset"] for r in recs] == list(range(41))
    assert [r["payload"] for r in recs] == [f"payload-{i}" for i in range(41)]
    assert [o["file"] for o in objs if o["type"] == "file"] == logs
    batches = [o for o in objs if o["type"] == "batch"]
    assert batches[0]["base_offset"] == 0 and batches[0]["count"] == 12 and all(b["is_valid"] for b in batches)

    # Index files: entries, sanity check, verification against the .log.
    index = first[:-len(".log")] + ".index"
    tindex = first[:-len(".log")] + ".timeindex"
    _, idx, _ = cli.dump(index)
    entries = [line for line in idx.splitlines() if line.startswith("offset: ")]
    assert entries, "expected offset index entries with index.interval.bytes 100"
    positions = {b["position"]: b["last_offset"] for b in batches if b["position"] is not None}
    for line in entries:
        _, off, _, pos = line.split()
        assert positions.get(int(pos)) == int(off)
    _, t, _ = cli.dump(tindex)
    assert [line for line in t.splitlines() if line.startswith("timestamp: ")]
    _, ok, _ = cli.dump(index, tindex, flags=["--index-sanity-check"])
    assert f"{index} passed sanity check." in ok and f"{tindex} passed sanity check." in ok
    _, quiet, err = cli.dump(index, tindex, flags=["--verify-index-only"])
    assert "offset: " not in quiet and "timestamp: " not in quiet and err == ""


def test_dump_log_reports_index_entries_that_do_not_match_the_log(cli):
    append_one_batch_each(cli, "t", 0, [{"key": f"k{i}", "value": f"v{i}" * 10, "timestamp": 1_700_000_000_000 + i}
                                        for i in range(30)])
    first = cli.segment_logs("t", 0)[0]
    index = first[:-len(".log")] + ".index"
    assert os.path.getsize(index) >= 16
    with open(index, "r+b") as f:                        # point the second entry at the first batch
        f.seek(12)
        f.write((0).to_bytes(4, "big"))
    rc, out, err = cli.dump(index, flags=["--verify-index-only"], expect=1)
    assert f"Mismatches in :{index}" in err and "Index offset:" in err
    rc, out, err = cli.dump(index, flags=["--index-sanity-check"], expect=1)
    assert "failed sanity check" in err and index in err
    rc, out, err = cli.run("verify", expect=1)
    assert any(p["file"] == index for p in json.loads(out)["problems"])


def copy_real_kafka_segment(name: str, dest_dir: pathlib.Path, base_offset: int) -> str:
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / (layout.filename_prefix(base_offset) + layout.LOG_SUFFIX)
    shutil.copyfile(REAL_KAFKA / name, dest)
    os.chmod(dest, 0o644)
    return str(dest)


# README.md of the fixtures: (file, base offset of the file, [(batch base offset, last offset, record count)])
REAL_SEGMENTS = [("cluster-metadata-a.00000000000000000000.log", 0, [(0, 0, 1), (1, 3, 3)]),
                 ("cluster-metadata-b.00000000000000000001.log", 1, [(1, 1, 1), (2, 3, 2)])]


@pytest.mark.parametrize("name,base,expected", REAL_SEGMENTS, ids=["a", "b"])
def test_dump_log_on_segments_written_by_real_kafka(tmp_path, cli, name, base, expected):
    seg = copy_real_kafka_segment(name, tmp_path / "copy", base)
    _, out, _ = cli.dump(seg, flags=["--deep-iteration"])
    assert f"Log starting offset: {base}" in out
    for first, last, count in expected:
        assert f"baseOffset: {first} lastOffset: {last} count: {count} " in out
    assert out.count("isvalid: true") == len(expected) and "isvalid: false" not in out
    offsets = [int(line.split()[2]) for line in out.splitlines() if line.startswith("| offset: ")]
    assert offsets == list(range(expected[0][0], expected[-1][1] + 1))
    _, js, _ = cli.dump(seg, flags=["--json"])
    batches = [json.loads(x) for x in js.splitlines() if json.loads(x)["type"] == "batch"]
    assert [(b["base_offset"], b["last_offset"], b["count"]) for b in batches] == expected
    assert all(b["magic"] == 2 and b["compression"] == "none" and b["is_valid"] for b in batches)


@pytest.mark.parametrize("name,base,expected", REAL_SEGMENTS, ids=["a", "b"])
def test_segments_written_by_real_kafka_load_as_a_partition(cli, name, base, expected):
    copy_real_kafka_segment(name, pathlib.Path(cli.dirs[0]) / "metadata-0", base)
    got = cli.consume("metadata", 0, "--encoding", "base64")
    assert [r["offset"] for r in got] == list(range(expected[0][0], expected[-1][1] + 1))
    assert all(r["key"] is None for r in got)
    assert cli.json("verify")["damaged"] is False
    # The engine appends after them and the whole segment still reads.
    assert cli.produce("metadata", 0, [{"key": "k", "value": "v"}])["base_offset"] == expected[-1][1] + 1
    _, out, _ = cli.dump(*cli.segment_logs("metadata", 0), flags=["--deep-iteration"])
    assert "isvalid: false" not in out


def test_cli_bad_input_exits_2_without_a_traceback(cli):
    cli.produce("t", 0, records(3))
    cases = [
        (["produce", "--topic", "../etc", "--partition", "0"], '{"value": "x"}\n', "topic name"),
        (["produce", "--topic", "t", "--partition", "0"], '{"value": "x"}\n{"value": \n', "line 2"),
        (["consume", "--topic", "t", "--partition", "9"], None, "does not exist"),
        (["delete-records", "--topic", "t", "--partition", "0", "--offset", "99"], None, "high watermark 3"),
        (["consume", "--topic", "t", "--partition", "-1"], None, "--partition"),
    ]
    for args, stdin, needle in cases:
        rc, out, err = cli.run(*args, stdin=stdin, expect=2)
        assert needle in err, (args, err)
    rc, out, err = cli.run("describe", config=str(cli.tmp / "missing.yaml"), expect=2)
    assert "config file not found" in err
    rc, out, err = cli.run("dump-log", "--files", str(cli.tmp / "nope.log"), config=False, expect=2)
    assert "nope.log" in err
    assert [r["offset"] for r in cli.consume("t", 0)] == [0, 1, 2]
    assert not os.path.exists(os.path.join(os.path.dirname(cli.dirs[0]), "etc-0"))


def test_dump_log_prints_legacy_compressed_and_control_batches_like_kafka(tmp_path, cli):
    from storage_engine.record import codecs
    from storage_engine.record.legacy_records import build_legacy_batch
    from storage_engine.record.record_batch import build_batch, build_control_batch

    recs = [SimpleRecord(b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i) for i in range(3)]
    data = (build_legacy_batch(recs[:1], magic=0, base_offset=0)
            + build_legacy_batch(recs, magic=1, base_offset=1, codec=codecs.GZIP)
            + build_batch(recs, base_offset=4, codec=codecs.LZ4, producer_id=7, producer_epoch=1, base_sequence=0,
                          is_transactional=True)
            + build_control_batch(1, base_offset=7, timestamp=1_700_000_000_009, producer_id=7, producer_epoch=1,
                                  coordinator_epoch=3)
            + build_batch(recs[:2], offsets=[9, 12], base_offset=9))        # a gap, as compaction leaves
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(data)
    _, out, err = cli.dump(str(seg), flags=["--print-data-log"])
    lines = out.splitlines()
    assert "offset: 0 position: 0 NoTimestampType: -1 " in lines[2] and "magic: 0 compresscodec: none" in lines[2]
    # legacy messages: Kafka's " isValid: true crc: N}" (stray brace included), per inner message of a wrapper
    import re
    import zlib
    v0 = build_legacy_batch(recs[:1], magic=0, base_offset=0)
    assert (f"| offset: 0 NoTimestampType: -1 keySize: 2 valueSize: 2 isValid: true crc: "
            f"{zlib.crc32(v0[16:])}}} key: k0 payload: v0") in lines
    assert "offset: 3 position: " in out and "magic: 1 compresscodec: gzip" in out
    inner = [ln for ln in lines if re.fullmatch(r"\| offset: [123] CreateTime: \d+ keySize: 2 valueSize: 2 "
                                                r"isValid: true crc: \d+\} key: k\d payload: v\d", ln)]
    assert len(inner) == 3
    wrapper_crc = int.from_bytes(build_legacy_batch(recs, magic=1, base_offset=1, codec=codecs.GZIP)[12:16], "big")
    crcs = {int(present(re.search(r"crc: (\d+)", ln)).group(1)) for ln in inner}
    assert len(crcs) == 3 and wrapper_crc not in crcs        # each inner message's own CRC
    assert "| offset: 2 CreateTime: 1700000000001 keySize: 2 valueSize: 2 isValid: true crc: " in out
    assert ("baseOffset: 4 lastOffset: 6 count: 3 baseSequence: 0 lastSequence: 2 producerId: 7 producerEpoch: 1 "
            "partitionLeaderEpoch: -1 isTransactional: true isControl: false") in out
    assert "compresscodec: lz4" in out
    assert "| offset: 5 CreateTime: 1700000000001 keySize: 2 valueSize: 2 sequence: 1" in out
    assert "isControl: true" in out and "endTxnMarker: COMMIT coordinatorEpoch: 3" in out
    assert "baseOffset: 9 lastOffset: 12 count: 2" in out and "| offset: 12 " in out
    assert "isvalid: false" not in out and "isValid: false" not in out
    assert "Non-consecutive offsets" in err and "9 is followed by 12" in err   # a note, not damage (exit 0)

    # A torn tail: reported with its position, exit 1; --max-bytes stops before it without complaint.
    torn = tmp_path / "00000000000000000020.log"
    good = build_batch(recs, base_offset=20)
    torn.write_bytes(good + build_batch(recs, base_offset=23)[:30])
    rc, out, err = cli.dump(str(torn), expect=1)
    assert "baseOffset: 20 lastOffset: 22 count: 3" in out
    assert f"Found 30 invalid bytes at the end of {torn.name} (position {len(good)})" in err
    cli.dump(str(torn), flags=["--max-bytes", len(good)])


def test_describe_pages_and_filters_opening_only_the_partitions_asked_for(cli):
    for p in range(5):
        cli.produce("t", p, records(3))
    cli.produce("u", 0, records(2))
    page = cli.json("describe", "--limit", "2", "--offset", "1")
    assert page["partitions_total"] == 6 and (page["offset"], page["limit"]) == (1, 2)
    assert sorted((p["topic"], p["partition"]) for d in page["log_dirs"] for p in d["partitions"]) == [
        ("t", 1), ("t", 2)]
    one = cli.json("describe", "--topic", "t", "--partition", "4")
    assert [(p["topic"], p["partition"], p["log_end_offset"]) for d in one["log_dirs"] for p in d["partitions"]] == [
        ("t", 4, 3)]
    assert one["partitions_total"] == 1
