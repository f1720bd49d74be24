"""The lifecycle commands end to end (real subprocesses): ``delete-topic``, ``move-partition``, ``log-dirs``,
``remove-folder``, ``purge-deleted`` of deleted folders, ``describe``/``verify`` of stray and foreign folders."""
from __future__ import annotations

import json
import os

import pytest

from storage_engine import layout

from .test_cli import Cli

pytestmark = pytest.mark.e2e
T0 = 1_700_000_000_000


@pytest.fixture
def cli(tmp_path):
    return Cli(tmp_path, broker={"log.segment.bytes": 2048, "log.segment.delete.delay.ms": 60000})


def _lines(n, prefix="v"):
    return [{"key": f"k{i}", "value": f"{prefix}{i:04d}" + "x" * 100, "timestamp": T0} for i in range(n)]


def test_delete_topic_then_produce_again_at_once(cli):
    for p in (0, 1):
        cli.produce("t", p, _lines(30), "--now-ms", T0)
    out = cli.json("delete-topic", "--topic", "t", "--partition", "1", "--now-ms", T0)
    assert out["partitions"] == [1] and out["deleted"][0]["deleted_folder"].startswith("t-1.")
    # The deleted folder waits for file.delete.delay.ms, then purge-deleted removes it.
    deleted = [os.path.join(d, n) for d in cli.dirs for n in os.listdir(d) if n.endswith("-delete")]
    assert len(deleted) == 1 and os.path.basename(deleted[0]) == out["deleted"][0]["deleted_folder"]
    assert cli.json("purge-deleted", "--now-ms", T0 + 59_999)["folders_removed"] == []
    assert cli.json("purge-deleted", "--now-ms", T0 + 60_000)["folders_removed"] == deleted
    assert not os.path.exists(deleted[0])
    assert [r["offset"] for r in cli.consume("t", 0)] == list(range(30))
    rc, err = cli.consume("t", 1, expect=2)
    assert rc == 2 and "t-1 does not exist" in err
    assert cli.produce("t", 1, _lines(2, "new"), "--now-ms", T0)["base_offset"] == 0
    assert [r["value"][:7] for r in cli.consume("t", 1)] == ["new0000", "new0001"]
    rc, _out, err = cli.run("delete-topic", "--topic", "nope", expect=2)
    assert "topic 'nope' has no partitions" in err
    rc, _out, err = cli.run("delete-topic", "--topic", "../t", expect=2)
    assert "illegal" in err


def test_move_partition_and_log_dirs_balance(cli):
    cli.produce("big", 0, _lines(200), "--now-ms", T0)       # first dir
    cli.produce("small", 0, _lines(5), "--now-ms", T0)       # second dir
    cli.produce("big", 1, _lines(150), "--now-ms", T0)       # first dir again (a tie goes to the first)
    first, second = cli.dirs
    assert cli.partition_dir("big", 0).startswith(first) and cli.partition_dir("big", 1).startswith(first)
    usage = {d["log_dir"]: d for d in cli.json("log-dirs")["log_dirs"]}
    assert usage[first]["data_bytes"] > usage[second]["data_bytes"] > 0
    limit = usage[first]["data_bytes"] * 3 // 4
    plan = cli.json("log-dirs", "--max-dir-bytes", limit)
    assert [(m["topic"], m["partition"], m["to_dir"]) for m in plan["moves"]] == [("big", 0, second)]
    assert cli.partition_dir("big", 0).startswith(first), "planning moved nothing"
    done = cli.json("log-dirs", "--max-dir-bytes", limit, "--execute")
    assert done["results"][0]["committed"] and cli.partition_dir("big", 0).startswith(second)
    assert cli.json("log-dirs", "--max-dir-bytes", limit)["moves"] == []
    assert [r["offset"] for r in cli.consume("big", 0)] == list(range(200))
    moved = cli.json("move-partition", "--topic", "big", "--partition", 0, "--to-dir", first)
    assert moved["committed"] and moved["source_dir"] == second and moved["bytes_copied"] > 0
    assert [r["offset"] for r in cli.consume("big", 0)] == list(range(200))
    assert cli.produce("big", 0, _lines(1), "--now-ms", T0)["base_offset"] == 200
    for args, message in [(("--to-dir", first), "already in"), (("--to-dir", "/elsewhere"), "not one of the log dirs"),
                          ((), "give either --to-dir"), (("--to-dir", first, "--cancel"), "give either")]:
        rc, _out, err = cli.run("move-partition", "--topic", "big", "--partition", 0, *args, expect=2)
        assert message in err, err
    rc, _out, err = cli.run("log-dirs", "--execute", expect=2)
    assert "--execute needs" in err
    rc, _out, err = cli.run("log-dirs", "--max-used-percent", "150", expect=2)
    assert "max_used_percent must be a number in (0, 100]" in err


def test_stray_and_foreign_folders_are_reported_never_loaded_and_removed_only_on_request(cli):
    cli.produce("t", 0, _lines(3), "--now-ms", T0)
    first = cli.dirs[0]
    stray = layout.stray_dir_name("t", 7)
    os.makedirs(os.path.join(first, stray))
    os.makedirs(os.path.join(first, "lost+found"))
    with open(os.path.join(first, "lost+found", "00000000000000000000.log"), "wb") as f:
        f.write(b"not a log")
    with open(os.path.join(first, "notes.txt"), "w") as notes:
        notes.write("ops notes")
    described = {d["path"]: d for d in cli.json("describe")["log_dirs"]}[first]
    assert described["strays"] == [stray]
    assert [f["name"] for f in described["foreign"]] == ["lost+found"]
    assert described["foreign_files"] == ["notes.txt"]
    assert [p["topic"] for p in described["partitions"]] == ["t"]
    report = cli.json("verify")
    assert report["damaged"] is False
    assert sorted(f["kind"] for f in report["foreign"]) == ["foreign", "foreign-file", "stray"]
    cli.run("verify", "--strict", expect=1)
    # Maintenance leaves them alone.
    cli.json("retention", "--now-ms", T0)
    cli.json("purge-deleted", "--now-ms", T0 + 10**12)
    assert os.path.isdir(os.path.join(first, stray)) and os.path.isdir(os.path.join(first, "lost+found"))
    # Only the explicit command removes them, and never a partition.
    for name, message in (("t-0", "is a partition"), ("../x", "one name inside the log dir"),
                          ("missing", "no stray or foreign folder")):
        rc, _out, err = cli.run("remove-folder", "--log-dir", first, "--name", name, expect=2)
        assert message in err, err
    dry = cli.json("remove-folder", "--log-dir", first, "--name", "lost+found", "--dry-run")
    assert dry["kind"] == "foreign" and dry["bytes_freed"] == 9 and os.path.isdir(os.path.join(first, "lost+found"))
    cli.json("remove-folder", "--log-dir", first, "--name", "lost+found")
    cli.json("remove-folder", "--log-dir", first, "--name", stray)
    assert not os.path.exists(os.path.join(first, "lost+found")) and not os.path.exists(os.path.join(first, stray))
    assert json.loads(cli.run("verify", "--strict", expect=1)[1])["foreign"][0]["kind"] == "foreign-file"
    assert [r["offset"] for r in cli.consume("t", 0)] == [0, 1, 2]
