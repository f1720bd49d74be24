"""Kafka's retention rules at their exact boundaries (MUTATION.md: what the mutants of retention.py showed the
other tests let through), plus the summaries operators read by key. Rules from the reference, section 6:

* ``UnifiedLog.deleteRetentionSizeBreachedSegments``: skip if ``retention.bytes < 0 || size < retention.bytes``;
  else ``diff = size - retention.bytes`` and a segment goes while ``diff - segment.size >= 0``;
* ``deleteRetentionMsBreachedSegments``: skip if ``retention.ms < 0``; a segment goes if
  ``now - largestTimestamp > retention.ms``;
* ``deleteLogStartOffsetBreachedSegments``: a segment goes while the next one's base offset <= log start offset;
* ``deletableSegments``: a prefix only, never the last segment when it is empty.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

import storage_engine
from storage_engine import crashpoints

from storage_engine.clock import ManualClock
from storage_engine.config import LogConfig
from storage_engine.log import intent, loader
from storage_engine.log.log import Log
from storage_engine.maintenance import retention
from storage_engine.maintenance.cleaner_manager import cleaning_claim
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord

from ..helpers import batch, partition_dir, segment_path, manual_clock

pytestmark = pytest.mark.unit

DAY_MS = 86_400_000
T0 = 1_700_000_000_000
RECORD = build_batch([SimpleRecord(b"key", b"v" * 20, T0)])


def open_log(log_dir, overrides, topic="t", now_ms=T0) -> Log:
    cfg = LogConfig().with_overrides(overrides)
    log, _ = loader.open_log(str(log_dir), topic, 0, cfg, clock=ManualClock(now_ms), exclusive=True, create=True)
    return log


def append(log: Log, n: int, ts: int) -> None:
    for _ in range(n):
        manual_clock(log).set(ts)
        log.append_records([SimpleRecord(b"key", b"v" * 20, ts)])


def bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


# -- size: diff - segment.size >= 0 --------------------------------------------------------------------------

def test_size_retention_deletes_a_segment_that_brings_the_log_exactly_to_the_limit(tmp_path):
    # 3 segments of 5 records; retention.bytes = two segments: diff = one segment, and diff - size == 0 -> goes.
    seg = 5 * len(RECORD)
    log = open_log(tmp_path, {"segment.bytes": seg, "retention.bytes": 2 * seg, "retention.ms": -1})
    append(log, 15, T0)
    assert bases(log) == [0, 5, 10] and log.size_in_bytes() == 3 * seg
    result = retention.run(log, T0)
    assert [s["base_offset"] for s in result["segments"]] == [0]
    assert bases(log) == [5, 10] and log.size_in_bytes() == 2 * seg
    # At the limit now: one byte less of limit would be needed for the next segment to go.
    assert retention.run(log, T0)["nothing_to_do"]


def test_retention_bytes_zero_deletes_every_segment_and_keeps_an_empty_active_one(tmp_path):
    seg = 5 * len(RECORD)
    log = open_log(tmp_path, {"segment.bytes": seg, "retention.bytes": 0, "retention.ms": -1})
    append(log, 12, T0)
    result = retention.run(log, T0)
    assert [s["reason"] for s in result["segments"]] == ["retention-bytes"] * 3
    assert bases(log) == [12] and log.size_in_bytes() == 0


def _log_with_empty_first_segment(log_dir, overrides) -> Log:
    """Segments [0, empty] and [5, two batches]: an empty sealed segment, as compaction can leave (KAFKA-9157)."""
    pdir = partition_dir(log_dir, "t")
    os.makedirs(pdir)
    open(segment_path(pdir, 0), "wb").close()
    with open(segment_path(pdir, 5), "wb") as f:
        f.write(batch(5, "a", "b", timestamp=T0) + batch(7, "c", timestamp=T0))
    # A topic that compacts too: in a delete-only topic an emptied sealed segment is lost data, which holds
    # retention (storage_engine.log.losses).
    log = open_log(log_dir, {"cleanup.policy": "compact,delete", **overrides})
    assert [(s.base_offset, s.size) for s in log.segments][0] == (0, 0)
    return log


def test_a_log_exactly_at_retention_bytes_is_still_walked(tmp_path):
    # Kafka skips only when size < retention.bytes: at size == retention.bytes, diff = 0, and an empty first
    # segment has diff - 0 >= 0, so it goes.
    probe = _log_with_empty_first_segment(tmp_path / "probe", {})
    size = probe.size_in_bytes()
    probe.close(clean=True)
    log = _log_with_empty_first_segment(tmp_path / "a", {"retention.bytes": size, "retention.ms": -1})
    deletions, _ = retention.plan(log, T0)
    assert [(d.segment.base_offset, d.reason) for d in deletions] == [(0, "retention-bytes")]
    log = _log_with_empty_first_segment(tmp_path / "b", {"retention.bytes": size + 1, "retention.ms": -1})
    assert retention.plan(log, T0) == ([], [])


# -- time: now - largestTimestamp > retention.ms --------------------------------------------------------------

def test_retention_ms_zero_deletes_what_is_older_than_now(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": 0})
    append(log, 5, T0)
    append(log, 5, T0 + 1)
    deletions, _ = retention.plan(log, T0 + 1)     # segment 0 is 1 ms old; segment 5 is exactly as old as now
    assert [(d.segment.base_offset, d.reason) for d in deletions] == [(0, "retention-ms")]


def test_the_last_segment_is_never_deletable_when_empty(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": DAY_MS})
    append(log, 5, T0)
    assert retention.run(log, T0 + 2 * DAY_MS)["segments_deleted"] == 1
    assert [s.size for s in log.segments] == [0]
    old = (T0 - 10 * DAY_MS) / 1000
    os.utime(segment_path(log.dir, 5), (old, old))   # an empty segment's "largest timestamp" is its mtime
    assert log.active_segment.largest_timestamp() < T0
    assert retention.plan(log, T0 + 3 * DAY_MS) == ([], [])
    assert retention.run(log, T0 + 3 * DAY_MS, dry_run=True)["nothing_to_do"]


def test_future_segments_are_those_with_a_record_after_now(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": DAY_MS})
    append(log, 5, T0 + 5)          # segment 0: a record 5 ms after now
    append(log, 5, T0)              # segment 5: a record exactly at now
    log.roll()                      # an empty active segment: its mtime (the wall clock) is after T0
    assert log.active_segment.size == 0 and log.active_segment.largest_timestamp() > T0
    _, future = retention.plan(log, T0)
    assert future == [{"base_offset": 0, "largest_timestamp": T0 + 5, "ahead_ms": 5}]


# -- log start offset: next.baseOffset <= logStartOffset -------------------------------------------------------

def test_delete_records_up_to_the_active_segment_deletes_every_sealed_segment(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": -1})
    append(log, 17, T0)
    assert bases(log) == [0, 5, 10, 15]
    log.delete_records(15)
    result = retention.run(log, T0)
    assert [(s["base_offset"], s["reason"]) for s in result["segments"]] == [
        (0, "log-start-offset"), (5, "log-start-offset"), (10, "log-start-offset")]
    assert bases(log) == [15]


def test_each_rule_walks_what_the_previous_one_left(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": DAY_MS})
    append(log, 12, T0)
    log.delete_records(7)
    result = retention.run(log, T0 + 2 * DAY_MS)
    assert [(s["base_offset"], s["reason"]) for s in result["segments"]] == [
        (0, "log-start-offset"), (5, "retention-ms"), (10, "retention-ms")]
    assert result["segments_deleted"] == 3


# -- compacted topics: retention takes the cleaning claim -------------------------------------------------------

def test_retention_of_a_compacted_topic_skips_while_its_cleaning_claim_is_held(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": DAY_MS,
                              "cleanup.policy": "compact,delete"})
    append(log, 12, T0)
    now = T0 + 2 * DAY_MS
    claim = cleaning_claim(log)
    assert claim.try_acquire()
    try:
        assert retention.run(log, now) == {
            "topic": "t", "partition": 0, "dry_run": False, "now_ms": now, "cleanup_policy": "compact,delete",
            "segments_deleted": 0, "bytes_reclaimed": 0, "segments": [], "log_start_offset_before": 0,
            "log_start_offset": 0, "future_segments": [], "nothing_to_do": True,
            "skipped": "cleaning in progress on this partition"}
        assert bases(log) == [0, 5, 10]
    finally:
        claim.release()
    assert retention.run(log, now)["segments_deleted"] == 3


def test_retention_of_a_delete_only_topic_ignores_the_cleaning_claim(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": DAY_MS})
    append(log, 12, T0)
    claim = cleaning_claim(log)
    assert claim.try_acquire()
    try:
        assert retention.run(log, T0 + 2 * DAY_MS)["segments_deleted"] == 3
    finally:
        claim.release()


# -- the summary ------------------------------------------------------------------------------------------------

def test_the_summary_has_exactly_the_documented_keys_and_values(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 5 * len(RECORD), "retention.ms": DAY_MS,
                              "cleanup.policy": "compact,delete"})
    append(log, 7, T0)
    log.delete_records(3)
    sizes = [s.size for s in log.segments]
    now = T0 + 2 * DAY_MS
    result = retention.run(log, now)
    assert result == {
        "topic": "t", "partition": 0, "dry_run": False, "now_ms": now, "cleanup_policy": "compact,delete",
        "segments_deleted": 2, "bytes_reclaimed": sum(sizes),
        "segments": [{"base_offset": 0, "size_bytes": sizes[0], "largest_timestamp": T0, "reason": "retention-ms"},
                     {"base_offset": 5, "size_bytes": sizes[1], "largest_timestamp": T0,
                      "reason": "retention-ms"}],
        "log_start_offset_before": 3, "log_start_offset": 7, "future_segments": [], "nothing_to_do": False}


# -- purging .deleted files after file.delete.delay.ms ------------------------------------------------------------

def _deleted_file(path, size: int, mtime_ms: int) -> None:
    with open(path, "wb") as f:
        f.write(b"x" * size)
    os.utime(path, (mtime_ms / 1000, mtime_ms / 1000))


def test_purge_removes_what_is_due_and_counts_what_waits(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a / "t-0", a / "u-1", b / "t-1"):
        d.mkdir(parents=True)
    now = T0
    _deleted_file(a / "t-0" / "00000000000000000000.log.deleted", 10, now - 60_000)   # due: exactly the delay
    _deleted_file(a / "t-0" / "00000000000000000000.index.deleted", 7, now - 70_000)
    _deleted_file(a / "t-0" / "00000000000000000005.log.deleted", 3, now - 59_999)    # waits
    _deleted_file(a / "u-1" / "00000000000000000000.log.deleted", 5, now - 59_999)    # waits
    _deleted_file(b / "t-1" / "00000000000000000009.log.deleted", 4, now - 120_000)
    def data_files():   # the partition folders' files; the engine's own lock files (a '+' in the name) aside
        return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if "+" not in p.name)

    before = data_files()
    planned = retention.purge_deleted([str(a), str(b)], now, dry_run=True)
    assert data_files() == before
    result = retention.purge_deleted([str(a), str(b)], now)
    assert result == {"files_removed": 3, "bytes_freed": 21, "files_waiting": 2, "dry_run": False,
                      "removed": ["t-0/00000000000000000000.index.deleted", "t-0/00000000000000000000.log.deleted",
                                  "t-1/00000000000000000009.log.deleted"]}
    assert planned == dict(result, dry_run=True)
    assert sorted(p.name for p in (a / "t-0").iterdir()) == ["00000000000000000005.log.deleted"]


def test_purge_takes_the_delay_of_each_topic(tmp_path):
    (tmp_path / "t-0").mkdir()
    (tmp_path / "u-0").mkdir()
    _deleted_file(tmp_path / "t-0" / "x.log.deleted", 1, T0 - 1_000)
    _deleted_file(tmp_path / "u-0" / "x.log.deleted", 1, T0 - 1_000)
    delays = {"t": 1_000, "u": 1_001}
    result = retention.purge_deleted([str(tmp_path)], T0, delays.__getitem__)
    assert result["removed"] == ["t-0/x.log.deleted"] and result["files_waiting"] == 1


def test_purge_passes_over_what_is_not_a_deleted_file_of_a_partition(tmp_path, monkeypatch):
    log_dir = tmp_path / "d"
    (log_dir / "t-0").mkdir(parents=True)
    (log_dir / "not-a-partition").mkdir()                     # not <topic>-<partition>: skipped
    (log_dir / "a-file").write_bytes(b"")                     # not a folder: skipped
    _deleted_file(log_dir / "not-a-partition" / "x.deleted", 1, 0)
    pdir = log_dir / "t-0"
    (pdir / "a.log").write_bytes(b"live")                     # not .deleted: kept
    os.symlink(pdir / "gone", pdir / "b.log.deleted")          # vanishes before its stat: skipped
    _deleted_file(pdir / "c.log.deleted", 2, 0)
    _deleted_file(pdir / "d.log.deleted", 3, 0)                # removed by someone else between stat and remove
    _deleted_file(pdir / "e.log.deleted", 4, 0)
    real_remove = os.remove

    def remove(path, *args, **kwargs):
        if str(path).endswith("d.log.deleted"):
            real_remove(path)
            raise FileNotFoundError(path)
        return real_remove(path, *args, **kwargs)

    monkeypatch.setattr(os, "remove", remove)
    result = retention.purge_deleted([str(tmp_path / "missing"), str(log_dir)], T0)
    assert result["removed"] == ["t-0/c.log.deleted", "t-0/e.log.deleted"]
    assert result["bytes_freed"] == 6 and result["files_waiting"] == 0
    assert sorted(p.name for p in pdir.iterdir()) == ["a.log", "b.log.deleted"]
    assert (log_dir / "not-a-partition" / "x.deleted").exists()


@pytest.mark.parametrize("pending", ["swap file", "pending-change record"])
def test_purge_keeps_every_deleted_file_while_a_swap_is_pending(tmp_path, pending):
    """Kafka deletes the ``.deleted`` files of a swap only once the swap is complete (``LogLoader`` may still
    roll it back with them): a ``.swap`` file, or the engine's pending-change record, each on its own, keeps every
    ``.deleted`` file of the partition, counted as waiting, nothing freed."""
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    _deleted_file(pdir / "00000000000000000000.log.deleted", 10, 0)
    _deleted_file(pdir / "00000000000000000000.index.deleted", 5, 0)
    (pdir / "00000000000000000007.log").write_bytes(b"")
    if pending == "swap file":
        (pdir / "00000000000000000000.log.swap").write_bytes(b"")
    else:
        intent.write(str(tmp_path), "t-0", "swap", {})
    before = sorted(p.name for p in pdir.iterdir())
    result = retention.purge_deleted([str(tmp_path)], T0)
    assert result == {"files_removed": 0, "bytes_freed": 0, "files_waiting": 2, "removed": [], "dry_run": False}
    assert sorted(p.name for p in pdir.iterdir()) == before


def test_purge_counts_each_file_that_waits_for_its_delay(tmp_path):
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    for i in range(3):
        _deleted_file(pdir / f"0000000000000000000{i}.log.deleted", 1, T0 - 59_999)
    _deleted_file(pdir / "00000000000000000009.log.deleted", 4, T0 - 60_000)
    result = retention.purge_deleted([str(tmp_path)], T0)
    assert result["files_waiting"] == 3 and result["removed"] == ["t-0/00000000000000000009.log.deleted"]


def test_purge_goes_on_past_partitions_deleted_or_moved_since_the_listing(tmp_path, monkeypatch):
    """A partition folder removed by another process after the log dir was listed (before its files are listed,
    or after, before its lock is taken), or one without a ``.deleted`` file, is passed over, and the partitions
    after it are still purged."""
    for name in ("a-0", "b-0", "c-0", "d-0"):
        (tmp_path / name).mkdir()
        _deleted_file(tmp_path / name / "00000000000000000000.log.deleted", 3, 0)
    os.remove(tmp_path / "c-0" / "00000000000000000000.log.deleted")    # nothing to purge there
    (tmp_path / "c-0" / "00000000000000000000.log").write_bytes(b"")
    real_listdir = os.listdir

    def listdir(path="."):
        where = str(path)
        if where.endswith(os.sep + "a-0") and os.path.isdir(where):
            shutil.rmtree(where)                        # deleted before its files are listed
        names = real_listdir(path)
        if where.endswith(os.sep + "b-0"):
            os.rename(where, where + ".gone")           # moved away before the lock is taken
        return names

    monkeypatch.setattr(os, "listdir", listdir)
    result = retention.purge_deleted([str(tmp_path)], T0)
    assert result["removed"] == ["d-0/00000000000000000000.log.deleted"] and result["bytes_freed"] == 3
    assert (tmp_path / "b-0.gone" / "00000000000000000000.log.deleted").exists()


@pytest.mark.kills
def test_purge_killed_after_its_first_removal_leaves_the_rest_for_the_next_run(tmp_path):
    """The ``purge.partial`` crash point is reached right after the first file is removed: a purge killed there
    (SIGKILL) has removed exactly one file, and the next purge removes the others."""
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    names = [f"0000000000000000000{i}.log.deleted" for i in range(3)]
    for name in names:
        _deleted_file(pdir / name, 2, 0)
    env = dict(os.environ, **{crashpoints.ENV_VAR: "purge.partial"},
               PYTHONPATH=os.path.dirname(os.path.dirname(storage_engine.__file__)))
    code = ("import sys; from storage_engine.maintenance import retention; "
            f"retention.purge_deleted([sys.argv[1]], {T0})")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "CRASHPOINT purge.partial" in proc.stderr
    assert sorted(p.name for p in pdir.iterdir() if "+" not in p.name) == names[1:]
    assert retention.purge_deleted([str(tmp_path)], T0)["removed"] == [f"t-0/{n}" for n in names[1:]]
