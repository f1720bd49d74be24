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
import struct

import pytest

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.segment.recovery import recover_segment
from storage_engine.segment.segment import INT32_MAX, LogSegment

from ..helpers import append_batch, batch, open_segment, present, segment_path

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
    result = recover_segment(lazy)
    assert (result.bytes_truncated, result.batches) == (0, 5)
    for suffix, data in expected.items():
        path = segment_path(tmp_path, 0, suffix)
        assert open(path, "rb").read() == data, suffix
        umask = os.umask(0)
        os.umask(umask)
        assert os.stat(path).st_mode & 0o777 == 0o644 & ~umask, suffix
    assert [lazy.offset_index.lookup(i)[0] for i in range(5)] == [0, 1, 2, 3, 4]
    assert present(lazy.find_offset_by_timestamp(1003))[1] == 3
    lazy.close()


def test_recovery_of_an_unopened_empty_segment_leaves_empty_indexes(tmp_path, kernels):
    """An empty segment recovers to empty index files (no entry, no stale bytes)."""
    seg = open_segment(tmp_path, 0)
    seg.close()
    for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        with open(segment_path(tmp_path, 0, suffix), "wb") as f:
            f.write(b"\x01" * 24)
    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, lazy=True)
    assert recover_segment(lazy).batches == 0
    for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        assert os.path.getsize(segment_path(tmp_path, 0, suffix)) == 0, suffix
    lazy.close()


def test_recovery_of_an_unopened_segment_rewrites_only_the_index_files_that_differ(tmp_path, kernels):
    """After a crash most index files are right. The compiled walk, which writes each file whole, leaves one that
    already holds exactly its entries as it is (its mtime) and rewrites one whose bytes differ at the same length;
    the Python walk rebuilds both. Either way both end holding the rebuilt entries."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    for i in range(5):
        append_batch(seg, i, f"v{i}", timestamp=1000 + i)
    seg.close()
    paths = {s: segment_path(tmp_path, 0, s) for s in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX)}
    expected = {s: open(p, "rb").read() for s, p in paths.items()}
    with open(paths[layout.INDEX_SUFFIX], "r+b") as f:
        f.seek(8)
        f.write(b"\x00\x00\x00\x07")   # the second entry's relative offset: 1 -> 7, same length
    old = 1_000_000_000
    for p in paths.values():
        os.utime(p, (old, old))
    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(index_interval_bytes=1), now_ms=0,
                           file_already_exists=True, lazy=True)
    assert recover_segment(lazy).batches == 5
    assert {s: open(p, "rb").read() for s, p in paths.items()} == expected
    rewritten = {s: os.stat(p).st_mtime != old for s, p in paths.items()}
    assert rewritten == {layout.INDEX_SUFFIX: True, layout.TIME_INDEX_SUFFIX: kernels == "python"}
    lazy.close()


def _entries(index) -> list[tuple[int, int]]:
    return [index.entry(n) for n in range(index.entries)]


def offsets_in(data: bytes) -> list[int]:
    from storage_engine.segment.file_records import iter_batches
    return [r.offset for b in iter_batches(data) for r in b.records()]


def reopen_active(tmp_path, base: int, cfg: LogConfig) -> LogSegment:
    """An existing segment reopened as the log's active one: its trimmed indexes re-expanded, as a load does."""
    seg = LogSegment.open(str(tmp_path), base, cfg, now_ms=0, file_already_exists=True)
    seg.offset_index.resize(cfg.segment_index_bytes)
    seg.time_index.resize(cfg.segment_index_bytes)
    return seg


def _recovered(tmp_path, base, interval, timestamps):
    """A segment of equal-sized one-record batches, closed, reopened and recovered with ``interval``."""
    seg = open_segment(tmp_path, base, index_interval_bytes=10**6)
    for i, ts in enumerate(timestamps):
        append_batch(seg, base + i, "v", timestamp=ts)
    size = seg.size // len(timestamps)
    seg.close()
    again = LogSegment.open(str(tmp_path), base, LogConfig(index_interval_bytes=interval), now_ms=0,
                            file_already_exists=True)
    result = recover_segment(again)
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


# LogSegment.append: "if (largestTimestamp > maxTimestampSoFar()) maxTimestampAndOffsetSoFar = (largestTimestamp,
# shallowOffsetOfMaxTimestamp)"; "if (bytesSinceLastIndexEntry > indexIntervalBytes) { offsetIndex.append(...);
# timeIndex.maybeAppend(...); bytesSinceLastIndexEntry = 0 }; bytesSinceLastIndexEntry += records.sizeInBytes";
# "if (physicalPosition == 0) rollingBasedTimestamp = largestTimestamp".

def test_append_keeps_the_first_offset_of_an_equal_max_timestamp(tmp_path):
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", timestamp=1000)
    append_batch(seg, 1, "b", timestamp=1000)
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (1000, 0)
    append_batch(seg, 2, "c", timestamp=1001)
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (1001, 2)
    seg.close()


def test_append_indexes_only_when_bytes_since_last_entry_exceed_the_interval(tmp_path):
    probe = open_segment(tmp_path, 1000)
    size = len(append_batch(probe, 1000, "v", timestamp=1000))
    probe.close()
    seg = open_segment(tmp_path, 0, index_interval_bytes=size)
    for i in range(5):
        append_batch(seg, i, "v", timestamp=1000 + i)
    # before each append: 0, S, 2S (> S: entry, reset), S, 2S (> S: entry)
    assert _entries(seg.offset_index) == [(2, 2 * size), (4, 4 * size)]
    assert _entries(seg.time_index) == [(1002, 2), (1004, 4)]
    seg.close()


def test_rolling_timestamp_is_the_largest_timestamp_of_the_first_append(tmp_path):
    """The first append to an empty segment fixes the roll clock at that append's largest timestamp (several
    batches at once: the largest of them); later appends do not move it, also after a reopen."""
    from storage_engine.record.record_batch import build_batch
    from ..helpers import recs
    seg = open_segment(tmp_path, 0)
    data = build_batch(recs("a", timestamp=1000), base_offset=0) + build_batch(recs("b", timestamp=9000),
                                                                                base_offset=1)
    seg.append(1, 9000, 1, data)
    assert seg.first_batch_timestamp() == 9000
    assert seg.time_waited_for_roll(0, 9500) == 500
    append_batch(seg, 2, "c", timestamp=20000)
    assert seg.time_waited_for_roll(0, 20000) == 11000
    seg.close()
    # reopened: the clock comes from the file's first batch, and later appends keep it
    again = reopen_active(tmp_path, 0, LogConfig())
    append_batch(again, 3, "d", timestamp=30000)
    assert again.first_batch_timestamp() == 1000
    assert again.time_waited_for_roll(0, 30000) == 29000
    again.close()


