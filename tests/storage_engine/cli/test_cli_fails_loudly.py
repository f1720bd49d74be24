"""Maintenance commands fail loudly (ARCHITECTURE.md section 6), each as a real ``python -m storage_engine``
subprocess over real files: a partition a command cannot read (its folder became a file, a segment file that is a
folder) or that compaction marked uncleanable makes it exit 1 with one line on stderr per failed partition, naming
the partition, the file and what is wrong; the JSON summary is still on stdout, and the other partitions are still
maintained.
"""
from __future__ import annotations

import json
import shutil
import struct

import pytest

from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.maintenance.cleaner_manager import read_cleaner_checkpoints
from storage_engine.record.records import SimpleRecord

from .test_cli_bad_input import run, write_config

pytestmark = pytest.mark.e2e

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "segment.bytes": 1024}


def error_lines(err: str) -> list[str]:
    """The error lines of stderr (every one of them is ``storage-engine: error: ...``)."""
    lines = err.splitlines()
    assert lines and all(line.startswith("storage-engine: error: ") for line in lines), err
    return lines


@pytest.fixture
def store(tmp_path):
    """Topic ``a`` (one partition, delete policy), topic ``b`` (two) and compacted ``c`` (two), 60 records each
    (4 keys), written in this process (the commands under test run as subprocesses)."""
    log_dir = tmp_path / "logs"
    cfg = write_config(tmp_path / "storage.json", [log_dir], topics={"c": COMPACT})
    with LogManager.open(load_config(cfg)) as mgr:
        for topic, partition in (("a", 0), ("b", 0), ("b", 1), ("c", 0), ("c", 1)):
            log = mgr.get_or_create_log(topic, partition)
            for i in range(60):
                log.append_records([SimpleRecord(b"k%d" % (i % 4), b"value-%d" % i * 8, -1)])
    return cfg, log_dir


def folder_becomes_file(log_dir, name: str) -> str:
    """The partition folder moved away and a regular file put in its place: what a bad restore leaves."""
    path = log_dir / name
    shutil.move(str(path), str(log_dir.parent / f"{name}.saved"))
    path.write_text("not a folder")
    return str(path)


@pytest.mark.parametrize("command", [["flush"], ["flush", "--due-only"], ["checkpoint", "--flush"], ["retention"],
                                     ["retention", "--dry-run"], ["expire-producers"]])
def test_a_partition_folder_that_became_a_file_fails_the_command_and_the_others_are_maintained(store, command):
    cfg, log_dir = store
    path = folder_becomes_file(log_dir, "b-0")
    rc, out, err = run("--config", cfg, *command)
    assert rc == 1
    (line,) = error_lines(err)
    assert line.startswith("storage-engine: error: b-0: PartitionUnreadableError: ")
    assert f"{path} is a regular file, not a folder" in line and "delete-topic --topic b --partition 0" in line
    summary = json.loads(out)
    (failure,) = summary["failures"]
    assert (failure["topic"], failure["partition"], failure["permanent"]) == ("b", 0, True)
    others = {("a", 0), ("b", 1), ("c", 0), ("c", 1)}      # were maintained
    if command == ["flush", "--due-only"]:
        assert summary["not_due"] == len(others)
    elif command[0] == "checkpoint":
        # written for the others; b-0's entry is kept (the evidence that it should be there)
        (written,) = summary["checkpoints"].values()
        assert set(written["recovery_points"]) == {"a-0", "b-0", "b-1", "c-0", "c-1"}
        assert {(p["topic"], p["partition"]) for p in summary["flushed"]} == others
    else:
        done = summary["flushed"] if command[0] == "flush" else summary["partitions"]
        assert {(p["topic"], p["partition"]) for p in done} == others


def test_flush_of_a_topic_whose_only_partition_is_unreadable_reports_it_not_an_empty_list(store):
    cfg, log_dir = store
    path = folder_becomes_file(log_dir, "a-0")
    rc, out, err = run("--config", cfg, "flush", "--topic", "a")
    assert rc == 1 and f"a-0: PartitionUnreadableError: partition a-0 cannot be read" in error_lines(err)[0]
    assert path in err
    summary = json.loads(out)
    assert summary["flushed"] == [] and [(f["topic"], f["partition"]) for f in summary["failures"]] == [("a", 0)]
    # A topic that does not exist at all is still bad input.
    rc, out, err = run("--config", cfg, "flush", "--topic", "nosuch")
    assert rc == 2 and out == "" and "unknown topic(s) ['nosuch']" in error_lines(err)[0]


def test_a_partition_that_fails_to_load_is_set_apart_and_the_others_are_flushed(store):
    cfg, log_dir = store
    index = sorted((log_dir / "b-1").glob("*.timeindex"))[-1]
    index.unlink()
    index.mkdir()                       # a folder where a segment file belongs: the partition cannot be loaded
    rc, out, err = run("--config", cfg, "flush")
    assert rc == 1
    (line,) = error_lines(err)
    assert line.startswith("storage-engine: error: b-1: StorageIOError: cannot open time index") and str(index) in line
    summary = json.loads(out)
    assert {(p["topic"], p["partition"]) for p in summary["flushed"]} == {("a", 0), ("b", 0), ("c", 0), ("c", 1)}
    assert [(f["topic"], f["partition"]) for f in summary["failures"]] == [("b", 1)]


