"""Which logs to compact and how far (after Kafka's LogCleanerManagerTest, LogCleanerTest.testLogToClean* and
OffsetMapTest), plus the ``compact`` maintenance job: checkpoints, dirty ratios, compaction lags, uncleanable
partitions and cross-process claims. Real files throughout; times are passed in."""
from __future__ import annotations

import json
import os

import pytest

from storage_engine.clock import ManualClock
from storage_engine.maintenance import cleaner_manager, retention
from storage_engine.jobs import compaction
from storage_engine import layout
from storage_engine.maintenance.cleaner_manager import (cleanable_offsets, cleaning_claim, log_to_clean, read_cleaner_checkpoints,
                                            update_cleaner_checkpoint)
from storage_engine.config import LogConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import LogLockedError
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.maintenance.offset_map import InProcessOffsetMap
from storage_engine.record.records import SimpleRecord
from ..helpers import get_log, manual_clock

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR
TOPIC = "foo"


def compact_cfg(**overrides) -> LogConfig:
    o = {"cleanup.policy": "compact"}
    o.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig().with_overrides(o)


def put(log: Log, key: str, value: str | None, ts: int = T0):
    manual_clock(log).set(ts)
    return log.append_records([SimpleRecord(key.encode(), None if value is None else value.encode(), ts)])


@pytest.fixture
def make_log(logs):
    def make(cfg=None, *, topic=TOPIC, partition=0, now=T0) -> Log:
        return logs(cfg or compact_cfg(), topic=topic, partition=partition, now_ms=now)
    return make


def one_record_segments(log: Log, n: int, ts=lambda i: T0) -> None:
    """Append until the log has ``n`` segments, one record (same size) per segment (segment.bytes = 100)."""
    assert log.config.segment_bytes == 100
    while len(log.segments) < n:
        i = log.log_end_offset
        put(log, "1", "0" * 25, ts(i))


def set_checkpoint(log: Log, offset: int | None) -> None:
    update_cleaner_checkpoint(log.log_dir, (log.topic, log.partition), offset)


def checkpoint_of(log: Log) -> int | None:
    return read_cleaner_checkpoints(log.log_dir).get((log.topic, log.partition))


# --------------------------------------------------------------------------------- offset map (OffsetMapTest)

def key(i: int) -> bytes:
    return str(i).encode()


@pytest.mark.parametrize("items", [10, 100, 1000, 5000])
def test_offset_map_basic_validation(items):
    m = InProcessOffsetMap(items * 48)     # the test sizing of OffsetMapTest: 48 bytes per item
    for i in range(items):
        m.put(key(i), i)
    for i in range(items):
        assert m.get(key(i)) == i
    assert m.size == items


def test_offset_map_get_when_full():
    m = InProcessOffsetMap(4096)
    assert m.slots == 4096 // 24
    i = 37
    while m.size < m.slots:
        m.put(key(i), i)
        i += 1
    assert m.get(key(i)) == -1
    assert m.get(key(i - 1)) == i - 1
    with pytest.raises(ValueError):
        m.put(key(i), i)
    m.put(key(40), 1000)                 # overwriting an existing key still works when full
    assert m.get(key(40)) == 1000 and m.size == m.slots


def test_offset_map_clear_and_latest_offset():
    m = InProcessOffsetMap(4000)
    assert m.latest_offset == -1
    for i in range(10):
        m.put(key(i), i)
        assert m.latest_offset == i
    m.update_latest_offset(99)
    assert m.latest_offset == 99
    m.clear()
    assert [m.get(key(i)) for i in range(10)] == [-1] * 10
    assert m.size == 0 and m.latest_offset == -1