def test_timestamp_zero_starts_the_roll_clock_and_is_the_largest_timestamp(tmp_path):
    """timeWaitedForRoll: ``case Some(t) if t >= 0``; largestTimestamp: the max timestamp when it is >= 0, else
    the file's last-modified time."""
    seg = open_segment(tmp_path, 0, now_ms=5)
    append_batch(seg, 0, "a", timestamp=0)
    assert seg.time_waited_for_roll(10**12, 500) == 500
    assert seg.largest_timestamp() == 0
    seg.close()
    none = open_segment(tmp_path, 10, now_ms=5)
    append_batch(none, 10, "a", timestamp=-1)
    os.utime(none.path, ns=(0, 123_000_000_000))
    assert none.largest_timestamp() == 123_000 == none.mtime_ms()
    none.close()


def test_roll_when_only_the_offset_index_is_full(tmp_path):
    """shouldRoll: offsetIndex.isFull || timeIndex.isFull. Equal timestamps add no time-index entry, so the
    offset index (4 slots of 36 bytes) fills while the time index (3 slots, one kept for the roll) does not."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1, max_index_size=36)
    for i in range(5):
        append_batch(seg, i, "v", timestamp=1000)
    assert seg.offset_index.is_full and not seg.time_index.is_full
    assert roll(seg, max_offset=5) == "index-full"
    seg.close()


def test_roll_writes_the_final_time_entry_into_the_reserved_slot(tmp_path):
    """onBecomeInactiveSegment: timeIndex.maybeAppend(maxTimestampSoFar, shallowOffsetOfMaxTimestampSoFar,
    skipFullCheck = true): a full time index still takes the segment's max timestamp, 0 included."""
    probe = open_segment(tmp_path, 1000)
    size = len(append_batch(probe, 1000, "v", timestamp=0))
    probe.close()
    seg = open_segment(tmp_path, 0, index_interval_bytes=size * 3 // 2, max_index_size=24)
    for i in range(3):
        append_batch(seg, i, "v", timestamp=0)   # the third is indexed: (0, 0), the first offset holding 0
    assert _entries(seg.time_index) == [(0, 0)] and seg.time_index.is_full
    append_batch(seg, 3, "v", timestamp=5)       # not indexed
    seg.on_become_inactive_segment()
    assert _entries(seg.time_index) == [(0, 0), (5, 3)]
    seg.close()
    zero = open_segment(tmp_path, 10, index_interval_bytes=10**6)
    append_batch(zero, 10, "v", timestamp=0)
    zero.on_become_inactive_segment()
    assert _entries(zero.time_index) == [(0, 10)]
    zero.close()


def test_read_from_the_middle_returns_whole_batches_from_the_one_holding_the_offset(tmp_path):
    """LogSegment.read: FetchDataInfo(offsetMetadata = (startOffset, position of its batch)), the batches from
    there that fit maxSize, at least one (minOneMessage)."""
    seg = open_segment(tmp_path, 0)
    sizes = [len(append_batch(seg, i, "v", timestamp=1000)) for i in range(4)]
    got = seg.read(2, sizes[2])
    assert got is not None
    assert (got.position, got.first_offset) == (sum(sizes[:2]), 2)
    assert offsets_in(got.data) == [2]
    got = seg.read(1, sizes[1] + sizes[2] + 1)
    assert got is not None
    assert offsets_in(got.data) == [1, 2]
    with pytest.raises(ValueError, match="invalid max size -1 for a log read from segment .*00000000000000000000.log"):
        seg.read(0, -1)
    seg.close()


def test_batches_from_includes_the_batch_ending_at_the_offset(tmp_path):
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", "b")
    append_batch(seg, 2, "c", "d")
    assert [b.last_offset for b in seg.batches_from(1)] == [1, 3]
    assert [b.last_offset for b in seg.batches_from(2)] == [3]
    second = present(seg.translate_offset(2))[1]
    assert [b.last_offset for b in seg.batches(second)] == [3]
    seg.close()


def test_batches_stop_silently_at_a_torn_tail_unless_strict(tmp_path):
    """FileLogInputStream: a batch running past the end is not returned (a torn tail); recovery, verify and
    dump-log read strictly and report it."""
    from storage_engine.errors import CorruptRecordError
    seg = open_segment(tmp_path, 0)
    first = append_batch(seg, 0, "a")
    torn = append_batch(seg, 1, "b")
    seg.close()
    with open(seg.path, "r+b") as f:
        f.truncate(os.path.getsize(seg.path) - len(torn) // 2)
    again = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True)
    assert [b.last_offset for b in again.batches()] == [0]
    at_zero = again.log.batch_at(0)
    assert at_zero is not None and at_zero.last_offset == 0
    assert again.log.batch_at(len(first)) is None
    with pytest.raises(CorruptRecordError, match="truncated batch at offset 1") as err:
        list(again.batches(0, strict=True))
    assert err.value.path == again.path
    with pytest.raises(CorruptRecordError, match="truncated batch at offset 1") as err:
        again.log.batch_at(len(first), strict=True)
    assert err.value.path == again.path
    again.close()


def test_a_read_over_a_corrupt_entry_names_the_file(tmp_path):
    from storage_engine.errors import CorruptRecordError
    seg = open_segment(tmp_path, 0)
    first = append_batch(seg, 0, "a")
    append_batch(seg, 1, "b")
    seg.close()
    with open(seg.path, "r+b") as f:
        f.seek(len(first) + 16)
        f.write(b"\x07")   # the second entry's magic
    again = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True)
    with pytest.raises(CorruptRecordError, match="unknown magic 7") as err:
        again.read(0, 10**6)
    assert err.value.path == again.path
    again.close()


def test_truncation_keeps_the_roll_clock_unless_the_segment_empties(tmp_path):
    """LogSegment.truncateTo: ``if (log.sizeInBytes == 0) { created = time.milliseconds; rollingBasedTimestamp =
    empty }``; truncating at or beyond the end removes nothing and returns 0; the .txnindex is truncated too."""
    from storage_engine.segment.txn_index import AbortedTxn
    seg = open_segment(tmp_path, 0, now_ms=100)
    for i in range(4):
        append_batch(seg, i, "v", timestamp=1000 + i)
    seg.txn_index.append(AbortedTxn(7, 0, 1, 0))
    seg.txn_index.append(AbortedTxn(8, 2, 3, 2))
    assert seg.truncate_to(10, now_ms=555) == 0
    assert seg.created_ms == 100
    removed = seg.truncate_to(2, now_ms=777)
    assert removed > 0 and seg.created_ms == 100 and seg.read_next_offset() == 2
    assert [t.producer_id for t in seg.txn_index.all_aborted_txns()] == [7]
    seg.truncate_to(0, now_ms=999)
    assert seg.size == 0 and seg.created_ms == 999
    seg.close()


