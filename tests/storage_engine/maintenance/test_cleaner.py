"""Compaction of one partition (after Kafka's LogCleanerTest), crash safety of the swap, and a concurrent writer.

Everything runs on real files. Times are passed in (``now_ms``); the only wall-clock use is the bound on the
writer-process test. Crashes are simulated by making ``os.replace`` (the one rename primitive every step of the
swap protocol uses) raise at its N-th call, then reopening the partition as after an unclean shutdown.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
from typing import cast

import pytest

from tests.paths import REPO as REPO_PATH
from storage_engine.log.loader import open_log
from storage_engine.clock import ManualClock
from storage_engine.maintenance import cleaner_manager
from storage_engine.record import codecs
from storage_engine import layout
from storage_engine.maintenance.cleaner import Cleaner, CleanerStats, build_offset_map, group_segments_by_size
from storage_engine.maintenance.cleaner_manager import LogToClean
from storage_engine.config import CleanerConfig, LogConfig
from storage_engine.errors import CorruptRecordError
from storage_engine.segment.file_records import iter_batches
from storage_engine.record.legacy_records import build_legacy_batch
from storage_engine.log.log import Log
from storage_engine.maintenance.offset_map import InProcessOffsetMap
from storage_engine.record.record_batch import (BATCH_OVERHEAD, CREATE_TIME, LOG_APPEND_TIME, build_batch,
                                                build_control_batch, build_empty_batch)
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.segment import LogSegment
from ..helpers import manual_clock


T0 = 1_700_000_000_000
DAY = 86_400_000
TOPIC = "topic"
INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
REPO = str(REPO_PATH)


# ---------------------------------------------------------------------------------------------------- helpers

def compact_cfg(**overrides) -> LogConfig:
    """A compacted topic's config; keyword args are topic keys with ``_`` for ``.``."""
    o = {"cleanup.policy": "compact"}
    o.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig().with_overrides(o)


def b(x):
    return x.encode() if isinstance(x, str) else x


def put(log: Log, key, value, ts: int = T0, **kw):
    """Append one single-record batch."""
    manual_clock(log).set(kw.pop("now_ms", ts))
    return log.append_records([SimpleRecord(b(key), b(value), ts)], **kw)


def put_many(log: Log, pairs, ts: int = T0, **kw):
    """Append one batch holding ``pairs`` of (key, value)."""
    manual_clock(log).set(kw.pop("now_ms", ts))
    return log.append_records([SimpleRecord(b(k), b(v), ts) for k, v in pairs], **kw)


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.read_records()]


def keys_in_log(log: Log) -> list[int]:
    """Keys (as ints) of the records holding a value, as Kafka's LogTestUtils.keysInLog."""
    return [int(cast(bytes, k)) for _, k, v in contents(log) if v is not None]


def batches_of(seg: LogSegment) -> list:
    return list(seg.batches(0))


def all_batches(log: Log) -> list:
    return [bt for s in log.segments for bt in s.batches(0)]


def checkpoint_of(log: Log) -> int | None:
    return cleaner_manager.read_cleaner_checkpoints(log.log_dir).get((log.topic, log.partition))


def ltc_for(log: Log, first_dirty: int, first_uncleanable: int) -> LogToClean:
    """An explicit dirty section, as Kafka's tests build ``LogToClean(tp, log, first, uncleanable)``."""
    return LogToClean(log, first_dirty, first_uncleanable, 0, 0, False)


def clean(log: Log, now: int = T0, cc: CleanerConfig | None = None, *, offset_map=None, ltc=None):
    """One round from the log's checkpoint, as the cleaner manager would select it."""
    if ltc is None:
        ltc = cleaner_manager.log_to_clean(log, checkpoint_of(log), now)
    return Cleaner(cc or CleanerConfig()).clean(ltc, now, offset_map)


def small_map_config(max_entries: int, load_factor: float = 0.75) -> CleanerConfig:
    """A cleaner whose key map holds at most ``max_entries`` keys (24 bytes per slot, as Kafka sizes it)."""
    slots = max_entries + 1
    while int(slots * load_factor) > max_entries:
        slots -= 1
    while int(slots * load_factor) < max_entries:
        slots += 1
    cc = CleanerConfig(dedupe_buffer_size=slots * 24, io_buffer_load_factor=load_factor)
    assert Cleaner(cc).new_offset_map().max_entries == max_entries
    return cc


class FakeOffsetMap:
    """Kafka's FakeOffsetMap: a plain dict with a chosen latest offset."""

    def __init__(self, entries: dict, latest_offset: int):
        self.entries = {b(k): v for k, v in entries.items()}
        self.latest_offset = latest_offset
        self.utilization = 0.0

    def get(self, key: bytes) -> int:
        return self.entries.get(key, -1)


def build_segment_files(dir_path: str, base: int, datas: list[bytes], *, mtime_ms: int | None = None,
                        index_interval_bytes: int = 4096) -> None:
    """Write a segment (``.log`` + indexes) holding the given encoded batches (any magic)."""
    os.makedirs(dir_path, exist_ok=True)
    seg = LogSegment.open(dir_path, base, LogConfig(index_interval_bytes=index_interval_bytes,
                                                    segment_index_bytes=10 * 1024 * 1024), now_ms=T0)
    for data in datas:
        last, max_ts = None, -1
        for bt in iter_batches(data, 0, len(data)):
            last = bt.last_offset
            max_ts = max(max_ts, bt.max_timestamp)
        assert last is not None, "every data holds a batch"
        seg.append(last, max_ts, last, data)
    seg.on_become_inactive_segment()
    seg.flush()
    seg.close()
    if mtime_ms is not None:
        t = mtime_ms / 1000.0
        os.utime(layout.segment_file(dir_path, base, layout.LOG_SUFFIX), (t, t))


def pdir(log_dir, topic: str = TOPIC, partition: int = 0) -> str:
    return os.path.join(str(log_dir), layout.partition_dir_name(topic, partition))


def open_existing(log_dir, cfg: LogConfig, now: int = T0) -> Log:
    log, _ = open_log(str(log_dir), TOPIC, 0, cfg, clock=ManualClock(now), exclusive=True, had_clean_shutdown=False,
                      recovery_point_checkpoint=0)
    return log


def segment_files(dir_path) -> list[str]:
    return sorted(os.listdir(str(dir_path)))


@pytest.fixture
def make_log(logs):
    def make(cfg: LogConfig | None = None, *, now: int = T0, existing: bool = False) -> Log:
        if existing:  # a load after an unclean shutdown, recovering from offset 0
            return logs(cfg or compact_cfg(), topic=TOPIC, now_ms=now, create=False, had_clean_shutdown=False,
                        recovery_point_checkpoint=0)
        return logs(cfg or compact_cfg(), topic=TOPIC, now_ms=now)
    return make


def fill_until(log: Log, segments: int, record=lambda off: (str(off), str(off)), ts: int = T0) -> None:
    """Append single-record batches until the log has ``segments`` segments."""
    while len(log.segments) < segments:
        k, v = record(log.log_end_offset)
        put(log, k, v, ts)


# ---------------------------------------------------------------------------------- basic cleaning (Kafka)

def test_clean_segments(make_log):
    # LogCleanerTest.testCleanSegments: pretend keys 1,3,5,7,9 have later values; clean the first 3 segments.
    log = make_log(compact_cfg(segment_bytes=1024))
    fill_until(log, 4)
    assert keys_in_log(log) == list(range(log.log_end_offset))
    segs = log.segments
    keys = {1, 3, 5, 7, 9}
    fake = FakeOffsetMap({str(k): LONG_MAX for k in keys}, latest_offset=segs[3].base_offset - 1)
    expected_read = sum(s.size for s in segs[:3])
    should_remain = [k for k in keys_in_log(log) if k not in keys]
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, segs[3].base_offset), T0, fake)  # type: ignore[arg-type]  # a duck-typed key map: clean() reads only get and latest_offset
    assert keys_in_log(log) == should_remain
    assert res.stats.bytes_read == expected_read
    assert res.stats.messages_read == segs[3].base_offset
    assert res.stats.messages_written == segs[3].base_offset - len(keys)
    # offsets never change
    assert [o for o, _, _ in contents(log)] == should_remain


def test_clean_keeps_latest_value_of_every_key(make_log):
    log = make_log(compact_cfg(segment_bytes=1024))
    latest = {}
    for i in range(150):
        k, v = f"k{i % 7}", f"v{i}"
        put(log, k, v)
        latest[k.encode()] = (i, v.encode())
    log.roll()
    active_before = log.active_segment.base_offset
    res = clean(log)
    got = contents(log)
    assert len(got) == 7
    assert {k: (o, v) for o, k, v in got} == latest
    assert [o for o, _, _ in got] == sorted(o for o, _ in latest.values())
    assert res.end_offset == active_before == checkpoint_of(log)
    assert res.checkpoint_written and res.groups_abandoned == 0
    assert res.stats.messages_read == 150 and res.stats.messages_written == 7
    assert log.log_end_offset == 150
    names = segment_files(pdir(log.log_dir))
    assert not any(n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)) for n in names)
    assert all(os.path.exists(s.path) for s in log.segments)
    # a second round at the same time finds nothing dirty and changes nothing
    again = clean(log)
    assert again.end_offset == active_before and contents(log) == got
    # new data: the next round (same Log object) cleans it together with the cleaned segments
    for i in range(150, 170):
        put(log, f"k{i % 7}", f"v{i}")
        latest[f"k{i % 7}".encode()] = (i, f"v{i}".encode())
    log.roll()
    res = clean(log)
    assert res.groups_abandoned == 0 and res.end_offset == 170 == checkpoint_of(log)
    assert {k: (o, v) for o, k, v in contents(log)} == latest and len(contents(log)) == 7
    assert all(os.path.exists(s.path) for s in log.segments)


