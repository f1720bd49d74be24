"""Tests of one partition's log: append, roll, read, flush, truncation, log start (after UnifiedLogTest)."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.errors import (CorruptRecordError, InvalidRecordError, InvalidRecordForTopicError,
                                   OffsetOutOfRangeError, RecordTooLargeError)
from storage_engine.record.legacy_records import build_legacy_batch
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.segment import INT32_MAX

from ..helpers import (batch, config, files, open_log, partition_dir, read_all, recs, segment_path)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000  # a fixed "now" for the tests (ms)


def one(value: str = "test", ts: int = T0) -> list[SimpleRecord]:
    return recs(value, timestamp=ts)


def single_size(value: str = "test") -> int:
    """Bytes of the batch append_records writes for one record with ``value`` (any timestamp, any offset)."""
    return len(batch(0, value, timestamp=T0))


def bases(log) -> list[int]:
    return [s.base_offset for s in log.segments]


@pytest.fixture
def make_log(logs):
    return logs


# ------------------------------------------------------------------ append

def test_append_assigns_offsets(make_log):
    log = make_log()
    info = log.append_records(recs("a", "b", "c", timestamp=T0))
    assert (info.first_offset, info.last_offset, info.count) == (0, 2, 3)
    info = log.append_records(recs("d", timestamp=T0))
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    assert log.high_watermark == log.log_end_offset == 4
    assert read_all(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_append_records_fills_missing_timestamp_with_now(make_log):
    log = make_log()
    log.clock.set(T0 + 5)
    log.append_records(recs("a"))
    assert [r.timestamp for r in log.read_records()] == [T0 + 5]


def test_append_batches_assigns_offsets(make_log):
    log = make_log()
    log.append_records(recs("x", "y", timestamp=T0))
    client = batch(0, "a", "b", "c", timestamp=T0) + batch(0, "d", timestamp=T0 + 1)
    info = log.append_batches(client)
    assert (info.first_offset, info.last_offset, info.count) == (2, 5, 4)
    assert info.max_timestamp == T0 + 1
    assert read_all(log) == [(0, b"x"), (1, b"y"), (2, b"a"), (3, b"b"), (4, b"c"), (5, b"d")]
    # the stored batches keep their CRC (the base offset is outside it)
    for b in log.active_segment.batches():
        b.ensure_valid()
    assert [b.base_offset for b in log.active_segment.batches()] == [0, 2, 5]


def assert_nothing_written(log, leo: int, size: int) -> None:
    assert log.log_end_offset == leo
    assert log.size_in_bytes() == size
    assert log.active_segment.log.physical_size() == log.active_segment.size


@pytest.mark.parametrize("magic", [0, 1])
def test_append_batches_rejects_legacy_magic(make_log, magic):
    log = make_log()
    log.append_records(one())
    size = log.size_in_bytes()
    legacy = build_legacy_batch([SimpleRecord(b"k", b"v", T0)], magic=magic)
    with pytest.raises(InvalidRecordError, match="magic"):
        log.append_batches(legacy)
    assert_nothing_written(log, 1, size)


def test_append_batches_rejects_bad_crc(make_log):
    log = make_log()
    good = batch(0, "a", timestamp=T0)
    bad = bytearray(batch(0, "b", timestamp=T0))
    bad[-3] ^= 0x01
    with pytest.raises(CorruptRecordError, match="crc"):
        log.append_batches(good + bytes(bad))
    assert_nothing_written(log, 0, 0)


def test_append_batches_rejects_non_sequential_offsets(make_log):
    log = make_log()
    gap = build_batch(recs("a", "b", timestamp=T0), offsets=[0, 2])
    with pytest.raises(InvalidRecordError):
        log.append_batches(gap)
    wide = build_batch(recs("a", "b", timestamp=T0), last_offset=5)
    with pytest.raises(InvalidRecordError):
        log.append_batches(wide)
    assert_nothing_written(log, 0, 0)


def test_append_batches_rejects_torn_input(make_log):
    log = make_log()
    data = batch(0, "a", timestamp=T0)
    with pytest.raises(CorruptRecordError):
        log.append_batches(data + data[:30])
    with pytest.raises(InvalidRecordError):
        log.append_batches(b"")
    assert_nothing_written(log, 0, 0)


def test_record_too_large_for_max_message_bytes(make_log):
    log = make_log(config(max_message_bytes=200))
    log.append_records(recs("small", timestamp=T0))
    size = log.size_in_bytes()
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append_records(recs("v" * 300, timestamp=T0))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append_batches(batch(0, "v" * 300, timestamp=T0))
    assert_nothing_written(log, 1, size)


def test_record_too_large_for_segment_bytes(make_log):
    log = make_log(config(segment_bytes=200))
    with pytest.raises(RecordTooLargeError, match="segment.bytes"):
        log.append_records(recs("v" * 300, timestamp=T0))
    assert_nothing_written(log, 0, 0)
    assert len(log.segments) == 1


def test_append_larger_than_segment_bytes_in_several_batches(make_log):
    """Kafka checks the whole append against segment.bytes, not each batch: no segment may exceed it."""
    one_batch = batch(0, "v" * 100, timestamp=T0)
    log = make_log(config(segment_bytes=len(one_batch) * 2 + 10))
    with pytest.raises(RecordTooLargeError, match="segment.bytes"):
        log.append_batches(one_batch * 3)
    assert_nothing_written(log, 0, 0)


def test_keyless_record_rejected_on_compacted_topic(make_log):
    log = make_log(config(cleanup_policy="compact"))
    log.append_records(recs("v", keys=["k"], timestamp=T0))
    size = log.size_in_bytes()
    with pytest.raises(InvalidRecordForTopicError):
        log.append_records(recs("a", "b", keys=["k", None], timestamp=T0))
    with pytest.raises(InvalidRecordForTopicError):
        log.append_batches(batch(0, "a", timestamp=T0))
    assert_nothing_written(log, 1, size)


def test_log_append_time_topic_stamps_client_batches(make_log):
    """On a LogAppendTime topic the broker's clock replaces client timestamps (Kafka's LogValidator sets the
    timestamp type and max timestamp of each batch and recomputes its CRC)."""
    log = make_log(config(message_timestamp_type="LogAppendTime"))
    log.clock.set(T0 + 1)
    log.append_batches(batch(0, "a", "b", timestamp=5) + batch(0, "c", timestamp=7))
    log.clock.set(T0 + 2)
    log.append_records(recs("d", timestamp=5))
    assert [(r.offset, r.timestamp) for r in log.read_records()] == [(0, T0 + 1), (1, T0 + 1), (2, T0 + 1),
                                                                      (3, T0 + 2)]
    for b in log.active_segment.batches():
        b.ensure_valid()
        assert b.timestamp_type == 1
    assert log.active_segment.max_timestamp_so_far == T0 + 2


def test_create_time_topic_keeps_client_timestamps(make_log):
    log = make_log()
    log.append_batches(batch(0, "a", timestamp=5))
    assert [r.timestamp for r in log.read_records()] == [5]


# ------------------------------------------------------------------ roll

def test_size_based_roll(make_log):
    """testSizeBasedLogRoll: roll when the next append would not fit in segment.bytes."""
    size = single_size()
    log = make_log(config(segment_bytes=10 * size))
    for i in range(25):
        info = log.append_records(one())
        assert info.rolled == (i in (10, 20))
    assert bases(log) == [0, 10, 20]
    assert [s.size for s in log.segments] == [10 * size, 10 * size, 5 * size]
    # the sealed segments were trimmed
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
        assert os.path.getsize(seg.time_index.path) == seg.time_index.entries * 12


def test_time_based_roll_during_append(make_log):
    """testTimeBasedLogRollDuringAppend: without timestamps the segment's age rolls it; with CreateTime
    timestamps the record time does; an empty segment never rolls; empty appends never roll."""
    segment_ms = 3600
    log = make_log(config(segment_ms=segment_ms), now_ms=T0)
    now = T0

    def no_ts_batch():
        return batch(0, "test", timestamp=-1)

    # records without a timestamp: wall clock against the segment's creation time
    now += segment_ms + 1
    log.clock.set(now)
    log.append_batches(no_ts_batch())
    assert len(log.segments) == 1, "an empty segment is not rolled"
    log.append_batches(no_ts_batch())
    assert len(log.segments) == 2, "the segment is older than segment.ms"
    for n in (3, 4):
        now += segment_ms + 1
        log.clock.set(now)
        log.append_batches(no_ts_batch())
        assert len(log.segments) == n

    # a timestamped record into a segment whose first record has none: still the wall clock
    timestamp = now + segment_ms + 1
    log.clock.set(now)
    log.append_records(one(ts=timestamp))
    assert len(log.segments) == 4

    now += segment_ms + 1
    log.clock.set(now)
    log.append_records(one(ts=timestamp))
    assert len(log.segments) == 5, "wall clock passed segment.ms"

    # now the segment's first record has a timestamp: only record time counts
    now += segment_ms + 1
    log.clock.set(now)
    log.append_records(one(ts=timestamp))
    assert len(log.segments) == 5, "record time did not move"
    log.append_records(one(ts=timestamp + segment_ms + 1))
    assert len(log.segments) == 6, "record time passed segment.ms"

    # empty appends do nothing, even when the segment is due
    now += 10 * segment_ms
    size = log.size_in_bytes()
    with pytest.raises(InvalidRecordError):
        log.clock.set(now)
        log.append_records([])
    with pytest.raises(InvalidRecordError):
        log.clock.set(now)
        log.append_batches(b"")
    with pytest.raises(InvalidRecordError):
        log.clock.set(now)
        log.append_batches(build_batch([]))
    assert len(log.segments) == 6 and log.size_in_bytes() == size


def test_time_based_roll_uses_create_time_of_records(make_log):
    """CreateTime data rolls on record time, not wall clock: old records appended late do not roll."""
    log = make_log(config(segment_ms=1000), now_ms=T0)
    log.clock.set(T0)
    log.append_records(one(ts=T0))
    log.clock.set(T0 + 10**6)
    log.append_records(one(ts=T0 + 1000))
    assert len(log.segments) == 1
    log.append_records(one(ts=T0 + 1001))
    assert bases(log) == [0, 2]


def test_time_based_roll_jitter(make_log):
    """testTimeBasedLogRollJitter: each segment rolls at segment.ms - its own jitter, jitter < segment.jitter.ms."""
    segment_ms, max_jitter = 3600, 1200
    log = make_log(config(segment_ms=segment_ms, segment_jitter_ms=max_jitter), now_ms=T0)
    seen = set()
    for i in range(30):
        log.roll()  # a fresh segment (a no-op the first time: the active segment is empty)
        jitter = log.active_segment.roll_jitter_ms
        assert 0 <= jitter < max_jitter
        seen.add(jitter)
        start = log.log_end_offset
        first_ts = T0 + 10**7 * i
        log.append_records(one(ts=first_ts))
        log.append_records(one(ts=first_ts + segment_ms - jitter))
        assert log.active_segment.base_offset == start, "not yet due"
        log.append_records(one(ts=first_ts + segment_ms - jitter + 1))
        assert log.active_segment.base_offset == start + 2, "due at segment.ms - jitter"
    assert len(seen) > 1, "jitter is drawn per segment"


def test_loaded_segments_get_jitter(log_dir):
    """Kafka gives every segment it opens a random jitter, the loaded active segment included."""
    cfg = config(segment_ms=10**9, segment_jitter_ms=10**9)
    jitters = []
    for p in range(8):
        log, _ = open_log(log_dir, cfg, partition=p)
        jitters.append(log.active_segment.roll_jitter_ms)
        log.close(clean=False)
    assert all(0 <= j < 10**9 for j in jitters)
    assert any(j > 0 for j in jitters)


def test_roll_empty_active_segment_is_noop(make_log, log_dir):
    """testRollEmptyActiveSegment (KAFKA-6388)."""
    log = make_log()
    before = files(partition_dir(log_dir))
    log.roll()
    log.roll()
    assert bases(log) == [0]
    assert files(partition_dir(log_dir)) == before
    log.append_records(one())
    log.roll()
    log.roll()
    assert bases(log) == [0, 1]
    log.append_records(one("after"))
    assert read_all(log) == [(0, b"test"), (1, b"after")]


def test_roll_advances_recovery_point(make_log):
    log = make_log()
    log.append_records(recs("a", "b", timestamp=T0))
    assert log.recovery_point == 0
    log.roll()
    assert log.recovery_point == 2


def write_raw_segment(dir_path: str, base: int, data: bytes) -> None:
    with open(segment_path(dir_path, base), "wb") as f:
        f.write(data)


def test_offset_overflow_roll(log_dir):
    """A segment whose offsets approach base + Int.MAX (as after compaction) rolls before an append whose
    last offset would not fit (testOverCompactedLogRecovery's roll)."""
    d = partition_dir(log_dir)
    os.makedirs(d)
    high = INT32_MAX - 5
    write_raw_segment(d, 0, batch(0, "a", timestamp=T0) + batch(high, "b", "c", timestamp=T0))
    log, _ = open_log(log_dir, now_ms=T0)
    assert log.log_end_offset == high + 2
    info = log.append_records(recs(*[str(i) for i in range(10)], timestamp=T0))
    assert info.rolled
    assert bases(log) == [0, high + 2]
    assert info.first_offset == high + 2
    assert [o for o, _ in read_all(log)] == [0, high, high + 1] + list(range(high + 2, high + 12))
    log.close(clean=True)


def test_preallocated_log(make_log, log_dir):
    """preallocate=true: the active .log is created segment.bytes long and keeps that length while appended
    to (its zero tail is not mistaken for a torn write), and is trimmed on roll and on a clean close."""
    cfg = config(segment_bytes=64 * 1024, preallocate=True)
    log = make_log(cfg)
    path = log.active_segment.log.path
    assert os.path.getsize(path) == 64 * 1024
    for i in range(5):
        log.append_records(one(f"v{i}"))
        assert os.path.getsize(path) == 64 * 1024
    assert log.active_segment.size == 5 * single_size("v0")
    # a second process joining the log dir sees the data, not the zeros, and appends after it
    joiner = make_log(cfg, exclusive=False)
    assert [o for o, _ in read_all(joiner)] == [0, 1, 2, 3, 4]
    joiner.append_records(one("v5"))
    assert os.path.getsize(path) == 64 * 1024
    log.append_records(one("v6"))
    assert [v for _, v in read_all(log)] == [f"v{i}".encode() for i in range(7)]
    log.roll()
    assert os.path.getsize(path) == 7 * single_size("v0")
    new_path = log.active_segment.log.path
    assert os.path.getsize(new_path) == 64 * 1024
    log.append_records(one("v7"))
    joiner.close(clean=False)
    log.close(clean=True)
    assert os.path.getsize(new_path) == single_size("v0")


# ------------------------------------------------------------------ reads

def test_read_and_out_of_range(make_log):
    size = single_size()
    log = make_log(config(segment_bytes=3 * size))
    for i in range(10):
        log.append_records(one(f"v{i}"))
    assert len(log.segments) == 4
    for start in range(10):
        got = read_all_from(log, start)
        assert got == [(i, f"v{i}".encode()) for i in range(start, 10)]
        data = log.read(start, 1)
        assert data is not None and data.first_offset == start
    assert log.read(10) is None  # at the log end: nothing yet
    assert list(log.read_records(10)) == []
    for bad in (-1, 11, 1000):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bad)
        with pytest.raises(OffsetOutOfRangeError):
            list(log.read_records(bad))