def test_offset_map_utilization_and_capacity():
    m = InProcessOffsetMap(24 * 100, load_factor=0.9)
    assert m.slots == 100 and m.max_entries == 90
    m.put(b"a", 1)
    m.put(b"a", 2)
    m.put(b"b", 3)
    assert m.utilization == pytest.approx(2 / 100)
    assert not m.full
    # Kafka requires slots * load factor > 1
    with pytest.raises(ValueError):
        InProcessOffsetMap(24, 0.9)
    assert InProcessOffsetMap(48, 0.75).max_entries == 1


# ------------------------------------------------------------------------------------- checkpoint file

def test_cleaner_checkpoint_file_kafka_format(make_log):
    a = make_log(topic="foo", partition=0)
    b = make_log(topic="foo", partition=1)
    set_checkpoint(a, 15)
    set_checkpoint(b, 7)
    path = os.path.join(a.log_dir, layout.CLEANER_OFFSET_CHECKPOINT)
    with open(path, "rb") as f:
        assert f.read() == b"0\n2\nfoo 0 15\nfoo 1 7\n"
    set_checkpoint(b, None)
    assert read_cleaner_checkpoints(a.log_dir) == {("foo", 0): 15}
    # entries of partitions whose folder is gone are dropped on the next update
    set_checkpoint(b, 3)
    b.close(clean=False)
    import shutil
    shutil.rmtree(b.dir)
    set_checkpoint(a, 16)
    assert read_cleaner_checkpoints(a.log_dir) == {("foo", 0): 16}


# ------------------------------------------------------------------------------------ cleanable offsets

def test_cleanable_offsets_for_none(make_log):
    # LogCleanerManagerTest.testCleanableOffsetsForNone
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 8:
        put(log, str(log.log_end_offset), str(log.log_end_offset))
    first_dirty, first_uncleanable, need_now, reset, _ = cleanable_offsets(log, None, T0)
    assert first_dirty == 0 and not reset and not need_now
    assert first_uncleanable == log.active_segment.base_offset


def test_cleanable_offsets_for_active_segment_only(make_log):
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(3):
        put(log, str(i), str(i))
    assert len(log.segments) == 1
    first_dirty, first_uncleanable, _, _, _ = cleanable_offsets(log, None, T0)
    assert (first_dirty, first_uncleanable) == (0, 0)
    ltc = log_to_clean(log, None, T0)
    assert ltc.cleanable_bytes == 0 and ltc.clean_bytes == 0 and ltc.total_bytes == 0


def test_cleanable_offsets_for_time(make_log):
    # LogCleanerManagerTest.testCleanableOffsetsForTime: min.compaction.lag.ms keeps recent segments dirty.
    lag = HOUR
    log = make_log(compact_cfg(segment_bytes=1024, min_compaction_lag_ms=lag))
    t0 = T0
    while len(log.segments) < 4:
        put(log, str(log.log_end_offset), "v", t0)
    active_at_t0 = log.active_segment
    t1 = t0 + lag + 1
    while len(log.segments) < 8:
        put(log, str(log.log_end_offset), "v", t1)
    first_dirty, first_uncleanable, _, _, _ = cleanable_offsets(log, 0, t1)
    assert first_dirty == 0, "The first cleanable offset starts at the beginning of the log."
    assert first_uncleanable == active_at_t0.base_offset, \
        "The first uncleanable offset begins with the second block of log entries."


def test_cleanable_offsets_for_short_time(make_log):
    # LogCleanerManagerTest.testCleanableOffsetsForShortTime: once the lag has passed, all but the active.
    lag = 60_000
    log = make_log(compact_cfg(segment_bytes=1024, min_compaction_lag_ms=lag))
    while len(log.segments) < 4:
        put(log, str(log.log_end_offset), "v", T0)
    first_dirty, first_uncleanable, _, _, _ = cleanable_offsets(log, 0, T0 + lag + 1)
    assert first_dirty == 0 and first_uncleanable == log.active_segment.base_offset
    # a segment is too recent while its largest timestamp > now - lag (strict)
    assert cleanable_offsets(log, 0, T0 + lag)[1] == log.active_segment.base_offset
    assert cleanable_offsets(log, 0, T0 + lag - 1)[1] == log.segments[0].base_offset