def test_compact_of_the_unreadable_partition_fails_instead_of_nothing_to_do(store):
    cfg, log_dir = store
    path = folder_becomes_file(log_dir, "c-0")
    rc, out, err = run("--config", cfg, "compact", "--topic", "c", "--partition", "0")
    assert rc == 1 and path in error_lines(err)[0] and error_lines(err)[0].startswith(
        "storage-engine: error: c-0: PartitionUnreadableError: ")
    summary = json.loads(out)
    assert summary["nothing_to_do"] is False and [f["partition"] for f in summary["failures"]] == [0]
    # The whole store: c-1 is cleaned, c-0 fails the command.
    rc, out, err = run("--config", cfg, "compact")
    assert rc == 1 and len(error_lines(err)) == 1 and path in err
    summary = json.loads(out)
    assert [(r["topic"], r["partition"]) for r in summary["results"]] == [("c", 1)]
    assert read_cleaner_checkpoints(str(log_dir)).get(("c", 1)) is not None


def damage_a_batch(log_dir) -> str:
    """One bit flipped inside the records of the first batch of c-0's second segment (a CRC mismatch)."""
    path = str(sorted((log_dir / "c-0").glob("*.log"))[1])
    with open(path, "r+b") as f:
        data = f.read()
        assert struct.unpack_from(">i", data, 8)[0] > 60
        f.seek(64)
        f.write(bytes([data[64] ^ 0x01]))
    return path


def test_an_uncleanable_partition_fails_every_compact_until_it_is_cleared(store):
    cfg, log_dir = store
    path = damage_a_batch(log_dir)
    rc, out, err = run("--config", cfg, "compact")
    assert rc == 1
    (line,) = error_lines(err)
    assert line.startswith("storage-engine: error: c-0: CorruptRecordError: cannot clean c-0") and path in line
    assert "compact --clear-uncleanable --topic c --partition 0" in line
    assert json.loads(out)["failed"] == ["c-0"]
    # The next runs skip it, and still fail naming it, the damage and the command that clears the mark.
    for _ in range(2):
        rc, out, err = run("--config", cfg, "compact")
        assert rc == 1
        (line,) = error_lines(err)
        assert line.startswith("storage-engine: error: c-0: CorruptRecordError: cannot clean c-0") and path in line
        assert "is marked uncleanable" in line and "compact --clear-uncleanable --topic c --partition 0" in line
        summary = json.loads(out)
        assert summary["results"] == [] and summary["nothing_to_do"] is False
        (skipped,) = summary["skipped"]
        assert skipped["reason"].startswith("uncleanable: CorruptRecordError")
    rc, out, err = run("--config", cfg, "compact", "--dry-run")
    assert rc == 1 and "is marked uncleanable" in err
    rc, out, err = run("--config", cfg, "compact", "--clear-uncleanable", "--topic", "c", "--partition", "0")
    assert (rc, err) == (0, "") and json.loads(out)["cleared"] == {str(log_dir): ["c-0"]}
    rc, out, err = run("--config", cfg, "compact")      # tried again, and the damage is met again
    assert rc == 1 and "cannot clean c-0" in error_lines(err)[0]


def test_a_command_naming_an_unreadable_partition_exits_1_naming_it_not_2_as_unknown(store):
    cfg, log_dir = store
    path = folder_becomes_file(log_dir, "b-0")
    tp = ["--topic", "b", "--partition", "0"]
    for command in (["delete-records", *tp, "--offset", "5"], ["retention", *tp],
                    ["move-partition", *tp, "--to-dir", str(log_dir)],
                    ["end-txn", *tp, "--producer-id", "1", "--epoch", "0", "--commit"], ["consume", *tp]):
        rc, out, err = run("--config", cfg, *command)
        assert rc == 1 and out == ""
        (line,) = error_lines(err)
        assert "partition b-0 cannot be read" in line and path in line, command
    rc, out, err = run("--config", cfg, "consume", "--topic", "b", "--partition", "7")     # does not exist: exit 2
    assert rc == 2 and out == "" and "partition b-7 does not exist" in error_lines(err)[0]


def test_verify_prints_one_stderr_line_per_problem(store):
    cfg, log_dir = store
    index = sorted((log_dir / "b-1").glob("*.timeindex"))[-1]
    index.unlink()
    index.mkdir()
    rc, out, err = run("--config", cfg, "verify")
    report = json.loads(out)
    assert rc == 1 and report["damaged"]
    lines = error_lines(err)
    assert len(lines) == len(report["problems"]) >= 1
    assert any(str(index) in line for line in lines)