def test_cleaning_with_deletes(make_log):
    # LogCleanerTest.testCleaningWithDeletes
    log = make_log(compact_cfg(segment_bytes=1024, delete_retention_ms=DAY))
    fill_until(log, 2)
    leo = log.log_end_offset
    for k in range(0, leo, 2):
        put(log, str(k), None)
    fill_until(log, 4)
    clean(log, T0)
    keys = set(keys_in_log(log))
    assert not any(k in keys for k in range(0, leo, 2)), "None of the keys we deleted should still exist."
    assert all(k in keys for k in range(1, leo, 2))
    # first pass: the tombstones stay, their batches carry the delete horizon (bit 6) = cleaning time + retention
    tombstones = [(o, int(cast(bytes, k))) for o, k, v in contents(log) if v is None]
    assert [k for _, k in tombstones] == list(range(0, leo, 2))
    for bt in all_batches(log):
        recs = bt.records()
        if any(r.value is None for r in recs):
            assert bt.has_delete_horizon and bt.delete_horizon_ms == T0 + DAY
        else:
            assert not bt.has_delete_horizon


def add_dirty_segment(log: Log, key: str = "pad", ts: int = T0) -> None:
    """New dirty data in a sealed segment, so that a later round has something to map."""
    put(log, key, f"{key}-{log.log_end_offset}", ts)
    log.roll()


def test_tombstones_need_two_passes_and_horizon_counts_from_cleaning(make_log):
    retention = DAY
    log = make_log(compact_cfg(delete_retention_ms=retention))
    put(log, "a", "1")
    put(log, "b", "1")
    # tombstone with a very old record timestamp: its age must not count from the timestamp
    put(log, "a", None, ts=T0 - 10 * retention)
    log.roll()
    t1 = T0 + 1000
    clean(log, t1)
    assert contents(log) == [(1, b"b", b"1"), (2, b"a", None)]
    tomb_batch = [bt for bt in all_batches(log) if bt.last_offset == 2][0]
    assert tomb_batch.has_delete_horizon and tomb_batch.delete_horizon_ms == t1 + retention
    # later rounds before the horizon keep it (and keep the horizon it got)
    add_dirty_segment(log)
    clean(log, t1 + retention - 1)
    assert (2, b"a", None) in contents(log)
    assert [bt for bt in all_batches(log) if bt.last_offset == 2][0].delete_horizon_ms == t1 + retention
    # a round at now >= horizon removes it
    add_dirty_segment(log)
    clean(log, t1 + retention)
    assert all(k != b"a" for _, k, _ in contents(log))
    assert (1, b"b", b"1") in contents(log)


def test_clean_tombstone_kafka(make_log):
    # LogCleanerTest.testCleanTombstone: a tombstone with a small timestamp is retained by later rounds.
    cfg = compact_cfg()
    log = make_log(cfg)
    now = T0
    put(log, "0", "0", ts=now + cfg.delete_retention_ms + 10000)
    log.roll()
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, log.active_segment.base_offset), now)
    put(log, "0", None, ts=now - cfg.delete_retention_ms - 10000)
    log.roll()
    Cleaner(CleanerConfig()).clean(ltc_for(log, 1, log.active_segment.base_offset), now)
    assert batches_of(log.segments[0])[0].last_offset == 1, "The tombstone should be retained."
    put(log, "1", "1", ts=now)
    log.roll()
    Cleaner(CleanerConfig()).clean(ltc_for(log, 2, log.active_segment.base_offset), now)
    assert batches_of(log.segments[0])[0].last_offset == 1, "The tombstone should be retained."


def test_partial_segment_clean_continues_next_round(make_log):
    # LogCleanerTest.testPartialSegmentClean: a map of one key stops the round at the last mapped offset.
    log = make_log()
    for k in (0, 1, 0, 1, 0):
        put(log, str(k), str(k))
    log.roll()
    cc = small_map_config(1)
    res = Cleaner(cc).clean(ltc_for(log, 2, log.active_segment.base_offset), T0)
    assert keys_in_log(log) == [1, 0, 1, 0]
    assert [o for o, _, _ in contents(log)] == [1, 2, 3, 4]
    assert res.end_offset == 3 == checkpoint_of(log)       # map.latest_offset + 1
    # the next round starts at the checkpoint and continues
    res = clean(log, cc=cc)
    assert res.end_offset == 4 == checkpoint_of(log)
    assert [(o, int(cast(bytes, k))) for o, k, _ in contents(log)] == [(2, 0), (3, 1), (4, 0)]
    res = clean(log, cc=cc)
    assert res.end_offset == 5 == checkpoint_of(log)
    assert [(o, int(cast(bytes, k))) for o, k, _ in contents(log)] == [(3, 1), (4, 0)]
    res = clean(log, cc=cc)
    assert res.end_offset == 5 and not res.checkpoint_written


def test_partial_rounds_converge_to_full_dedup(make_log):
    log = make_log(compact_cfg(segment_bytes=600))
    latest, written = {}, []
    for i in range(80):
        k = f"k{(i * 7) % 13}"
        put(log, k, f"v{i}")
        latest[k.encode()] = (i, f"v{i}".encode())
        written.append((i, k.encode(), f"v{i}".encode()))
    log.roll()
    cc = small_map_config(3)
    ends = []
    for _ in range(100):
        before = checkpoint_of(log)
        res = clean(log, cc=cc)
        if res.end_offset == before:
            break
        ends.append(res.end_offset)
        assert res.stats.buffer_utilization <= 3 / Cleaner(cc).new_offset_map().slots
        # every round stops after 3 distinct keys and never removes anything past its end
        got = contents(log)
        assert [r for r in got if r[0] >= res.end_offset] == [r for r in written if r[0] >= res.end_offset]
        assert len({k for o, k, _ in written if (before or 0) <= o < res.end_offset}) <= 3
        clean_keys = [k for o, k, _ in got if o < res.end_offset]
        assert len(clean_keys) == len(set(clean_keys))
    assert len(ends) > 3 and ends == sorted(ends) and ends[-1] == log.active_segment.base_offset
    assert {k: (o, v) for o, k, v in contents(log)} == latest
    assert len(contents(log)) == len(latest)


