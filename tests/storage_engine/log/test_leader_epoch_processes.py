"""The ``leader-epoch-checkpoint`` shared by real processes: a newer epoch another process assigned is never
regressed by this process's next appends, and a truncation by one is seen by the other."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.leader_epoch import EpochEntry as E

from ...paths import REPO
from ..kernels import split_by_process_fixture

pytestmark = pytest.mark.slow

# Once, not once per kernel implementation: the work is in child processes (see split_by_process_fixture).
kernels = split_by_process_fixture()

T0 = 1_700_000_000_000
CHILD = textwrap.dedent("""
    import sys
    from storage_engine.clock import ManualClock
    from storage_engine.config_file import config_from_mapping
    from storage_engine.log.manager import LogManager
    from storage_engine.record.records import SimpleRecord
    log_dir, epoch, action = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    cfg = config_from_mapping({"broker": {"log.dirs": [log_dir], "log.partition.leader.epoch": epoch}})
    with LogManager.open(cfg, clock=ManualClock(1_700_000_000_000)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        if action == "append":
            log.append_records([SimpleRecord(None, b"child", 1_700_000_000_000)])
        else:
            log.truncate_to(int(action))
        print(log.log_end_offset)
""")


def child(log_dir: str, epoch: int, action: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CHILD, log_dir, str(epoch), action], capture_output=True,
                          text=True, timeout=120, env=env, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr


def test_processes_share_the_leader_epoch_checkpoint(tmp_path):
    log_dir = str(tmp_path / "logs")
    cfg = config_from_mapping({"broker": {"log.dirs": [log_dir]}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        log.append_records([SimpleRecord(None, b"a", T0)])
        path = os.path.join(log.dir, layout.LEADER_EPOCH_CHECKPOINT)

        def content() -> bytes:
            with open(path, "rb") as f:
                return f.read()

        assert content() == b"0\n1\n0 0\n"
        child(log_dir, 5, "append")                                   # another process, leader epoch 5
        assert content() == b"0\n2\n0 0\n5 1\n"
        log.append_records([SimpleRecord(None, b"b", T0)])            # epoch 0 here: known, nothing written
        log.append_as_follower(build_batch([SimpleRecord(None, b"c", T0)], base_offset=log.log_end_offset,
                                           partition_leader_epoch=3))  # older than 5: re-read, no regression
        assert content() == b"0\n2\n0 0\n5 1\n"
        assert log.leader_epochs.entries == [E(0, 0), E(5, 1)]
        child(log_dir, 5, "1")                                        # the other process truncates to 1
        assert content() == b"0\n1\n0 0\n"
        log.refresh()                                                 # the log end offset is 1 again
        log.append_as_follower(build_batch([SimpleRecord(None, b"d", T0)], base_offset=log.log_end_offset,
                                           partition_leader_epoch=3))
        assert log.log_end_offset == 2 and content() == b"0\n2\n0 0\n3 1\n"
