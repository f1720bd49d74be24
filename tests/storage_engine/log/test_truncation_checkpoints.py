"""The log dir's offset checkpoints right after a truncation (storage_engine.log.truncation), as Kafka's
``LogManager.truncateTo`` / ``truncateFullyAndStartAt`` write the recovery-point checkpoint at once: a partial
truncation (in place at a segment boundary, by rewrite inside a segment, below a raised log start offset) and a full
one (below the first segment, by rewrite at a segment's base). The dir's ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint`` hold offsets at or below the new log end as soon as the truncation returns (the
values the dir's checkpoint would write), and ``verify`` finds nothing, before any checkpoint run: in one process
for each kind, and for a partial and a full truncation by rewrite with another process holding the partition open
and a read-only ``verify`` from a third. Then the one window a kill can leave an entry past the end in (a full
truncation below a raised log start offset, killed before its checkpoint write): reported by ``verify``, repaired by
the next checkpoint, and the load starts the log right."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from storage_engine import crashpoints, layout
from storage_engine.config_file import load_config
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.jobs import housekeeping
from storage_engine.log import rewrite
from storage_engine.log.local_log import LocalLog
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from tests.paths import REPO
from tests.storage_engine.kernels import split_by_process_fixture
from tests.storage_engine.log.test_swap_crash import Holder, cli, env

kernels = split_by_process_fixture()     # once: the truncation's work is the same on either kernel

TOPIC = "plain"
TP = (TOPIC, 0)
CUT = 403           # inside the batch 400-404: a truncation there ends the log at 400


def write_config(tmp_path) -> str:
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: [logs]\n  log.segment.bytes: 4096\n  log.index.interval.bytes: 256\n"
                    f"topics:\n  {TOPIC}: {{cleanup.policy: delete, retention.ms: -1}}\n", encoding="utf-8")
    return str(path)


def fill(cfg: str, delete_below: int | None) -> list[int]:
    """600 records in batches of 5, then (``delete_below``) ``delete-records`` to that offset and retention; the
    manager's close writes both checkpoints. Returns the segments' bases."""
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for start in range(0, 600, 5):
            log.append_records([SimpleRecord(f"k{i}".encode(), f"v{i}".encode() + b"x" * 40)
                                for i in range(start, start + 5)])
        if delete_below is not None:
            log.delete_records(delete_below)
    if delete_below is not None:
        housekeeping.retention_all(load_config(cfg))
    with LogManager.open(load_config(cfg)) as mgr:
        reopened = mgr.get_log(TOPIC, 0)
        assert reopened is not None
        return [s.base_offset for s in reopened.segments]


def entries(cfg: str) -> tuple[int | None, int | None]:
    """This partition's (recovery-point, log-start-offset) checkpoint entries on disk."""
    log_dir = load_config(cfg).log_dirs[0]
    return tuple(OffsetCheckpointFile(os.path.join(log_dir, name)).read().get(TP)     # type: ignore[return-value]
                 for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT))


def inode_of_segment(log: Log, base: int) -> int:
    return os.stat(layout.segment_file(log.dir, base, layout.LOG_SUFFIX)).st_ino


