"""A cleaner killed at every step of its swap, while other processes keep the log dir open (real processes,
real SIGKILL through ``STORAGE_ENGINE_CRASH_AT``), then maintenance from a third process, then a restart.

The first test is a deterministic reproduction: a compacted partition (500 unique keys, then 2,500
records over 300 keys, small segments); a second process holds the log dir open; ``compact`` dies right after the
old segments became ``.deleted`` and before the ``.swap`` got its final name; ``flush`` and ``checkpoint --flush``
run from a third process; then everything restarts. Before the fix the view opened by ``flush`` took the first
remaining base offset as the log start offset and published it: 500 of 800 keys lost their latest value,
``verify`` said nothing, and the next retention deleted segment 0 for good.
"""
from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys

import pytest

from storage_engine import crashpoints
from storage_engine.config_file import load_config
from storage_engine.log import intent
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.inspection.verify import verify_log_dirs
from tests.paths import REPO
from tests.storage_engine.helpers import present
from tests.storage_engine.kernels import split_by_process_fixture

pytestmark = pytest.mark.slow

# Once, not once per kernel implementation: the work is in child processes (see split_by_process_fixture).
kernels = split_by_process_fixture()

PROCS = pathlib.Path(__file__).resolve().parent.parent / "procs"
TOPIC = "keyed"
TIMEOUT_S = 120
SWAP_STEPS = [s for s, (protocol, _) in crashpoints.STEPS.items() if protocol == "swap"]


def write_config(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: [logs]\n  log.segment.bytes: 4096\n  log.index.interval.bytes: 256\n"
                    f"topics:\n  {TOPIC}: {{cleanup.policy: compact, min.cleanable.dirty.ratio: 0.01}}\n",
                    encoding="utf-8")
    return str(path)


def env(**extra) -> dict:
    out = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)
    if crashpoints.ENV_VAR not in extra:
        out.pop(crashpoints.ENV_VAR, None)
    return out