def read_all_from(log, start):
    return [(r.offset, r.value) for r in log.read_records(start)]


def test_read_records_max_records(make_log):
    log = make_log()
    log.append_records(recs(*"abcdef", timestamp=T0))
    assert [r.offset for r in log.read_records(2, max_records=3)] == [2, 3, 4]


def test_offset_for_timestamp(make_log):
    size = single_size("v00")
    log = make_log(config(segment_bytes=4 * size, index_interval_bytes=1))
    for i in range(20):
        log.append_records(one(f"v{i:02d}", ts=T0 + i * 10))
    assert len(log.segments) == 5
    assert log.offset_for_timestamp(T0 - 1) == (T0, 0)
    assert log.offset_for_timestamp(T0) == (T0, 0)
    assert log.offset_for_timestamp(T0 + 1) == (T0 + 10, 1)
    assert log.offset_for_timestamp(T0 + 125) == (T0 + 130, 13)
    assert log.offset_for_timestamp(T0 + 190) == (T0 + 190, 19)
    assert log.offset_for_timestamp(T0 + 191) is None
    # below the log start offset nothing is returned
    log.delete_records(6)
    assert log.offset_for_timestamp(T0) == (T0 + 60, 6)


# ------------------------------------------------------------------ flush

def test_flush_advances_recovery_point(make_log):
    log = make_log()
    log.clock.set(T0)
    log.append_records(recs("a", "b", "c", timestamp=T0))
    assert log.recovery_point == 0
    log.clock.set(T0 + 1)
    assert log.flush(1) == 1
    log.clock.set(T0 + 2)
    assert log.flush() == 3
    assert log.last_flush_ms == T0 + 2
    log.clock.set(T0 + 3)
    assert log.flush(100) == 3  # never past the log end
    assert log.recovery_point == 3


