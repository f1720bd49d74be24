"""Producer state across real processes: two processes appending for one producer see one state, and a process
killed (SIGKILL) at each step of an abort, a snapshot and a roll leaves a log that recovers the same state. The
cleaner's crash points are simulated in process (a rename that raises), as in test_cleaner."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from storage_engine import layout
from storage_engine.errors import CorruptSnapshotError
from storage_engine.log.reads import READ_COMMITTED
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment import producer_snapshot
from tests.storage_engine.helpers import present
from tests.storage_engine.kernels import child_processes_once

from ..maintenance.test_cleaner import RenameCrasher, SimulatedCrash, compact_cfg, open_existing

PROCS = pathlib.Path(__file__).resolve().parent.parent / "procs"
REPO = pathlib.Path(__file__).resolve().parents[3]
T0 = 1_700_000_000_000


def write_config(tmp_path, **broker) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "storage.yaml"
    path.write_text(json.dumps({"broker": {"log.dirs": [str(tmp_path / "logs")], **broker}}))
    return str(path)


class Client:
    def __init__(self, cfg: str, crash_at: str = ""):
        args = [sys.executable, str(PROCS / "txn_client.py"), "--config", cfg, "--topic", "t", "--partition", "0"]
        if crash_at:
            args += ["--crash-at", crash_at]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}, self.proc.stderr.read()

    def send(self, **cmd) -> dict | None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def append(self, pid, seq, values, epoch=0, txn=False):
        return self.send(op="append", pid=pid, epoch=epoch, seq=seq, values=values, txn=txn)

    def killed(self) -> bool:
        return self.proc.wait(timeout=60) == -9

    def close(self):
        if self.proc.poll() is None:
            self.send(op="close")
            self.proc.wait(timeout=60)


@pytest.fixture
def clients():
    started = []

    def start(cfg, crash_at=""):
        c = Client(cfg, crash_at)
        started.append(c)
        return c
    yield start
    for c in started:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


@pytest.mark.slow
@child_processes_once
def test_two_processes_appending_for_one_producer_see_one_state(tmp_path, clients):
    cfg = write_config(tmp_path)
    a = clients(cfg)
    for i in range(5):
        assert a.append(7, i, [f"a{i}"])["first"] == i
    b = clients(cfg)                                   # joins the open log dir: a view, rebuilt from snapshots
    dup = b.append(7, 2, ["a2"])
    assert dup["duplicate"] and dup["first"] == 2      # A's batch, recognised by B
    assert b.append(7, 5, ["b5"]) == {"ok": True, "first": 5, "last": 5, "duplicate": False}
    assert a.append(7, 5, ["b5"])["duplicate"]         # B's batch, recognised by A
    assert a.append(7, 7, ["gap"]) == {"ok": False, "error": "OUT_OF_ORDER_SEQUENCE_NUMBER"}
    assert a.append(7, 6, ["a6"])["first"] == 6
    # a transaction begun by one process and aborted by the other
    assert a.append(8, 0, ["t0"], txn=True)["first"] == 7
    assert b.send(op="end", pid=8, epoch=0, commit=False)["first"] == 8
    assert a.send(op="end", pid=8, epoch=0, commit=False)["first"] == 9      # an empty transaction's marker
    sa, sb = a.send(op="state"), b.send(op="state")
    assert sa == sb and sa["aborted"] == [[8, 7, 8, 9]] and sa["lso"] == 10
    # a roll by B (snapshot, new generation) makes A rebuild from the snapshot and go on in sequence
    assert b.send(op="roll")["ok"]
    assert a.append(7, 7, ["a7"])["first"] == 10
    assert b.append(7, 7, ["a7"])["duplicate"]
    assert a.append(9, 0, ["fenced?"], epoch=3)["ok"] and b.append(9, 1, ["old"], epoch=2)["error"] == \
        "INVALID_PRODUCER_EPOCH"
    final = a.send(op="state")
    assert final == b.send(op="state")
    a.close()
    b.close()
    # the last to close wrote a snapshot; a new process loads the same state
    c = clients(cfg)
    assert c.send(op="state") == final
    c.close()


def recovered_state(cfg_path: str) -> dict:
    """The state a fresh first opener recovers (no clean-shutdown marker: the killed process wrote none)."""
    from tests.storage_engine.procs.txn_client import state_of
    from storage_engine.config_file import load_config
    with LogManager.open(load_config(cfg_path)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        return {"ok": True, **state_of(log),
                "committed": [(r.offset, present(r.value).decode()) for r in log.read_records(isolation_level=READ_COMMITTED)],
                "all": [(r.offset, present(r.value).decode()) for r in log.read_records()]}


def temp_files(pdir: pathlib.Path) -> list[str]:
    return sorted(n for n in os.listdir(pdir) if n.endswith(layout.TMP_SUFFIX))


SCRIPT = [dict(op="append", pid=1, epoch=0, seq=0, values=["p1-0", "p1-1"], txn=True),
          dict(op="append", pid=2, epoch=0, seq=0, values=["p2-0"], txn=True),
          dict(op="append", pid=3, epoch=0, seq=0, values=["i-0"]),
          dict(op="end", pid=1, epoch=0, commit=True),
          dict(op="append", pid=2, epoch=0, seq=1, values=["p2-1"], txn=True)]


@pytest.mark.slow
@child_processes_once
@pytest.mark.parametrize("point,last_op", [
    ("txnindex", dict(op="end", pid=2, epoch=0, commit=False)),      # the marker written, its index entry not
    ("snapshot-tmp", dict(op="roll")),                               # a roll's snapshot half written
    ("after-snapshot", dict(op="roll")),                             # a roll's snapshot in place, no flush yet
    ("snapshot-tmp", dict(op="close")),                              # the close snapshot half written
])
def test_a_process_killed_at_each_step_recovers_the_same_state(tmp_path, clients, point, last_op):
    # the reference: the same commands, no crash
    ref_cfg = write_config(tmp_path / "ref")
    ref = clients(ref_cfg)
    for cmd in SCRIPT + ([last_op] if last_op["op"] != "close" else []):
        assert ref.send(**cmd)["ok"]
    expected = ref.send(op="state")
    ref.close()
    expected_read = recovered_state(ref_cfg)
    assert expected_read["lso"] == expected["lso"]

    cfg = write_config(tmp_path / "crash")
    child = clients(cfg)
    for cmd in SCRIPT:
        assert child.send(**cmd)["ok"]
    watcher = clients(cfg) if point == "txnindex" else None   # a second, live process holding the dir
    child.send(op="arm", point=point)
    assert child.send(**last_op) is None and child.killed()
    pdir = tmp_path / "crash" / "logs" / "t-0"
    # The kill left the temp file of the step it interrupted, and only that: the producer snapshot at the log end,
    # half written (it does not parse). The other steps leave none.
    torn = layout.filename_prefix(expected["leo"]) + layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX
    assert temp_files(pdir) == ([torn] if point == "snapshot-tmp" else [])
    if point == "snapshot-tmp":
        with pytest.raises(CorruptSnapshotError):
            producer_snapshot.read_snapshot(str(pdir / torn))
    if watcher is not None:
        # the next lock holder replays the marker and adds the .txnindex entry its writer did not live to add
        assert watcher.send(op="state") == expected
        assert os.path.getsize(pdir / "00000000000000000000.txnindex") == 34
        watcher.proc.kill()
        watcher.proc.wait()
    got = recovered_state(cfg)
    assert got == expected_read
    assert temp_files(pdir) == [], "the recovery leaves no temp file behind"
    # and producing goes on: a retry is recognised, the next sequence accepted
    after = clients(cfg)
    assert after.append(3, 0, ["i-0"])["duplicate"]
    assert after.append(3, 1, ["i-1"])["ok"]
    after.close()


# -- the cleaner's swap with transactions --------------------------------------------------------------------------

def txn_log_for_cleaning(log):
    """Two transactional producers (one aborts) and plain keyed records over a few segments."""
    seq = {1: 0, 2: 0}

    def txn(pid, n, round_):
        log.append_records([SimpleRecord(b"k%d" % (i % 4), b"p%d-%d-%d" % (pid, round_, i), T0) for i in range(n)],
                           producer_id=pid, producer_epoch=0, base_sequence=seq[pid], is_transactional=True)
        seq[pid] += n
    for round_ in range(3):
        log.append_records([SimpleRecord(b"k%d" % i, b"plain-%d-%d" % (round_, i), T0) for i in range(3)])
        txn(1, 2, round_)
        txn(2, 1, round_)
        log.append_end_txn(1, 0, commit=True)
        log.append_end_txn(2, 0, commit=round_ != 1)
        log.roll()


def snapshot(log):
    """What a reader and a producer see. (Not the .txnindex bytes: once the cleaner removed every record of an
    aborted transaction, a recovery no longer finds the transaction and does not index it again, as in Kafka;
    there is nothing left for the index to filter.)"""
    return ([(r.offset, r.key, r.value) for r in log.read_records(isolation_level=READ_COMMITTED)],
            [(r.offset, r.key, r.value) for r in log.read_records()],
            log.producer_state.state_key(as_snapshot=True), log.last_stable_offset)


def clean_round(log, now):
    from storage_engine.config import CleanerConfig
    from storage_engine.maintenance import cleaner_manager
    from storage_engine.maintenance.cleaner import Cleaner
    ltc = cleaner_manager.log_to_clean(log, cleaner_manager.read_cleaner_checkpoints(log.log_dir).get(("topic", 0)),
                                       now)
    return Cleaner(CleanerConfig()).clean(ltc, now)


@pytest.mark.unit   # in process: the crashes are simulated renames
def test_a_crash_at_every_rename_of_a_transactional_cleaning_recovers(tmp_path, monkeypatch, logs):
    cfg = compact_cfg(segment_bytes=100_000)
    pristine = tmp_path / "pristine"
    log = logs(cfg, topic="topic")
    txn_log_for_cleaning(log)
    log.close(clean=False)
    shutil.copytree(log.log_dir, pristine)
    before_log = open_existing(pristine, cfg)
    before = snapshot(before_log)
    assert before_log.aborted_transactions(0, before_log.log_end_offset), "the log should hold an aborted transaction"
    before_log.close(clean=False)
    ref = tmp_path / "ref"
    shutil.copytree(pristine, ref)
    ref_log = open_existing(ref, cfg)
    counter = RenameCrasher()
    with monkeypatch.context() as m:
        m.setattr(os, "replace", counter)
        clean_round(ref_log, T0)
    after = snapshot(ref_log)
    ref_log.close(clean=False)
    # the latest committed value of each key survives; aborted and overwritten records are gone
    assert {k: v for _, k, v in after[0]} == {k: v for _, k, v in before[0]}
    assert after[1] == after[0] and len(after[1]) < len(before[0]) < len(before[1])
    renames = len(counter.calls)
    assert renames > 3
    for n in range(1, renames + 1):
        work = tmp_path / f"crash-{n}"
        shutil.copytree(pristine, work)
        crashed = open_existing(work, cfg)
        with monkeypatch.context() as m:
            m.setattr(os, "replace", RenameCrasher(n))
            try:
                clean_round(crashed, T0)
            except SimulatedCrash:
                pass
        crashed.close(clean=False)
        reopened = open_existing(work, cfg)
        got = snapshot(reopened)
        assert got in (before, after), f"crash at rename #{n}"
        clean_round(reopened, T0)
        assert snapshot(reopened) == after, f"cleaning again after the crash at rename #{n}"
        reopened.close(clean=False)
        shutil.rmtree(work)
