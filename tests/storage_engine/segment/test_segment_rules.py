"""Kafka's exact rules for one segment, at their boundaries (MUTATION.md: what the mutants of segment.py showed the
other tests let through). Rules quoted from Kafka's ``LogSegment``:

- ``shouldRoll``: ``size > maxSegmentBytes - messagesSize || (size > 0 && reachedRollMs) || offsetIndex.isFull ||
  timeIndex.isFull || !canConvertToRelativeOffset(maxOffsetInMessages)``, with
  ``reachedRollMs = timeWaitedForRoll(now, maxTimestampInMessages) > maxSegmentMs - rollJitterMs``;
- ``timeWaitedForRoll``: ``messageTimestamp - rollingBasedTimestamp`` when the first batch has a timestamp
  (``t >= 0``), else ``now - created``.
"""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.segment.segment import INT32_MAX, LogSegment

from ..helpers import append_batch, open_segment, segment_path

pytestmark = pytest.mark.unit

NO_LIMIT = INT32_MAX


def roll(seg, *, segment_bytes=NO_LIMIT, max_segment_ms=NO_LIMIT, messages_size=100, max_timestamp=-1,
         max_offset=None, now_ms=0):
    return seg.should_roll(segment_bytes=segment_bytes, max_segment_ms=max_segment_ms, messages_size=messages_size,
                           max_timestamp=max_timestamp,
                           max_offset=seg.base_offset if max_offset is None else max_offset, now_ms=now_ms)


def test_roll_for_size_only_when_the_append_would_pass_segment_bytes(tmp_path):
    """size > maxSegmentBytes - messagesSize: an append that ends exactly at segment.bytes still fits."""
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", "b", timestamp=1000)
    size = seg.size
    assert roll(seg, segment_bytes=size + 100, messages_size=100) is None
    assert roll(seg, segment_bytes=size + 99, messages_size=100) == "segment-bytes"
    # The size rule holds for an empty segment too (Kafka checks it before the size > 0 of the time rule).
    empty = open_segment(tmp_path, 10)
    assert roll(empty, segment_bytes=99, messages_size=100) == "segment-bytes"
    assert roll(empty, segment_bytes=100, messages_size=100) is None
    seg.close()
    empty.close()


def test_roll_for_time_measured_from_the_first_batch_timestamp_minus_jitter(tmp_path):
    """reachedRollMs = messageTimestamp - rollingBasedTimestamp > maxSegmentMs - rollJitterMs (strictly)."""
    seg = open_segment(tmp_path, 0, now_ms=0)
    append_batch(seg, 0, "a", timestamp=1000)
    seg.roll_jitter_ms = 7
    # now_ms is far in the future: with a first-batch timestamp, only the incoming batch's timestamp counts.
    far = 10**12
    assert roll(seg, max_segment_ms=500, max_timestamp=1000 + 493, now_ms=far) is None
    assert roll(seg, max_segment_ms=500, max_timestamp=1000 + 494, now_ms=far) == "segment-ms"
    assert seg.time_waited_for_roll(far, 1494) == 494
    seg.close()


def test_roll_for_time_without_timestamps_uses_the_creation_time(tmp_path):
    """With no first-batch timestamp (-1), timeWaitedForRoll = now - created."""
    seg = open_segment(tmp_path, 0, now_ms=100)
    append_batch(seg, 0, "a", timestamp=-1)
    assert seg.first_batch_timestamp() == -1
    seg.roll_jitter_ms = 7
    assert roll(seg, max_segment_ms=500, now_ms=100 + 493, max_timestamp=10**12) is None
    assert roll(seg, max_segment_ms=500, now_ms=100 + 494, max_timestamp=10**12) == "segment-ms"
    assert seg.time_waited_for_roll(100 + 494, 10**12) == 494
    seg.close()


def test_roll_reasons_in_kafkas_order(tmp_path):
    """shouldRoll checks size, then time, then full indexes, then the relative-offset range."""
    seg = open_segment(tmp_path, 0, now_ms=0)
    append_batch(seg, 0, "a", timestamp=1000)
    both = dict(segment_bytes=seg.size, max_segment_ms=1, max_timestamp=5000)
    assert roll(seg, **both) == "segment-bytes"
    assert roll(seg, max_segment_ms=1, max_timestamp=5000, max_offset=INT32_MAX + 1) == "segment-ms"
    assert roll(seg, max_offset=INT32_MAX) is None
    assert roll(seg, max_offset=INT32_MAX + 1) == "offset-overflow"
    seg.close()


