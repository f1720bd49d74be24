"""Retention scenarios from Kafka's tests (LogManagerTest / UnifiedLogTest), on real files."""
from __future__ import annotations

import os

import pytest

from storage_engine.log import loader
from storage_engine.clock import ManualClock
from storage_engine import layout
from storage_engine.maintenance import retention
from storage_engine.jobs import housekeeping as maintenance
from storage_engine.config import LogConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import PartitionNotFoundError
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from ..helpers import get_log, manual_clock

pytestmark = pytest.mark.unit

DAY_MS = 86_400_000
T0 = 1_700_000_000_000


def _one_record_size() -> int:
    from storage_engine.record.record_batch import build_batch
    return len(build_batch([SimpleRecord(b"key", b"v" * 20, T0)]))


def open_log(tmp_path, overrides, topic="t", now_ms=T0) -> Log:
    cfg = LogConfig().with_overrides(overrides)
    log, _ = loader.open_log(str(tmp_path), topic, 0, cfg, clock=ManualClock(now_ms), exclusive=True, create=True)
    return log


def append(log: Log, n: int, ts: int, key=b"key") -> None:
    for _ in range(n):
        manual_clock(log).set(ts)
        log.append_records([SimpleRecord(key, b"v" * 20, ts)])


def files(log: Log, suffix: str) -> list[str]:
    return sorted(f for f in os.listdir(log.dir) if f.endswith(suffix))


def test_size_retention_keeps_six_of_twenty_segments(tmp_path):
    # LogManagerTest.testCleanupSegmentsToMaintainSize: 20 segments of 10 messages, limit 50 messages + 10 bytes.
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 10 * size, "retention.bytes": 5 * 10 * size + 10,
                              "retention.ms": -1})
    append(log, 200, T0)
    assert len(log.segments) == 20
    result = retention.run(log, T0)
    assert result["segments_deleted"] == 14
    assert len(log.segments) == 6
    assert all(s["reason"] == "retention-bytes" for s in result["segments"])
    assert result["bytes_reclaimed"] == 14 * 10 * size
    assert log.log_start_offset == 140
    assert len(files(log, ".log.deleted")) == 14
    # Never below the limit: what is left is still >= retention.bytes - one segment.
    assert log.size_in_bytes() >= 5 * 10 * size


def test_size_retention_skipped_when_log_smaller_than_limit(tmp_path):
    log = open_log(tmp_path, {"segment.bytes": 1000, "retention.bytes": 10**9, "retention.ms": -1})
    append(log, 100, T0)
    assert retention.run(log, T0)["nothing_to_do"]


def test_time_retention_deletes_only_an_expired_prefix(tmp_path):
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS})
    append(log, 5, T0)                 # segment 0: old
    append(log, 5, T0 + 10 * DAY_MS)   # segment 1: recent (blocks the walk)
    append(log, 5, T0)                 # segment 2: old timestamps, but after a recent segment
    append(log, 2, T0 + 10 * DAY_MS)   # active
    now = T0 + 10 * DAY_MS + 1
    deletions, _ = retention.plan(log, now)
    assert [d.segment.base_offset for d in deletions] == [0]
    result = retention.run(log, now)
    assert [s["base_offset"] for s in result["segments"]] == [0]
    assert result["segments"][0]["reason"] == "retention-ms"
    assert [s.base_offset for s in log.segments] == [5, 10, 15]


def test_time_retention_is_strict(tmp_path):
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS})
    append(log, 6, T0)
    assert retention.run(log, T0 + DAY_MS)["nothing_to_do"]          # now - ts == retention.ms: kept
    assert retention.run(log, T0 + DAY_MS + 1)["segments_deleted"] >= 1


def test_all_segments_expired_rolls_first_and_keeps_an_empty_active_segment(tmp_path):
    # LogManagerTest.testCleanupExpiredSegments: the log keeps one (new, empty) active segment.
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS})
    append(log, 12, T0)
    end = log.log_end_offset
    result = retention.run(log, T0 + 2 * DAY_MS)
    assert result["segments_deleted"] == 3
    assert [s.base_offset for s in log.segments] == [end]
    assert log.active_segment.size == 0
    assert log.log_start_offset == end == log.log_end_offset
    # Appends continue at the same offsets.
    append(log, 1, T0 + 2 * DAY_MS)
    assert log.log_end_offset == end + 1


def test_retention_rerun_for_the_same_time_changes_nothing(tmp_path):
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS})
    append(log, 12, T0)
    retention.run(log, T0 + 2 * DAY_MS)
    snapshot = {f: open(os.path.join(log.dir, f), "rb").read() for f in os.listdir(log.dir)}
    again = retention.run(log, T0 + 2 * DAY_MS)
    assert again["nothing_to_do"] and again["segments_deleted"] == 0
    assert {f: open(os.path.join(log.dir, f), "rb").read() for f in os.listdir(log.dir)} == snapshot


def test_log_start_offset_retention_after_delete_records(tmp_path):
    # UnifiedLogTest.testLogDeletionAfterDeleteRecords
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": -1})
    append(log, 20, T0)
    assert [s.base_offset for s in log.segments] == [0, 5, 10, 15]
    log.delete_records(7)
    result = retention.run(log, T0)
    # The segment holding offset 7 survives; the one before goes.
    assert [s["base_offset"] for s in result["segments"]] == [0]
    assert result["segments"][0]["reason"] == "log-start-offset"
    assert log.log_start_offset == 7
    log.delete_records(10)
    assert [s["base_offset"] for s in retention.run(log, T0)["segments"]] == [5]
    assert log.log_start_offset == 10


