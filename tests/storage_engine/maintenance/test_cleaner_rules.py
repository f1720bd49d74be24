"""The cleaner's rules at their boundaries (MUTATION.md: what the mutants of cleaner.py showed the other tests
let through).

The round report: Kafka's ``LogCleaner.recordStats`` logs each round as these lines (``mb = bytes / (1024 * 1024)``,
Java's ``%,.1f`` and ``%,d``: thousands separators, one decimal), and the engine's run report carries the same
figures as numbers: sizes in MB to 3 decimals, seconds to 4, percentages to 2, with no division by zero for an
empty round.

The round itself (Kafka's ``Cleaner.doClean``, ``buildOffsetMap``, ``groupSegmentsBySize``, ``checkBatchRetention``),
on real files: the map phase's counts and its empty section, the exact size and offset limits of a group, the result
of a round with nothing dirty, the legacy delete horizon, the abandoned-group count, the round's last batch when an
earlier round already emptied it, and a group of empty segments deleted with its producer snapshot."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config import CleanerConfig, LogConfig
from storage_engine.log.loader import open_log
from storage_engine.maintenance.cleaner import (INT32_MAX, MB, Cleaner, CleanerStats, build_offset_map,
                                                group_segments_by_size)
from storage_engine.maintenance.offset_map import InProcessOffsetMap
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.producer_snapshot import encode_snapshot
from storage_engine.segment.segment import LogSegment

from .test_cleaner import (DAY, T0, TOPIC, HookMap, all_batches, build_segment_files, checkpoint_of, compact_cfg,
                           contents, legacy, ltc_for, make_log, one, pdir, put, put_many)  # noqa: F401 (fixture)
from .test_cleaner_txn import abort, appender, commit

pytestmark = pytest.mark.unit


def stats(**kw) -> CleanerStats:
    base = dict(bytes_read=3703701, messages_read=1000, bytes_written=1234567, messages_written=250,
                map_bytes_read=2 * MB + 12345, map_messages_read=700, invalid_messages_read=3, tombstones_removed=5,
                buffer_utilization=0.123456, start_s=100.0, map_complete_s=100.5, end_s=102.0)
    return CleanerStats(**{**base, **kw})


def test_round_figures():
    assert stats().as_dict() == {
        "mb_read": 3.532, "mb_written": 1.177,                 # 3703701 / 2**20 = 3.53213..., 1234567 / 2**20
        "bytes_read": 3703701, "bytes_written": 1234567,
        "messages_read": 1000, "messages_written": 250, "records_removed": 750,
        "map_bytes_read": 2109497, "map_messages_read": 700,
        "invalid_messages_read": 3, "tombstones_removed": 5,
        "map_utilization_percent": 12.35,
        "elapsed_s": 2.0, "map_s": 0.5, "clean_s": 1.5,
        "mb_per_s": 1.766,                                     # 3.53213 MB / 2 s
        "size_reduction_percent": 66.67, "fewer_messages_percent": 75.0,
    }


def test_round_log_lines_as_kafka_prints_them():
    assert stats().log_lines("t-0", 10, 99) == [
        "Log cleaner cleaned log t-0 (dirty section = [10, 99])",
        "3.5 MB of log processed in 2.0 seconds (1.8 MB/sec).",
        "Indexed 2.0 MB in 0.5 seconds (4.0 Mb/sec, 25.0% of total time)",
        "Buffer utilization: 12.3%",
        "Cleaned 3.5 MB in 1.5 seconds (2.4 Mb/sec, 75.0% of total time)",
        "Start size: 3.5 MB (1,000 messages)",
        "End size: 1.2 MB (250 messages)",
        "66.7% size reduction (75.0% fewer messages)",
    ]


def test_large_round_uses_thousands_separators():
    big = stats(bytes_read=1500 * MB, messages_read=12_345_678, bytes_written=1200 * MB, messages_written=2_000_000,
                map_bytes_read=1500 * MB, start_s=0.0, map_complete_s=1000.0, end_s=3000.0)
    lines = big.log_lines("t-0", 0, 1)
    assert lines[1] == "1,500.0 MB of log processed in 3,000.0 seconds (0.5 MB/sec)."
    assert lines[2] == "Indexed 1,500.0 MB in 1,000.0 seconds (1.5 Mb/sec, 33.3% of total time)"
    assert lines[4] == "Cleaned 1,500.0 MB in 2,000.0 seconds (0.8 Mb/sec, 66.7% of total time)"
    assert lines[5] == "Start size: 1,500.0 MB (12,345,678 messages)"
    assert lines[6] == "End size: 1,200.0 MB (2,000,000 messages)"
    assert lines[7] == "20.0% size reduction (83.8% fewer messages)"


def test_empty_round_reports_zeros():
    """A round that read nothing (every segment already clean) reports 0 %, not a division by zero."""
    empty = CleanerStats(start_s=5.0, map_complete_s=5.0, end_s=5.0).as_dict()
    assert (empty["size_reduction_percent"], empty["fewer_messages_percent"], empty["mb_per_s"]) == (0.0, 0.0, 0.0)
    assert (empty["elapsed_s"], empty["map_s"], empty["clean_s"]) == (0.0, 0.0, 0.0)
    lines = CleanerStats(start_s=5.0, map_complete_s=5.0, end_s=5.0).log_lines("t-0", 0, 0)
    assert lines[1] == "0.0 MB of log processed in 0.0 seconds (0.0 MB/sec)."
    assert lines[7] == "0.0% size reduction (0.0% fewer messages)"


def test_sub_second_round_divides_by_its_real_durations():
    """Rates and shares of a round shorter than a second: the 1e-9 floor only guards against a zero duration, it
    does not round a short phase up to a second (Kafka divides by the measured elapsed time)."""
    lines = stats(start_s=100.0, map_complete_s=100.125, end_s=100.5).log_lines("t-0", 0, 1)
    assert lines[1] == "3.5 MB of log processed in 0.5 seconds (7.1 MB/sec)."     # 3.532 MB / 0.5 s
    assert lines[2] == "Indexed 2.0 MB in 0.1 seconds (16.1 Mb/sec, 25.0% of total time)"   # 2.012 MB / 0.125 s
    assert lines[4] == "Cleaned 3.5 MB in 0.4 seconds (9.4 Mb/sec, 75.0% of total time)"   # 3.532 MB / 0.375 s


def test_round_figures_keep_four_decimals_of_seconds_and_two_of_percentages():
    """Seconds to 4 decimals, percentages to 2: a round of 0.123456 s (map 0.0123456 s) reports 0.1235 / 0.0123 /
    0.1111 s, and 1 of 3 messages removed reports 33.33 %."""
    d = stats(messages_read=3, messages_written=2, start_s=0.0, map_complete_s=0.0123456, end_s=0.123456).as_dict()
    assert (d["elapsed_s"], d["map_s"], d["clean_s"]) == (0.1235, 0.0123, 0.1111)
    assert d["fewer_messages_percent"] == 33.33


# ------------------------------------------------------------------------------------------------ the key map

def test_an_empty_dirty_section_at_a_segment_boundary_maps_nothing(make_log):
    """Kafka's ``buildOffsetMap`` maps ``log.logSegments(start, end)``, which is empty when start == end: a round
    with nothing dirty (first dirty = first uncleanable = a segment's base) reads no batch, touches no segment and
    leaves the cleared map's latest offset at -1 (Kafka: ``SkimpyOffsetMap.clear``)."""
    log = make_log(compact_cfg(segment_bytes=1 << 20))
    for seg in range(3):
        put_many(log, [(f"s{seg}a", "1"), (f"s{seg}b", "1")])
        log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    for boundary in (2, 4, 6):
        m, st = InProcessOffsetMap(1 << 16), CleanerStats()
        assert build_offset_map(log, boundary, boundary, m, st) is False
        assert (m.latest_offset, m.size, st.map_bytes_read, st.map_messages_read) == (-1, 0, 0, 0)


def test_map_counts_markers_and_aborted_records_as_read(make_log):
    """Kafka's ``buildOffsetMapForSegment``: a control batch counts one message read (``indexMessagesRead(1)``), an
    aborted batch its record count (``indexMessagesRead(batch.countOrNull)``) without being mapped, every other
    record one each."""
    log = make_log(compact_cfg(segment_bytes=1 << 20))
    put_many(log, [("a", "1"), ("b", "1")])          # 0-1
    p1, p2 = appender(log, 1), appender(log, 2)
    p1([10, 11, 12])                                  # 2-4, aborted
    abort(log, 1)                                     # 5
    p2([20, 21])                                      # 6-7, committed
    commit(log, 2)                                    # 8
    p1([13, 14, 15, 16])                              # 9-12, aborted
    abort(log, 1)                                     # 13
    log.roll()
    assert log.active_segment.base_offset == 14
    m, st = InProcessOffsetMap(1 << 16), CleanerStats()
    assert build_offset_map(log, 0, 14, m, st) is False
    assert st.map_messages_read == 2 + 3 + 1 + 2 + 1 + 4 + 1
    assert st.map_bytes_read == sum(bt.size_in_bytes for bt in all_batches(log))
    assert (m.size, m.latest_offset, m.get(b"10"), m.get(b"20")) == (4, 13, -1, 6)


# ------------------------------------------------------------------------------------------------- grouping

def sealed_segments(d: str, layout_: list[tuple[int, list[int]]], *, ts_step: int = 0) -> list:
    """Real segments at the given bases holding one single-record batch per offset (timestamps T0 + ts_step * offset),
    every batch indexed (``index.interval.bytes`` = 1), sealed as after a roll."""
    segs = []
    for base, offsets in layout_:
        s = LogSegment.open(d, base, LogConfig(segment_index_bytes=1 << 20, index_interval_bytes=1), now_ms=T0)
        for o in offsets:
            s.append(o, T0 + ts_step * o, o, one(b"k", b"v", o))
        s.on_become_inactive_segment()
        segs.append(s)
    return segs


def bases(groups) -> list[list[int]]:
    return [[s.base_offset for s in g] for g in groups]


@pytest.mark.parametrize("ts_step", [0, 1])
def test_a_group_may_sum_exactly_to_each_limit(tmp_path, ts_step):
    """Kafka's ``groupSegmentsBySize`` takes the next segment while ``logSize + size <= maxSize`` and both summed
    index sizes ``<= maxIndexSize``: a group whose sums equal a limit is one group. Three segments of 3 batches
    (210 bytes of log each; 2 offset-index entries, 16 bytes; 1 time-index entry, 12 bytes, or 2, 24 bytes, with
    rising timestamps)."""
    segs = sealed_segments(str(tmp_path), [(0, [0, 1, 2]), (3, [3, 4, 5]), (6, [6, 7, 8])], ts_step=ts_step)
    try:
        log_size, index, time_index = segs[0].size, segs[0].offset_index.size_in_bytes, segs[0].time_index.size_in_bytes
        assert (log_size, index, time_index) == (210, 16, 24 if ts_step else 12)
        assert all((s.size, s.offset_index.size_in_bytes, s.time_index.size_in_bytes) == (log_size, index, time_index)
                   for s in segs)
        assert bases(group_segments_by_size(segs, 2 * log_size, INT32_MAX, 9)) == [[0, 3], [6]]
        assert bases(group_segments_by_size(segs, 2 * log_size - 1, INT32_MAX, 9)) == [[0], [3], [6]]
        # the larger of the two indexes meets the limit exactly: the offset index (12-byte time entries) or the
        # time index (24 bytes against the offset index's 16)
        larger = 2 * max(index, time_index)
        assert bases(group_segments_by_size(segs, INT32_MAX, larger, 9)) == [[0, 3], [6]]
        assert bases(group_segments_by_size(segs, INT32_MAX, larger - 1, 9)) == [[0], [3], [6]]
    finally:
        for s in segs:
            s.close()


def test_a_candidate_with_a_next_segment_is_bounded_by_that_segment(tmp_path):
    """Kafka's ``lastOffsetForFirstSegment``: a candidate followed by another segment can hold offsets up to that
    segment's base - 1 (not the first uncleanable offset); only the last candidate is bounded by the first
    uncleanable offset. Here the candidate at INT32_MAX - 1 fits the group of 0 (its bound, INT32_MAX, is INT32_MAX
    offsets above 0) while the last segment, bounded by the first uncleanable offset INT32_MAX + 1, does not."""
    segs = sealed_segments(str(tmp_path),
                           [(0, [0]), (INT32_MAX - 1, [INT32_MAX - 1]), (INT32_MAX + 1, [INT32_MAX + 1])])
    try:
        assert bases(group_segments_by_size(segs, INT32_MAX, INT32_MAX, INT32_MAX + 2)) == \
            [[0, INT32_MAX - 1], [INT32_MAX + 1]]
    finally:
        for s in segs:
            s.close()


# ---------------------------------------------------------------------------------------------- the round

def test_a_round_with_an_empty_dirty_section_changes_nothing(log_dir, make_log):
    """First dirty = first uncleanable inside a segment (both at the last stable offset of a partition whose
    transaction is still open, say): the map covers nothing (latest offset = first dirty - 1), so the round ends
    at once: end offset = first dirty, no group, none abandoned, no checkpoint written, nothing copied, and the
    report's times are set (start <= map complete <= end). Kafka never starts such a round (the manager selects
    only logs with a dirty section)."""
    log = make_log(compact_cfg(segment_bytes=1 << 20))
    put_many(log, [(f"k{i % 3}", f"v{i}") for i in range(10)])    # 0-9, one batch
    log.roll()
    seg_file = log.segments[0].path
    inode = os.stat(seg_file).st_ino
    before = contents(log)
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 5, 5), T0)
    assert (res.end_offset, res.groups, res.groups_abandoned, res.checkpoint_written) == (5, 0, 0, False)
    st = res.stats
    assert (st.bytes_read, st.messages_read, st.bytes_written, st.messages_written) == (0, 0, 0, 0)
    # the map read the batch holding the first dirty offset (as Kafka's map reads from that batch), mapping nothing
    assert (st.map_bytes_read, st.map_messages_read) == (all_batches(log)[0].size_in_bytes, 10)
    assert st.start_s <= st.map_complete_s <= st.end_s
    assert res.stats.as_dict()["records_removed"] == 0
    assert checkpoint_of(log) is None
    assert os.stat(seg_file).st_ino == inode and contents(log) == before