def test_build_offset_map(make_log):
    # LogCleanerTest.testBuildOffsetMap
    log = make_log(compact_cfg(segment_bytes=1024))
    fill_until(log, 4)
    end = log.active_segment.base_offset
    for start, stop in ((0, end), (3, end), (end // 2, end - 1)):
        m = InProcessOffsetMap(1024 * 1024)
        stats = CleanerStats()
        full = build_offset_map(log, start, stop, m, stats)
        assert not full
        for off in range(start, stop):
            assert m.get(str(off).encode()) == off
        assert m.get(str(stop).encode()) == -1
        assert m.latest_offset == stop - 1
        assert stats.map_messages_read >= stop - start


def test_build_partial_offset_map(make_log):
    # LogCleanerTest.testBuildPartialOffsetMap: the map fills; latest offset = last offset put.
    log = make_log(compact_cfg(segment_bytes=1024))
    fill_until(log, 3)
    m = Cleaner(small_map_config(4, 0.9)).new_offset_map()
    full = build_offset_map(log, 2, log.active_segment.base_offset, m, CleanerStats())
    assert full
    assert m.size == 4 and m.latest_offset == 5
    assert [m.get(str(o).encode()) for o in range(0, 8)] == [-1, -1, 2, 3, 4, 5, -1, -1]


def test_map_filled_at_a_segment_start_ends_at_the_previous_segment(make_log):
    # KAFKA-8764: after each segment the map's latest offset moves to the next segment's base - 1; a map that fills
    # at the first record of a segment ends the round there, at the previous segment's end (here the log's last
    # sealed segment and the active one: the dirty section reaches into the active segment)
    log = make_log(compact_cfg(segment_bytes=1024))
    for seg in range(3):
        put_many(log, [(f"s{seg}a", "1"), (f"s{seg}b", "1")])
        log.roll()
    put_many(log, [("new", "1"), ("new2", "1")])
    active = log.active_segment.base_offset
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6] and active == 6
    m = InProcessOffsetMap(8 * 24, load_factor=0.75)        # 6 keys: the sealed segments' keys exactly
    assert m.max_entries == 6
    assert build_offset_map(log, 0, 8, m, CleanerStats()) is True
    assert m.size == 6 and m.latest_offset == 5 and m.get(b"new") == -1


def test_map_reads_only_the_batches_of_the_dirty_section(make_log):
    # Kafka's buildOffsetMap reads the dirty section [start, end) only: the map's figures count its batches, a
    # batch starting at the end offset is not read
    log = make_log(compact_cfg(segment_bytes=1 << 20))
    for i in range(6):
        put_many(log, [(f"k{i}a", "v"), (f"k{i}b", "v")])            # batches at 0, 2, 4, 6, 8, 10
    batches = all_batches(log)
    stats = CleanerStats()
    assert build_offset_map(log, 2, 8, InProcessOffsetMap(1 << 16), stats) is False
    assert (stats.map_messages_read, stats.map_bytes_read) == (6, sum(bt.size_in_bytes for bt in batches[1:4]))


def test_map_fails_on_a_truncated_batch(make_log):
    # the key map reads sealed segments strictly (Kafka: CorruptRecordException "batch size > bytes left")
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(6):
        put(log, f"k{i % 2}", f"v{i}")
    log.roll()
    put(log, "k0", "active")
    seg = log.segments[0]
    with open(seg.path, "r+b") as f:
        f.truncate(seg.size - 5)
    log = reopen_clean_shutdown(log)
    with pytest.raises(CorruptRecordError):
        build_offset_map(log, 0, log.active_segment.base_offset, InProcessOffsetMap(1 << 16), CleanerStats())


def test_map_of_a_range_inside_the_last_segment(make_log):
    # A dirty range inside the log's last segment (any offsets, here above 125) is mapped from that segment
    log = make_log(compact_cfg(segment_bytes=1 << 20))
    for i in range(0, 200, 50):
        put_many(log, [(f"k{j}", "v") for j in range(i, i + 50)])
    assert len(log.segments) == 1
    m = InProcessOffsetMap(1 << 16)
    assert build_offset_map(log, 150, 200, m, CleanerStats()) is False
    assert m.size == 50 and m.latest_offset == 199
    assert (m.get(b"k150"), m.get(b"k199"), m.get(b"k149")) == (150, 199, -1)


def test_cleaning_beyond_missing_offsets(log_dir, make_log):
    # LogCleanerTest.testCleaningBeyondMissingOffsets (KAFKA-8764): offset gaps between segments.
    d = pdir(log_dir)
    build_segment_files(d, 0, [build_batch([SimpleRecord(b"k", b"0", T0), SimpleRecord(b"j", b"1", T0)])])
    build_segment_files(d, 10, [build_batch([SimpleRecord(b"k", b"10", T0)], base_offset=10)])
    build_segment_files(d, 20, [])
    log = make_log(existing=True)
    assert log.log_end_offset == 20
    m = InProcessOffsetMap(1024 * 1024)
    assert not build_offset_map(log, 0, 20, m, CleanerStats())
    assert m.latest_offset == 19 and m.get(b"k") == 10 and m.get(b"j") == 1
    m2 = InProcessOffsetMap(1024 * 1024)
    build_offset_map(log, 5, 20, m2, CleanerStats())  # start inside the gap
    assert m2.latest_offset == 19 and m2.get(b"j") == -1
    res = clean(log)
    assert res.end_offset == 20 == checkpoint_of(log)
    assert contents(log) == [(1, b"j", b"1"), (10, b"k", b"10")]


def test_cleaning_with_uncleanable_section(make_log):
    # LogCleanerTest.testCleaningWithUncleanableSection
    n = 10
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) <= 2:
        put(log, str(log.log_end_offset % n), str(log.log_end_offset))
    while len(log.segments) < 6:
        put(log, str(log.log_end_offset % n), str(log.log_end_offset))
    segs = log.segments

    def distinct_values():
        return [len({r.value for bt in s.batches(0) for r in bt.records()}) for s in log.segments]

    before = distinct_values()
    assert all(x > n for x in before[:-1]), "each sealed segment must hold duplicates"
    raw_uncleanable = {s.base_offset: open(s.path, "rb").read() for s in segs[2:]}
    boundary = segs[2].base_offset
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, boundary), T0)
    assert res.end_offset == boundary
    after = distinct_values()
    cleaned = [s for s in log.segments if s.base_offset < boundary]
    assert sum(len(batches_of(s)) for s in cleaned) <= n
    assert sum(after[:len(cleaned)]) < sum(before[:2])
    # the uncleanable segments are untouched, byte for byte
    rest = [s for s in log.segments if s.base_offset >= boundary]
    assert {s.base_offset: open(s.path, "rb").read() for s in rest} == raw_uncleanable


def append_keyless(log: Log, value: str, ts: int = T0):
    """Keyless records are refused on a compacted topic; write them as a non-compacted topic would have."""
    compacted = log.config
    log.config = LogConfig().with_overrides({"cleanup.policy": "delete", "segment.bytes": compacted.segment_bytes})
    try:
        manual_clock(log).set(ts)
        return log.append_records([SimpleRecord(None, b(value), ts)])
    finally:
        log.config = compacted


def test_cleaning_with_unkeyed_messages(make_log):
    # LogCleanerTest.testCleaningWithUnkeyedMessages
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 2:
        append_keyless(log, str(log.log_end_offset))
    num_invalid = sum(1 for _, k, _ in contents(log) if k is None)
    size_with_unkeyed = log.size_in_bytes()
    fill_until(log, 3)
    expected_size = log.size_in_bytes() - size_with_unkeyed
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, log.active_segment.base_offset), T0)
    assert sum(1 for _, k, _ in contents(log) if k is None) == 0
    assert log.size_in_bytes() == expected_size
    assert res.stats.invalid_messages_read == num_invalid


def test_log_cleaner_stats(make_log):
    log = make_log(compact_cfg(segment_bytes=600))
    for i in range(20):
        put(log, f"k{i % 4}", f"value-{i:03d}")
    append_keyless(log, "nokey")
    put(log, "k0", "last")
    log.roll()
    sealed = log.segments[:-1]
    bytes_before = sum(s.size for s in sealed)
    cc = CleanerConfig()
    res = clean(log, cc=cc)
    s = res.stats
    assert s.messages_read == 22 and s.messages_written == 4
    assert s.invalid_messages_read == 1
    assert s.bytes_read == bytes_before
    assert s.bytes_written == sum(seg.size for seg in log.segments[:-1])
    assert s.map_messages_read == 22 and s.map_bytes_read == bytes_before
    slots = cc.dedupe_buffer_size // 24
    assert s.buffer_utilization == pytest.approx(4 / slots)
    d = s.as_dict()
    assert d["records_removed"] == 18
    assert d["size_reduction_percent"] == round(100 * (1 - s.bytes_written / s.bytes_read), 2)
    lines = s.log_lines(log.name, 0, res.end_offset)
    assert lines[0] == f"Log cleaner cleaned log {log.name} (dirty section = [0, {res.end_offset}])"
    assert lines[-2] == f"End size: {d['mb_written']:,.1f} MB (4 messages)"


# ------------------------------------------------------------------------------------------- grouping

def assert_greedy_groups(groups, segs, max_size, max_index):
    """Each group respects the limits and could not take the next segment (the greedy rule)."""
    assert [s.base_offset for g in groups for s in g] == [s.base_offset for s in segs]
    for i, g in enumerate(groups):
        sums = (sum(s.size for s in g), sum(s.offset_index.size_in_bytes for s in g),
                sum(s.time_index.size_in_bytes for s in g))
        assert len(g) == 1 or (sums[0] <= max_size and sums[1] <= max_index and sums[2] <= max_index)
        if i + 1 < len(groups):
            nxt = groups[i + 1][0]
            assert (sums[0] + nxt.size > max_size or sums[1] + nxt.offset_index.size_in_bytes > max_index
                    or sums[2] + nxt.time_index.size_in_bytes > max_index)


def test_segment_grouping(make_log):
    # LogCleanerTest.testSegmentGrouping
    log = make_log(compact_cfg(segment_bytes=300, index_interval_bytes=1))
    while len(log.segments) < 10:
        put(log, "hello", "hello")
    segs = log.segments
    leo = log.log_end_offset

    def check_order(groups):
        assert [s.base_offset for g in groups for s in g] == [s.base_offset for s in segs]

    groups = group_segments_by_size(segs, INT32_MAX, INT32_MAX, leo)
    assert len(groups) == 1 and len(groups[0]) == len(segs)
    groups = group_segments_by_size(segs, 1, INT32_MAX, leo)
    assert len(groups) == len(segs) and all(len(g) == 1 for g in groups)
    groups = group_segments_by_size(segs, INT32_MAX, 1, leo)
    assert len(groups) == len(segs) and all(len(g) == 1 for g in groups)
    check_order(groups)
    group_size = 3
    log_size = sum(s.size for s in segs[:group_size]) + 1
    groups = group_segments_by_size(segs, log_size, INT32_MAX, leo)
    check_order(groups)
    assert all(len(g) == group_size for g in groups[:-1]), "All but the last group should be the target size."
    index_size = sum(s.offset_index.size_in_bytes for s in segs[:group_size]) + 1
    groups = group_segments_by_size(segs, INT32_MAX, index_size, leo)
    check_order(groups)
    assert all(len(g) == group_size for g in groups[:-1])
    # index sizes are entries in use, not file sizes (the active segment's index is preallocated)
    assert log.active_segment.offset_index.size_in_bytes == 8 * log.active_segment.offset_index.entries


def test_segment_grouping_by_time_index_size(make_log):
    # increasing timestamps give every segment time-index entries (12 bytes each, offset index: 8)
    log = make_log(compact_cfg(segment_bytes=300, index_interval_bytes=1))
    while len(log.segments) < 10:
        put(log, "hello", "hello", ts=T0 + log.log_end_offset)
    segs = log.segments
    assert all(s.time_index.size_in_bytes > s.offset_index.size_in_bytes for s in segs[:-1])
    for limit in (30, 49, 73, 100):
        groups = group_segments_by_size(segs, INT32_MAX, limit, log.log_end_offset)
        assert_greedy_groups(groups, segs, INT32_MAX, limit)
    groups = group_segments_by_size(segs, INT32_MAX, 73, log.log_end_offset)
    assert [len(g) for g in groups][:-1] == [3, 3]       # 3 x 24 bytes of time index fit, 4 x 24 do not
    for limit in (300, 500, 700):
        groups = group_segments_by_size(segs, limit, INT32_MAX, log.log_end_offset)
        assert_greedy_groups(groups, segs, limit, INT32_MAX)


def one(key: bytes, value: bytes, offset: int) -> bytes:
    return build_batch([SimpleRecord(key, value, T0)], base_offset=offset)