def test_recovery_of_an_unopened_segment_writes_exactly_the_index_entries(tmp_path, kernels):
    """Kafka's recover() resets both indexes and rebuilds one entry per index.interval.bytes; an index file left
    longer (a preallocated tail, stale entries) or missing ends up holding exactly the rebuilt entries, created
    rw-r--r-- like the files a segment opens itself (the umask applied)."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    for i in range(5):
        append_batch(seg, i, f"v{i}", timestamp=1000 + i)
    seg.close()
    expected = {s: open(segment_path(tmp_path, 0, s), "rb").read()
                for s in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX)}
    assert all(len(v) > 0 for v in expected.values())
    with open(segment_path(tmp_path, 0, layout.INDEX_SUFFIX), "ab") as f:
        f.write(b"\xff" * 64)
    os.remove(segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX))

    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(index_interval_bytes=1), now_ms=0,
                           file_already_exists=True, lazy=True)
    assert not lazy.is_open
    result = lazy.recover()
    assert (result.bytes_truncated, result.batches) == (0, 5)
    for suffix, data in expected.items():
        path = segment_path(tmp_path, 0, suffix)
        assert open(path, "rb").read() == data, suffix
        umask = os.umask(0)
        os.umask(umask)
        assert os.stat(path).st_mode & 0o777 == 0o644 & ~umask, suffix
    assert [lazy.offset_index.lookup(i)[0] for i in range(5)] == [0, 1, 2, 3, 4]
    assert lazy.find_offset_by_timestamp(1003)[1] == 3
    lazy.close()


def test_recovery_of_an_unopened_empty_segment_leaves_empty_indexes(tmp_path, kernels):
    """An empty segment recovers to empty index files (no entry, no stale bytes)."""
    seg = open_segment(tmp_path, 0)
    seg.close()
    for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        with open(segment_path(tmp_path, 0, suffix), "wb") as f:
            f.write(b"\x01" * 24)
    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, lazy=True)
    assert lazy.recover().batches == 0
    for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        assert os.path.getsize(segment_path(tmp_path, 0, suffix)) == 0, suffix
    lazy.close()


def _entries(index) -> list[tuple[int, int]]:
    return [index.entry(n) for n in range(index.entries)]


def _recovered(tmp_path, base, interval, timestamps):
    """A segment of equal-sized one-record batches, closed, reopened and recovered with ``interval``."""
    seg = open_segment(tmp_path, base, index_interval_bytes=10**6)
    for i, ts in enumerate(timestamps):
        append_batch(seg, base + i, "v", timestamp=ts)
    size = seg.size // len(timestamps)
    seg.close()
    again = LogSegment.open(str(tmp_path), base, LogConfig(index_interval_bytes=interval), now_ms=0,
                            file_already_exists=True)
    result = again.recover()
    assert (result.bytes_truncated, result.batches) == (0, len(timestamps))
    return again, size


@pytest.mark.parametrize("past", [False, True], ids=["interval-equals-batch", "interval-one-below"])
def test_recovery_indexes_when_bytes_since_last_entry_exceed_the_interval(tmp_path, kernels, past):
    """recover(): ``if (validBytes - lastIndexEntry > indexIntervalBytes)`` append (last offset, validBytes) to the
    offset index and maybeAppend (max timestamp so far, its offset) to the time index; lastIndexEntry = validBytes.
    The comparison is strict: with batches exactly one interval long every other batch is indexed."""
    probe, size = _recovered(tmp_path, 0, 10**6, [1000])
    probe.close()
    seg, size = _recovered(tmp_path, 100, size - 1 if past else size, [1000 + i for i in range(6)])
    every = 1 if past else 2
    indexed = list(range(every, 6, every))
    assert _entries(seg.offset_index) == [(100 + i, i * size) for i in indexed]
    # the time index: one entry per offset entry, plus the segment's max timestamp added at the end of recovery
    assert _entries(seg.time_index) == [(1000 + i, 100 + i) for i in indexed] + (
        [(1005, 105)] if indexed[-1] != 5 else [])
    seg.close()


def test_recovery_takes_timestamp_zero_and_ignores_missing_timestamps(tmp_path, kernels):
    """Timestamp 0 is a timestamp (the largest-timestamp search starts at -1, Kafka's NO_TIMESTAMP); batches
    without timestamps (-1) add no time-index entry (TimeIndex.maybeAppend only appends a timestamp larger than
    the last entry's, -1 for an empty index)."""
    seg, size = _recovered(tmp_path, 0, 1, [0, 0, 0])
    assert seg.max_timestamp_so_far == 0 and seg.offset_of_max_timestamp_so_far == 0
    assert _entries(seg.time_index) == [(0, 0)]
    seg.close()
    seg, _ = _recovered(tmp_path, 50, 1, [-1, -1, -1])
    assert _entries(seg.offset_index) == [(51, size), (52, 2 * size)]
    assert _entries(seg.time_index) == []
    assert seg.max_timestamp_so_far == -1 and seg.offset_of_max_timestamp_so_far == 50
    seg.close()