def test_cleanable_offsets_upper_time_bound(make_log):
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 3:
        put(log, str(log.log_end_offset), "v", T0)
    while len(log.segments) < 6:
        put(log, str(log.log_end_offset), "v", T0 + 1000)
    first_new = next(s for s in log.segments if s.largest_timestamp() >= T0 + 1000)
    _, fu, _, _, _ = cleanable_offsets(log, None, T0 + DAY, upper_time_bound_ms=T0 + 1000)
    assert fu == first_new.base_offset
    _, fu, _, _, _ = cleanable_offsets(log, None, T0 + DAY, upper_time_bound_ms=T0 + 1001)
    assert fu == log.active_segment.base_offset


def test_cleanable_offsets_needs_checkpoint_reset(make_log):
    # LogCleanerManagerTest.testCleanableOffsetsNeedsCheckpointReset
    log = make_log(compact_cfg(segment_bytes=1024))
    while log.log_end_offset < 24:
        put(log, str(log.log_end_offset % 5), "v")
    log.delete_records(10)
    assert not cleanable_offsets(log, 15, T0)[3], "Checkpoint offset should not be reset if valid"
    log.delete_records(20)
    fd, _, _, reset, _ = cleanable_offsets(log, 15, T0)
    assert reset and fd == 20, "Checkpoint offset needs to be reset if less than log start offset"
    fd, _, _, reset, _ = cleanable_offsets(log, 25, T0)
    assert reset and fd == 20, "Checkpoint offset needs to be reset if greater than log end offset"
    assert not cleanable_offsets(log, 24, T0)[3]     # == log end offset is valid


def test_dirty_offset_reset_if_larger_than_end_offset(make_log):
    # LogCleanerManagerTest.testDirtyOffsetResetIfLargerThanEndOffset
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 3:
        put(log, str(log.log_end_offset % 3), "v")
    set_checkpoint(log, 200)
    sel = cleaner_manager.select([log], T0)
    assert [e.log for e in sel["eligible"]] == [log]
    assert sel["eligible"][0].first_dirty_offset == 0 and sel["eligible"][0].checkpoint_reset
    assert checkpoint_of(log) == 0


def test_dirty_offset_reset_if_smaller_than_start_offset(make_log):
    # LogCleanerManagerTest.testDirtyOffsetResetIfSmallerThanStartOffset
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 3:
        put(log, str(log.log_end_offset % 3), "v")
    log.delete_records(2)
    set_checkpoint(log, 0)
    sel = cleaner_manager.select([log], T0)
    assert sel["eligible"][0].first_dirty_offset == 2
    assert checkpoint_of(log) == 2


def test_log_start_offset_larger_than_active_segment_base(make_log):
    # LogCleanerManagerTest.testLogStartOffsetLargerThanActiveSegmentBaseOffset: nothing to clean, but the
    # reset checkpoint is written although the log is not selected.
    log = make_log(compact_cfg(segment_bytes=2048))
    for i in range(3):
        put(log, str(i), "v")
    assert len(log.segments) == 1
    log.delete_records(2)
    set_checkpoint(log, 0)
    sel = cleaner_manager.select([log], T0)
    assert sel["eligible"] == [], "Log should not be selected for cleaning"
    assert checkpoint_of(log) == 2, "Unselected log should have checkpoint offset updated"
    ltc = sel["not_dirty"][0]
    assert ltc.cleanable_bytes == 0