def test_last_index_position_and_tail_state_after_a_reopen(tmp_path):
    """After a reopen (or another process's appends) the bytes since the last index entry are the size minus the
    position of the last indexed batch, and the largest timestamp is the larger of the last time-index entry and
    the batches after it (the first of equal ones)."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    sizes = [len(append_batch(seg, i, "v", timestamp=ts)) for i, ts in enumerate([1000, 2000, 3000])]
    seg.close()
    again = reopen_active(tmp_path, 0, LogConfig(index_interval_bytes=10**6, segment_index_bytes=1000))
    assert _entries(again.offset_index) == [(1, sizes[0]), (2, sizes[0] + sizes[1])]
    assert again.last_index_position() == sizes[0] + sizes[1]
    append_batch(again, 3, "v", timestamp=3000)   # equal to the indexed max: not the new max
    append_batch(again, 4, "v", timestamp=2500)
    again.reload_tail_state()
    assert again.bytes_since_last_index_entry == again.size - (sizes[0] + sizes[1])
    assert (again.max_timestamp_so_far, again.offset_of_max_timestamp_so_far) == (3000, 2)
    append_batch(again, 5, "v", timestamp=4000)
    again.reload_tail_state()
    assert (again.max_timestamp_so_far, again.offset_of_max_timestamp_so_far) == (4000, 5)
    again.close()
    one = open_segment(tmp_path, 100, index_interval_bytes=1)
    first = len(append_batch(one, 100, "v", timestamp=1))
    append_batch(one, 101, "v", timestamp=2)
    assert one.offset_index.entries == 1 and one.last_index_position() == first
    one.close()
    empty = open_segment(tmp_path, 200)
    assert empty.last_index_position() == 0
    empty.close()


# Operating-system failures name the operation, the file and the cause (the project's rule for bad input and
# failing disks: a clear error naming what was wrong). Each is provoked for real: a directory where a file is
# expected, a read-only descriptor, a closed file.

def test_rewriting_an_index_that_is_a_directory_names_it(tmp_path, kernels):
    from storage_engine.errors import StorageIOError
    if kernels != "c":
        pytest.skip("only the compiled recovery writes an unopened segment's index files directly")
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", timestamp=1)
    seg.close()
    index = segment_path(tmp_path, 0, layout.INDEX_SUFFIX)
    os.remove(index)
    os.mkdir(index)
    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, lazy=True)
    with pytest.raises(StorageIOError, match=f"^cannot rewrite index: {index}: \\[Errno 21\\] Is a directory") as err:
        recover_segment(lazy)
    assert err.value.path == index
    lazy.close_quietly()


def test_deleting_a_segment_file_that_is_a_directory_names_it(tmp_path):
    from storage_engine.errors import StorageIOError
    seg = open_segment(tmp_path, 0)
    seg.close()
    index = segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX)
    os.remove(index)
    os.mkdir(index)
    with pytest.raises(StorageIOError, match=f"^cannot delete segment file: {index}: \\[Errno 21\\]") as err:
        seg.delete_files()
    assert err.value.path == index
    assert not os.path.exists(seg.path)   # the files before it are gone, the directory stays
    os.rmdir(index)


def test_log_file_truncation_failures_name_the_file(tmp_path):
    from storage_engine.errors import StorageIOError
    from storage_engine.segment.file_records import FileRecords
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", "b", timestamp=1)
    seg.close()
    path = segment_path(tmp_path, 0)
    size = os.path.getsize(path)
    ro = FileRecords(path, writable=False)
    with pytest.raises(ValueError, match=f"^cannot truncate {path} of size {size} to {size + 1}$"):
        ro.truncate_to(size + 1)
    with pytest.raises(StorageIOError, match=f"^cannot truncate log file: {path}: \\[Errno 22\\]") as err:
        ro.truncate_to(1)
    assert err.value.path == path and os.path.getsize(path) == size
    ro.close()


def test_has_overflow_when_an_offset_does_not_fit_the_segment(tmp_path):
    """LogSegment.hasOverflow: ``nextOffset > baseOffset && !canConvertToRelativeOffset(nextOffset - 1)`` (a
    segment written by an old broker, KAFKA-6264)."""
    from ..helpers import batch
    seg = open_segment(tmp_path, 0)
    assert not seg.has_overflow()                   # empty
    append_batch(seg, INT32_MAX - 1, "a", "b")      # last offset INT32_MAX: still relative
    assert not seg.has_overflow()
    seg.close()
    with open(segment_path(tmp_path, 0), "ab") as f:
        f.write(batch(INT32_MAX + 1, "c"))
    again = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True)
    assert again.has_overflow()
    again.close()


def test_aborted_transactions_are_indexed_committed_ones_are_not(tmp_path):
    """LogSegment.updateTxnIndex: ``if (completedTxn.isAborted) txnIndex.append(new AbortedTxn(completedTxn,
    lastStableOffset))``."""
    from storage_engine.log.producer_state import CompletedTxn
    seg = open_segment(tmp_path, 0)
    seg.update_txn_index(CompletedTxn(5, 0, 3, is_aborted=False), last_stable_offset=4)
    assert not seg.txn_index.exists
    seg.update_txn_index(CompletedTxn(6, 1, 7, is_aborted=True), last_stable_offset=2)
    [txn] = seg.txn_index.all_aborted_txns()
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset) == (6, 1, 7, 2)
    seg.close()


def test_segment_mtime_is_the_log_files(tmp_path):
    """largestTimestamp falls back to the .log's last-modified time; the cleaner carries it over to the cleaned
    segment (Kafka's ``cleaned.lastModified = segments.last.lastModified``)."""
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", timestamp=-1)
    seg.log.set_mtime_ms(1_600_000_000_123)
    assert seg.mtime_ms() == seg.log.mtime_ms() == 1_600_000_000_123
    seg.release()
    assert not seg.is_open and seg.mtime_ms() == 1_600_000_000_123
    assert seg.largest_timestamp() == 1_600_000_000_123


def test_recovery_time_entries_start_from_the_first_timestamp_above_minus_one(tmp_path, kernels):
    """recover(): at each index point timeIndex.maybeAppend(maxTimestampSoFar, offsetOfMaxTimestampSoFar), which
    appends any timestamp above the last entry's (-1 for an empty index): timestamp 1 is indexed."""
    seg, size = _recovered(tmp_path, 0, 1, [1, 1, 2])
    assert _entries(seg.offset_index) == [(1, size), (2, 2 * size)]
    assert _entries(seg.time_index) == [(1, 0), (2, 2)]
    seg.close()


def test_appends_after_recovery_count_bytes_from_zero(tmp_path, kernels):
    """After recover() the bytes-since-last-entry counter is 0 (Kafka's counter of a freshly opened segment): with
    index.interval.bytes 0 the first append after recovery adds no entry, the second does."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=10**6)
    append_batch(seg, 0, "v", timestamp=1)
    seg.close()
    again = reopen_active(tmp_path, 0, LogConfig(index_interval_bytes=0, segment_index_bytes=1000))
    recover_segment(again)
    again.offset_index.resize(1000)
    again.time_index.resize(1000)
    assert again.offset_index.entries == 0
    append_batch(again, 1, "v", timestamp=2)
    assert again.offset_index.entries == 0
    append_batch(again, 2, "v", timestamp=3)
    assert again.offset_index.entries == 1
    again.close()


# -- checked reads: the offset order every scanned batch must keep (checked_read.OffsetOrder) -------------------------
# Kafka's fetcher relies on batches of a segment having offsets at or above the segment's base offset, each batch
# above the previous one, and below the next segment's base offset; the base offset of a magic-2 batch lies outside
# its CRC, so these checks are what catch a flipped bit there. Gaps are fine (compaction leaves them).

def raw_segment(tmp_path, base, *entries):
    """A segment whose .log holds exactly ``entries`` (bytes written as they are, no index)."""
    os.makedirs(tmp_path, exist_ok=True)
    seg = open_segment(tmp_path, base)
    for data in entries:
        seg.log.append(data)
    return seg


def checked_read_error(seg, start_offset, **kw):
    from storage_engine.errors import CorruptRecordError
    with pytest.raises(CorruptRecordError) as read_err:
        seg.read(start_offset, 10**6, **kw)
    with pytest.raises(CorruptRecordError) as scan_err:
        list(seg.checked_batches(start_offset, **kw))
    assert str(read_err.value) == str(scan_err.value)
    assert read_err.value.path == seg.path
    return read_err.value


def test_a_checked_read_refuses_a_batch_below_the_segment_base_offset(tmp_path):
    seg = raw_segment(tmp_path, 10, batch(5, "a"))
    err = checked_read_error(seg, 10)
    assert str(err) == (f"batch with offsets [5, 5] is out of order: below the segment's base offset 10 "
                        f"(file {seg.path}, byte position 0)")
    seg.close()
    at_base = raw_segment(tmp_path / "b", 10, batch(10, "a"))       # at the base offset: fine
    assert offsets_in(at_base.read(10, 10**6).data) == [10]
    at_base.close()


def test_a_checked_read_refuses_a_batch_not_above_the_previous_one(tmp_path):
    first = batch(0, "a", "b", "c")                                     # offsets [0, 2]
    seg = raw_segment(tmp_path, 0, first, batch(1, "x", "y", "z"))      # [1, 3] overlaps it
    err = checked_read_error(seg, 0)
    assert err.position == len(first)
    assert str(err) == (f"batch with offsets [1, 3] is out of order: not above the previous batch's last offset 2 "
                        f"(file {seg.path}, byte position {len(first)})")
    seg.close()
    again = raw_segment(tmp_path / "b", 0, first, batch(2, "x"))        # [2, 2]: the last offset again
    assert "[2, 2] is out of order: not above the previous batch's last offset 2" in str(checked_read_error(again, 0))
    again.close()
    fine = raw_segment(tmp_path / "c", 0, first, batch(3, "x"), batch(9, "y"))   # contiguous, then a gap
    assert offsets_in(fine.read(0, 10**6).data) == [0, 1, 2, 3, 9]
    assert [b.last_offset for b in fine.checked_batches(0)] == [2, 3, 9]
    fine.close()


def test_a_checked_read_refuses_a_batch_whose_last_offset_is_below_its_first(tmp_path):
    first = batch(0, "a")
    bad = bytearray(batch(1, "b", "c"))
    struct.pack_into(">i", bad, 23, -1)                   # lastOffsetDelta = -1: offsets [1, 0]
    seg = raw_segment(tmp_path, 0, first, bytes(bad))
    err = checked_read_error(seg, 0)
    assert str(err) == (f"batch with offsets [1, 0] is out of order: not above the previous batch's last offset 0 "
                        f"(file {seg.path}, byte position {len(first)})")
    seg.close()


def test_a_checked_read_refuses_a_batch_reaching_the_next_segment(tmp_path):
    sizes = [len(b) for b in (batch(0, "a"), batch(1, "b"))]
    seg = raw_segment(tmp_path, 0, batch(0, "a"), batch(1, "b"), batch(2, "c", "d"))   # the last batch: [2, 3]
    assert offsets_in(seg.read(0, 10**6, upper_bound=4).data) == [0, 1, 2, 3]
    assert [b.last_offset for b in seg.checked_batches(0, upper_bound=4)] == [0, 1, 3]
    err = checked_read_error(seg, 0, upper_bound=3)
    assert err.position == sum(sizes)
    assert str(err) == (f"batch with offsets [2, 3] lies beyond the segment's end: offsets from 3 on belong to the "
                        f"next segment or to no one yet (file {seg.path}, byte position {sum(sizes)})")
    # A batch is handed out only once the next one passed the checks: the scan stops before yielding [1, 1].
    seen = []
    from storage_engine.errors import CorruptRecordError
    with pytest.raises(CorruptRecordError):
        for b in seg.checked_batches(0, upper_bound=3):
            seen.append(b.last_offset)
    assert seen == [0]
    seg.close()


# -- a read that fails from an index position is repeated from the segment's start ---------------------------------
# The indexes are derived data (Kafka rebuilds them at recovery); a damaged entry must not make good records
# unreadable, while damage in the records themselves is reported.

def _segment_with_a_misplaced_index_entry(tmp_path):
    """Batches 0..4 with index entries; the entry for offset 3 is moved one byte into its batch."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    sizes = [len(append_batch(seg, i, f"v{i}", timestamp=1000 + i)) for i in range(5)]
    seg.close()
    index_path = segment_path(tmp_path, 0, layout.INDEX_SUFFIX)
    data = bytearray(open(index_path, "rb").read())
    entries = [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]
    slot = [rel for rel, _ in entries].index(3)
    struct.pack_into(">ii", data, slot * 8, 3, sum(sizes[:3]) + 1)
    with open(index_path, "wb") as f:
        f.write(data)
    return LogSegment.open(str(tmp_path), 0, LogConfig(index_interval_bytes=1), now_ms=0,
                           file_already_exists=True), sizes


def test_a_read_from_a_damaged_index_position_is_repeated_from_the_start(tmp_path, caplog):
    seg, sizes = _segment_with_a_misplaced_index_entry(tmp_path)
    bad = sum(sizes[:3]) + 1
    assert seg.offset_index.lookup(3) == (3, bad)
    caplog.set_level("WARNING", logger="storage_engine.segment.segment")
    got = seg.read(3, sizes[3] + sizes[4], upper_bound=5)
    assert (got.position, got.first_offset, offsets_in(got.data)) == (sum(sizes[:3]), 3, [3, 4])
    [record] = caplog.records
    assert record.getMessage().startswith(
        f"{seg.path}: scanning from offset index position {bad} failed (")
    assert record.getMessage().endswith("); scanning from the start")
    from storage_engine.errors import CorruptRecordError
    assert isinstance(record.args[2], CorruptRecordError)
    # the repeated read keeps the caller's limits: at least one batch, and the maximum position
    assert offsets_in(seg.read(3, 1).data) == [3]
    assert offsets_in(seg.read(3, 10**6, max_position=sum(sizes[:4])).data) == [3]
    caplog.clear()
    assert [b.last_offset for b in seg.checked_batches(3, upper_bound=5)] == [3, 4]
    [record] = caplog.records
    assert record.getMessage().startswith(f"{seg.path}: scanning from offset index position {bad} failed (")
    assert isinstance(record.args[2], CorruptRecordError)
    # the repeated scan keeps the caller's bounds: the upper bound and the end position
    with pytest.raises(Exception, match="lies beyond the segment's end"):
        seg.read(3, 10**6, upper_bound=4)
    with pytest.raises(Exception, match="lies beyond the segment's end"):
        list(seg.checked_batches(3, upper_bound=4))
    assert [b.last_offset for b in seg.checked_batches(3, end=sum(sizes[:4]))] == [3]
    assert [b.last_offset for b in seg.checked_batches(0, end=sum(sizes[:2]))] == [0, 1]
    seg.close()


def test_damage_found_scanning_from_the_start_is_reported_not_repeated(tmp_path, caplog):
    from storage_engine.errors import CorruptRecordError
    seg = raw_segment(tmp_path, 0, batch(0, "a"), batch(0, "b"))     # the second batch goes backwards
    caplog.set_level("WARNING", logger="storage_engine.segment.segment")
    with pytest.raises(CorruptRecordError):
        seg.read(0, 10**6)
    with pytest.raises(CorruptRecordError):
        list(seg.checked_batches(0))
    assert caplog.records == []
    seg.close()


# -- LogSegment.append refuses to write when its indexes cannot take the entry the append would add ----------------

def test_an_indexed_append_into_full_indexes_is_refused_before_writing(tmp_path):
    """OffsetIndex.append fails on a full index (entries >= maxEntries); the segment checks first, so the batch is
    not written: here only the offset index is full (timestamps -1 add no time entry)."""
    from storage_engine.errors import IndexFullError
    seg = open_segment(tmp_path, 0, index_interval_bytes=1, max_index_size=48)   # 6 offset, 4 time slots
    for i in range(7):
        append_batch(seg, i, "v")
    assert (seg.offset_index.is_full, seg.time_index.is_full, seg.time_index.entries) == (True, False, 0)
    size = seg.size
    with pytest.raises(IndexFullError) as err:
        append_batch(seg, 7, "v")
    assert str(err.value) == f"the indexes of {seg.path} are full; the segment must roll first"
    assert seg.size == size
    seg.close()


def test_an_indexed_append_behind_a_stale_offset_index_is_refused(tmp_path):
    from storage_engine.errors import CorruptIndexError
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    sizes = [len(append_batch(seg, i, "v", timestamp=1000)) for i in range(4)]
    assert seg.offset_index.entries == 3 and seg.offset_index.last_offset == 3
    seg.log.truncate_to(sum(sizes[:3]))                  # the .log lost its last batch; the index still names it
    size = seg.size
    with pytest.raises(CorruptIndexError) as err:        # Kafka: OffsetIndex.append needs offset > lastOffset
        seg.append(3, 1000, 3, batch(3, "w", timestamp=1000))
    assert err.value.path == seg.offset_index.path and err.value.position == 16
    assert str(err.value) == (f"the offset index's last entry (3, {sum(sizes[:3])}) is not below offset 3 at "
                              f"position {size}: the index is stale (file {seg.offset_index.path}, byte position 16)")
    assert seg.size == size
    seg.close()


def test_an_indexed_append_before_the_last_indexed_position_is_refused(tmp_path):
    from storage_engine.errors import CorruptIndexError
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    sizes = [len(append_batch(seg, i, "v")) for i in range(3)]
    seg.log.truncate_to(sizes[0] + sizes[1] - 1)        # shorter than where the last indexed batch starts
    seg.bytes_since_last_index_entry = 100
    size = seg.size
    with pytest.raises(CorruptIndexError) as err:
        seg.append(10, -1, 10, batch(10, "w"))
    assert str(err.value).startswith(f"the offset index's last entry (2, {sizes[0] + sizes[1]}) is not below "
                                     f"offset 10 at position {size}: the index is stale")
    assert seg.size == size
    seg.close()
    os.makedirs(tmp_path / "at")
    at = open_segment(tmp_path / "at", 0, index_interval_bytes=1)
    sizes = [len(append_batch(at, i, "v")) for i in range(3)]
    at.log.truncate_to(sizes[0] + sizes[1])            # exactly where the last indexed batch starts: fine
    at.append(10, -1, 10, batch(10, "w"))
    assert at.offset_index.lookup(10) == (10, sizes[0] + sizes[1])
    at.close()


def test_an_indexed_append_behind_a_stale_time_index_is_refused(tmp_path):
    from storage_engine.errors import CorruptIndexError
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    append_batch(seg, 0, "v", timestamp=1000)
    append_batch(seg, 1, "v", timestamp=1001)
    seg.time_index.maybe_append(5000, 9)                 # an entry past what the .log holds
    size = seg.size
    with pytest.raises(CorruptIndexError) as err:
        seg.append(8, 1002, 8, batch(8, "w", timestamp=1002))
    assert err.value.path == seg.time_index.path
    assert str(err.value) == (f"the time index's last entry (5000, 9) is past offset 8: the index is stale "
                              f"(file {seg.time_index.path})")
    assert seg.size == size
    seg.append(9, 6000, 9, batch(9, "w", timestamp=6000))   # an entry at the appended offset itself is fine
    assert seg.offset_index.last_offset == 9 and seg.time_index.last_entry == (6000, 9)
    seg.close()


def test_a_checked_read_reports_a_torn_tail_instead_of_ending_early(tmp_path):
    from storage_engine.errors import CorruptRecordError
    first = batch(0, "a")
    seg = raw_segment(tmp_path, 0, first, batch(1, "b")[:20])
    for scan in (lambda: seg.read(0, 10**6), lambda: list(seg.checked_batches(0))):
        with pytest.raises(CorruptRecordError) as err:
            scan()
        assert err.value.position == len(first) and str(err.value).startswith("truncated batch at offset 1")
    seg.close()


def test_a_read_too_small_for_the_first_batch_returns_no_bytes_at_its_position_unless_min_one_message(tmp_path):
    """LogSegment.read: with minOneMessage false and maxSize below the first batch's size, FetchDataInfo holds the
    start offset's position and no records; with minOneMessage the first batch is returned whole."""
    seg = open_segment(tmp_path, 0)
    sizes = [len(append_batch(seg, i, "v" * 20)) for i in range(3)]
    got = seg.read(1, sizes[1] - 1, min_one_message=False)
    assert got is not None
    assert (got.data, got.position, got.first_offset) == (b"", sizes[0], 1)
    got = seg.read(1, sizes[1] - 1)
    assert got is not None
    assert (offsets_in(got.data), got.position, got.first_offset) == ([1], sizes[0], 1)
    seg.close()


def test_a_read_spanning_several_read_windows_returns_the_batches_in_order(tmp_path):
    """A read scans from the index position to the first batch, then takes the fetch: batches taken from more than
    one read window are joined in file order."""
    entries = [batch(i, f"value-{i:04d}" * 4) for i in range(120)]
    seg = raw_segment(tmp_path, 0, *entries)                       # no index entries: every read scans from 0
    size = len(entries[0])
    start = 4096 // size + 5                                       # beyond the first window of a small fetch
    got = seg.read(start, 40 * size)
    assert offsets_in(got.data) == list(range(start, start + 40))
    assert got.data == b"".join(entries[start:start + 40]) and got.position == start * size
    seg.close()


def test_an_append_at_exactly_the_interval_needs_no_index_room(tmp_path):
    """bytesSinceLastIndexEntry > indexIntervalBytes (strict): at equality no entry is added, so full indexes do
    not stop the append."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1, max_index_size=48)
    for i in range(7):
        append_batch(seg, i, "v")
    assert seg.offset_index.is_full
    seg.bytes_since_last_index_entry = seg.index_interval_bytes
    append_batch(seg, 7, "v")
    assert seg.offset_index.last_offset == 6 and present(seg.read(7, 10**6)).first_offset == 7
    seg.close()


def test_close_and_recovery_add_the_final_time_entry_for_timestamp_zero(tmp_path, kernels):
    """LogSegment.close / onBecomeInactiveSegment / recover: timeIndex.maybeAppend(maxTimestampSoFar, its offset,
    skipFullCheck = true); timestamp 0 is a timestamp (only -1 means none), so it gets its entry."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=10**6)
    append_batch(seg, 0, "a", timestamp=0)
    append_batch(seg, 1, "b", timestamp=0)
    seg.close()
    assert open(segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX), "rb").read() == struct.pack(">qi", 0, 0)
    again, _ = _recovered(tmp_path, 10, 10**6, [0, 0])
    assert _entries(again.time_index) == [(0, 10)]
    again.close()


