"""A partition's ``leader-epoch-checkpoint`` kept as Kafka keeps it: created with the log, written at the first append
of a newer epoch, truncated with the log's end and start, cleared by a full truncation, read (and truncated to the
log) at load, rebuilt by recovery (after UnifiedLogTest and LogLoaderTest.testLogRecoversForLeaderEpoch)."""
from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config import LogConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment import leader_epoch
from storage_engine.segment.leader_epoch import EpochEntry as E

from ..helpers import open_log, partition_dir, read_all, recs, segment_path
from ...paths import REAL_KAFKA_FIXTURES

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def epoch_config(epoch: int, **kw: object) -> LogConfig:
    return dataclasses.replace(LogConfig(**kw), partition_leader_epoch=epoch)  # type: ignore[arg-type]


def checkpoint(log_dir) -> bytes:
    with open(os.path.join(partition_dir(log_dir), layout.LEADER_EPOCH_CHECKPOINT), "rb") as f:
        return f.read()


def follower_batch(base: int, epoch: int, count: int = 1) -> bytes:
    return build_batch([SimpleRecord(None, f"v{base + i}".encode(), T0) for i in range(count)], base_offset=base,
                       partition_leader_epoch=epoch)


@pytest.fixture
def writes(monkeypatch):
    done: list[str] = []
    real = leader_epoch.atomic_write

    def counting(path: str, data: bytes, *, sync: bool = True) -> None:
        done.append(path)
        real(path, data, sync=sync)

    monkeypatch.setattr(leader_epoch, "atomic_write", counting)
    return done


def three_epochs(log) -> None:
    """Offsets 0-9 at epoch 0, 10-15 at epoch 1, 16-19 at epoch 2 (one record per batch, as a follower)."""
    for offset in range(20):
        log.append_as_follower(follower_batch(offset, 0 if offset < 10 else 1 if offset < 16 else 2))
    assert log.leader_epochs.entries == [E(0, 0), E(1, 10), E(2, 16)]


# ------------------------------------------------------------------ creation and appends

def test_a_new_log_has_an_empty_file_and_its_first_append_writes_epoch_0_at_0(logs, log_dir):
    log = logs()
    assert checkpoint(log_dir) == b""          # Kafka creates it empty with the log
    log.append_records(recs("a", "b", timestamp=T0))
    assert checkpoint(log_dir) == b"0\n1\n0 0\n"
    log.append_records(recs("c", timestamp=T0))
    assert checkpoint(log_dir) == b"0\n1\n0 0\n"
    assert not os.path.exists(os.path.join(log.dir, layout.LEADER_EPOCH_CHECKPOINT + layout.TMP_SUFFIX))