def test_dirty_offset_larger_than_active_segment_base(make_log):
    # LogCleanerManagerTest.testDirtyOffsetLargerThanActiveSegmentBaseOffset
    log = make_log(compact_cfg(segment_bytes=2048))
    for i in range(3):
        put(log, str(i), "v")
    set_checkpoint(log, 3)
    sel = cleaner_manager.select([log], T0)
    assert sel["eligible"] == [], "Log should not be selected for cleaning"
    assert checkpoint_of(log) == 3, "Checkpoint offset should not change"
    ltc = sel["not_dirty"][0]
    assert ltc.first_dirty_offset == 3 and ltc.first_uncleanable_offset == 3 and ltc.cleanable_bytes == 0


# -------------------------------------------------------------------------------- LogToClean arithmetic

def test_log_to_clean(make_log):
    # LogCleanerTest.testLogToClean
    log = make_log(compact_cfg(segment_bytes=100))
    for _ in range(6):
        put(log, "1", "0" * 25)
    assert len(log.segments) == 6
    active = log.active_segment
    ltc = log_to_clean(log, active.base_offset, T0)
    assert ltc.total_bytes == log.size_in_bytes() - active.size
    assert ltc.clean_bytes == ltc.total_bytes and ltc.cleanable_bytes == 0 and ltc.cleanable_ratio == 0


def test_log_to_clean_with_uncleanable_section(make_log):
    # LogCleanerTest.testLogToCleanWithUncleanableSection: segments [0,1] clean, [2,3] cleanable, [4,5] not
    # (here: [4] is too recent for min.compaction.lag.ms, [5] is active).
    lag = HOUR
    log = make_log(compact_cfg(segment_bytes=100, min_compaction_lag_ms=lag))
    one_record_segments(log, 6, ts=lambda i: T0 if i < 4 else T0 + 2 * lag)
    segs = log.segments
    assert len(segs) == 6
    clean_size = sum(s.size for s in segs[:2])
    cleanable_size = sum(s.size for s in segs[2:4])
    ltc = log_to_clean(log, segs[2].base_offset, T0 + 2 * lag)
    assert ltc.first_dirty_offset == segs[2].base_offset
    assert ltc.first_uncleanable_offset == segs[4].base_offset
    assert ltc.clean_bytes == clean_size
    assert ltc.cleanable_bytes == cleanable_size
    assert ltc.total_bytes == clean_size + cleanable_size
    assert ltc.cleanable_ratio == cleanable_size / (clean_size + cleanable_size)


def test_log_to_clean_checkpoint_inside_a_segment(make_log):
    # A map that filled mid-segment leaves the checkpoint inside a segment: it counts as clean and cleanable.
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 4:
        put(log, str(log.log_end_offset % 4), "v")
    segs = log.segments
    mid = segs[1].base_offset + 2
    ltc = log_to_clean(log, mid, T0)
    assert ltc.clean_bytes == sum(s.size for s in segs[:2])
    assert ltc.cleanable_bytes == sum(s.size for s in segs[1:3])
    assert ltc.first_uncleanable_offset == segs[3].base_offset


def test_strict_ratio_comparison(make_log):
    # eligible only if the ratio is strictly above min.cleanable.dirty.ratio
    log = make_log(compact_cfg(segment_bytes=100, min_cleanable_dirty_ratio=0.5))
    one_record_segments(log, 5)
    segs = log.segments
    set_checkpoint(log, segs[2].base_offset)
    sel = cleaner_manager.select([log], T0)
    ltc = sel["not_dirty"][0]
    assert ltc.cleanable_ratio == 0.5 and sel["eligible"] == []
    log.config = compact_cfg(segment_bytes=100, min_cleanable_dirty_ratio=0.49)
    sel = cleaner_manager.select([log], T0)
    assert [e.log for e in sel["eligible"]] == [log]


