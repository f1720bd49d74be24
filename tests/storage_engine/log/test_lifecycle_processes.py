"""Topic and log-dir lifecycle with real processes (issue: deleting topics, moving partitions online, offline dirs).

* A topic deleted while a reader process holds it open: the reader fails cleanly (a typed error, no crash) and
  the topic is created again at once.
* A partition moved between log dirs while a writer process appends, a reader process reads and a third process
  runs maintenance; the mover is killed with SIGKILL at every step of the commit (and twice in the copy):
  afterwards every acknowledged record is readable exactly once.
* One log dir made unreadable (``chmod 000`` seen by a process without CAP_DAC_OVERRIDE) while a writer appends
  to partitions in both dirs: the other dir keeps taking appends.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from storage_engine import layout
from storage_engine.config_file import load_config
from storage_engine.log import mover as mover_mod
from storage_engine.log.locks import LIVE, MOVED, FileLock, lock_path, peek_state
from storage_engine.log.manager import LogManager
from storage_engine.inspection.verify import verify_log_dirs
from tests.paths import REPO
from tests.storage_engine.procs.payloads import digest, payload_ok

from .test_concurrency import (CHILD_TIMEOUT_S, TOPIC, appender, assert_acks_present, children,  # noqa: F401
                               read_log, write_config)
from tests.storage_engine.helpers import present
from tests.storage_engine.kernels import split_by_process_fixture

pytestmark = pytest.mark.slow

# Once, not once per kernel implementation: the work is in child processes (see split_by_process_fixture).
kernels = split_by_process_fixture()


def _home(config, topic=TOPIC, partition=0) -> list[str]:
    """The dirs the partition is in service in: the dir of a plain folder whose lock is not retired, and, for a
    move stopped past its commit point (the source's lock retired as moved) before its copy was renamed to the
    plain name, the dir of that copy: there the next process to use the partition completes the move.

    Read under the creation lock, which every move's commit and every completion of a move hold: the folders and
    locks read here are one state, not one taken half way through a completion by another process."""
    name = layout.partition_dir_name(topic, partition)
    with FileLock(mover_mod.create_lock_path(config.log_dirs)):
        states = {d: peek_state(lock_path(d, name)) for d in config.log_dirs if os.path.isdir(os.path.join(d, name))}
        live = [d for d, state in states.items() if state is None or state.status == LIVE]
        moved_out = [d for d, state in states.items() if state is not None and state.status == MOVED]
        copies = [d for d, _folder in mover_mod.future_folders(config.log_dirs, topic, partition)
                  if moved_out and not live and d not in moved_out]
        return live + copies


def _acks_of(child) -> int:
    return sum(1 for line in child.snapshot() if line.startswith("ACK"))


# -- delete while a reader holds it open, create again at once ---------------------------------------------------

def test_a_topic_deleted_under_a_reader_process_fails_it_cleanly_and_is_created_again_at_once(tmp_path, children):
    cfg = write_config(tmp_path, dirs=["logs-a", "logs-b"], **{"log.segment.bytes": 4096})
    config = load_config(cfg)
    writer = appender(children, cfg, "old", appends=60, records_per_append=2, payload_bytes=100)
    assert writer.finish() == 0, writer.failure("failed")
    reader = children("reader.py", "--config", cfg, "--topic", TOPIC, "--partition", "0", "--rounds", "100000",
                      "--max-seconds", "60")
    assert reader.wait_for(lambda ls: any(x.startswith("SNAP 0 120 ") for x in ls), CHILD_TIMEOUT_S), \
        reader.failure("never read the partition")
    (home,) = _home(config)

    result = subprocess.run([sys.executable, "-m", "storage_engine", "--config", cfg, "delete-topic", "--topic",
                             TOPIC], capture_output=True, cwd=str(REPO), timeout=CHILD_TIMEOUT_S,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr.decode()
    deleted = json.loads(result.stdout)["deleted"][0]["deleted_folder"]
    assert os.path.isdir(os.path.join(home, deleted)) and _home(config) == []

    # The reader stops on a typed error naming the deletion: exit 0, no traceback, nothing wrong read before.
    assert reader.finish() == 0, reader.failure("did not stop cleanly")
    lines = reader.snapshot()
    gone = [x for x in lines if x.startswith("GONE")]
    assert gone and gone[0].startswith(f"GONE PartitionDeletedError: partition {TOPIC}-0 was deleted"), lines[-3:]
    assert not [x for x in lines if x.startswith("BAD")]
    assert "Traceback" not in reader.stderr_path.read_text()

    # Created again at once, by another process: a new partition from offset 0, none of the old records.
    again = appender(children, cfg, "new", appends=5, records_per_append=1, payload_bytes=50)
    assert again.finish() == 0, again.failure("failed")
    assert [a[0] for a in again.acks()] == list(range(5))
    with LogManager.open(config) as mgr:
        records = read_log(mgr.get_log(TOPIC, 0))
        assert sorted(records) == list(range(5))
        assert_acks_present(again.acks(), records)
    report = verify_log_dirs(config)
    assert not report["damaged"]
    assert any(p["file"].endswith(deleted) for p in report["pending"])


# -- a move with a live writer, killed at every step -------------------------------------------------------------

def _mover(children, cfg, to_dir, *extra):
    return children("mover_proc.py", "--config", cfg, "--topic", TOPIC, "--partition", "0", "--to-dir", to_dir,
                    *extra)


def test_a_move_killed_at_every_step_with_a_live_writer_keeps_every_acknowledged_record_once(tmp_path, children):
    cfg = write_config(tmp_path, dirs=["logs-a", "logs-b"],
                       **{"log.segment.bytes": 16384, "log.index.interval.bytes": 1024})
    config = load_config(cfg)
    stop_file = tmp_path / "stop"
    writer = appender(children, cfg, "w", appends=1_000_000, records_per_append=2, payload_bytes=120,
                      max_seconds=600, pause_s=0.003)
    writer.wait_ready()
    assert writer.wait_for(lambda ls: _acks_of(writer) >= 400, CHILD_TIMEOUT_S), writer.failure("did not append")
    reader = children("reader.py", "--config", cfg, "--topic", TOPIC, "--partition", "0", "--rounds", "10000000",
                      "--max-seconds", "600")
    maintainer = children("maintainer.py", "--config", cfg, "--max-seconds", "600", "--stop-file", str(stop_file))

    runs = []
    # Two kills in the middle of the copy, then one at every step of the commit until a move completes.
    plans = [("--die-after-bytes", "20000"), ("--die-after-bytes", "60000")]
    step = 0
    while True:
        if plans:
            extra = plans.pop(0)
        else:
            step += 1
            extra = ("--stop-at", str(step))
        (home,) = _home(config)
        target = [d for d in config.log_dirs if d != home][0]
        acks_before = _acks_of(writer)
        mover = _mover(children, cfg, target, *extra, "--final-lag-bytes", "65536")
        rc = mover.finish()
        assert rc in (0, -signal.SIGKILL), mover.failure(f"failed at {extra}")
        # Exactly one log in service, and the writer keeps appending to it. (A kill past the commit point may leave
        # the move for the writer to complete; until it takes the partition lock, the copy's dir is the home.)
        homes = _home(config)
        assert len(homes) == 1, (extra, homes)
        runs.append((extra, rc, home, homes[0]))
        assert writer.proc.poll() is None, writer.failure("the writer died")
        assert writer.wait_for(lambda ls: _acks_of(writer) >= acks_before + 20, CHILD_TIMEOUT_S), \
            writer.failure(f"the writer stopped appending after the mover stopped at {extra}")
        if rc == 0 and not plans:
            moved = json.loads([x for x in mover.snapshot() if x.startswith("MOVED ")][0][6:])
            assert moved["committed"] and moved["target_dir"] == target
            break
        assert step < 100, "the commit never completed"
    commit_steps = step

    # One more move with everything running, to the first dir, completing.
    (home,) = _home(config)
    back = _mover(children, cfg, [d for d in config.log_dirs if d != home][0])
    assert back.finish() == 0, back.failure("failed")

    writer.proc.send_signal(signal.SIGKILL)      # stops mid-append: its last batch may be written, not acknowledged
    writer.finish()
    stop_file.write_text("stop")
    assert maintainer.finish() == 0, maintainer.failure("failed")
    reader.proc.send_signal(signal.SIGTERM)
    reader.finish()
    assert not [x for x in maintainer.snapshot() if x.startswith("BAD")], maintainer.snapshot()[-5:]
    assert sum(1 for x in maintainer.snapshot() if x.startswith("ROUND")) >= 3
    assert not [x for x in reader.snapshot() if x.startswith("BAD")], [x for x in reader.snapshot() if "BAD" in x][:3]
    assert sum(1 for x in reader.snapshot() if x.startswith("SNAP")) >= 3

    acks = writer.acks()
    offsets = [a[0] for a in acks]
    assert offsets == sorted(set(offsets)), "the writer's acknowledged offsets repeat or go backwards"
    assert commit_steps > 8, runs
    killed = [r for r in runs if r[1] != 0]
    assert any(before == after for _e, _rc, before, after in killed), "no kill left the old log in service"
    assert any(before != after for _e, _rc, before, after in killed), "no kill came after the commit point"
    with LogManager.open(config) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        records = read_log(log)              # offsets strictly increase: no record twice
        assert sorted(records) == list(range(log.log_end_offset)), "offsets are not contiguous"
        assert_acks_present(acks, records)
        assert max(offsets) + 1 <= log.log_end_offset <= max(offsets) + 3
        assert all(payload_ok(v) for v in records.values())
    report = verify_log_dirs(config)
    assert not report["damaged"], report["problems"]
    assert all(not layout.scan_log_dir(d).futures for d in config.log_dirs), "a copy was left behind"


def test_a_move_killed_right_after_its_commit_point_is_in_service_in_the_target_until_a_process_completes_it(
        tmp_path, children):
    """What a SIGKILL between the commit point and the rename of the copy leaves, when no other process meets it at
    once: no plain folder has a live lock (the source's lock is retired as moved, the copy still has its
    ``-future`` name), yet the partition is in service in the target, where the next process to use it completes
    the move, with every record. (The kill-at-every-step test above observes this state whenever its writer is
    slower than the test to take the partition lock after the mover died.)"""
    cfg = write_config(tmp_path, dirs=["logs-a", "logs-b"],
                       **{"log.segment.bytes": 16384, "log.index.interval.bytes": 1024})
    config = load_config(cfg)
    name = f"{TOPIC}-0"
    writer = appender(children, cfg, "w", appends=300, records_per_append=2, payload_bytes=120)
    assert writer.finish() == 0, writer.failure("failed")
    (home,) = _home(config)
    target = [d for d in config.log_dirs if d != home][0]
    mover = _mover(children, cfg, target, "--stop-before", "durable_rename")
    assert mover.finish() == -signal.SIGKILL, mover.failure("did not die before renaming the copy")
    assert present(peek_state(lock_path(home, name))).status == MOVED, "the kill came before the commit point"
    assert not os.path.isdir(os.path.join(target, name))
    assert [d for d, _folder in mover_mod.future_folders(config.log_dirs, TOPIC, 0)] == [target]
    assert _home(config) == [target]

    with LogManager.open(config) as mgr:         # the next process to use the partition completes the move
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        assert log.log_dir == target
        records = read_log(log)
        assert sorted(records) == list(range(600))
        assert_acks_present(writer.acks(), records)
    assert _home(config) == [target]
    assert os.path.isdir(os.path.join(target, name)) and not os.path.isdir(os.path.join(home, name))
    assert mover_mod.future_folders(config.log_dirs, TOPIC, 0) == []
    assert not verify_log_dirs(config)["damaged"]


# -- one dir unreadable, the other keeps taking appends ----------------------------------------------------------

def _unprivileged(*argv: str) -> list[str]:
    """Run as root without the capabilities that ignore file permissions, so a chmod 000 dir is unreadable."""
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", *argv]


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux) to drop capabilities")
def test_a_dir_made_unreadable_goes_offline_while_the_other_dir_keeps_taking_appends(tmp_path, children):
    cfg = write_config(tmp_path, dirs=["logs-a", "logs-b"], **{"log.segment.bytes": 4096})
    config = load_config(cfg)
    a, b = config.log_dirs
    os.makedirs(a)
    os.makedirs(b)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = os.path.join(os.path.dirname(__file__), "..", "procs", "dir_writer.py")
    with open(tmp_path / "writer.stderr", "wb") as err:
        proc = subprocess.Popen(_unprivileged(sys.executable, script, "--config", cfg, "--partitions", "x-0,y-0",
                                              "--max-seconds", "120", "--pause-s", "0.005"),
                                stdout=subprocess.PIPE, stderr=err, env=env, cwd=str(REPO))
    lines: list[str] = []
    try:
        def read_until(pred, timeout_s):
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                assert proc.stdout is not None
                line = proc.stdout.readline().decode()
                if not line:
                    return False
                lines.append(line.strip())
                if pred():
                    return True
            return False

        def count(prefix):
            return sum(1 for x in lines if x.startswith(prefix))

        assert read_until(lambda: count("ACK x-0") >= 30 and count("ACK y-0") >= 30, CHILD_TIMEOUT_S), \
            (tmp_path / "writer.stderr").read_text()[-3000:]
        homes = dict(x.split()[1:] for x in lines if x.startswith("HOME"))
        assert homes == {"x-0": a, "y-0": b}
        os.chmod(a, 0)
        y_before = count("ACK y-0")
        assert read_until(lambda: count("ERR x-0") >= 5 and count("ACK y-0") >= y_before + 100, CHILD_TIMEOUT_S), \
            lines[-10:]
        errors = [x for x in lines if x.startswith("ERR x-0")]
        # The first error names the OS error; every later one says the dir is offline.
        assert "Permission denied" in errors[0], errors[0]
        assert all(f"LogDirOfflineError: log dir {a} is offline" in e for e in errors[1:]), errors[1:3]
        assert not [x for x in lines if x.startswith("ERR y-0")]
        # A new process finds the dir unreadable at once: describe reports it offline, exit 0.
        described = subprocess.run(_unprivileged(sys.executable, "-m", "storage_engine", "--config", cfg,
                                                 "describe"), capture_output=True, env=env, cwd=str(REPO),
                                   timeout=CHILD_TIMEOUT_S)
        assert described.returncode == 0, described.stderr.decode()
        dirs = {d["path"]: d for d in json.loads(described.stdout)["log_dirs"]}
        assert dirs[a]["status"] == "offline" and "Permission denied" in dirs[a]["offline_reason"]
        assert [p["topic"] for p in dirs[b]["partitions"]] == ["y"]
        verified = subprocess.run(_unprivileged(sys.executable, "-m", "storage_engine", "--config", cfg, "verify"),
                                  capture_output=True, env=env, cwd=str(REPO), timeout=CHILD_TIMEOUT_S)
        report = json.loads(verified.stdout)
        assert verified.returncode == 0 and list(report["offline_dirs"]) == [a], verified.stdout[-2000:]
    finally:
        os.chmod(a, 0o755)
        if proc.poll() is None:
            proc.kill()
        proc.wait(CHILD_TIMEOUT_S)
    acked: dict[str, list[tuple[int, str]]] = {}
    for x in lines:
        if x.startswith("ACK"):
            _, name, ack_offset, dig = x.split()
            acked.setdefault(name, []).append((int(ack_offset), dig))
    with LogManager.open(config) as mgr:
        for name, acks in acked.items():
            topic, part = name.split("-")
            records = read_log(mgr.get_log(topic, int(part)))
            for offset, dig in acks:
                assert digest(records[offset]) == dig, (name, offset)
    assert not verify_log_dirs(config)["damaged"]
