"""Maintenance notices what it cannot read (ARCHITECTURE.md section 6): a partition folder that became a file, a
partition that vanished while the dir's checkpoint files list it, a segment file that is no file. Each is a failure
of that partition in the job's summary (every batched job: retention, checkpoint, flush, producer expiry; and the
whole-store jobs), the other partitions are maintained, and the evidence is kept until an operator acts."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.jobs import batches, housekeeping, lifecycle
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from tests.storage_engine.helpers import manual_clock

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
HOUR = 3_600_000
BATCH_JOBS: dict[str, Callable[..., batches.BatchResult]] = {
    "retention": batches.retention_batch, "checkpoint": batches.checkpoint_batch,
    "flush": lambda cfg, parts, now: batches.flush_batch(cfg, parts, now, due_only=False),
    "expire_producers": batches.expire_producers_batch}


@pytest.fixture
def cfg(tmp_path):
    """One log dir, topic t with partitions 0..2, each several segments, the oldest ones expired at T0 + 2h."""
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a")], "log.segment.bytes": 1024},
                                  "topics": {"t": {"retention.ms": HOUR}}})
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        for p in range(3):
            log = mgr.get_or_create_log("t", p)
            for i in range(40):
                ts = T0 + (0 if i < 20 else 2 * HOUR)
                manual_clock(log).set(ts)
                log.append_records([SimpleRecord(b"k%d" % i, b"v" * 60, ts)])
    return config


def folder(cfg, p: int):
    return os.path.join(cfg.log_dirs[0], f"t-{p}")


def checkpointed(cfg) -> set:
    return set(OffsetCheckpointFile(os.path.join(cfg.log_dirs[0], layout.RECOVERY_POINT_CHECKPOINT)).read())


def run_all(cfg, now=T0 + 2 * HOUR + 1):
    """Every batched job over the plan's batches: {job: (failures, partitions with a result)}."""
    out = {}
    for name, job in BATCH_JOBS.items():
        failures, done = [], set()
        for b in batches.plan_batches(cfg):
            res = job(cfg, b["partitions"], now)
            failures += res["failures"]
            done |= {(r["topic"], r["partition"]) for r in res["results"]}
        out[name] = (failures, done)
    return out


def only_failure(failures, partition: int) -> dict:
    assert [(f["topic"], f["partition"]) for f in failures] == [("t", partition)], failures
    f = failures[0]
    assert f["error_type"] == "PartitionUnreadableError" and f["permanent"] is True
    return f


def test_a_partition_folder_that_became_a_file_fails_in_every_job_and_the_others_are_maintained(cfg, tmp_path):
    assert ("t", 1) in checkpointed(cfg)
    shutil.move(folder(cfg, 1), tmp_path / "saved")
    with open(folder(cfg, 1), "w") as out:
        out.write("not a folder")
    # The plan lists it (7 of 8 would be a green run that maintains less), with the reason.
    listed = {(p["topic"], p["partition"]): p for p in housekeeping.list_partitions(cfg, include_missing=True)}
    assert "is a regular file, not a folder" in listed[("t", 1)]["missing"]
    assert [tuple(p) for b in batches.plan_batches(cfg) for p in b["partitions"]] == [("t", 0), ("t", 1), ("t", 2)]
    for name, (failures, done) in run_all(cfg).items():
        f = only_failure(failures, 1)
        assert f"{folder(cfg, 1)} is a regular file, not a folder" in f["error"], name
        assert done == {("t", 0), ("t", 2)}, name
    assert ("t", 1) in checkpointed(cfg), "the checkpoint job kept the evidence"
    # The folder restored: maintained again, nothing reported.
    os.remove(folder(cfg, 1))
    shutil.move(tmp_path / "saved", folder(cfg, 1))
    assert all(not failures for failures, _ in run_all(cfg).values())


def test_a_vanished_partition_stays_reported_until_the_engine_deletes_it(cfg, tmp_path):
    shutil.rmtree(folder(cfg, 2))
    for _ in range(2):        # the checkpoint job runs again and again: the partition is never forgotten silently
        results = run_all(cfg)
        for name, (failures, done) in results.items():
            f = only_failure(failures, 2)
            assert "vanished" in f["error"] and "delete-topic --topic t --partition 2" in f["error"], name
            assert done == {("t", 0), ("t", 1)}
        assert ("t", 2) in checkpointed(cfg)
        written = housekeeping.checkpoint(cfg, T0)
        only_failure(written["failures"], 2)
        assert "t-2" in written["checkpoints"][cfg.log_dirs[0]]["recovery_points"]
    # The whole-store jobs say so too.
    only_failure(housekeeping.flush(cfg, T0, due_only=False)["failures"], 2)
    only_failure(housekeeping.expire_producers(cfg, T0)["failures"], 2)
    failures = []
    housekeeping.retention_all(cfg, T0, failures=failures)
    only_failure(failures, 2)
    # The operator forgets it through the engine's delete path: its entries and engine files go, no failure since.
    deleted = lifecycle.delete_topic(cfg, "t", [2], T0)
    assert deleted["deleted"][0]["folder_was_missing"] is True
    assert ("t", 2) not in checkpointed(cfg)
    assert not os.path.exists(layout.partition_state_file(cfg.log_dirs[0], "t-2"))
    assert all(not failures for failures, _ in run_all(cfg).values())


def test_partitions_the_engine_deleted_or_moved_are_not_reported(tmp_path):
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")]}})
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        for p in range(3):
            mgr.get_or_create_log("t", p).append_records([SimpleRecord(b"k", b"v", T0)])
        mgr.checkpoint()
    homes = {p: next(d for d in config.log_dirs if os.path.isdir(os.path.join(d, f"t-{p}"))) for p in range(3)}
    lifecycle.delete_topic(config, "t", [0], T0)
    other = next(d for d in config.log_dirs if d != homes[1])
    lifecycle.move_partition(config, "t", 1, other, T0)
    assert housekeeping.missing_partitions(config) == []
    assert housekeeping.checkpoint(config, T0)["failures"] == []
    assert all(not failures for failures, _ in run_all(config).values())


def test_a_segment_file_that_is_no_file_fails_the_partition_and_nothing_of_it_is_touched(cfg):
    pdir = folder(cfg, 0)
    logs = sorted(n for n in os.listdir(pdir) if n.endswith(".log"))
    assert len(logs) > 3
    first = os.path.join(pdir, logs[0])      # sealed and expired: retention would rename it away
    os.remove(first)
    os.mkdir(first)
    before = sorted(os.listdir(pdir))
    for name, (failures, done) in run_all(cfg).items():
        f = only_failure(failures, 0)
        assert f"{first} (a directory)" in f["error"], name
        assert done == {("t", 1), ("t", 2)}, name
    assert sorted(os.listdir(pdir)) == before, "nothing of the partition was maintained"
    failures = []
    housekeeping.retention_all(cfg, T0 + 2 * HOUR + 1, failures=failures)
    only_failure(failures, 0)
    assert sorted(os.listdir(pdir)) == before