def test_select_ranks_dirtiest_first_and_skips_claimed_and_uncleanable(make_log):
    # LogCleanerManagerTest.testGrabFilthiestCompactedLog*: dirtiest ratio first; uncleanable and in-progress
    # partitions are not candidates (and are reported).
    logs = [make_log(compact_cfg(segment_bytes=100, min_cleanable_dirty_ratio=0.01), partition=p)
            for p in range(4)]
    for log in logs:
        one_record_segments(log, 6)
    for p, log in enumerate(logs):
        set_checkpoint(log, log.segments[p].base_offset)     # ratios 5/5, 4/5, 3/5, 2/5
    sel = cleaner_manager.select(logs, T0)
    assert [e.log.partition for e in sel["eligible"]] == [0, 1, 2, 3]
    assert [round(e.cleanable_ratio, 2) for e in sel["eligible"]] == [1.0, 0.8, 0.6, 0.4]
    cleaner_manager.mark_uncleanable(logs[0].log_dir, logs[0].name, "boom", T0)
    with cleaning_claim(logs[1]) as claim:
        assert claim.try_acquire()
        sel = cleaner_manager.select(logs, T0)
        assert [e.log.partition for e in sel["eligible"]] == [2, 3]
        reasons = {s["partition"]: s["reason"] for s in sel["skipped"]}
        assert reasons == {0: "uncleanable: boom", 1: "another run is cleaning this partition"}
    sel = cleaner_manager.select(logs, T0)
    assert [e.log.partition for e in sel["eligible"]] == [1, 2, 3]
    cleaner_manager.clear_uncleanable(logs[0].log_dir)
    assert [e.log.partition for e in cleaner_manager.select(logs, T0)["eligible"]] == [0, 1, 2, 3]


def test_non_compacted_logs_are_not_candidates(make_log):
    log = make_log(LogConfig().with_overrides({"cleanup.policy": "delete", "segment.bytes": 100}))
    put(log, "1", "0" * 25)
    put(log, "1", "0" * 25)
    sel = cleaner_manager.select([log], T0)
    assert sel == {"eligible": [], "skipped": [], "not_dirty": []}


def test_max_compaction_lag_forces_cleaning_below_the_ratio(make_log):
    # LogCleanerIntegrationTest.testMaxLogCompactionLag: a log below min.cleanable.dirty.ratio is cleaned once
    # its oldest dirty data is older than max.compaction.lag.ms.
    max_lag = HOUR
    log = make_log(compact_cfg(segment_bytes=100, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=max_lag))
    one_record_segments(log, 6)
    set_checkpoint(log, log.segments[2].base_offset)           # ratio 3/5 < 0.99
    ltc = log_to_clean(log, checkpoint_of(log), T0 + max_lag)
    assert not ltc.need_compaction_now and ltc.max_compaction_delay_ms == 0
    assert cleaner_manager.select([log], T0 + max_lag)["eligible"] == []
    now = T0 + max_lag + 5
    ltc = log_to_clean(log, checkpoint_of(log), now)
    assert ltc.need_compaction_now and ltc.max_compaction_delay_ms == 5
    sel = cleaner_manager.select([log], now)
    assert [e.log for e in sel["eligible"]] == [log]
    # nothing dirty (checkpoint at the active segment): never forced
    set_checkpoint(log, log.active_segment.base_offset)
    assert cleaner_manager.select([log], now + DAY)["eligible"] == []


# --------------------------------------------------------------------------------- the compact job

def storage_config(tmp_path, topics: dict, **broker):
    b = {"log.dirs": [str(tmp_path / "d1")]}
    b.update(broker)
    return config_from_mapping({"broker": b, "topics": topics})


def write(cfg, topic: str, partition: int, records, now: int = T0, roll: bool = True) -> None:
    """Append (key, value, ts) records through a LogManager, then roll so they are cleanable."""
    with LogManager.open(cfg, clock=ManualClock(now)) as mgr:
        log = mgr.get_or_create_log(topic, partition)
        for k, v, ts in records:
            manual_clock(log).set(ts)
            log.append_records([SimpleRecord(k.encode(), None if v is None else v.encode(), ts)])
        if roll:
            manual_clock(log).set(now)
            log.roll()