def test_segment_grouping_with_sparse_offsets(tmp_path):
    # LogCleanerTest.testSegmentGroupingWithSparseOffsets: a group may span at most Int.MAX offsets.
    d = str(tmp_path)
    segs = []

    def seg(base, offsets):
        s = LogSegment.open(d, base, LogConfig(segment_index_bytes=1 << 20), now_ms=T0)
        for o in offsets:
            s.append(o, T0, o, one(b"hello", b"hello", o))
        segs.append(s)
        return s

    seg(0, range(0, 5))
    seg(INT32_MAX - 1, [INT32_MAX - 1, INT32_MAX])
    groups = group_segments_by_size(segs, INT32_MAX, INT32_MAX, INT32_MAX + 1)
    assert len(groups) == 1
    segs[1].append(INT32_MAX + 1, T0, INT32_MAX + 1, one(b"hello", b"hello", INT32_MAX + 1))
    groups = group_segments_by_size(segs, INT32_MAX, INT32_MAX, INT32_MAX + 2)
    assert [[s.base_offset for s in g] for g in groups] == [[0], [INT32_MAX - 1]]
    seg(INT32_MAX + 2, [INT32_MAX + 2])
    seg(2 * INT32_MAX, [2 * INT32_MAX, 2 * INT32_MAX + 5])
    seg(3 * INT32_MAX, [3 * INT32_MAX])
    end = 3 * INT32_MAX + 1
    groups = group_segments_by_size(segs, INT32_MAX, INT32_MAX, end)
    assert [s.base_offset for g in groups for s in g] == [s.base_offset for s in segs]
    bases = [s.base_offset for s in segs] + [end]
    for g in groups:
        last = bases[bases.index(g[-1].base_offset) + 1] - 1
        assert last - g[0].base_offset <= INT32_MAX
    assert len(groups) == 3
    for s in segs:
        s.close()


def test_segment_grouping_merges_empty_segments(tmp_path):
    # KAFKA-12889 (testSegmentGroupingWithSparseOffsetsAndEmptySegments): empty segments skip the range check.
    d = str(tmp_path)
    segs = []
    for base, offsets in ((0, []), (2**31, []), (2**32, [2**32 + 3]), (2**33, [2**33])):
        s = LogSegment.open(d, base, LogConfig(segment_index_bytes=1 << 20), now_ms=T0)
        for o in offsets:
            s.append(o, T0, o, one(b"k", b"v", o))
        segs.append(s)
    groups = group_segments_by_size(segs[:3], INT32_MAX, INT32_MAX, 2**33)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 2**31], [2**32]]
    groups = group_segments_by_size(segs, INT32_MAX, INT32_MAX, 2**33 + 1)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 2**31], [2**32], [2**33]]
    for s in segs:
        s.close()


def test_cleaning_sparse_log_leaves_no_empty_segments(log_dir, make_log):
    # Three segments spanning more than Int.MAX offsets, one key: everything but the latest record goes, and
    # (unlike Kafka, KAFKA-9157) no empty segment is left behind.
    d = pdir(log_dir)
    span = 2**31
    for i in range(3):
        base = i * span
        build_segment_files(d, base, [one(b"k", f"v{base}".encode(), base),
                                      one(b"k", f"v{base + span - 1}".encode(), base + span - 1)])
    build_segment_files(d, 3 * span, [])
    log = make_log(existing=True)
    res = clean(log)
    assert res.end_offset == 3 * span
    assert contents(log) == [(3 * span - 1, b"k", f"v{3 * span - 1}".encode())]
    assert all(s.size > 0 for s in log.segments[:-1])
    assert [s.base_offset for s in log.segments] == [2 * span, 3 * span]
    assert log.log_start_offset == 0, "cleaning never moves the log start offset (Kafka's replaceSegments neither)"
    reopened = reopen(log, compact_cfg())
    assert reopened.log_start_offset == 2 * span  # a load raises it to the first segment's base, as Kafka's does
    assert contents(reopened) == [(3 * span - 1, b"k", f"v{3 * span - 1}".encode())]
    reopened.close(clean=False)


def reopen(log: Log, cfg: LogConfig) -> Log:
    """Close ``log`` without any clean-shutdown work and load the folder again as after a crash."""
    log.close(clean=False)
    return open_existing(log.log_dir, cfg)


def test_no_empty_segment_left_when_a_group_is_all_removed(make_log):
    # KAFKA-9157: the engine deletes a group whose records all go instead of swapping in an empty segment.
    log = make_log(compact_cfg(segment_bytes=1024))
    while len(log.segments) < 3:
        put(log, "a", f"old-{log.log_end_offset}")
    put(log, "a", "newest")
    put(log, "b", "x")
    log.roll()
    first_base = log.segments[0].base_offset
    res = clean(log)
    assert res.groups >= 2
    assert contents(log) == [(log.log_end_offset - 2, b"a", b"newest"), (log.log_end_offset - 1, b"b", b"x")]
    assert all(s.size > 0 for s in log.segments[:-1])
    names = segment_files(log.dir)
    assert layout.filename_prefix(first_base) + ".log" + layout.DELETED_SUFFIX in names
    assert not any(n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)) for n in names)


def test_last_batch_of_round_kept_as_empty_batch(make_log):
    # LogCleanerTest.testCleanSegmentsRetainingLastEmptyBatch (KAFKA-17076)
    log = make_log(compact_cfg(segment_bytes=1024))
    fill_until(log, 4)
    segs = log.segments
    upper = segs[3].base_offset
    fake = FakeOffsetMap({str(k): LONG_MAX for k in keys_in_log(log)}, latest_offset=upper - 1)
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, upper), T0, fake)  # type: ignore[arg-type]  # a duck-typed key map: clean() reads only get and latest_offset
    cleaned = [s for s in log.segments if s.base_offset < upper]
    bts = [bt for s in cleaned for bt in s.batches(0)]
    assert len(bts) == 1
    last = bts[0]
    assert last.records_count == 0 and last.size_in_bytes == BATCH_OVERHEAD
    assert last.last_offset == upper - 1 and last.base_offset == upper - 1
    last.ensure_valid()
    assert contents(log)[0][0] == upper      # no record below the uncleanable section
    assert log.log_end_offset == segs[-1].read_next_offset()


def test_tombstone_last_batch_of_round_kept_empty(make_log):
    log = make_log(compact_cfg(delete_retention_ms=1000))
    put(log, "a", "1")
    put(log, "b", None)
    log.roll()
    clean(log, T0)
    assert contents(log) == [(0, b"a", b"1"), (1, b"b", None)]
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, log.active_segment.base_offset), T0 + 1000)
    assert contents(log) == [(0, b"a", b"1")]
    last = all_batches(log)[-1]
    assert last.records_count == 0 and (last.base_offset, last.last_offset) == (1, 1)
    assert not last.has_delete_horizon


def test_key_map_is_the_dedupe_buffer_per_thread_filled_to_the_load_factor():
    # Kafka: new SkimpyOffsetMap(memory = min(dedupeBufferSize / numThreads, Int.MaxValue)), 24-byte slots, mapped
    # up to slots * log.cleaner.io.buffer.load.factor entries
    m = Cleaner(CleanerConfig(dedupe_buffer_size=24_000, threads=3, io_buffer_load_factor=0.5)).new_offset_map()
    assert (m.slots, m.max_entries) == (333, 166)
    m = Cleaner(CleanerConfig(dedupe_buffer_size=24_000, threads=1, io_buffer_load_factor=0.75)).new_offset_map()
    assert (m.slots, m.max_entries) == (1000, 750)


def idempotent(key: str, value: str, offset: int, seq: int) -> bytes:
    return build_batch([SimpleRecord(b(key), b(value), T0 + offset)], base_offset=offset, producer_id=5,
                       producer_epoch=2, base_sequence=seq, partition_leader_epoch=7)


def test_a_group_reaches_into_its_last_segment_with_data_by_an_empty_batch(log_dir, make_log):
    # The cleaned segment must reach into the group's last segment holding data (a loader completes an interrupted
    # swap over [.swap base, .swap next offset) only): when none of its batches survives, its last batch stays as
    # an empty batch, written as Kafka's DefaultRecordBatch.writeEmptyHeader (same offsets, producer id, epoch,
    # base sequence, partition leader epoch and max timestamp). A trailing empty segment holds no data to reach.
    d = pdir(log_dir)
    build_segment_files(d, 0, [build_batch([SimpleRecord(b"x", b"1", T0)], base_offset=0)])
    build_segment_files(d, 1, [idempotent("a", "1", 1, 0)])
    build_segment_files(d, 2, [])                                   # an empty segment (an older cleaner's)
    build_segment_files(d, 3, [idempotent("a", "2", 3, 1)])
    build_segment_files(d, 4, [build_batch([SimpleRecord(b"y", b"1", T0)], base_offset=4)])
    build_segment_files(d, 5, [])
    log = make_log(compact_cfg(segment_bytes=200), existing=True)
    groups = group_segments_by_size(log.segments[:-1], 200, log.config.segment_index_bytes, 5)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 1, 2], [3, 4]]
    template = batches_of(log.segments[1])[0]
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 5), T0)
    assert (res.groups, res.groups_abandoned) == (2, 0)
    assert contents(log) == [(0, b"x", b"1"), (3, b"a", b"2"), (4, b"y", b"1")]
    assert res.stats.bytes_written == sum(s.size for s in log.segments[:-1])     # the cover batch included
    first = batches_of(log.segments[0])
    assert [s.base_offset for s in log.segments] == [0, 3, 5]
    cover = first[-1]
    assert cover.raw() == build_empty_batch(template)
    assert (cover.base_offset, cover.last_offset, cover.records_count, cover.producer_id, cover.producer_epoch,
            cover.base_sequence, cover.partition_leader_epoch, cover.max_timestamp) == (1, 1, 0, 5, 2, 0, 7, T0 + 1)