class KeyMap:
    """A key map handed in with only what every map answers (``get``, ``latest_offset``): no ``utilization``."""

    def __init__(self, entries: dict[bytes, int], latest_offset: int):
        self.entries, self.latest_offset = entries, latest_offset

    def get(self, key: bytes) -> int:
        return self.entries.get(key, -1)


def test_a_map_without_utilization_reports_zero(make_log):
    """A map built elsewhere need not tell how full it is: the round reports a utilization of 0 (0.0 %)."""
    log = make_log(compact_cfg(segment_bytes=1 << 20))
    for i in range(4):
        put(log, "k", f"v{i}")
    log.roll()
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 4), T0, KeyMap({b"k": 3}, 3))  # type: ignore[arg-type]  # a duck-typed key map: clean() reads only get and latest_offset
    assert contents(log) == [(3, b"k", b"v3")]
    assert res.stats.buffer_utilization == 0.0
    assert res.stats.as_dict()["map_utilization_percent"] == 0.0


def test_legacy_horizon_comes_from_the_last_segment_below_the_first_dirty_offset(log_dir, make_log):
    """Kafka's ``doClean``: ``legacyDeleteHorizonMs`` = mtime of the last segment of ``logSegments(0,
    firstDirtyOffset)`` (bases below the first dirty offset) - delete.retention.ms. The first dirty segment, newer,
    does not count: the clean segment's v1 tombstone (mtime 10 days back, horizon 11 days back) stays."""
    d = pdir(log_dir)
    build_segment_files(d, 0, [legacy(1, [("t", None)], 0), legacy(1, [("x", "1")], 1)], mtime_ms=T0 - 10 * DAY)
    build_segment_files(d, 2, [legacy(1, [("x", "2")], 2)], mtime_ms=T0)
    build_segment_files(d, 3, [])
    log = make_log(compact_cfg(delete_retention_ms=DAY), existing=True)
    assert [s.mtime_ms() for s in log.segments[:2]] == [T0 - 10 * DAY, T0]
    Cleaner(CleanerConfig()).clean(ltc_for(log, 2, 3), T0)
    assert contents(log) == [(0, b"t", None), (2, b"x", b"2")]