def read(cfg, topic: str, partition: int = 0) -> list:
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        return [(r.offset, r.key, r.value) for r in get_log(mgr, topic, partition).read_records()]


def segment_bytes_of(cfg, topic: str, partition: int = 0) -> dict:
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        return {s.base_offset: open(s.path, "rb").read() for s in get_log(mgr, topic, partition).segments}


def test_compact_job_cleans_and_is_idempotent(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024}})
    write(cfg, "t", 0, [(f"k{i % 5}", f"v{i}", T0) for i in range(60)])
    dry = compaction.compact(cfg, T0, dry_run=True)
    assert dry["results"][0]["stats"]["messages_written"] == 5
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {}
    assert len(read(cfg, "t")) == 60
    res = compaction.compact(cfg, T0)
    r = res["results"][0]
    assert not res["failed"] and r["checkpoint_written"] and r["end_offset"] == 60
    assert r["size_bytes_after"] < r["size_bytes_before"]
    assert r["log_lines"][0].startswith("Log cleaner cleaned log t-0 (dirty section = [0, 60])")
    assert [(o, k, v) for o, k, v in read(cfg, "t")] == [(55 + i, f"k{i}".encode(), f"v{55 + i}".encode())
                                                         for i in range(5)]
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {("t", 0): 60}
    with open(os.path.join(cfg.log_dirs[0], layout.CLEANER_OFFSET_CHECKPOINT), "rb") as f:
        assert f.read() == b"0\n1\nt 0 60\n"
    again = compaction.compact(cfg, T0)
    assert again["nothing_to_do"] and again["results"] == []
    assert again["not_dirty"][0]["first_dirty_offset"] == 60


def test_compact_job_picks_dirtiest_first(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 100,
                                          "min.cleanable.dirty.ratio": 0.1}})
    for p in range(3):
        write(cfg, "t", p, [("1", "0" * 25, T0) for _ in range(5)])
    for p in range(3):
        update_cleaner_checkpoint(cfg.log_dirs[0], ("t", p), [1, 3, 2][p])
    res = compaction.compact(cfg, T0, max_partitions=1)
    assert [(r["topic"], r["partition"]) for r in res["results"]] == [("t", 0)]
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {("t", 0): 5, ("t", 1): 3, ("t", 2): 2}
    res = compaction.compact(cfg, T0)
    assert [r["partition"] for r in res["results"]] == [2, 1]


def test_min_compaction_lag_leaves_recent_segments(tmp_path):
    lag = HOUR
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 300,
                                          "min.compaction.lag.ms": lag}})
    old = [(f"k{i % 3}", f"old{i}", T0) for i in range(12)]
    new = [(f"k{i % 3}", f"new{i}", T0 + lag) for i in range(12)]
    write(cfg, "t", 0, old + new, now=T0 + lag)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        segs = get_log(mgr, "t", 0).segments
        first_recent = next(s.base_offset for s in segs if s.largest_timestamp() >= T0 + lag)
    before = segment_bytes_of(cfg, "t")
    res = compaction.compact(cfg, T0 + lag + 10)
    assert res["results"][0]["end_offset"] == first_recent
    after = segment_bytes_of(cfg, "t")
    assert {b: d for b, d in after.items() if b >= first_recent} == \
           {b: d for b, d in before.items() if b >= first_recent}
    got = read(cfg, "t")
    written = old + new
    latest_below = {}
    for o, (k, v, _) in enumerate(written[:first_recent]):
        latest_below[k.encode()] = (o, v.encode())
    assert sorted((o, k, v) for o, k, v in got if o < first_recent) == \
           sorted((o, k, v) for k, (o, v) in latest_below.items())
    assert [(o, k.decode(), v.decode()) for o, k, v in got if o >= first_recent] == \
           [(o, k, v) for o, (k, v, _) in enumerate(written) if o >= first_recent]
    # once the lag has passed for the rest, everything but the active segment gets cleaned
    res = compaction.compact(cfg, T0 + 3 * lag)
    assert {k: v for _, k, v in read(cfg, "t")} == {b"k0": b"new9", b"k1": b"new10", b"k2": b"new11"}
    assert len(read(cfg, "t")) == 3