def test_appends_of_a_known_epoch_write_nothing(logs, log_dir, writes):
    log = logs()
    log.append_records(recs("first", timestamp=T0))
    assert len(writes) == 1
    before = os.stat(os.path.join(log.dir, layout.LEADER_EPOCH_CHECKPOINT))
    for i in range(50):
        log.append_records(recs(f"r{i}", timestamp=T0))
    log.append_batches(build_batch(recs("x", "y", timestamp=T0)))
    log.append_end_txn(7, 0, commit=True)
    after = os.stat(os.path.join(log.dir, layout.LEADER_EPOCH_CHECKPOINT))
    assert len(writes) == 1 and (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_newer_leader_epoch_starts_at_its_first_offset_through_every_append_path(logs, log_dir):
    log = logs()
    log.append_records(recs("a", "b", timestamp=T0))
    log.close(clean=True)
    log = logs(epoch_config(3))
    log.append_batches(build_batch(recs("c", timestamp=T0)))      # the batch is stamped with epoch 3
    assert checkpoint(log_dir) == b"0\n2\n0 0\n3 2\n"
    log.close(clean=True)
    log = logs(epoch_config(4))
    log.append_end_txn(9, 0, commit=False)
    assert checkpoint(log_dir) == b"0\n3\n0 0\n3 2\n4 3\n"
    log.close(clean=True)
    log = logs(epoch_config(2))                                    # an older epoch never regresses the file
    log.append_records(recs("d", timestamp=T0))
    assert checkpoint(log_dir) == b"0\n3\n0 0\n3 2\n4 3\n"


def test_an_unknown_leader_epoch_assigns_nothing(logs, log_dir):
    log = logs(epoch_config(-1))
    log.append_records(recs("a", timestamp=T0))
    assert checkpoint(log_dir) == b""


def test_batches_appended_as_follower_assign_their_own_epochs(logs, log_dir):
    log = logs()
    for base, epoch in ((0, 1), (1, 2), (2, 2), (3, 3)):
        log.append_as_follower(follower_batch(base, epoch))
    assert checkpoint(log_dir) == b"0\n3\n1 0\n2 1\n3 3\n"
    log.append_as_follower(follower_batch(4, -1) + follower_batch(5, 5, count=2))
    assert checkpoint(log_dir) == b"0\n4\n1 0\n2 1\n3 3\n5 5\n"


# ------------------------------------------------------------------ recovery

@pytest.mark.parametrize("missing", [False, True], ids=["entries-removed", "file-removed"])
def test_the_log_recovers_its_leader_epochs(logs, log_dir, missing):
    """LogLoaderTest.testLogRecoversForLeaderEpoch: entries removed from the cache come back when the log is
    recovered from the start."""
    log = logs()
    for base, epoch in ((0, 1), (1, 2), (2, 2), (3, 3)):
        log.append_as_follower(follower_batch(base, epoch))
    with log.locked():
        log.leader_epochs.truncate_from_end(2)
    assert checkpoint(log_dir) == b"0\n2\n1 0\n2 1\n"
    log.close(clean=False)
    if missing:
        os.remove(os.path.join(partition_dir(log_dir), layout.LEADER_EPOCH_CHECKPOINT))
    log, res = open_log(log_dir, now_ms=T0, had_clean_shutdown=False, recovery_point_checkpoint=0)
    try:
        assert log.leader_epochs.entries == [E(1, 0), E(2, 1), E(3, 3)]
        assert checkpoint(log_dir) == b"0\n3\n1 0\n2 1\n3 3\n"
        assert not res.messages
    finally:
        log.close(clean=False)


def test_recovery_assigns_only_from_the_recovery_point(logs, log_dir):
    """Kafka recovers (and assigns) only the segments from the one holding the recovery point."""
    log = logs()
    for offset in range(4):
        log.append_as_follower(follower_batch(offset, offset))
        log.roll()
    log.flush()
    with log.locked():
        log.leader_epochs.clear()
    log.close(clean=False)
    log, _ = open_log(log_dir, now_ms=T0, had_clean_shutdown=False, recovery_point_checkpoint=2)
    try:
        assert log.leader_epochs.entries == [E(2, 2), E(3, 3)]
    finally:
        log.close(clean=False)


def test_load_truncates_entries_past_the_log_end_and_below_the_log_start(logs, log_dir):
    log = logs()
    three_epochs(log)
    log.close(clean=True)
    path = os.path.join(partition_dir(log_dir), layout.LEADER_EPOCH_CHECKPOINT)
    with open(path, "wb") as f:       # a writer died after assigning epoch 7 at the log end, before its batch
        f.write(b"0\n4\n0 0\n1 10\n2 16\n7 20\n")
    log, _ = open_log(log_dir, now_ms=T0, had_clean_shutdown=True, log_start_offset_checkpoint=12)
    try:
        assert log.log_start_offset == 12
        assert log.leader_epochs.entries == [E(1, 12), E(2, 16)]
        assert checkpoint(log_dir) == b"0\n2\n1 12\n2 16\n"
    finally:
        log.close(clean=False)


def test_load_reads_the_file_and_leaves_it_alone(logs, log_dir, writes):
    log = logs()
    three_epochs(log)
    log.close(clean=True)
    path = os.path.join(partition_dir(log_dir), layout.LEADER_EPOCH_CHECKPOINT)
    before = os.stat(path)
    writes.clear()
    log, _ = open_log(log_dir, now_ms=T0, had_clean_shutdown=True)
    try:
        assert log.leader_epochs.entries == [E(0, 0), E(1, 10), E(2, 16)]
        after = os.stat(path)
        assert not writes and (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        log.append_as_follower(follower_batch(20, 2))             # known epoch: still nothing written
        assert not writes
    finally:
        log.close(clean=False)


def test_a_log_written_before_the_file_was_kept_gets_it_rebuilt_at_load(logs, log_dir):
    log = logs()
    three_epochs(log)
    log.close(clean=True)
    os.remove(os.path.join(partition_dir(log_dir), layout.LEADER_EPOCH_CHECKPOINT))
    log, res = open_log(log_dir, now_ms=T0, had_clean_shutdown=True)
    try:
        assert checkpoint(log_dir) == b"0\n3\n0 0\n1 10\n2 16\n" and not res.messages
    finally:
        log.close(clean=False)


def test_a_damaged_file_is_reported_and_rebuilt_at_load(logs, log_dir):
    log = logs()
    three_epochs(log)
    log.close(clean=True)
    path = os.path.join(partition_dir(log_dir), layout.LEADER_EPOCH_CHECKPOINT)
    with open(path, "wb") as f:
        f.write(b"0\n3\n0 0\n1 1")
    log, res = open_log(log_dir, now_ms=T0, had_clean_shutdown=True)
    try:
        assert checkpoint(log_dir) == b"0\n3\n0 0\n1 10\n2 16\n"
        assert any("leader-epoch-checkpoint was damaged" in m for m in res.messages)
    finally:
        log.close(clean=False)


# ------------------------------------------------------------------ truncation

def test_truncation_truncates_the_epoch_cache(logs, log_dir):
    """UnifiedLogTest: truncateTo(LEO) changes nothing, truncateTo(11) keeps 2 entries, (10) 1, (0) none."""
    log = logs(LogConfig(segment_bytes=10 * len(follower_batch(10, 1))))
    three_epochs(log)
    assert len(log.segments) == 2
    assert not log.truncate_to(log.log_end_offset)
    assert log.leader_epochs.entries == [E(0, 0), E(1, 10), E(2, 16)]
    log.truncate_to(11)
    assert checkpoint(log_dir) == b"0\n2\n0 0\n1 10\n"
    log.truncate_to(10)
    assert checkpoint(log_dir) == b"0\n1\n0 0\n"
    log.truncate_to(0)
    assert checkpoint(log_dir) == b"0\n0\n" and read_all(log) == []


def test_truncating_at_the_log_end_drops_an_epoch_without_data(logs, log_dir):
    """Kafka's truncateTo(LEO) still truncates the cache's end: an epoch assigned at the end whose batch never
    came (its writer died) goes."""
    log = logs()
    log.append_records(recs("a", timestamp=T0))
    with log.locked():
        log.leader_epochs.assign(5, log.log_end_offset)
    assert checkpoint(log_dir) == b"0\n2\n0 0\n5 1\n"
    assert not log.truncate_to(log.log_end_offset)
    assert checkpoint(log_dir) == b"0\n1\n0 0\n"


def test_a_full_truncation_clears_the_file(logs, log_dir):
    log = logs()
    three_epochs(log)
    log.truncate_fully_and_start_at(100)
    assert checkpoint(log_dir) == b"0\n0\n"
    log.append_records(recs("x", timestamp=T0))
    assert checkpoint(log_dir) == b"0\n1\n0 100\n"


def test_delete_records_truncates_the_start(logs, log_dir):
    log = logs()
    three_epochs(log)
    log.delete_records(12)
    assert checkpoint(log_dir) == b"0\n2\n1 12\n2 16\n"
    log.delete_records(12)                               # unchanged start: nothing to do
    log.delete_records(-1)                               # the high watermark, 20: epoch 2 starts there
    assert checkpoint(log_dir) == b"0\n1\n2 20\n"


def test_retention_truncates_the_start(logs, log_dir):
    """UnifiedLogTest.testDeleteOldSegments: the epoch cache is trimmed with the segments."""
    log = logs()
    three_epochs(log)
    log.roll()
    segments = [s for s in log.segments if s.base_offset < 20]
    with log.locked():
        log.delete_segments_locked(segments, T0)
    assert log.log_start_offset == 20
    assert checkpoint(log_dir) == b"0\n1\n2 20\n"


# ------------------------------------------------------------------ several processes

def test_another_process_newer_epoch_is_never_regressed(logs, log_dir, writes):
    """Two Logs on one partition (two processes as far as the partition lock goes)."""
    first = logs()
    first.append_records(recs("a", timestamp=T0))
    second, _ = open_log(log_dir, epoch_config(5), now_ms=T0, exclusive=False, create=False)
    try:
        second.append_records(recs("b", timestamp=T0))
        assert checkpoint(log_dir) == b"0\n2\n0 0\n5 1\n"
        first.append_records(recs("c", timestamp=T0))                  # epoch 0: known, no I/O
        first.append_as_follower(follower_batch(first.log_end_offset, 3))  # epoch 3: re-read, 5 is there
        assert checkpoint(log_dir) == b"0\n2\n0 0\n5 1\n"
        assert first.leader_epochs.entries == [E(0, 0), E(5, 1)]
        # A truncation by one moves the generation: the other re-reads before its next change.
        second.truncate_to(1)
        assert checkpoint(log_dir) == b"0\n1\n0 0\n"
        first.append_as_follower(follower_batch(1, 3))
        assert checkpoint(log_dir) == b"0\n2\n0 0\n3 1\n"
    finally:
        second.close(clean=False)
    assert [v for _, v in read_all(first)] == [b"a", b"v1"]


# ------------------------------------------------------------------ Kafka's own files, verify, moves

@pytest.mark.parametrize("name,base,expected", [
    ("cluster-metadata-a.00000000000000000000.log", 0, b"0\n1\n1 0\n"),
    ("cluster-metadata-b.00000000000000000001.log", 1, b"0\n1\n1 1\n"),
])
@pytest.mark.parametrize("clean", [False, True])
def test_segments_written_by_real_kafka(log_dir, name, base, expected, clean):
    """Batches a Kafka broker wrote at leader epoch 1: without the broker's file, the load rebuilds what the broker
    held; with a file Kafka wrote beside them, it is read and left byte for byte."""
    d = partition_dir(log_dir, "meta")
    os.makedirs(d)
    shutil.copyfile(str(REAL_KAFKA_FIXTURES / name), segment_path(d, base))
    log, _ = open_log(log_dir, topic="meta", create=False, had_clean_shutdown=clean, now_ms=T0)
    log.close(clean=True)
    path = os.path.join(d, layout.LEADER_EPOCH_CHECKPOINT)
    with open(path, "rb") as f:
        assert f.read() == expected
    before = os.stat(path)
    log, _ = open_log(log_dir, topic="meta", create=False, had_clean_shutdown=clean, now_ms=T0)
    try:
        assert log.leader_epochs.entries == [E(1, base)]
        log.append_as_follower(follower_batch(log.log_end_offset, 1))
    finally:
        log.close(clean=True)
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_verify_knows_the_file_and_reports_damage(tmp_path):
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a")]}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        log.append_records(recs("a", timestamp=T0))
        path = os.path.join(log.dir, layout.LEADER_EPOCH_CHECKPOINT)
    report = verify_log_dirs(cfg)
    assert not report["problems"]
    assert not [p for p in report["pending"] if layout.LEADER_EPOCH_CHECKPOINT in p["file"]]
    with open(path, "wb") as f:
        f.write(b"0\n1\n0 x\n")
    report = verify_log_dirs(cfg)
    assert [p["file"] for p in report["problems"]] == [path]


def test_a_moved_partition_keeps_its_epochs(tmp_path):
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")]}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        for offset in range(6):
            log.append_as_follower(follower_batch(offset, offset // 2))
        source = log.log_dir
        target = next(d for d in cfg.log_dirs if d != source)
        mgr.move_log("t", 0, target)
        moved = mgr.get_log("t", 0)
        assert moved is not None and moved.log_dir == target
        with open(os.path.join(moved.dir, layout.LEADER_EPOCH_CHECKPOINT), "rb") as f:
            assert f.read() == b"0\n3\n0 0\n1 2\n2 4\n"