def test_compacted_topic_untouched_by_time_and_size_retention(tmp_path):
    # LogManagerTest.testDoesntCleanLogsWithCompactPolicy
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS, "retention.bytes": 1,
                              "cleanup.policy": "compact"})
    append(log, 20, T0)
    assert retention.run(log, T0 + 100 * DAY_MS)["nothing_to_do"]
    assert len(log.segments) == 4
    # ... but the log start offset rule still applies (KAFKA-7400).
    log.delete_records(10)
    assert retention.run(log, T0 + 100 * DAY_MS)["segments_deleted"] == 2


def test_compact_delete_topic_gets_time_retention(tmp_path):
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS,
                              "cleanup.policy": "compact,delete"})
    append(log, 12, T0)
    assert retention.run(log, T0 + 2 * DAY_MS)["segments_deleted"] == 3


def test_dry_run_changes_nothing(tmp_path):
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS})
    append(log, 12, T0)
    before = sorted(os.listdir(log.dir))
    result = retention.run(log, T0 + 2 * DAY_MS, dry_run=True)
    assert result["dry_run"] and result["segments_deleted"] == 3
    assert sorted(os.listdir(log.dir)) == before
    assert log.log_start_offset == 0


def test_future_timestamps_are_reported(tmp_path):
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 5 * size, "retention.ms": DAY_MS})
    append(log, 5, T0 + 30 * DAY_MS)
    append(log, 5, T0)
    result = retention.run(log, T0 + 5 * DAY_MS)
    assert result["nothing_to_do"]  # the future segment blocks the prefix walk
    assert result["future_segments"][0]["base_offset"] == 0
    assert result["future_segments"][0]["ahead_ms"] == 25 * DAY_MS


def test_deletion_delay_is_honoured(tmp_path):
    size = _one_record_size()
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "d")]},
                               "topics": {"t": {"segment.bytes": 5 * size, "retention.ms": DAY_MS,
                                                "file.delete.delay.ms": 60000}}})
    now = T0 + 2 * DAY_MS
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        append(log, 12, T0)
    result = maintenance.retention(cfg, "t", 0, now)
    assert result["segments_deleted"] == 3
    pdir = tmp_path / "d" / "t-0"
    deleted = sorted(f for f in os.listdir(pdir) if f.endswith(layout.DELETED_SUFFIX))
    # .log, .index, .timeindex of three segments, and the producer snapshots taken when 5 and 10 were rolled
    # (Kafka's testRetentionDeletesProducerStateSnapshots); the one at the new active segment's base stays
    assert len(deleted) == 11
    assert [f for f in deleted if layout.SNAPSHOT_SUFFIX in f] == ["00000000000000000005.snapshot.deleted",
                                                                   "00000000000000000010.snapshot.deleted"]
    assert sorted(f for f in os.listdir(pdir) if f.endswith(layout.SNAPSHOT_SUFFIX)) == ["00000000000000000012.snapshot"]
    assert maintenance.purge(cfg, now + 59_999)["files_removed"] == 0
    assert all((pdir / f).exists() for f in deleted)
    purged = maintenance.purge(cfg, now + 60_000)
    assert purged["files_removed"] == 11
    assert not any(f.endswith(layout.DELETED_SUFFIX) for f in os.listdir(pdir))
    # Kafka checkpoints a log start offset only when it is above the first segment's base; here the log
    # rolled to a new segment at 12, so the file is empty and a reload derives the start from the segment.
    cp = (tmp_path / "d" / layout.LOG_START_OFFSET_CHECKPOINT).read_text().splitlines()
    assert cp == ["0", "0"]
    with LogManager.open(cfg, clock=ManualClock(now)) as mgr:
        assert get_log(mgr, "t", 0).log_start_offset == 12


def test_retention_of_unknown_partition_is_a_clear_error(tmp_path):
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "d")]}})
    with pytest.raises(PartitionNotFoundError, match="nope-0"):
        maintenance.retention(cfg, "nope", 0, T0)


@pytest.mark.parametrize("blocked", [0, 2], ids=["first-rename-fails", "third-rename-fails"])
def test_a_failed_rename_moves_the_log_start_offset_only_past_what_went(tmp_path, blocked):
    """Retention publishes the new log start offset before its first rename (a process meeting the deletion half
    done, its process killed, sees only segments below the start). If a rename fails and the process lives on,
    the start goes back to just past what really went, and every record from there is still read."""
    size = _one_record_size()
    log = open_log(tmp_path, {"segment.bytes": 10 * size, "retention.bytes": 10 * size, "retention.ms": -1})
    append(log, 60, T0)
    bases = [s.base_offset for s in log.segments]
    os.mkdir(layout.segment_file(log.dir, bases[blocked], layout.LOG_SUFFIX, layout.DELETED_SUFFIX))
    with pytest.raises(Exception):
        retention.run(log, T0)
    assert log.log_start_offset == bases[blocked]
    assert [r.offset for r in log.read_records()] == list(range(bases[blocked], 60))
    log.close(clean=False)
    again = open_log(tmp_path, {"segment.bytes": 10 * size})
    assert again.log_start_offset == bases[blocked]
    assert [r.offset for r in again.read_records()] == list(range(bases[blocked], 60))
    again.close(clean=False)