def test_max_compaction_lag_job(tmp_path):
    max_lag = HOUR
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 100,
                                          "min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": max_lag}})
    write(cfg, "t", 0, [("1", "0" * 25, T0) for _ in range(5)], now=T0)
    update_cleaner_checkpoint(cfg.log_dirs[0], ("t", 0), 2)
    assert compaction.compact(cfg, T0 + max_lag)["nothing_to_do"]
    res = compaction.compact(cfg, T0 + max_lag + 1)
    r = res["results"][0]
    assert r["selection"]["need_compaction_now"] and r["selection"]["dirty_ratio"] < 0.99
    assert r["checkpoint_written"] and r["end_offset"] == 5
    assert len(read(cfg, "t")) == 1


def corrupt_magic(cfg, topic: str, partition: int, batch_no: int = 1) -> tuple[str, int, bytes]:
    """Overwrite the magic byte of the ``batch_no``-th batch of the first segment; returns what to restore."""
    from storage_engine.segment.file_records import iter_batches
    d = os.path.join(cfg.log_dirs[0], layout.partition_dir_name(topic, partition))
    path = layout.segment_file(d, 0, layout.LOG_SUFFIX)
    with open(path, "rb") as f:
        data = f.read()
    pos = [bt.pos for bt in iter_batches(data)][batch_no] + 16
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(b"\x07")
    return path, pos, data[pos:pos + 1]