def test_without_a_clean_segment_the_legacy_horizon_is_zero(log_dir, make_log):
    """Kafka's ``doClean``: with no segment below the first dirty offset ``legacyDeleteHorizonMs`` is 0, so a v1
    tombstone is kept in any segment modified after the epoch, even at 1 ms (mtime > horizon)."""
    d = pdir(log_dir)
    build_segment_files(d, 0, [legacy(1, [("t", None)], 0), legacy(1, [("x", "1")], 1)])
    os.utime(os.path.join(d, "00000000000000000000.log"), ns=(1_000_000, 1_000_000))
    build_segment_files(d, 2, [])
    log = make_log(compact_cfg(delete_retention_ms=DAY), existing=True)
    assert log.segments[0].mtime_ms() == 1
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 2), T0)
    assert contents(log) == [(0, b"t", None), (1, b"x", b"1")]


def test_every_abandoned_group_is_counted(log_dir, make_log):
    """A group whose segments another process changed is not swapped (Kafka: the round is retried): the result
    counts each such group. Six segments of two batches in groups [0, 2], [4, 6], [8, 10]; while the round copies
    the first group another process truncates the log to 5, removing segments 6, 8 and 10: two groups abandoned,
    the first one swapped, the checkpoint not written."""
    log = make_log(compact_cfg(segment_bytes=1024))
    for i in range(12):
        put(log, f"k{i % 3}", f"v{i:02d}")
        if i % 2 == 1:
            log.roll()
    end = log.active_segment.base_offset
    small = compact_cfg(segment_bytes=2 * log.segments[0].size)
    assert bases(group_segments_by_size(log.segments[:-1], small.segment_bytes, small.segment_index_bytes, end)) == \
        [[0, 2], [4, 6], [8, 10]]
    other, _ = open_log(str(log_dir), TOPIC, 0, log.config, clock=ManualClock(T0), exclusive=False)
    log.config = small
    m = HookMap(1 << 20, lambda: other.truncate_to(5))
    build_offset_map(log, 0, end, m, CleanerStats())
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, end), T0, m)
    assert (res.groups, res.groups_abandoned, res.checkpoint_written) == (3, 2, False)
    assert checkpoint_of(log) is None
    other.close(clean=False)