def test_flush_messages_triggers_flush(make_log):
    log = make_log(config(flush_messages=3))
    log.append_records(recs("a", "b", timestamp=T0))
    assert log.recovery_point == 0
    log.append_records(recs("c", timestamp=T0))
    assert log.recovery_point == 3
    log.append_records(recs("d", timestamp=T0))
    assert log.recovery_point == 3
    log.append_records(recs("e", "f", timestamp=T0))
    assert log.recovery_point == 6


def test_flush_due(make_log):
    log = make_log(config(flush_ms=1000), now_ms=T0)
    assert not log.flush_due(T0 + 5000)  # nothing unflushed
    log.append_records(one())
    assert not log.flush_due(T0 + 999)
    assert log.flush_due(T0 + 1000)


# ------------------------------------------------------------------ truncation

def test_truncate_to(make_log, log_dir):
    """testTruncateTo."""
    size = single_size()
    log = make_log(config(segment_bytes=10 * size))
    for _ in range(10):
        log.append_records(one())
    assert len(log.segments) == 1 and log.log_end_offset == 10
    total = log.size_in_bytes()
    assert log.truncate_to(10) is False  # keep everything
    assert log.truncate_to(11) is False  # beyond the end
    assert (log.log_end_offset, log.size_in_bytes()) == (10, total)
    log.truncate_to(5)
    assert log.log_end_offset == 5 and log.size_in_bytes() == 5 * size
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0
    for _ in range(10):
        log.append_records(one())
    assert (log.log_end_offset, log.size_in_bytes()) == (10, total)
    log.truncate_fully_and_start_at(1)
    assert log.log_end_offset == 1 and log.size_in_bytes() == 0
    for _ in range(10):
        log.append_records(one())
    assert log.log_end_offset == 11 and log.size_in_bytes() == total
    log.truncate_to(0)  # below the first segment: truncate fully and start at 0
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0 and bases(log) == [0]
    assert log.log_start_offset == 0