def test_cleaning_failure_marks_partition_uncleanable(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    write(cfg, "t", 1, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    path, pos, original = corrupt_magic(cfg, "t", 0)    # the log dir was closed cleanly: no recovery on open
    res = compaction.compact(cfg, T0)
    assert res["failed"] == ["t-0"]
    bad = next(r for r in res["results"] if r["partition"] == 0)
    assert bad["marked_uncleanable"] and "CorruptRecordError" in bad["error"]
    good = next(r for r in res["results"] if r["partition"] == 1)
    assert good["checkpoint_written"]
    # persisted in the log dir, with the reason
    with open(os.path.join(cfg.log_dirs[0], layout.UNCLEANABLE_FILE)) as f:
        marked = json.load(f)
    assert list(marked) == ["t-0"] and "CorruptRecordError" in marked["t-0"]["reason"]
    assert marked["t-0"]["since_ms"] == T0
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {("t", 1): 30}
    # the next run skips it and says why
    write(cfg, "t", 1, [("k9", "x", T0)] * 40)
    res = compaction.compact(cfg, T0 + 1)
    assert res["failed"] == []
    assert [(s["topic"], s["partition"]) for s in res["skipped"]] == [("t", 0)]
    assert res["skipped"][0]["reason"].startswith("uncleanable: CorruptRecordError")
    assert [r["partition"] for r in res["results"]] == [1]
    # cleared by clear_uncleanable, then cleaned once the damage is repaired
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(original)
    cleared = compaction.clear_uncleanable(cfg, "t", 0)
    assert cleared == {"cleared": {cfg.log_dirs[0]: ["t-0"]}}
    assert cleaner_manager.read_uncleanable(cfg.log_dirs[0]) == {}
    res = compaction.compact(cfg, T0 + 2)
    assert res["failed"] == [] and res["skipped"] == []
    assert [r["partition"] for r in res["results"]] == [0]
    assert {k for _, k, _ in read(cfg, "t", 0)} == {b"k0", b"k1", b"k2"}
    assert len(read(cfg, "t", 0)) == 3


def test_truncated_sealed_segment_marks_partition_uncleanable(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    d = os.path.join(cfg.log_dirs[0], "t-0")
    path = layout.segment_file(d, 0, layout.LOG_SUFFIX)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    before = segment_bytes_of(cfg, "t")
    res = compaction.compact(cfg, T0)
    # Kafka: CorruptRecordException ("batch size > bytes left in segment"); the tail is not silently dropped
    assert res["failed"] == ["t-0"] and "CorruptRecordError" in res["results"][0]["error"]
    assert "t-0" in cleaner_manager.read_uncleanable(cfg.log_dirs[0])
    assert segment_bytes_of(cfg, "t") == before
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {}


def test_second_run_skips_a_claimed_partition(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    before = segment_bytes_of(cfg, "t")
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        claim = cleaning_claim(get_log(mgr, "t", 0))
        claim.acquire_or_raise()
        try:
            other = cleaning_claim(get_log(mgr, "t", 0))
            assert not other.try_acquire()
            with pytest.raises(LogLockedError):
                other.acquire_or_raise()
            res = compaction.compact(cfg, T0)
            assert res["results"] == [] and res["failed"] == []
            assert res["skipped"] == [{"topic": "t", "partition": 0,
                                       "reason": "another run is cleaning this partition"}]
            # retention on a compacted topic waits for the cleaning too
            r = retention.run(get_log(mgr, "t", 0), T0)
            assert r["skipped"] == "cleaning in progress on this partition"
        finally:
            claim.release()
    assert segment_bytes_of(cfg, "t") == before
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {}
    res = compaction.compact(cfg, T0)
    assert [r["partition"] for r in res["results"]] == [0] and res["results"][0]["checkpoint_written"]


def test_uncleanable_file_unreadable_blocks_the_dir(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    with open(os.path.join(cfg.log_dirs[0], layout.UNCLEANABLE_FILE), "w") as f:
        f.write("{not json")
    res = compaction.compact(cfg, T0)
    assert res["results"] == [] and "not valid JSON" in res["skipped"][0]["reason"]
    compaction.clear_uncleanable(cfg)
    assert compaction.compact(cfg, T0)["results"][0]["checkpoint_written"]


def test_checkpoint_reset_is_written_by_the_job(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    update_cleaner_checkpoint(cfg.log_dirs[0], ("t", 0), 500)
    dry = compaction.compact(cfg, T0, dry_run=True)
    assert dry["selected"][0]["checkpoint_reset"]
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {("t", 0): 500}    # a dry run writes nothing
    res = compaction.compact(cfg, T0)
    assert res["selected"][0]["checkpoint_reset"] and res["selected"][0]["first_dirty_offset"] == 0
    assert read_cleaner_checkpoints(cfg.log_dirs[0]) == {("t", 0): 30}


def test_failure_while_selecting_marks_only_that_partition(tmp_path):
    # Kafka marks a partition uncleanable on an error while selecting it too; the others are still cleaned.
    # Here max.compaction.lag.ms makes selection read the first batch of each dirty segment.
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024,
                                          "max.compaction.lag.ms": HOUR}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    write(cfg, "t", 1, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    corrupt_magic(cfg, "t", 0, batch_no=0)
    dry = compaction.compact(cfg, T0 + 2 * HOUR, dry_run=True)
    assert [s["partition"] for s in dry["skipped"]] == [0]
    assert cleaner_manager.read_uncleanable(cfg.log_dirs[0]) == {}       # a dry run marks nothing
    res = compaction.compact(cfg, T0 + 2 * HOUR)
    assert [r["partition"] for r in res["results"]] == [1] and res["results"][0]["checkpoint_written"]
    assert res["skipped"][0]["partition"] == 0
    assert res["skipped"][0]["reason"].startswith("uncleanable: CorruptRecordError")
    assert "CorruptRecordError" in cleaner_manager.read_uncleanable(cfg.log_dirs[0])["t-0"]["reason"]
    assert compaction.compact(cfg, T0 + 3 * HOUR)["skipped"][0]["reason"].startswith("uncleanable:")