def test_a_legacy_segment_is_reached_by_an_empty_v2_batch_spanning_its_last_message(log_dir, make_log):
    # A legacy message has no empty form: the cover is a v2 batch without records over the wrapper's offsets
    d = pdir(log_dir)
    build_segment_files(d, 0, [legacy(1, [("x", "1")], 0)])
    build_segment_files(d, 1, [legacy(1, [("a", "1"), ("b", "1"), ("c", "1")], 1, codec=codecs.GZIP)])
    build_segment_files(d, 4, [legacy(1, [("a", "2"), ("b", "2"), ("c", "2")], 4, codec=codecs.GZIP)])
    build_segment_files(d, 7, [])
    log = make_log(compact_cfg(segment_bytes=200), existing=True)
    groups = group_segments_by_size(log.segments[:-1], 200, log.config.segment_index_bytes, 7)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 1], [4]]
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 7), T0)
    assert contents(log) == [(0, b"x", b"1"), (4, b"a", b"2"), (5, b"b", b"2"), (6, b"c", b"2")]
    cover = batches_of(log.segments[0])[-1]
    assert (cover.magic, cover.base_offset, cover.last_offset, cover.records_count) == (2, 1, 3, 0)
    assert cover.raw() == build_batch([], base_offset=1, last_offset=3)


def test_a_group_of_empty_segments_is_deleted(log_dir, make_log):
    # An empty first segment too small to share a group with the next (larger than segment.bytes after a config
    # change) forms a group alone: it holds nothing to swap in and is deleted (Kafka would keep it, KAFKA-9157)
    d = pdir(log_dir)
    build_segment_files(d, 0, [])
    build_segment_files(d, 1, [build_batch([SimpleRecord(b"k%d" % i, b"v" * 40, T0) for i in range(4)],
                                           base_offset=1)])
    build_segment_files(d, 5, [])
    log = make_log(compact_cfg(segment_bytes=100), existing=True)
    groups = group_segments_by_size(log.segments[:-1], 100, log.config.segment_index_bytes, 5)
    assert [[s.base_offset for s in g] for g in groups] == [[0], [1]]
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 1, 5), T0)
    assert (res.groups, res.groups_abandoned, res.checkpoint_written) == (2, 0, True)
    assert [s.base_offset for s in log.segments] == [1, 5]
    assert [o for o, _, _ in contents(log)] == [1, 2, 3, 4]


# --------------------------------------------------------------------------------- batch formats

def raw_batches(log: Log) -> dict[int, bytes]:
    return {bt.base_offset: bt.raw() for bt in all_batches(log)}


def test_fully_retained_batches_copied_byte_for_byte(make_log):
    log = make_log(compact_cfg(segment_bytes=4096))
    put_many(log, [("a", "1"), ("b", "1")], codec=codecs.GZIP)
    put_many(log, [("c", "1"), ("d", "1")], codec=codecs.LZ4, producer_id=5, producer_epoch=1, base_sequence=0)
    put_many(log, [("e", "1")], codec=codecs.ZSTD)
    put(log, "a", "2")
    log.roll()
    before = raw_batches(log)
    clean(log)
    after = raw_batches(log)
    assert after[2] == before[2] and after[4] == before[4] and after[5] == before[5]
    assert after[0] != before[0]
    assert [(o, k) for o, k, _ in contents(log)] == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"a")]


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
@pytest.mark.parametrize("ts_type", [CREATE_TIME, LOG_APPEND_TIME])
def test_rebuilt_batch_keeps_its_attributes(make_log, codec, ts_type):
    log = make_log(compact_cfg(segment_bytes=4096, delete_retention_ms=DAY))
    append_time = T0 + 77
    recs = [SimpleRecord(b"a", b"va", T0 + 1), SimpleRecord(b"b", None, T0 + 9), SimpleRecord(b"c", b"vc", T0 + 5),
            SimpleRecord(b"d", b"vd", T0 + 3)]
    data = build_batch(recs, base_offset=0, codec=codec, timestamp_type=ts_type,
                       log_append_time_ms=append_time if ts_type == LOG_APPEND_TIME else None, producer_id=4242,
                       producer_epoch=3, base_sequence=17, is_transactional=True, partition_leader_epoch=7)
    log.append_batches(data)
    log.append_end_txn(4242, 3, commit=True)  # an open transaction would hold the cleaner back (LSO)
    put_many(log, [("c", "new"), ("d", "new")])
    log.roll()
    original = all_batches(log)[0]
    orig = {f: getattr(original, f) for f in ("magic", "compression", "timestamp_type", "producer_id",
                                               "producer_epoch", "base_sequence", "is_transactional",
                                               "is_control", "partition_leader_epoch", "base_offset",
                                               "last_offset")}
    now = T0 + 500
    clean(log, now)
    rebuilt = all_batches(log)[0]
    rebuilt.ensure_valid()
    assert {f: getattr(rebuilt, f) for f in orig} == orig
    assert rebuilt.last_offset == 3 and rebuilt.records_count == 2
    got = [(r.offset, r.key, r.value, r.timestamp) for r in rebuilt.records()]
    if ts_type == LOG_APPEND_TIME:
        assert got == [(0, b"a", b"va", append_time), (1, b"b", None, append_time)]
        assert rebuilt.max_timestamp == append_time
    else:
        assert got == [(0, b"a", b"va", T0 + 1), (1, b"b", None, T0 + 9)]
        assert rebuilt.max_timestamp == T0 + 9
    # the retained tombstone stamps the horizon (KIP-534)
    assert rebuilt.has_delete_horizon and rebuilt.delete_horizon_ms == now + DAY
    # the whole segment still reads, and the next batch keeps its offsets
    assert [o for o, _, _ in contents(log)] == [0, 1, 5, 6]  # the COMMIT marker at 4 is a control record: never read


def test_a_marker_without_data_takes_two_rounds_to_go(make_log):
    """A COMMIT marker whose transaction has no data left (here: written raw, as a coordinator of another log
    would, so no producer state keeps it) first gets a delete horizon, then goes once the horizon has passed."""
    log = make_log(compact_cfg(delete_retention_ms=DAY))
    put(log, "a", "1")
    marker = build_control_batch(1, base_offset=0, timestamp=T0, producer_id=9, producer_epoch=0)
    with log.locked():
        off = log.log_end_offset
        data = bytearray(marker)
        struct.pack_into(">q", data, 0, off)
        log.active_segment.append(off, T0, off, bytes(data))
        log.log_end_offset = off + 1
        log.view.known_active_size = log.active_segment.size
        log.producer_state.map_end_offset = off + 1
    put(log, "a", "2")
    log.roll()
    clean(log, T0)
    bts = all_batches(log)
    assert [bt.is_control for bt in bts] == [True, False]
    assert bts[0].has_delete_horizon and bts[0].delete_horizon_ms == T0 + DAY
    assert bts[0].control_type() == "COMMIT" and bts[0].base_offset == off
    put(log, "b", "3")
    log.roll()
    clean(log, T0 + DAY)
    assert [bt.is_control for bt in all_batches(log)] == [False, False]


# ---------------------------------------------------------------------------------------- legacy data

def legacy(magic, pairs, base, codec=codecs.NONE, ts=T0, ts_type=CREATE_TIME):
    return build_legacy_batch([SimpleRecord(b(k), b(v), ts) for k, v in pairs], magic=magic, base_offset=base,
                              codec=codec, timestamp_type=ts_type,
                              log_append_time_ms=ts if ts_type == LOG_APPEND_TIME else None)


def test_legacy_data_cleaned_in_its_own_format(log_dir, make_log):
    d = pdir(log_dir)
    build_segment_files(d, 0, [
        legacy(0, [("k1", "a")], 0), legacy(0, [("k2", "b")], 1), legacy(0, [("k1", "c")], 2),
        legacy(1, [("k2", "d"), ("k3", "e"), ("k1", "f")], 3, codec=codecs.GZIP),
        legacy(0, [("k4", "g"), ("k3", "h"), ("k5", "i")], 6, codec=codecs.SNAPPY),
        legacy(1, [("k5", "j")], 9, ts=T0 + 5, ts_type=LOG_APPEND_TIME),
        legacy(1, [("k6", "z")], 10),
    ])
    build_segment_files(d, 11, [build_batch([SimpleRecord(b"k6", b"v2", T0)], base_offset=11)])
    build_segment_files(d, 12, [])
    log = make_log(existing=True)
    before = {bt.last_offset: bt.raw() for bt in all_batches(log)}
    res = clean(log)
    assert res.end_offset == 12
    assert contents(log) == [(3, b"k2", b"d"), (5, b"k1", b"f"), (6, b"k4", b"g"), (7, b"k3", b"h"),
                             (9, b"k5", b"j"), (11, b"k6", b"v2")]
    bts = all_batches(log)
    got = [(bt.magic, bt.compression, bt.base_offset, bt.last_offset, bt.timestamp_type) for bt in bts]
    assert got == [(1, codecs.GZIP, 3, 5, CREATE_TIME), (0, codecs.SNAPPY, 6, 7, -1),
                   (1, codecs.NONE, 9, 9, LOG_APPEND_TIME), (2, codecs.NONE, 11, 11, CREATE_TIME)]
    for bt in bts:
        bt.ensure_valid()
    assert bts[2].raw() == before[9]          # a fully retained legacy message is copied as is
    assert bts[2].records()[0].timestamp == T0 + 5