def test_the_max_timestamp_of_an_unopened_segment_comes_from_its_trimmed_time_index(tmp_path):
    """A sealed segment's largest timestamp is its last time-index entry (Kafka's maxTimestampSoFar after
    load); it is read without opening the segment's files."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=10**6)
    append_batch(seg, 0, "a", timestamp=700)
    append_batch(seg, 1, "b", timestamp=900)
    seg.close()
    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, lazy=True)
    assert (lazy.max_timestamp_so_far, lazy.offset_of_max_timestamp_so_far, lazy.largest_timestamp()) == (900, 1, 900)
    assert not lazy.is_open
    lazy.close()


def test_reloaded_tail_state_keeps_the_first_offset_of_the_largest_timestamp(tmp_path):
    """After a reload the largest timestamp is the larger of the last time-index entry and the batches after the
    last indexed position; on a tie the earlier offset stays (LogSegment.append: only a larger timestamp moves
    maxTimestampAndOffsetSoFar)."""
    for name, stamps, expected in (("lower", [100, 1000, 500], (1000, 1)), ("tie", [100, 1000, 1000], (1000, 1)),
                                   ("higher", [100, 1000, 2000], (2000, 2))):
        os.makedirs(tmp_path / name)
        seg = open_segment(tmp_path / name, 0, index_interval_bytes=1)
        for i, ts in enumerate(stamps):
            append_batch(seg, i, "v", timestamp=ts)
        if name != "higher":                     # the entry of the last indexed batch still says 1000 at offset 1
            assert seg.time_index.last_entry == (1000, 1)
        seg.reload_tail_state()
        assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == expected, name
        seg.close()


def test_a_segment_emptied_by_another_process_forgets_its_rolling_timestamp(tmp_path):
    """reload_tail_state after the .log was cut to nothing: no first batch, so timeWaitedForRoll falls back to
    now - created (LogSegment.truncateTo resets rollingBasedTimestamp when the segment empties)."""
    seg = open_segment(tmp_path, 0, now_ms=100)
    append_batch(seg, 0, "a", timestamp=1000)
    assert seg.first_batch_timestamp() == 1000
    seg.log.truncate_to(0)
    seg.reload_tail_state()
    assert seg.first_batch_timestamp() == -1
    assert seg.time_waited_for_roll(600, 5000) == 500
    seg.close()


@pytest.mark.parametrize("tail", [b"\x00", b"\x00" * 16, b"\x00" * 40])
def test_recovery_cuts_a_torn_tail_down_to_the_last_whole_batch_and_says_where(tmp_path, kernels, tail):
    """LogSegment.recover: ``truncated = log.sizeInBytes - validBytes; if (truncated > 0) log.truncateTo(validBytes)``
    -- even a single byte; the reason names the file and the position of the first invalid byte."""
    seg = open_segment(tmp_path, 0)
    valid = len(append_batch(seg, 0, "a", timestamp=5)) + len(append_batch(seg, 1, "b", timestamp=6))
    seg.log.append(tail)
    seg.close()
    again = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True)
    result = recover_segment(again)
    assert (result.bytes_truncated, result.valid_bytes, result.batches) == (len(tail), valid, 2)
    assert result.error is not None and result.error.endswith(f"(file {again.path}, byte position {valid})")
    assert os.path.getsize(again.path) == again.size == valid
    again.close()


def test_recovery_of_an_undamaged_preallocated_segment_keeps_its_file(tmp_path, kernels):
    """Nothing invalid, nothing truncated: a preallocated active segment keeps its preallocated length."""
    seg = open_segment(tmp_path, 0, preallocate_bytes=4096)
    size = len(append_batch(seg, 0, "a", timestamp=5))
    result = recover_segment(seg)
    assert (result.bytes_truncated, result.valid_bytes, result.error) == (0, size, None)
    assert (seg.size, os.path.getsize(seg.path)) == (size, 4096)
    seg.close(trim=False)


def test_an_offset_outside_the_segment_is_refused_with_its_range(tmp_path):
    """LogSegment.ensureOffsetInRange: the relative offset must fit an int32 (LogSegmentOffsetOverflowException)."""
    from storage_engine.errors import SegmentOffsetOverflowError
    seg = open_segment(tmp_path, 10)
    with pytest.raises(SegmentOffsetOverflowError) as err:
        seg.append(9, -1, 9, batch(9, "a"))
    assert str(err.value) == (f"offset 9 cannot be stored in the segment with base offset 10 ({seg.path}): the "
                              f"relative offset must be in [0, {INT32_MAX}]")
    assert seg.size == 0
    seg.close()


def test_a_new_segment_replaces_leftover_files_of_its_name_and_suffix(tmp_path):
    """A new segment (Kafka's LogSegment.open without fileAlreadyExists) starts from empty files: leftovers with
    its name and suffix (e.g. ``.cleaned`` from an interrupted clean) are removed, other suffixes are not."""
    for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX):
        for extra in (".cleaned", ""):
            with open(segment_path(tmp_path, 0, suffix, extra), "wb") as f:
                f.write(b"\x07" * 40)
    seg = LogSegment.open(str(tmp_path), 0, LogConfig(segment_index_bytes=120), now_ms=0, suffix=".cleaned")
    assert seg.size == 0 and seg.offset_index.entries == 0 and seg.time_index.entries == 0
    assert not os.path.exists(segment_path(tmp_path, 0, layout.TXN_INDEX_SUFFIX, ".cleaned"))
    assert open(segment_path(tmp_path, 0, layout.INDEX_SUFFIX, ".cleaned"), "rb").read() == bytes(120)
    assert open(segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX, ".cleaned"), "rb").read() == bytes(120)
    assert os.path.getsize(segment_path(tmp_path, 0, layout.LOG_SUFFIX, ".cleaned")) == 0
    for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX):
        assert open(segment_path(tmp_path, 0, suffix), "rb").read() == b"\x07" * 40, suffix
    seg.close()


def test_a_lazily_opened_segment_knows_its_size_from_stat_and_names_a_missing_log(tmp_path):
    seg = open_segment(tmp_path, 0)
    size = len(append_batch(seg, 0, "a"))
    seg.close()
    lazy = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, lazy=True)
    assert (lazy.size, lazy.is_open) == (size, False)
    missing = segment_path(tmp_path, 5)
    with pytest.raises(Exception) as err:
        LogSegment.open(str(tmp_path), 5, LogConfig(), now_ms=0, file_already_exists=True, lazy=True)
    assert isinstance(err.value.__cause__, FileNotFoundError)
    assert str(err.value) == f"cannot stat log file: {missing}: {err.value.__cause__}"


def test_a_read_only_segment_opens_its_files_read_only(tmp_path):
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    append_batch(seg, 0, "a")
    append_batch(seg, 1, "b")
    seg.close(trim=False)
    reader = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, writable=False)
    assert (reader.writable, reader.log.writable, reader.offset_index.writable, reader.time_index.writable) == (
        False, False, False, False)
    assert reader.offset_index.entries == 1
    reader.close()


@pytest.mark.kills
def test_a_crash_named_after_the_log_rename_leaves_the_indexes_under_their_old_suffix(tmp_path):
    """change_file_suffixes renames the .log first; the crash step it is given is reached right after that rename,
    before any index is renamed (the swap protocol's "swap.swap-partial")."""
    import signal
    from storage_engine import crashpoints
    seg = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, suffix=".cleaned")
    append_batch(seg, 0, "a")
    seg.close()
    pid = os.fork()
    if pid == 0:                                         # pragma: no cover - the child
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            crashpoints.arm("swap.swap-partial")
            child = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True,
                                    suffix=".cleaned")
            child.change_file_suffixes(".cleaned", ".swap", after_log="swap.swap-partial")
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000.index.cleaned", "00000000000000000000.log.swap",
                                            "00000000000000000000.timeindex.cleaned"]
    # not armed, the same call renames every file
    os.mkdir(tmp_path / "plain")
    seg = LogSegment.open(str(tmp_path / "plain"), 0, LogConfig(), now_ms=0, suffix=".cleaned")
    append_batch(seg, 0, "a")
    seg.close()
    seg = LogSegment.open(str(tmp_path / "plain"), 0, LogConfig(), now_ms=0, file_already_exists=True,
                          suffix=".cleaned")
    seg.change_file_suffixes(".cleaned", ".swap", after_log="swap.swap-partial")
    assert sorted(os.listdir(tmp_path / "plain")) == ["00000000000000000000.index.swap",
                                                      "00000000000000000000.log.swap",
                                                      "00000000000000000000.timeindex.swap"]
    seg.close()