def test_an_empty_marker_batch_ending_the_round_stays(log_dir, make_log):
    """KAFKA-17076: the round's last batch is kept (as an empty batch if none of its records stays; Kafka's
    ``checkBatchRetention`` answers RETAIN_EMPTY and ``filterTo`` writes its empty header). A marker batch an earlier
    round already emptied and that ends the round is kept as it is, byte for byte, and counted as written (the
    dry run too)."""
    d = pdir(log_dir)
    data = build_batch([SimpleRecord(b"k", b"v", T0)], base_offset=0)
    marker = build_batch([], base_offset=1, last_offset=1, producer_id=7, producer_epoch=0, is_transactional=True,
                         is_control=True)
    build_segment_files(d, 0, [data, marker])
    build_segment_files(d, 2, [])
    log = make_log(existing=True)
    dry = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 2), T0, dry_run=True)
    assert (dry.stats.bytes_read, dry.stats.bytes_written) == (len(data) + len(marker), len(data) + len(marker))
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 2), T0)
    assert (res.end_offset, res.checkpoint_written) == (2, True)
    assert [bt.raw() for bt in all_batches(log)] == [data, marker]
    assert res.stats.bytes_written == len(data) + len(marker)



def test_a_group_of_empty_segments_goes_with_its_producer_snapshot(log_dir, make_log):
    """A partition whose cleaner left an empty segment (Kafka does, KAFKA-9157) with the producer snapshot taken
    when it was rolled: the empty segment forms a group alone (its neighbours are larger than segment.bytes after
    a config change), which holds nothing to swap in and is deleted, its producer snapshot with it (Kafka's
    ``deleteSegments`` deletes the producer snapshots of the segments it deletes)."""
    d = pdir(log_dir)
    big = [SimpleRecord(b"k%d" % i, b"v" * 40, T0) for i in range(2)]
    build_segment_files(d, 0, [build_batch(big, base_offset=0)])
    build_segment_files(d, 2, [])
    snapshot = layout.segment_file(d, 2, layout.SNAPSHOT_SUFFIX)
    with open(snapshot, "wb") as f:
        f.write(encode_snapshot([]))
    build_segment_files(d, 3, [build_batch(big, base_offset=3)])
    build_segment_files(d, 5, [])
    log = make_log(compact_cfg(segment_bytes=100), existing=True)
    assert bases(group_segments_by_size(log.segments[:-1], 100, log.config.segment_index_bytes, 5)) == [[0], [2], [3]]
    assert os.path.exists(snapshot)
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 3, 5), T0)
    assert (res.groups, res.groups_abandoned, res.checkpoint_written) == (3, 0, True)
    assert [s.base_offset for s in log.segments] == [3, 5]
    assert [o for o, _, _ in contents(log)] == [3, 4]
    assert not os.path.exists(snapshot) and os.path.exists(snapshot + layout.DELETED_SUFFIX)