def test_legacy_log_append_time_wrapper_rebuilt_with_its_one_kept_record(log_dir, make_log):
    # A v1 compressed wrapper with LogAppendTime of which one record survives is rebuilt in its own format:
    # magic 1, its codec, the LogAppendTime attribute and the append time as every timestamp (Kafka rebuilds a
    # legacy batch with the same magic, codec and timestamp type), the kept record at its own offset
    d = pdir(log_dir)
    build_segment_files(d, 0, [legacy(1, [("a", "1"), ("b", "1"), ("c", "1")], 0, codec=codecs.GZIP, ts=T0 + 7,
                                      ts_type=LOG_APPEND_TIME),
                               legacy(1, [("a", "2"), ("c", "2")], 3)])
    build_segment_files(d, 5, [])
    log = make_log(existing=True)
    clean(log)
    assert contents(log) == [(1, b"b", b"1"), (3, b"a", b"2"), (4, b"c", b"2")]
    rebuilt = all_batches(log)[0]
    assert (rebuilt.magic, rebuilt.compression, rebuilt.timestamp_type, rebuilt.base_offset, rebuilt.last_offset) == \
        (1, codecs.GZIP, LOG_APPEND_TIME, 1, 1)
    assert [r.timestamp for r in rebuilt.records()] == [T0 + 7] and rebuilt.max_timestamp == T0 + 7
    rebuilt.ensure_valid()


def test_legacy_tombstones_follow_the_segment_mtime_rule(log_dir, make_log):
    # v0/v1 tombstones have no horizon: kept iff their segment is newer than (mtime of the last clean
    # segment - delete.retention.ms).
    d = pdir(log_dir)
    now_wall = int(time.time() * 1000)
    build_segment_files(d, 0, [legacy(1, [("gone", None)], 0), legacy(1, [("x", "1")], 1)],
                        mtime_ms=now_wall - 10 * DAY)
    build_segment_files(d, 2, [legacy(1, [("kept", None)], 2)], mtime_ms=now_wall)
    build_segment_files(d, 3, [legacy(1, [("x", "2")], 3)], mtime_ms=now_wall)
    build_segment_files(d, 4, [])
    log = make_log(compact_cfg(delete_retention_ms=DAY), existing=True)
    Cleaner(CleanerConfig()).clean(ltc_for(log, 3, 4), T0)
    assert contents(log) == [(2, b"kept", None), (3, b"x", b"2")]
    assert all(bt.magic == 1 for bt in all_batches(log))


# ------------------------------------------------------------------------------ corruption, concurrency

def test_truncated_batch_in_sealed_segment_fails_the_round(make_log):
    # Kafka throws CorruptRecordException ("batch size > bytes left in segment") instead of dropping the tail.
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(6):
        put(log, f"k{i % 2}", f"v{i}")
    log.roll()
    put(log, "k0", "active")
    seg = log.segments[0]
    with open(seg.path, "r+b") as f:
        f.truncate(seg.size - 5)
    log = reopen_clean_shutdown(log)
    before = contents_until_error(log)
    with pytest.raises(CorruptRecordError):
        clean(log)
    assert checkpoint_of(log) is None
    assert not any(n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)) for n in segment_files(log.dir))
    assert contents_until_error(log) == before


def reopen_clean_shutdown(log: Log) -> Log:
    """Reopen without recovery (as after a clean shutdown), so damage below the recovery point stays."""
    d, cfg = log.log_dir, log.config
    log.close(clean=False)
    new, _ = open_log(d, TOPIC, 0, cfg, clock=ManualClock(T0), exclusive=True, had_clean_shutdown=True,
                      recovery_point_checkpoint=0)
    return new


def contents_until_error(log: Log) -> list:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for seg in log.segments:
        for bt in seg.batches(0):
            out.extend((r.offset, r.key, r.value) for r in bt.records())
    return out


class HookMap(InProcessOffsetMap):
    """A real key map that runs ``hook`` once, the first time the cleaner asks it for a key (i.e. after the
    map is built and the round has started copying) - used to interleave another process's change."""

    def __init__(self, memory, hook):
        super().__init__(memory)
        self._hook = hook

    def get(self, key):
        if self._hook is not None:
            hook, self._hook = self._hook, None
            hook()
        return super().get(key)


def test_segment_deleted_concurrently_abandons_its_group(log_dir, make_log):
    # LogCleanerTest.testCleanSegmentsWithConcurrentSegmentDeletion: retention (another process) deletes a
    # segment being cleaned; its group is abandoned and the checkpoint does not move.
    log = make_log(compact_cfg(segment_bytes=1024))
    fill_until(log, 4, record=lambda off: (f"k{off % 5}", str(off)))
    log.roll()
    end = log.active_segment.base_offset
    other, _ = open_log(str(log_dir), TOPIC, 0, log.config, clock=ManualClock(T0), exclusive=False)

    def concurrent_retention():
        other.delete_records(other.segments[1].base_offset)
        with other.locked():
            other.delete_segments_locked([other.segments[0]], T0)

    m = HookMap(1 << 20, concurrent_retention)
    build_offset_map(log, 0, end, m, CleanerStats())
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, end), T0, m)
    assert res.groups_abandoned >= 1 and not res.checkpoint_written
    assert checkpoint_of(log) is None
    other.close(clean=False)
    log2 = reopen(log, log.config)
    got = contents(log2)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)) and offsets[0] >= log2.log_start_offset
    assert not any(n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)) for n in segment_files(log2.dir))
    log2.close(clean=False)


def test_a_later_group_whose_segment_went_is_abandoned_with_a_warning(log_dir, make_log, caplog):
    # Another process truncates the log while the round copies its first group: the groups it reached are
    # abandoned (the round works on the segments it started with only while they are the same files), the
    # others are swapped, and the cleaner-offset checkpoint does not move (Kafka: a group whose segments changed
    # is not swapped; the round is retried)
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(12):
        put(log, f"k{i % 3}", f"v{i:02d}")
        if i % 2 == 1:
            log.roll()                       # six segments of two batches (about 150 bytes each)
    end = log.active_segment.base_offset
    small = compact_cfg(segment_bytes=600)   # the round groups the segments as [0, 2, 4, 6], [8, 10]
    groups = group_segments_by_size(log.segments[:-1], 600, small.segment_index_bytes, end)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 2, 4, 6], [8, 10]]
    other, _ = open_log(str(log_dir), TOPIC, 0, log.config, clock=ManualClock(T0), exclusive=False)

    def truncate_the_tail():
        other.truncate_to(10)                # segment 10 is emptied (a new file), segment 8 keeps its file

    log.config = small
    m = HookMap(1 << 20, truncate_the_tail)
    build_offset_map(log, 0, end, m, CleanerStats())
    with caplog.at_level("WARNING", logger="storage_engine.maintenance.cleaner"):
        res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, end), T0, m)
    assert (res.groups, res.groups_abandoned, res.checkpoint_written) == (2, 1, False)
    assert checkpoint_of(log) is None
    assert [r.getMessage() for r in caplog.records if r.name == "storage_engine.maintenance.cleaner"] == \
        [f"abandoning the group at 8 of {log.name}: segment 10 changed since the round started"]
    other.close(clean=False)


def test_size_trimmed_for_preallocated_and_compacted_topic(make_log):
    # LogCleanerTest.testSizeTrimmedForPreallocatedAndCompactedTopic
    log = make_log(compact_cfg(segment_bytes=4096, preallocate=True))
    for i in range(20):
        put(log, f"k{i % 3}", f"v{i}")
    log.roll()
    clean(log)
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.path) == seg.size
        assert seg.size == sum(bt.size_in_bytes for bt in seg.batches(0))
    assert len(contents(log)) == 3


def test_delete_horizon_is_bit_6_and_base_timestamp(make_log):
    log = make_log(compact_cfg(delete_retention_ms=DAY))
    put_many(log, [("a", None), ("b", "1")], ts=T0 - DAY)
    log.roll()
    res = clean(log, T0)
    bt = all_batches(log)[0]
    assert bt.attributes & 0x40 and bt.base_timestamp == T0 + DAY
    assert [(r.offset, r.timestamp) for r in bt.records()] == [(0, T0 - DAY), (1, T0 - DAY)]
    assert bt.max_timestamp == T0 - DAY
    assert res.stats.tombstones_removed == 0
    add_dirty_segment(log)
    res = clean(log, T0 + DAY)
    assert [(o, k) for o, k, _ in contents(log)] == [(1, b"b"), (2, b"pad")]
    assert res.stats.tombstones_removed == 1


def test_dry_run_changes_nothing(make_log):
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(40):
        put(log, f"k{i % 4}", f"v{i}")
    log.roll()
    before = {n: open(os.path.join(log.dir, n), "rb").read() for n in segment_files(log.dir)}
    ltc = cleaner_manager.log_to_clean(log, None, T0)
    res = Cleaner(CleanerConfig()).clean(ltc, T0, dry_run=True)
    assert res.stats.messages_read == 40 and res.stats.messages_written == 4 and not res.checkpoint_written
    assert {n: open(os.path.join(log.dir, n), "rb").read() for n in segment_files(log.dir)} == before
    assert checkpoint_of(log) is None


def round_figures(stats: CleanerStats) -> dict:
    d = stats.as_dict()
    return {k: d[k] for k in ("bytes_read", "bytes_written", "messages_read", "messages_written",
                              "invalid_messages_read", "tombstones_removed")}