def test_truncate_to_deletes_later_segments_and_lowers_offsets(make_log, log_dir):
    three = len(batch(0, "0-0", "0-1", "0-2", timestamp=T0))
    log = make_log(config(segment_bytes=three + 1))
    for i in range(4):  # four batches of 3 records, one per segment
        log.append_records(recs(*[f"{i}-{j}" for j in range(3)], timestamp=T0))
    assert bases(log) == [0, 3, 6, 9]
    log.flush()
    assert log.recovery_point == 12
    d = partition_dir(log_dir)
    assert log.truncate_to(4)  # inside the batch [3, 5]: that whole batch goes
    assert bases(log) == [0, 3]
    assert log.log_end_offset == 3
    assert log.recovery_point == 3
    assert [o for o, _ in read_all(log)] == [0, 1, 2]
    for base in (6, 9):
        for suffix in layout.SEGMENT_SUFFIXES[:3]:
            assert not os.path.exists(segment_path(d, base, suffix))
        assert os.path.exists(segment_path(d, base, layout.LOG_SUFFIX, layout.DELETED_SUFFIX))
        assert os.path.exists(segment_path(d, base, layout.INDEX_SUFFIX, layout.DELETED_SUFFIX))
    # the new active segment takes appends at the new log end
    log.append_records(recs("new", timestamp=T0))
    assert read_all(log)[-1] == (3, b"new")
    assert bases(log) == [0, 3]


