"""Moving partitions between log dirs (Kafka's alter-log-dirs): the copy holds the same batches at the same
offsets, processes holding the partition follow it, retention and compaction keep the copy, and a move stopped
at any step of its commit leaves exactly one log in service, which a later move completes.

(The same with real processes killed by SIGKILL and a live writer: ``test_lifecycle_processes.py``.)
"""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import InvalidRequestError, LogDirOfflineError, PartitionNotFoundError
from storage_engine.log import mover
from storage_engine.log.manager import LogManager
from storage_engine.jobs import compaction, housekeeping, lifecycle
from storage_engine.record.legacy_records import build_legacy_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.inspection.verify import verify_log_dirs

from ..helpers import recs, get_log
from ..procs import steps as step_mod

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


def _config(tmp_path, **broker):
    broker.setdefault("log.segment.bytes", 1024)
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")], **broker},
                                "topics": {"keyed": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                                                     "segment.bytes": 1024}}})


def _records(log):
    log.refresh()
    out, previous = [], -1
    for r in log.read_records():
        assert r.offset > previous
        previous = r.offset
        out.append((r.offset, r.key, r.value, r.timestamp))
    return out


def _log_bytes(folder) -> bytes:
    """Every batch of a partition folder, in offset order (segment boundaries aside)."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(".log") and layout.is_offset_named(n))
    return b"".join(open(os.path.join(folder, n), "rb").read() for n in names)


def _other(cfg, d):
    return [x for x in cfg.log_dirs if x != d][0]


def _fill(log, n, key=lambda i: b"k%d" % i, size=60):
    for i in range(n):
        log.append_records([SimpleRecord(key(i), b"%05d" % i + b"x" * size, T0 + i)])


def test_a_move_copies_the_same_batches_and_keeps_offsets_log_start_and_gaps(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("keyed", 0)
        _fill(log, 120, key=lambda i: b"k%d" % (i % 40) if i < 80 else b"j%d" % (i % 5))
        compaction.compact(cfg, T0 + 1000)              # gaps: only the latest value per key below the dirty end
        start = _records(log)[2][0]               # a log start offset inside a segment (delete-records)
        log.delete_records(start)
        source = mgr.dir_of(("keyed", 0))
        before = _records(log)
        assert before[0][0] == start and [r[0] for r in before] != list(range(start, 120)), "gaps"
        old_folder = log.dir
        old_bytes = _log_bytes(old_folder)
        result = mgr.move_log("keyed", 0, _other(cfg, source))
        assert result["committed"] and result["source_dir"] == source and not result["resumed"]
        assert log.log_dir == result["target_dir"], "the log followed the partition"
        deleted = os.path.join(source, result["deleted_folder"])
        assert _log_bytes(deleted) == old_bytes, "the old folder is kept whole until its delay passed"
        # The copy holds the batches of the partition from the one holding the log start offset on, byte for byte.
        new_bytes = _log_bytes(log.dir)
        assert old_bytes.endswith(new_bytes) and len(new_bytes) > 0
        assert _records(log) == before
        assert log.log_start_offset == start and log.log_end_offset == 120
        info = log.append_records([SimpleRecord(b"k", b"after", T0)])
        assert info.first_offset == 120
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = get_log(mgr, "keyed", 0)
        assert log.log_dir == result["target_dir"] and log.log_start_offset == start
        assert _records(log)[:-1] == before
    assert not verify_log_dirs(cfg)["damaged"]
    target = result["target_dir"]
    cleaner = OffsetCheckpointFile(os.path.join(target, layout.CLEANER_OFFSET_CHECKPOINT)).read()
    assert cleaner.get(("keyed", 0), 0) > start, "the cleaner checkpoint moved with the partition"
    assert ("keyed", 0) not in OffsetCheckpointFile(os.path.join(source, layout.CLEANER_OFFSET_CHECKPOINT)).read()


def test_legacy_batches_are_copied_as_they_are(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("old", 0)
        source = log.log_dir
        folder = log.dir
    # A segment of magic 0 and magic 1 messages, one of them a gzip wrapper, as an 0.10 broker wrote them.
    data = b"".join([
        build_legacy_batch([SimpleRecord(b"a", b"v0")], magic=0, base_offset=0),
        build_legacy_batch([SimpleRecord(b"b", b"v1", T0), SimpleRecord(b"c", b"v2", T0)], magic=1,
                           base_offset=1, codec=1),
        build_legacy_batch([SimpleRecord(b"d", b"v3", T0)], magic=1, base_offset=3)])
    with open(os.path.join(folder, "00000000000000000000.log"), "ab") as f:
        f.write(data)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = get_log(mgr, "old", 0)
        before = _records(log)
        assert [r[0] for r in before] == [0, 1, 2, 3]
        mgr.move_log("old", 0, _other(cfg, source))
        assert _records(log) == before
        assert _log_bytes(log.dir) == data


def test_writers_and_readers_in_other_managers_follow_the_move(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as writer_mgr, \
            LogManager.open(cfg, clock=ManualClock(T0)) as reader_mgr:
        writer = writer_mgr.get_or_create_log("t", 0)
        _fill(writer, 40)
        reader = reader_mgr.get_log("t", 0)
        assert reader is not None
        assert len(_records(reader)) == 40
        source = writer.log_dir
        result = lifecycle.move_partition(cfg, "t", 0, _other(cfg, source), now_ms=T0)
        assert result["committed"] and result["log_end_offset"] == 40
        assert writer.append_records(recs("w", timestamp=T0)).first_offset == 40
        assert writer.log_dir == result["target_dir"]
        records = _records(reader)
        assert [r[0] for r in records] == list(range(41)) and records[-1][2] == b"w"
        assert reader.log_dir == result["target_dir"]
        # Moving back works too (a fresh copy in the first dir).
        back = reader_mgr.move_log("t", 0, source)
        assert back["committed"] and writer.append_records(recs("x", timestamp=T0)).first_offset == 41
        assert writer.log_dir == source
        assert [r[0] for r in _records(reader)] == list(range(42))


def test_retention_and_compaction_keep_the_copy_and_describe_shows_the_move(tmp_path):
    """Kafka runs retention and cleaning on future logs too: a copy left by a move that stopped is maintained
    like its partition while it waits to be resumed."""
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")],
                                          "log.segment.bytes": 1024, "log.retention.ms": 1000}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        _fill(log, 60)
        source, target = log.log_dir, _other(cfg, log.log_dir)
        with mover.FileLock(mover.create_lock_path(cfg.log_dirs)):
            progress = mover.MoveProgress("t", 0, source, target)
            future = mover._prepare_future(log, target, cfg.log_dirs, cfg.log_config("t"), ManualClock(T0),
                                           progress)
        mover._copy_round(log, future)
        assert future.log_end_offset == 60 and len(future.segments) > 2
        future.close(clean=False)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        entry = {d["path"]: d for d in mgr.describe()["log_dirs"]}[target]
        (move,) = entry["moves_in_progress"]
        assert move["folder"] == progress.future_folder and move["log_end_offset"] == 60
        assert move["source_dir"] == source and move["source_log_end_offset"] == 60
    results = housekeeping.retention_all(cfg, T0 + 60 + 1001)
    by_kind = {r.get("future", False): r for r in results}
    assert by_kind[False]["segments_deleted"] > 0
    assert by_kind[True]["segments_deleted"] == by_kind[False]["segments_deleted"]
    assert by_kind[True]["folder"] == progress.future_folder
    # The move resumes from the copy, whose start followed the partition's.
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        result = mgr.move_log("t", 0, target)
        assert result["resumed"] and result["bytes_copied"] == 0
        log = get_log(mgr, "t", 0)
        assert log.log_dir == target and [r[0] for r in _records(log)] == list(range(log.log_start_offset, 60))


def test_a_copy_that_no_longer_matches_is_started_over(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        _fill(log, 30)
        source, target = log.log_dir, _other(cfg, log.log_dir)
        with mover.FileLock(mover.create_lock_path(cfg.log_dirs)):
            future = mover._prepare_future(log, target, cfg.log_dirs, cfg.log_config("t"), ManualClock(T0),
                                           mover.MoveProgress("t", 0, source, target))
        mover._copy_round(log, future)
        future.close(clean=False)
        log.truncate_to(20)                          # the partition lost its tail and got other records
        _fill(log, 15, key=lambda i: b"new%d" % i)
        expected = _records(log)
        result = mgr.move_log("t", 0, target)
        assert result["resumed"] and _records(log) == expected


def test_cancel_and_bad_requests(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        _fill(log, 10)
        source, target = log.log_dir, _other(cfg, log.log_dir)
        with pytest.raises(InvalidRequestError, match="already in"):
            mgr.move_log("t", 0, source)
        with pytest.raises(InvalidRequestError, match="is not one of the log dirs"):
            mgr.move_log("t", 0, str(tmp_path / "elsewhere"))
        with pytest.raises(PartitionNotFoundError):
            mgr.move_log("t", 9, target)
        with mover.FileLock(mover.create_lock_path(cfg.log_dirs)):
            future = mover._prepare_future(log, target, cfg.log_dirs, cfg.log_config("t"), ManualClock(T0),
                                           mover.MoveProgress("t", 0, source, target))
        future.close(clean=False)
        cancelled = mgr.cancel_move("t", 0)
        assert len(cancelled["discarded"]) == 1 and cancelled["discarded"][0].endswith("-delete")
        assert layout.scan_log_dir(target).futures == []
        assert log.log_dir == source and len(_records(log)) == 10
        mgr.failures.mark_offline(target, "test: disk gone")
        with pytest.raises(LogDirOfflineError, match="offline"):
            mgr.move_log("t", 0, target)


def _move_stopped_at(cfg, step: int):
    """Run a move in this process that stops (as a crash would) at commit step ``step``; True if it finished."""
    counter = step_mod.Steps(step, step_mod.stop)
    original_commit = mover._commit

    def commit(*args, **kwargs):
        counter.arm()
        return original_commit(*args, **kwargs)
    step_mod.install(counter)
    mover._commit = commit
    try:
        with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
            log = mgr.get_log("t", 0)
            assert log is not None
            target = _other(cfg, log.log_dir)
            try:
                mgr.move_log("t", 0, target)
            except step_mod.Stop:
                return False, counter.names
            return True, counter.names
    finally:
        mover._commit = original_commit
        step_mod.uninstall()


def test_a_move_stopped_at_every_step_of_its_commit_leaves_one_log_in_service(tmp_path):
    step = 0
    seen: list[str] = []
    while True:
        step += 1
        base = tmp_path / f"run{step}"
        cfg = _config(base)
        with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
            log = mgr.get_or_create_log("t", 0)
            _fill(log, 25)
            source = log.log_dir
        with LogManager.open(cfg, clock=ManualClock(T0)) as holder:      # holds the partition all along
            held = holder.get_log("t", 0)
            assert held is not None
            finished, names = _move_stopped_at(cfg, step)
            seen = names if finished else seen
            # Exactly one home now; the holder appends where it is, after every record.
            assert held.append_records(recs("held", timestamp=T0)).first_offset == 25
            homes = [d for d in cfg.log_dirs if os.path.isdir(os.path.join(d, "t-0"))]
            assert homes == [held.log_dir], (step, names)
            with LogManager.open(cfg, clock=ManualClock(T0)) as fresh:
                records = _records(fresh.get_log("t", 0))
                assert [r[0] for r in records] == list(range(26)), (step, names)
            report = verify_log_dirs(cfg)
            assert not report["damaged"], (step, report["problems"])
            # A later move completes what this one started, whichever dir the partition is in now.
            target = _other(cfg, held.log_dir)
            if held.log_dir == source:
                holder.move_log("t", 0, target)
            assert held.log_dir != source
            assert [r[0] for r in _records(held)] == list(range(26))
            assert layout.scan_log_dir(source).futures == layout.scan_log_dir(target).futures == []
        if finished:
            break
    assert step > 8, f"the commit has more steps than {step}: {seen}"
    assert {"PartitionLock.retire", "durable_rename", "PartitionLock.unlink", "edit_checkpoint"} <= set(seen)