def cli(cfg: str, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    extra = {crashpoints.ENV_VAR: crash_at} if crash_at else {}
    return subprocess.run([sys.executable, "-m", "storage_engine", "--config", cfg, *args], cwd=str(REPO),
                          env=env(**extra), capture_output=True, text=True, timeout=TIMEOUT_S)


def fill(cfg: str) -> dict[str, bytes | None]:
    """500 unique keys, then 2,500 records over 300 keys; returns the latest value of every key."""
    rng = random.Random(10)
    keys = [f"key-{i}" for i in range(500)] + [f"key-{500 + rng.randrange(300)}" for _ in range(2500)]
    latest = {}
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for start in range(0, len(keys), 5):
            records = [SimpleRecord(k.encode(), f"{k}@{start + j}".encode()) for j, k in enumerate(keys[start:start + 5])]
            log.append_records(records)
            latest.update({present(r.key).decode(): r.value for r in records})
    return latest


def latest_values(cfg: str) -> tuple[dict[str, bytes | None], dict]:
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        found = {present(r.key).decode(): r.value for r in log.read_records(log.log_start_offset)}
        state = {"log_start_offset": log.log_start_offset, "bases": [s.base_offset for s in log.segments]}
    return found, state


class Holder:
    """A process holding the log dir open (every partition loaded) until told to stop."""

    def __init__(self, cfg: str, clean: bool):
        args = [sys.executable, str(PROCS / "holder.py"), "--config", cfg] + (["--clean"] if clean else [])
        self.proc = subprocess.Popen(args, cwd=str(REPO), env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        assert self.proc.stdout.readline().strip() == "READY", self.proc.stderr.read()

    def stop(self, kill: bool) -> None:
        if kill:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(TIMEOUT_S)
        else:
            out, err = self.proc.communicate("", timeout=TIMEOUT_S)
            assert self.proc.returncode == 0 and "DONE" in out, err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT_S)


def run_scenario(tmp_path, step: str, *, kill_holder: bool) -> None:
    cfg = write_config(tmp_path)
    expected = fill(cfg)
    assert len(expected) == 800
    holder = Holder(cfg, clean=not kill_holder)
    try:
        compact = cli(cfg, "compact", "--topic", TOPIC, crash_at=step)
        assert compact.returncode == -signal.SIGKILL, (compact.returncode, compact.stderr)
        assert f"CRASHPOINT {step}" in compact.stderr
        log_dir = load_config(cfg).log_dirs[0]
        if step != "swap.done" or intent.exists(log_dir, f"{TOPIC}-0"):
            assert intent.exists(log_dir, f"{TOPIC}-0"), "the swap was recorded before its first rename"
        # Maintenance from a third process while the holder keeps the dir open: each opens a view.
        for args in (["flush"], ["checkpoint", "--flush"]):
            res = cli(cfg, *args)
            assert res.returncode == 0, res.stderr
        assert not intent.exists(log_dir, f"{TOPIC}-0"), "the first view to sync resolved the dead cleaner's swap"
        res = cli(cfg, "verify")
        assert res.returncode == 0, res.stdout
        holder.stop(kill=kill_holder)
    finally:
        holder.close()
    found, state = latest_values(cfg)  # a restart: the first opener's full load
    lost = {k: v for k, v in expected.items() if found.get(k) != v}
    assert not lost, f"{len(lost)} of 800 keys lost their latest value ({state})"
    assert state["log_start_offset"] == 0 or state["bases"][0] > 0 and state["log_start_offset"] <= state["bases"][0]
    report = verify_log_dirs(load_config(cfg))
    assert not report["damaged"], report["problems"]
    # The next retention (and a second compaction) keep every key too.
    for args in (["retention"], ["compact", "--topic", TOPIC], ["retention"]):
        res = cli(cfg, *args)
        assert res.returncode == 0, res.stderr
    found, state = latest_values(cfg)
    assert {k: found.get(k) for k in expected} == expected, state


def test_the_issues_reproduction_a_cleaner_killed_between_old_deleted_and_swap_renamed(tmp_path):
    run_scenario(tmp_path, "swap.old-deleted", kill_holder=True)


@pytest.mark.parametrize("step", SWAP_STEPS)
@pytest.mark.parametrize("kill_holder", [False, True], ids=["holder-closes", "holder-killed"])
def test_a_cleaner_killed_at_each_step_of_its_swap_loses_no_key(tmp_path, step, kill_holder):
    run_scenario(tmp_path, step, kill_holder=kill_holder)


def test_a_reader_retries_across_a_swap_in_progress(tmp_path):
    """A reader whose segment files are renamed away by a swap (the cleaner pausing inside it, holding the lock)
    waits for the lock and reads the new files: no "cannot open log file" failure."""
    cfg = write_config(tmp_path)
    expected = fill(cfg)
    config = load_config(cfg)
    with LogManager.open(config) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        sealed = [s for s in log.segments[:-1]]
        for seg in sealed:
            seg.release()  # lazily opened again when read: by then the swap renamed its files
        compactor = subprocess.Popen([sys.executable, "-c", PAUSING_COMPACT, cfg], cwd=str(REPO), env=env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert compactor.stdout is not None and compactor.stderr is not None
            assert compactor.stdout.readline().strip() == "PAUSED", compactor.stderr.read()
            found = {present(r.key).decode(): r.value for r in log.read_records(log.log_start_offset)}
            out, err = compactor.communicate(timeout=TIMEOUT_S)
            assert compactor.returncode == 0, err
        finally:
            if compactor.poll() is None:
                compactor.kill()
        assert found == expected
        assert json.loads(out.splitlines()[-1])["results"][0]["groups"] >= 1


# A compaction whose first swap pauses (holding the partition lock) right after the old segments became .deleted.
# Only the first: the reader starts when it reads PAUSED and is waiting on that lock; a pause in each of the
# following groups' swaps (about 30 of them) only made the compaction 30 s longer.
PAUSING_COMPACT = """
import sys, time
from storage_engine import crashpoints
from storage_engine.config_file import load_config
from storage_engine.jobs import compaction
original = crashpoints.reached
paused = []
def reached(step):
    if step == "swap.old-deleted" and not paused:
        paused.append(step)
        print("PAUSED", flush=True)
        time.sleep(1.0)
    original(step)
crashpoints.reached = reached
import json
print(json.dumps(compaction.compact(load_config(sys.argv[1]), topics=["keyed"])), flush=True)
"""


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_a_cleaner_killed_swapping_a_first_group_that_cleaned_to_nothing_loses_nothing_and_reports_no_loss(tmp_path,
                                                                                                           step):
    """Every key of the first segments has a later value, so the first group cleans to nothing and the swap drops
    it. A finished swap moves the log start past it; one killed at any step and completed by the next load must do
    the same, not report the dropped offsets lost (a loss rule took the base offset 0 of the group's ``.deleted``
    files for no offset at all and refused every read until ``accept-loss``). A swap killed before its first
    rename is rolled back instead: the group is still there."""
    cfg = write_config(tmp_path)
    latest = {}
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for start in range(0, 1500, 5):
            records = [SimpleRecord(f"key-{(start + j) % 50}".encode(), f"v{start + j}".encode()) for j in range(5)]
            log.append_records(records)
            latest.update({present(r.key).decode(): r.value for r in records})
    compact = cli(cfg, "compact", "--topic", TOPIC, crash_at=step)
    assert compact.returncode == -signal.SIGKILL, (compact.returncode, compact.stderr)
    found, state = latest_values(cfg)
    assert found == latest, state
    # rolled back (the group still there, the log start where it was) or forward (past the dropped group)
    assert state["log_start_offset"] == state["bases"][0], state
    report = verify_log_dirs(load_config(cfg))
    assert not report["damaged"], report["problems"]
    assert not any(n.startswith(".engine+loss+") for n in os.listdir(load_config(cfg).log_dirs[0]))