def dry_and_real(log_dir, cfg, first_dirty: int, upper: int, now: int):
    """The figures of a dry run, then of the real round on the same files (the dry run must not change them)."""
    log = open_existing(log_dir, cfg)
    before = {n: open(os.path.join(log.dir, n), "rb").read() for n in segment_files(log.dir)}
    dry = Cleaner(CleanerConfig()).clean(ltc_for(log, first_dirty, upper), now, dry_run=True)
    assert {n: open(os.path.join(log.dir, n), "rb").read() for n in segment_files(log.dir)} == before
    real = Cleaner(CleanerConfig()).clean(ltc_for(log, first_dirty, upper), now)
    assert (dry.end_offset, dry.groups) == (real.end_offset, real.groups)
    got = round_figures(dry.stats), round_figures(real.stats), contents(log)
    log.close(clean=False)
    return got


def test_dry_run_counts_what_the_round_writes(log_dir):
    # The dry run applies the round's rules (Kafka's Cleaner.cleanSegments without the swap): the same records
    # read, kept and removed, the same bytes, including the round's last batch kept empty (KAFKA-17076)
    d = pdir(log_dir)
    build_segment_files(d, 0, [build_batch([SimpleRecord(b"a", b"1", T0), SimpleRecord(b"b", b"1", T0)]),
                               build_batch([SimpleRecord(b"c", None, T0)], base_offset=2),
                               build_batch([SimpleRecord(None, b"keyless", T0)], base_offset=3)])
    build_segment_files(d, 4, [build_batch([SimpleRecord(b"a", b"2", T0), SimpleRecord(b"d", b"1", T0)],
                                           base_offset=4),
                               build_batch([SimpleRecord(None, b"keyless", T0)], base_offset=6)])
    build_segment_files(d, 7, [build_batch([SimpleRecord(b"b", b"3", T0)], base_offset=7)])
    build_segment_files(d, 8, [])
    # offset 6 is the round's last batch below the uncleanable offset 7: its record goes, its empty header
    # (61 bytes) stays
    dry, real, after = dry_and_real(log_dir, compact_cfg(delete_retention_ms=DAY), 0, 7, T0)
    assert after == [(1, b"b", b"1"), (2, b"c", None), (4, b"a", b"2"), (5, b"d", b"1"), (7, b"b", b"3")]
    assert dry == real
    assert (dry["messages_read"], dry["messages_written"], dry["invalid_messages_read"]) == (7, 4, 2)


def test_dry_run_follows_the_legacy_tombstone_mtime_rule(log_dir):
    # v0/v1 tombstones are kept iff their segment's mtime > (mtime of the last segment below the dirty section -
    # delete.retention.ms) (Kafka: Cleaner.cleanSegments, retainLegacyDeletesAndTxnMarkers); at the horizon they go
    d = pdir(log_dir)
    now_wall = (int(time.time()) - 100) * 1000        # whole seconds: mtimes compare exactly
    # the horizon is S2's mtime - 1 day: S0 is exactly at it
    build_segment_files(d, 0, [legacy(1, [("gone", None)], 0), legacy(1, [("x", "1")], 1)],
                        mtime_ms=now_wall - DAY)
    build_segment_files(d, 2, [legacy(1, [("kept", None)], 2)], mtime_ms=now_wall)
    build_segment_files(d, 3, [legacy(1, [("x", "2")], 3)], mtime_ms=now_wall)
    build_segment_files(d, 4, [])
    dry, real, after = dry_and_real(log_dir, compact_cfg(delete_retention_ms=DAY), 3, 4, T0)
    assert after == [(2, b"kept", None), (3, b"x", b"2")]
    assert dry == real and dry["tombstones_removed"] == 1 and dry["messages_written"] == 2


def test_dry_run_fails_on_a_truncated_batch_as_the_round_does(make_log):
    # Kafka throws CorruptRecordException ("batch size > bytes left in segment"): a dry run reads as strictly
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(6):
        put(log, f"k{i % 2}", f"v{i}")
    log.roll()
    put(log, "k0", "active")
    seg = log.segments[0]
    with open(seg.path, "r+b") as f:
        f.truncate(seg.size - 5)
    log = reopen_clean_shutdown(log)
    ltc = ltc_for(log, 0, log.active_segment.base_offset)
    with pytest.raises(CorruptRecordError):
        Cleaner(CleanerConfig()).clean(ltc, T0, FakeOffsetMap({}, log.active_segment.base_offset - 1), dry_run=True)  # type: ignore[arg-type]  # a duck-typed key map: clean() reads only get and latest_offset


def test_a_truncated_batch_fails_the_copy_with_a_map_built_elsewhere(make_log):
    # The copy reads every segment of its groups strictly (with a key map built elsewhere nothing else reads them
    # first): a sealed segment that ends inside a batch fails the round (Kafka: CorruptRecordException, "batch
    # size > bytes left in segment"), nothing of it is swapped and no .cleaned file is left
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(6):
        put(log, f"k{i % 2}", f"v{i}")
    log.roll()
    put(log, "k0", "active")
    seg = log.segments[0]
    with open(seg.path, "r+b") as f:
        f.truncate(seg.size - 5)
    log = reopen_clean_shutdown(log)
    before = contents_until_error(log)
    end = log.active_segment.base_offset
    with pytest.raises(CorruptRecordError):
        Cleaner(CleanerConfig()).clean(ltc_for(log, 0, end), T0, FakeOffsetMap({}, end - 1))   # type: ignore[arg-type]  # a duck-typed key map: clean() reads only get and latest_offset; a map built elsewhere
    assert not any(n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)) for n in segment_files(log.dir))
    assert contents_until_error(log) == before and checkpoint_of(log) is None


# ------------------------------------------------------------------------------------------ crash safety

class SimulatedCrash(BaseException):
    """Raised instead of the N-th rename: the process "dies" there (no handler may swallow it)."""


class RenameCrasher:
    """Count ``os.replace`` calls and crash at the ``at``-th one (0: never)."""

    def __init__(self, at: int = 0):
        self.at = at
        self.calls: list[tuple[str, str]] = []
        self.existed: list[bool] = []          # False: a no-op rename of a file already moved
        self._real = os.replace

    def __call__(self, src, dst, *args, **kwargs):
        self.calls.append((os.path.basename(str(src)), os.path.basename(str(dst))))
        self.existed.append(os.path.exists(src))
        if len(self.calls) == self.at:
            raise SimulatedCrash(f"crash at rename #{self.at}: {src} -> {dst}")
        return self._real(src, dst, *args, **kwargs)


def V(n: int) -> bytes:  # noqa: N802 - reads as a value in the cases below
    """``n`` incompressible (but reproducible) bytes, so segment sizes do not depend on the codec."""
    import random
    return random.Random(n).randbytes(n)


# Segments of batches of (key, value). Built so that one round has three groups: [S0, S1] keeps x but nothing
# of S1 (the last replaced segment holding data), [S2, S3] loses every record, [S4, S5] keeps everything and
# stamps a delete horizon on the tombstone's batch.
CRASH_SEGMENTS: list[list[list[tuple[str, bytes | None]]]] = [
    [[("a", V(300))], [("x", V(300))]],
    [[("b", V(100))]],
    [[("c", V(300))], [("c", V(300))]],
    [[("d", V(100))]],
    [[("a", V(40)), ("b", V(41)), ("c", V(42)), ("d", None)]],
    [[("e", V(10))], [("pad", V(10))]],
]
CRASH_CFG = dict(segment_bytes=1000, delete_retention_ms=DAY)


def build_crash_log(log_dir, fmt: str) -> None:
    d = pdir(log_dir)
    offset = 0
    for segment in CRASH_SEGMENTS:
        datas = []
        base = offset
        for pairs in segment:
            recs = [SimpleRecord(b(k), b(v), T0 + offset + i) for i, (k, v) in enumerate(pairs)]
            if fmt == "v2":
                datas.append(build_batch(recs, base_offset=offset, codec=codecs.GZIP if len(recs) > 1 else 0))
            else:
                datas.append(build_legacy_batch(recs, magic=1, base_offset=offset,
                                                codec=codecs.GZIP if len(recs) > 1 else codecs.NONE))
            offset += len(pairs)
        build_segment_files(d, base, datas)
    build_segment_files(d, offset, [])


def short(records: list) -> list:
    return [(o, k, None if v is None else len(v)) for o, k, v in records]


def expected_states(before: list, after: list, group_bases: list[int]) -> list[list]:
    """The states a crash may leave: the first k groups swapped, the rest not (k = 0 .. number of groups)."""
    states = []
    for k in range(len(group_bases) + 1):
        bound = group_bases[k] if k < len(group_bases) else LONG_MAX
        states.append([r for r in after if r[0] < bound] + [r for r in before if r[0] >= bound])
    return states