def segment_boundary(bases: list[int]) -> int:
    return bases[len(bases) // 2]


def base_below_cut(bases: list[int]) -> int:
    """The base of the segment holding ``CUT`` (below the log start offset ``CUT + 1``)."""
    return max(b for b in bases if b <= CUT)


# (delete-records offset before, the truncation, the new log start, the new log end, the segment whose .log is
# kept in place (None: every kept segment is a new file or none is kept))
Truncate = Callable[[Log, list[int]], None]
CASES: list = [
    pytest.param(None, lambda log, bases: log.truncate_to(segment_boundary(bases)),
                 lambda bases: 0, segment_boundary, lambda bases: bases[len(bases) // 2 - 1],
                 id="partial-in-place-at-a-segment-boundary"),
    pytest.param(None, lambda log, bases: log.truncate_to(CUT),
                 lambda bases: 0, lambda bases: 400, lambda bases: None, id="partial-by-rewrite-inside-a-segment"),
    pytest.param(CUT + 1, lambda log, bases: log.truncate_to(CUT),
                 lambda bases: 400, lambda bases: 400, lambda bases: None, id="partial-below-the-log-start"),
    pytest.param(450, lambda log, bases: log.truncate_to(bases[0] - 7),
                 lambda bases: bases[0] - 7, lambda bases: bases[0] - 7, lambda bases: None,
                 id="full-below-the-first-segment"),
    pytest.param(CUT + 1, lambda log, bases: log.truncate_fully_and_start_at(base_below_cut(bases)),
                 base_below_cut, base_below_cut, lambda bases: None, id="full-by-rewrite-at-a-segments-base"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("deleted_to", "truncate", "start", "end", "in_place"), CASES)
def test_the_checkpoints_hold_the_truncated_partition_at_once_and_verify_finds_nothing(tmp_path, deleted_to,
                                                                                      truncate, start, end, in_place):
    cfg = write_config(tmp_path)
    bases = fill(cfg, deleted_to)
    start, end, in_place = start(bases), end(bases), in_place(bases)
    assert entries(cfg) == (600, deleted_to), "the close checkpointed both (the start only when above the first base)"
    with LogManager.open(load_config(cfg), partitions=[TP]) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        kept_inode = inode_of_segment(log, in_place) if in_place is not None else None
        truncate(log, bases)
        assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (start, end, end)
        if kept_inode is not None:
            assert inode_of_segment(log, in_place) == kept_inode, "cut at a boundary: no file rewritten"
        # On disk as the truncation returns, before this manager's close or any checkpoint run: the values the
        # dir's checkpoint writes (the log start offset only when above the first segment's base).
        first_base = log.segments[0].base_offset
        assert entries(cfg) == (end, start if start > first_base else None), (entries(cfg), first_base)
        report = verify_log_dirs(load_config(cfg))
        assert report["problems"] == [], report["problems"]
        assert [(p["log_start_offset"], p["log_end_offset"]) for p in report["partitions"]] == [(start, end)]


@pytest.mark.unit
@pytest.mark.parametrize(("deleted_to", "truncate", "start", "end", "in_place"), CASES)
def test_the_recovery_point_entry_is_at_or_below_the_new_end_before_the_first_rename(tmp_path, monkeypatch, deleted_to,
                                                                                    truncate, start, end, in_place):
    """What a kill at any step finds on disk: the entry as each segment file is renamed away or rewritten (the real
    steps run; the test only reads the checkpoint file as they start) is already at or below the new log end, which
    is at or below every end a kill can leave."""
    cfg = write_config(tmp_path)
    bases = fill(cfg, deleted_to)
    end = end(bases)
    seen: list[int | None] = []
    delete_segment_files, truncate_segment = LocalLog.delete_segment_files, rewrite.truncate_segment

    def deleting(self, *args, **kwargs):
        seen.append(entries(cfg)[0])
        return delete_segment_files(self, *args, **kwargs)

    def rewriting(*args, **kwargs):
        seen.append(entries(cfg)[0])
        return truncate_segment(*args, **kwargs)
    monkeypatch.setattr(LocalLog, "delete_segment_files", deleting)
    monkeypatch.setattr(rewrite, "truncate_segment", rewriting)
    with LogManager.open(load_config(cfg), partitions=[TP]) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        truncate(log, bases)
        assert log.log_end_offset == end
    assert seen and all(entry is not None and entry <= end for entry in seen), (seen, end)


@pytest.mark.slow
@pytest.mark.parametrize(("deleted_to", "truncate", "start", "end", "in_place"),
                         [c for c in CASES if c.id in ("partial-by-rewrite-inside-a-segment",
                                                       "full-by-rewrite-at-a-segments-base")])
def test_with_another_process_holding_the_partition_a_read_only_verify_finds_nothing_at_once(
        tmp_path, deleted_to, truncate, start, end, in_place):
    cfg = write_config(tmp_path)
    bases = fill(cfg, deleted_to)
    start, end, in_place = start(bases), end(bases), in_place(bases)
    rp_before, lso_before = entries(cfg)
    assert rp_before == 600, "the close checkpointed the recovery point at the log end"
    assert lso_before == deleted_to, "a log start offset above the first segment's base is checkpointed"
    holder = Holder(cfg, clean=False)       # another process holds the partition open throughout
    try:
        with LogManager.open(load_config(cfg), partitions=[TP]) as mgr:
            log = mgr.get_log(TOPIC, 0)
            assert log is not None
            kept_inode = inode_of_segment(log, in_place) if in_place is not None else None
            truncate(log, bases)
            assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (start, end, end)
            if kept_inode is not None:
                assert inode_of_segment(log, in_place) == kept_inode, "cut at a boundary: no file rewritten"
            # On disk as the truncation returns, before this manager's close or any checkpoint run: the values the
            # dir's checkpoint writes (the log start offset only when above the first segment's base).
            first_base = log.segments[0].base_offset
            assert entries(cfg) == (end, start if start > first_base else None), (entries(cfg), first_base)
            out = cli(cfg, "verify")     # read-only, while two processes hold the partition
            report = json.loads(out.stdout)
            assert out.returncode == 0 and report["problems"] == [], report["problems"]
            # (pending: only the segment files the truncation renamed .deleted, purged after file.delete.delay.ms)
            assert all(p["file"].endswith(".deleted") for p in report["pending"]), report["pending"]
            assert report["partitions"][0]["log_end_offset"] == end
            assert report["partitions"][0]["log_start_offset"] == start
        holder.stop(kill=False)     # (it exits without closing its logs: no signal)
    finally:
        holder.close()


# argv: config, offset: a full truncation by another process, armed through STORAGE_ENGINE_CRASH_AT
START_AT = """
import sys
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
with LogManager.open(load_config(sys.argv[1]), partitions=[("plain", 0)]) as mgr:
    mgr.get_log("plain", 0).truncate_fully_and_start_at(int(sys.argv[2]))
"""


@pytest.mark.slow
@pytest.mark.kills
def test_a_full_truncation_below_a_raised_log_start_killed_before_its_checkpoint_write_is_reported_then_repaired(
        tmp_path):
    """The one window left: a full truncation below a log start offset raised by ``delete-records`` (its entry is in
    the log-start-offset checkpoint), killed once complete and before its entries are written. The entry is only
    written after the truncation (lowered sooner, a load finding the truncation rolled back would expose the
    deleted records below the old start), so it is past the end until the next checkpoint: ``verify`` reports that
    entry and nothing else, the recovery-point entry is already at the end, the next checkpoint writes both, and a
    load starts the log at the new start (it takes the partition's recorded start over an entry past the end)."""
    cfg = write_config(tmp_path)
    bases = fill(cfg, CUT + 1)
    base = base_below_cut(bases)
    assert base < CUT + 1 and entries(cfg) == (600, CUT + 1)
    holder = Holder(cfg, clean=False)
    try:
        res = subprocess.run([sys.executable, "-c", START_AT, cfg, str(base)], cwd=str(REPO),
                             env=env(**{crashpoints.ENV_VAR: "truncation.published"}), capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == -signal.SIGKILL and "CRASHPOINT truncation.published" in res.stderr, res.stderr
        assert entries(cfg) == (base, CUT + 1), "the recovery-point entry was lowered before the first rename"
        out = cli(cfg, "verify")
        report = json.loads(out.stdout)
        assert [p["message"] for p in report["problems"]] == [
            f"log-start-offset checkpoint entry {TOPIC} 0 {CUT + 1} is past the log end offset {base} (the next load "
            "clamps or recovers it)"], report["problems"]
        assert cli(cfg, "checkpoint").returncode == 0
        assert entries(cfg) == (base, None)
        out = cli(cfg, "verify")
        assert out.returncode == 0 and json.loads(out.stdout)["problems"] == [], out.stdout
    finally:
        holder.close()
    with LogManager.open(load_config(cfg)) as mgr:     # a restart: the first opener's full load
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        assert (log.log_start_offset, log.log_end_offset) == (base, base)