def test_truncate_fully_and_start_at(make_log, log_dir):
    log = make_log(config(segment_bytes=2 * single_size()))
    for _ in range(5):
        log.append_records(one())
    log.flush()
    log.truncate_fully_and_start_at(100)
    assert bases(log) == [100]
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (100, 100, 100)
    assert read_all(log) == []
    names = files(partition_dir(log_dir))
    assert [n for n in names if n.endswith(".log")] == [layout.filename_prefix(100) + ".log"]
    assert all(n.endswith(".deleted") for n in names
               if not n.startswith(layout.filename_prefix(100)) and not layout.is_partition_file(n))
    log.append_records(one("x"))
    assert read_all(log) == [(100, b"x")]
    # starting at the base of an existing segment keeps one segment there
    log.truncate_fully_and_start_at(100)
    assert bases(log) == [100] and log.log_end_offset == 100 and read_all(log) == []


def test_index_resizing_at_truncation(make_log):
    """testIndexResizingAtTruncation."""
    size = single_size()
    cfg = config(segment_bytes=10 * size, index_interval_bytes=size - 1)
    log = make_log(cfg)
    for i in range(1, 11):
        log.append_records(one(ts=T0 + i))
    assert len(log.segments) == 1
    for i in range(1, 11):
        log.append_records(one(ts=T0 + 10 + i))
    assert len(log.segments) == 2
    first = log.segments[0]
    assert first.offset_index.max_entries == 9
    assert first.time_index.max_entries == 9
    log.truncate_to(0)
    assert len(log.segments) == 1
    assert log.active_segment.offset_index.max_entries == cfg.segment_index_bytes // 8
    assert log.active_segment.time_index.max_entries == cfg.segment_index_bytes // 12
    for i in range(1, 11):
        log.append_records(one(ts=T0 + 20 + i))
    assert len(log.segments) == 1