@pytest.mark.parametrize("fmt", ["v2", "legacy"])
def test_crash_at_every_rename_of_a_cleaning_round(tmp_path, monkeypatch, fmt):
    cfg = compact_cfg(**CRASH_CFG)
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    build_crash_log(pristine, fmt)
    now = T0 + 1000

    # the uncrashed round, on a copy: the "after" state and the number of renames it performs
    ref_dir = tmp_path / "reference"
    shutil.copytree(pristine, ref_dir)
    log = open_existing(ref_dir, cfg)
    before = contents(log)
    segs = log.segments
    groups = group_segments_by_size(segs[:-1], cfg.segment_bytes, cfg.segment_index_bytes,
                                    segs[-1].base_offset)
    group_bases = [g[0].base_offset for g in groups]
    assert [[s.base_offset for s in g] for g in groups] == [[0, 2], [3, 5], [6, 10]]
    counter = RenameCrasher()
    with monkeypatch.context() as m:
        m.setattr(os, "replace", counter)
        res = clean(log, now)
    assert res.groups == 3 and res.checkpoint_written
    after = contents(log)
    assert after == [(1, b"x", b(V(300))), (6, b"a", b(V(40))), (7, b"b", b(V(41))), (8, b"c", b(V(42))),
                     (9, b"d", None), (10, b"e", b(V(10))), (11, b"pad", b(V(10)))]
    # [S0, S1] keeps S1's last batch as an empty batch (the swap must reach into S1); [S2, S3] is gone
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    seg0 = batches_of(log.segments[0])
    assert seg0[-1].records_count == 0 and (seg0[-1].base_offset, seg0[-1].last_offset) == (2, 2)
    log.close(clean=False)
    reference_after = open_existing(ref_dir, cfg)
    assert contents(reference_after) == after
    reference_after.close(clean=False)
    total = len(counter.calls)
    assert counter.calls[-1][1] == layout.CLEANER_OFFSET_CHECKPOINT and total > 20
    states = expected_states(before, after, group_bases)

    seen = set()
    for n in range(1, total + 1):
        work = tmp_path / f"crash-{n}"
        shutil.copytree(pristine, work)
        log = open_existing(work, cfg)
        crasher = RenameCrasher(n)
        with monkeypatch.context() as m:
            m.setattr(os, "replace", crasher)
            with pytest.raises(SimulatedCrash):
                clean(log, now)
        log.close(clean=False)
        # restart after the crash: load as after an unclean shutdown
        log = open_existing(work, cfg)
        got = contents(log)
        assert got in states, (f"crash at rename #{n} {crasher.calls[-1]} left {short(got)}, expected one of "
                               f"{[short(st) for st in states]}")
        seen.add(repr(got))
        cp = checkpoint_of(log)
        assert cp is None or (cp == res.end_offset and got == after), f"checkpoint {cp} after crash #{n}"
        names = segment_files(log.dir)      # (.deleted files wait for file.delete.delay.ms)
        assert not any(x.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)) for x in names), names
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets))
        # cleaning again converges to the state of the uncrashed round
        again = clean(log, now)
        assert contents(log) == after
        assert checkpoint_of(log) == again.end_offset == res.end_offset
        log.close(clean=False)
        shutil.rmtree(work)
    assert seen == {repr(st) for st in states}, "every intermediate state should be reachable"


def test_crash_states_named_in_the_protocol(tmp_path, monkeypatch):
    # The four named crash points of one swap, checked on the files: (a) .cleaned written, (b) .cleaned ->
    # .swap done, (c) some old files .deleted, (d) .swap -> final done, checkpoint not written.
    cfg = compact_cfg(segment_bytes=100_000)
    pristine = tmp_path / "pristine"
    d = pdir(pristine)
    build_segment_files(d, 0, [one(b"k", b"1", 0), one(b"j", b"1", 1)])
    build_segment_files(d, 2, [one(b"k", b"2", 2)])
    build_segment_files(d, 3, [])
    ref = tmp_path / "ref"
    shutil.copytree(pristine, ref)
    log = open_existing(ref, cfg)
    before = contents(log)
    counter = RenameCrasher()
    with monkeypatch.context() as m:
        m.setattr(os, "replace", counter)
        clean(log)
    after = contents(log)
    log.close(clean=False)
    assert after == [(1, b"j", b"1"), (2, b"k", b"2")]
    first = layout.filename_prefix(0)
    # segment-file renames only (producer snapshots of replaced segments are renamed .deleted after the swap)
    segment_renames = [existed and layout.SNAPSHOT_SUFFIX not in c[0] for c, existed in zip(counter.calls, counter.existed)]
    names = [c for c, keep in zip(counter.calls, segment_renames) if keep]
    real = [i + 1 for i, keep in enumerate(segment_renames) if keep]    # call numbers of real renames
    to_swap = [i for i, (s, t) in enumerate(names) if s.endswith(layout.CLEANED_SUFFIX)]
    to_deleted = [i for i, (s, t) in enumerate(names) if t.endswith(layout.DELETED_SUFFIX)]
    to_final = [i for i, (s, t) in enumerate(names) if s.endswith(layout.SWAP_SUFFIX)]
    cp = [i for i, (s, t) in enumerate(names) if t == layout.CLEANER_OFFSET_CHECKPOINT]
    assert len(to_swap) == 3 and len(to_deleted) == 6 and len(to_final) == 3 and len(cp) == 1
    assert max(to_swap) < min(to_deleted) and max(to_deleted) < min(to_final) and max(to_final) < cp[0]
    assert names[to_final[-1]] == (first + ".log.swap", first + ".log")   # the .log is the last to lose .swap
    points = {"a": real[to_swap[0]], "b": real[to_deleted[0]], "c": real[to_deleted[0] + 4],
              "d": real[cp[0]]}
    expect = {"a": before, "b": after, "c": after, "d": after}
    for name, n in points.items():
        work = tmp_path / f"point-{name}"
        shutil.copytree(pristine, work)
        log = open_existing(work, cfg)
        with monkeypatch.context() as m:
            m.setattr(os, "replace", RenameCrasher(n))
            with pytest.raises(SimulatedCrash):
                clean(log)
        log.close(clean=False)
        files = segment_files(pdir(work))
        if name == "a":
            assert first + ".log.cleaned" in files and not any(f.endswith(".swap") for f in files)
        if name == "b":
            assert first + ".log.swap" in files and not any(f.endswith(".deleted") for f in files)
        if name == "c":
            assert any(f.endswith(".deleted") for f in files) and first + ".log.swap" in files
        if name == "d":
            assert first + ".log" in files and not any(f.endswith(".swap") for f in files)
        log = open_existing(work, cfg)
        assert contents(log) == expect[name], name
        assert checkpoint_of(log) is None
        log.close(clean=False)


# --------------------------------------------------------------------------------- a concurrent writer

WRITER = r'''
import sys, time
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

cfg_path, topic, appends, max_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
deadline = time.monotonic() + max_s
out = sys.stdout
with LogManager.open(load_config(cfg_path)) as mgr:
    log = mgr.get_or_create_log(topic, 0)
    out.write("READY\n")
    out.flush()
    for n in range(appends):
        if time.monotonic() > deadline:
            break
        recs = [SimpleRecord(("k%d" % ((n * 3 + j) % 17)).encode(), ("w:%d:%d:" % (n, j)).encode() + b"x" * 40)
                for j in range(3)]
        info = log.append_records(recs)
        out.write("".join("ACK %d %s %s\n" % (info.first_offset + j, r.key.decode(), r.value.decode())
                          for j, r in enumerate(recs)))
        out.flush()
out.write("DONE\n")
out.flush()
'''


@pytest.mark.slow
def test_writer_process_loses_nothing_during_compaction(tmp_path):
    import threading

    from storage_engine.jobs import compaction
    from storage_engine.config_file import load_config
    from storage_engine.log.manager import LogManager

    log_dir = tmp_path / "logs"
    cfg_path = tmp_path / "storage.yaml"
    cfg_path.write_text(
        "broker:\n"
        f"  log.dirs: [{str(log_dir)!r}]\n"
        "topics:\n"
        "  t:\n"
        "    cleanup.policy: compact\n"
        "    segment.bytes: 3000\n"
        "    min.cleanable.dirty.ratio: 0.01\n")
    cfg = load_config(str(cfg_path))
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(cfg_path), "t", "4000", "30"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read_stdout():
        assert proc.stdout is not None   # stdout=PIPE
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                ready.set()
        ready.set()

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        assert ready.wait(60), "writer did not start"
        rounds, cleaned_while_writing, removed = 0, 0, 0
        deadline = time.monotonic() + 90
        while proc.poll() is None and rounds < 400 and time.monotonic() < deadline:
            res = compaction.compact(cfg, now_ms=int(time.time() * 1000), topics=["t"])
            assert not res["failed"], res["results"]
            rounds += 1
            for r in res["results"]:
                if r.get("checkpoint_written") and proc.poll() is None:
                    cleaned_while_writing += 1
                removed += r.get("stats", {}).get("records_removed", 0)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.stderr is not None   # stderr=PIPE
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert lines[-1] == "DONE", err
    res = compaction.compact(cfg, now_ms=int(time.time() * 1000), topics=["t"])
    assert not res["failed"]
    acks = {}
    for line in lines:
        if line.startswith("ACK "):
            _, ack_off, ack_key, ack_value = line.split(" ", 3)
            acks[int(ack_off)] = (ack_key.encode(), ack_value.encode())
    assert len(acks) > 300
    assert sorted(acks) == list(range(len(acks)))
    latest = {}
    for off in sorted(acks):
        latest[acks[off][0]] = off
    assert cleaned_while_writing >= 1 and removed > 0
    with LogManager.open(cfg) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        assert log.log_end_offset == len(acks)
        got = [(r.offset, r.key, r.value) for r in log.read_records()]
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    for off, key, value in got:
        assert acks[off] == (key, value), f"record at {off} is not the one acknowledged there"
    last_read = {}
    for off, key, _ in got:
        last_read[key] = off
    assert last_read == latest, "every key's latest acknowledged record must be readable, at its offset"
    assert len(got) < len(acks)


# Every test here is a fast in-process ``unit`` test except the writer-process one, which is ``slow``.
for _name, _test in list(globals().items()):
    if _name.startswith("test_") and callable(_test) and \
            not any(m.name == "slow" for m in getattr(_test, "pytestmark", [])):
        globals()[_name] = pytest.mark.unit(_test)
