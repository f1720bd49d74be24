"""``status`` end to end (a real subprocess): the Storage view's first page for a terminal, a table by default and
the same facts with ``--json``; and ``log-dirs``' filesystem use as ``df`` counts it."""
from __future__ import annotations

import math
import os
import subprocess

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import load_config
from storage_engine.log import losses
from storage_engine.log.manager import LogManager
from storage_engine.maintenance.cleaner_manager import log_to_clean, update_cleaner_checkpoint

from .test_cli import Cli

pytestmark = pytest.mark.e2e
T0 = 1_700_000_000_000


@pytest.fixture
def cli(tmp_path):
    cli = Cli(tmp_path, broker={"log.segment.bytes": 2048},
              topics={"keyed": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.2}})
    for p, keys in enumerate((5, 50)):
        cli.produce("keyed", p, [{"key": f"k{i % keys}", "value": "v" * 40, "timestamp": T0 + i} for i in range(300)])
    cli.produce("plain", 0, [{"value": "x" * 80, "timestamp": T0 + i} for i in range(100)])
    log = cli.segment_logs("keyed", 1)[1]          # keyed-1 cleaned up to its second segment: less dirty
    update_cleaner_checkpoint(os.path.dirname(os.path.dirname(log)), ("keyed", 1),
                              layout.offset_from_filename(os.path.basename(log)))
    return cli


def df_percent(path: str) -> int:
    out = subprocess.run(["df", "-P", path], capture_output=True, text=True, check=True).stdout.splitlines()
    return int(out[1].split()[4].rstrip("%"))


def stable(read, path):
    """``read()`` between two equal readings of df's Use% (other processes write to the filesystem too)."""
    for _attempt in range(5):
        before = df_percent(path)
        value = read()
        if df_percent(path) == before:
            return value, before
    pytest.fail("the filesystem's use kept changing")


def files(dirs) -> dict:
    """{path: (size, mtime)} of everything under ``dirs``."""
    out = {}
    for d in dirs:
        for root, folders, names in os.walk(d):
            for n in names + folders:
                st = os.stat(os.path.join(root, n))
                out[os.path.join(root, n)] = (st.st_size, st.st_mtime_ns)
    return out


def test_status_shows_the_overview_as_a_table_and_as_json(cli):
    config = load_config(cli.cfg)
    before = files(cli.dirs)
    facts, percent = stable(lambda: cli.json("status", "--json", "--now-ms", T0 + 1000), cli.dirs[0])
    assert files(cli.dirs) == before                     # read-only: no file created, changed or locked
    # The same facts the engine's own listing gives.
    with LogManager.open(config, clock=ManualClock(T0 + 1000)) as mgr:
        truth = {tp: log.describe() for tp, log in mgr.logs.items()}
        ratios = {tp: round(log_to_clean(log, _checkpoint(log), T0 + 1000).cleanable_ratio, 6)
                  for tp, log in mgr.logs.items() if tp[0] == "keyed"}
    assert facts["partitions"] == 3
    for d in facts["log_dirs"]:
        mine = [v for v in truth.values() if os.path.dirname(v["dir"]) == d["path"]]
        assert d["partitions"] == len(mine) and d["size_bytes"] == sum(v["size_bytes"] for v in mine)
        assert math.ceil(d["used_percent"]) == percent          # both dirs on one filesystem
    assert [(p["topic"], p["partition"]) for p in facts["dirtiest"]] == sorted(ratios, key=lambda tp: -ratios[tp])
    assert [p["dirty_ratio"] for p in facts["dirtiest"]] == sorted(ratios.values(), reverse=True)
    assert facts["damaged"] == []

    _rc, text, _err = cli.run("status", "--now-ms", T0 + 1000)
    lines = text.splitlines()
    assert lines[0].startswith("3 partition(s) in 2 log dir(s)")
    header = next(line for line in lines if line.startswith("LOG DIR"))
    assert header.split()[-2:] == ["USE%", "DAMAGE"]
    for d in facts["log_dirs"]:
        row = next(line for line in lines if line.startswith(d["path"] + " "))
        assert row.split()[-2:] == [f"{d['used_percent']:.1f}%", "none"]
    dirtiest = lines[lines.index(next(x for x in lines if x.startswith("Dirtiest"))) + 2:][:2]
    assert [x.split()[0] for x in dirtiest] == [f"{t}-{p}" for t, p in sorted(ratios, key=lambda tp: -ratios[tp])]
    assert f"{100 * max(ratios.values()):.1f}%" in dirtiest[0]
    assert "Damage: 0 partition(s), none found" in text


def test_status_names_damage_and_foreign_entries(cli):
    pdir = cli.partition_dir("plain", 0)
    victim = cli.segment_logs("plain", 0)[0]
    os.remove(victim)
    os.mkdir(victim)                                         # a .log that became a directory
    log_dir = os.path.dirname(cli.partition_dir("keyed", 0))
    losses.record(log_dir, "keyed-0", [{"start": 3, "end": 9, "reason": "a segment emptied", "found_ms": T0}])
    os.mkdir(os.path.join(log_dir, "lost+found"))
    with open(os.path.join(log_dir, "README"), "w") as f:
        f.write("x")

    facts = cli.json("status", "--json")
    damaged = {(p["topic"], p["partition"]): [x["kind"] for x in p["damage"]] for p in facts["damaged"]}
    assert damaged == {("plain", 0): ["unreadable"], ("keyed", 0): ["lost"]}
    _rc, text, _err = cli.run("status")
    assert "Damage: 2 partition(s)" in text
    assert any(line.split()[:3] == ["plain-0", os.path.basename(os.path.dirname(pdir)), "unreadable"]
               and victim in line for line in text.splitlines())
    assert "offsets [3, 9) were lost (a segment emptied)" in text
    assert f"{log_dir}: lost+found" in text and f"{log_dir}: README (file)" in text
    row = next(line for line in text.splitlines() if line.startswith(log_dir + " "))
    assert row.endswith("problem(s)")


def test_log_dirs_use_is_df_s(cli):
    usage, percent = stable(lambda: cli.json("log-dirs")["log_dirs"], cli.dirs[0])
    first = next(u for u in usage if u["log_dir"] == cli.dirs[0])
    assert math.ceil(first["fs_used_percent"]) == percent
    assert first["fs_used_percent"] == pytest.approx(
        100 * first["fs_used_bytes"] / (first["fs_used_bytes"] + first["fs_available_bytes"]), abs=0.001)


def _checkpoint(log):
    from storage_engine.maintenance.cleaner_manager import read_cleaner_checkpoints
    return read_cleaner_checkpoints(log.log_dir).get((log.topic, log.partition))