# -- closing without trimming: Kafka's closeHandlers (another process may still append through its own mapping) ----

def _file_sizes(tmp_path, base):
    return {s: os.path.getsize(segment_path(tmp_path, base, s))
            for s in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX)}


def _preallocated_segment(tmp_path):
    """A segment with a preallocated .log and indexes holding three batches, the last two indexed."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=1, preallocate_bytes=4096)
    append_batch(seg, 0, "a", timestamp=1000)
    append_batch(seg, 1, "b", timestamp=1001)     # indexed: (1001, 1)
    append_batch(seg, 2, "c", timestamp=1005)     # indexed: (1005, 2)
    assert _entries(seg.time_index) == [(1001, 1), (1005, 2)]
    return seg


def test_close_without_trim_leaves_every_file_at_its_preallocated_length(tmp_path):
    """LogSegment.closeHandlers: the indexes and the .log are closed as they are; only close() (Kafka's close) adds
    the final time-index entry and cuts the preallocated tails."""
    seg = _preallocated_segment(tmp_path)
    seg.close(trim=False)
    assert _file_sizes(tmp_path, 0) == {layout.LOG_SUFFIX: 4096, layout.INDEX_SUFFIX: 1000,
                                        layout.TIME_INDEX_SUFFIX: 996}
    seg = LogSegment.open(str(tmp_path), 0, LogConfig(index_interval_bytes=1), now_ms=0, file_already_exists=True)
    seg.close()
    assert seg.size == 4096   # the zeroes of the preallocated tail were left in the file


def test_release_closes_without_trimming(tmp_path):
    """release() goes back to the lazy state through closeHandlers: no file is cut or written, whatever it holds."""
    seg = _preallocated_segment(tmp_path)
    time_before = open(segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX), "rb").read()
    seg.release()
    assert not seg.is_open
    assert _file_sizes(tmp_path, 0) == {layout.LOG_SUFFIX: 4096, layout.INDEX_SUFFIX: 1000,
                                        layout.TIME_INDEX_SUFFIX: 996}
    assert open(segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX), "rb").read() == time_before
    assert seg.size == 4096


# -- a checked read repeated from the start goes on from the batch after the last one it handed out ----------------

def test_a_checked_scan_failing_after_it_yielded_resumes_after_the_last_yielded_batch(tmp_path, caplog):
    """A scan from an index position that fails after handing out batches is repeated from the segment's start for
    the offsets not yet handed out: no batch twice, and damage found again is reported as such."""
    from storage_engine.errors import CorruptRecordError
    seg = open_segment(tmp_path, 0, index_interval_bytes=1)
    sizes = [len(append_batch(seg, i, f"v{i}", timestamp=1000 + i)) for i in range(5)]
    torn = batch(5, "w", timestamp=1005)
    seg.log.append(torn[:len(torn) // 2])          # a torn tail after offset 4
    assert seg.offset_index.lookup(3) == (3, sum(sizes[:3]))
    caplog.set_level("WARNING", logger="storage_engine.segment.segment")
    seen = []
    with pytest.raises(CorruptRecordError) as err:
        for b in seg.checked_batches(3):
            seen.append(b.last_offset)
    assert seen == [3]                              # 4 is held until the next entry is checked: the torn one
    assert err.value.position == sum(sizes)
    assert str(err.value).startswith("truncated batch at offset 5:")
    [record] = caplog.records
    assert record.getMessage().startswith(f"{seg.path}: scanning from offset index position {sum(sizes[:3])} failed")
    seg.close()


# -- shouldRoll's time rule applies to any non-empty segment ---------------------------------------------------------

def test_roll_for_time_applies_to_a_segment_of_one_byte(tmp_path):
    """shouldRoll: ``size > 0 && reachedRollMs``; a .log holding a single (torn) byte is not empty, and with no
    first-batch timestamp to read, the time waited is ``now - created``."""
    seg = raw_segment(tmp_path, 0, b"\x00")
    assert seg.size == 1 and seg.first_batch_timestamp() == -1
    assert roll(seg, max_segment_ms=500, now_ms=501) == "segment-ms"
    assert roll(seg, max_segment_ms=500, now_ms=500) is None
    seg.close()


# -- change_file_suffixes reaches its crash step once per call, after the .log ---------------------------------------

@pytest.mark.kills
def test_a_suffix_change_reaches_its_crash_step_once(tmp_path):
    """The step named ``after_log`` is reached once per call (after the .log's rename): a process armed for its second
    hit renames every file of one segment and lives on."""
    from storage_engine import crashpoints
    seg = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, suffix=".cleaned")
    append_batch(seg, 0, "a")
    seg.close()
    pid = os.fork()
    if pid == 0:                                         # pragma: no cover - the child
        code = 3
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            crashpoints.arm("swap.swap-partial", 2)
            child = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True,
                                    suffix=".cleaned")
            child.change_file_suffixes(".cleaned", ".swap", after_log="swap.swap-partial")
            child.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000.index.swap", "00000000000000000000.log.swap",
                                            "00000000000000000000.timeindex.swap"]
    # the same call in this process (nothing armed) renames every file back
    back = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0, file_already_exists=True, suffix=".swap")
    back.change_file_suffixes(".swap", ".cleaned", after_log="swap.swap-partial")
    back.close()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000.index.cleaned", "00000000000000000000.log.cleaned",
                                            "00000000000000000000.timeindex.cleaned"]


def test_close_writes_the_final_time_index_entry_into_the_slot_kept_for_it(tmp_path, caplog):
    """Kafka's TimeIndex counts as full one entry early (``isFull``: entries >= maxEntries - 1) and keeps the last
    slot for the entry LogSegment.close appends with ``skipFullCheck = true``: a time index that appends see as
    full still takes the final entry, and close logs nothing."""
    import logging
    seg = open_segment(tmp_path, 0, index_interval_bytes=100, max_index_size=24)     # a time index of 2 slots
    append_batch(seg, 0, "a" * 150, timestamp=10)
    append_batch(seg, 1, "b", timestamp=20)       # more than 100 bytes since the last entry: entry (20, 1)
    append_batch(seg, 2, "c", timestamp=30)       # less: no entry
    assert seg.time_index.entries == 1 and seg.time_index.is_full
    with caplog.at_level(logging.WARNING, logger="storage_engine.segment.segment"):
        seg.close()
    assert caplog.records == []
    with open(segment_path(tmp_path, 0, layout.TIME_INDEX_SUFFIX), "rb") as f:
        assert f.read() == struct.pack(">qi", 20, 1) + struct.pack(">qi", 30, 2)


def test_close_after_a_recovery_stopped_by_an_offset_going_backwards_closes_every_file(tmp_path, caplog):
    """Kafka's LogSegment.close swallows a failure of the final ``timeIndex.maybeAppend`` (``Utils.swallow``, at
    WARN) and closes the other files. A legacy message whose offset field (outside its checksum) had a bit flipped
    jumps 2**24 ahead; the next message goes backwards, so recovery stops with InvalidOffsetError (the loader then
    truncates the segment, as Kafka's recoverLog does), and the in-memory largest timestamp belongs to an offset
    below the time index's last entry: close logs that and still trims and closes both indexes."""
    import logging

    from storage_engine.errors import InvalidOffsetError
    from storage_engine.record.legacy_records import build_legacy_batch
    from storage_engine.record.records import SimpleRecord
    # 100 bytes between index entries: the jumped message is indexed (both indexes), the one after it is not, so
    # only the time index's final entry (largest timestamp 2, at offset 103) goes backwards
    data = b"".join(build_legacy_batch([SimpleRecord(b"k", b"v" * size, ts)], magic=1, base_offset=offset)
                    for offset, ts, size in ((100, 0, 60), (101, 0, 1), (100 + 2**24 + 2, 1, 1), (103, 2, 1)))
    seg = open_segment(tmp_path, 100, index_interval_bytes=100)
    seg.log.append(data)
    with pytest.raises(InvalidOffsetError):
        recover_segment(seg)
    time_entries = seg.time_index.entries
    with caplog.at_level(logging.WARNING, logger="storage_engine.segment.segment"):
        seg.close()
    path = segment_path(tmp_path, 100)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: final time index entry not written: attempt to append an offset (103) to slot {time_entries} no "
        f"larger than the last offset appended ({100 + 2**24 + 2}) to {segment_path(tmp_path, 100, layout.TIME_INDEX_SUFFIX)}"]
    assert os.path.getsize(segment_path(tmp_path, 100, layout.TIME_INDEX_SUFFIX)) == 12 * time_entries
    assert os.path.getsize(segment_path(tmp_path, 100, layout.INDEX_SUFFIX)) == 8 * seg.offset_index.entries


# -- checked reads of legacy data ------------------------------------------------------------------------------------

def test_a_checked_read_takes_a_legacy_wrapper_at_its_own_last_offset(tmp_path):
    """A v0/v1 compressed wrapper carries the offset of its last inner message, and Kafka rolls a segment for it at
    that offset (LogAppendInfo.firstOrLastOffsetOfFirstBatch: the last offset when the magic is below 2): a segment
    based at 10 may begin with a wrapper whose inner messages are 8, 9, 10. The checked read takes the wrapper at
    its offset, as Kafka's fetch does, and returns it whole."""
    from storage_engine.record import codecs
    from storage_engine.record.legacy_records import build_legacy_batch
    from storage_engine.record.records import SimpleRecord
    wrapper = build_legacy_batch([SimpleRecord(None, b"v%d" % i, 1000 + i) for i in range(3)], magic=1,
                                 codec=codecs.GZIP, base_offset=8)
    seg = raw_segment(tmp_path, 10, wrapper, batch(11, "x"))
    assert offsets_in(seg.read(10, 10**6).data) == [8, 9, 10, 11]
    assert [b.last_offset for b in seg.checked_batches(10)] == [10, 11]
    seg.close()


def test_a_batch_at_the_base_offset_going_backwards_is_named_as_out_of_order(tmp_path):
    """A batch starting at the segment's base offset is not below it: after [0, 2], a batch [0, 0] is refused for not
    being above the previous batch's last offset."""
    first = batch(0, "a", "b", "c")
    seg = raw_segment(tmp_path, 0, first, batch(0, "x"))
    err = checked_read_error(seg, 0)
    assert str(err) == (f"batch with offsets [0, 0] is out of order: not above the previous batch's last offset 2 "
                        f"(file {seg.path}, byte position {len(first)})")
    seg.close()


# -- recovery writes the segment's max timestamp into the time index's reserved last slot ----------------------------

def test_recovery_adds_the_final_time_entry_to_a_full_time_index(tmp_path, kernels):
    """LogSegment.recover ends with ``timeIndex.maybeAppend(maxTimestampSoFar, shallowOffsetOfMaxTimestampSoFar,
    true)``: skipFullCheck, so a time index filled during the walk (isFull: one slot left) still takes it."""
    size = len(batch(0, "v", timestamp=1000))           # every batch below is this long
    cfg = LogConfig(index_interval_bytes=size, segment_index_bytes=24)   # time index: 2 slots, full at 1 entry
    seg = LogSegment.open(str(tmp_path), 0, cfg, now_ms=0)
    for i in range(4):
        seg.log.append(batch(i, "v", timestamp=1000 + i))
    seg.log.append(batch(4, "w")[:20])                   # a torn tail: recovery walks batch by batch
    result = recover_segment(seg)
    assert (result.bytes_truncated, result.batches, result.valid_bytes) == (20, 4, 4 * size)
    assert _entries(seg.offset_index) == [(2, 2 * size)]
    assert _entries(seg.time_index) == [(1002, 2), (1003, 3)]
    assert seg.time_index.entries == seg.time_index.max_entries
    seg.close()