def test_truncate_then_append_from_second_opener(make_log, log_dir):
    """A process that joined the log dir (non-exclusive view) truncates into a sealed segment and appends:
    the segment that becomes active must be writable."""
    size = single_size()
    cfg = config(segment_bytes=3 * size)
    owner = make_log(cfg)
    for i in range(7):
        owner.append_records(one(f"v{i}"))
    assert bases(owner) == [0, 3, 6]
    joiner = make_log(cfg, exclusive=False)
    joiner.truncate_to(4)
    joiner.append_records(one("new"))
    assert read_all(joiner) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3"), (4, b"new")]
    owner.refresh()
    assert read_all(owner) == read_all(joiner)


# ------------------------------------------------------------------ log start offset and high watermark

def test_delete_records(make_log):
    size = single_size()
    log = make_log(config(segment_bytes=3 * size))
    for i in range(8):
        log.append_records(one(f"v{i}"))
    assert log.high_watermark == log.log_end_offset == 8
    assert log.delete_records(4) == 4
    assert log.log_start_offset == 4
    assert [o for o, _ in read_all(log)] == [4, 5, 6, 7]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(9)  # beyond the high watermark
    assert log.delete_records(2) == 4  # never moves back
    assert log.delete_records(-1) == 8  # -1 = the high watermark
    assert read_all(log) == []
    # segments stay until retention removes them
    assert bases(log) == [0, 3, 6]


def test_delete_records_survives_reopen(log_dir):
    log, _ = open_log(log_dir, now_ms=T0)
    log.append_records(recs(*"abcde", timestamp=T0))
    log.delete_records(3)
    log.close(clean=True)
    log, res = open_log(log_dir, now_ms=T0, log_start_offset_checkpoint=3, had_clean_shutdown=True,
                        recovery_point_checkpoint=5)
    assert log.log_start_offset == 3
    assert [o for o, _ in read_all(log)] == [3, 4]
    log.close(clean=True)


def test_clean_reopen_keeps_data(log_dir):
    """A reopen after a clean close brings back every record, offsets unchanged."""
    log, _ = open_log(log_dir, config(segment_bytes=200), now_ms=T0)
    for i in range(30):
        log.append_records(one(f"v{i}"))
    expected = read_all(log)
    log.close(clean=True)
    log, res = open_log(log_dir, config(segment_bytes=200), now_ms=T0, had_clean_shutdown=True,
                        recovery_point_checkpoint=30)
    assert read_all(log) == expected
    assert res.recovery_point == 30 and res.next_offset == 30
    log.close(clean=True)
