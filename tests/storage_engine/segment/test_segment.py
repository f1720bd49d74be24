"""Tests of one segment (``.log`` + ``.index`` + ``.timeindex``), after Kafka's LogSegmentTest."""
from __future__ import annotations

import os
import random

import pytest

from storage_engine import layout
from storage_engine.errors import SegmentOffsetOverflowError
from storage_engine.segment.file_records import iter_batches
from storage_engine.segment.recovery import recover_segment
from storage_engine.segment.segment import INT32_MAX, LogSegment

from ..helpers import append_batch, batch, open_segment, present, segment_path

pytestmark = pytest.mark.unit


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for b in iter_batches(data) for r in b.records()]


def last_offsets(seg: LogSegment) -> list[int]:
    return [b.last_offset for b in seg.batches()]


@pytest.fixture
def seg40(tmp_path):
    seg = open_segment(tmp_path, 40)
    yield seg
    seg.close()


# ------------------------------------------------------------------ append

def test_append_offset_overflow_rejected(tmp_path):
    """testAppendForLogSegmentOffsetOverflowException: offsets below base or above base + Int.MAX."""
    seg = open_segment(tmp_path, 2**31)
    for bad in (2**31 - 1, 2**31 + INT32_MAX + 1):
        with pytest.raises(SegmentOffsetOverflowError):
            seg.append(bad, -1, bad, batch(bad, "x"))
    assert seg.size == 0
    append_batch(seg, 2**31 + INT32_MAX, "edge")  # the largest representable relative offset
    assert seg.read_next_offset() == 2**31 + INT32_MAX + 1
    seg.close()


# ------------------------------------------------------------------ reads

def test_read_on_empty_segment(seg40):
    assert seg40.read(40, 300) is None


def test_read_before_first_offset(seg40):
    data = append_batch(seg40, 50, "hello", "there", "little", "bee")
    read = seg40.read(41, 300)
    assert read.data == data
    assert offsets_in(read.data) == [50, 51, 52, 53]


def test_read_after_last(seg40):
    append_batch(seg40, 50, "hello", "there")
    assert seg40.read(52, 200) is None


def test_read_from_gap(seg40):
    append_batch(seg40, 50, "hello", "there")
    second = append_batch(seg40, 60, "alpha", "beta")
    read = seg40.read(55, 200)
    assert read.data == second
    assert offsets_in(read.data) == [60, 61]


def test_read_whole_batches_only(seg40):
    first = append_batch(seg40, 50, "hello", "there")
    second = append_batch(seg40, 52, "alpha", "beta")
    # One byte short of both batches: only the first comes back; too small for one: still one (min one).
    assert seg40.read(50, len(first) + len(second) - 1).data == first
    assert seg40.read(50, len(first) + len(second)).data == first + second
    assert seg40.read(50, 1).data == first
    assert seg40.read(50, 1, min_one_message=False).data == b""


def test_read_when_no_max_position(seg40):
    """testReadWhenNoMaxPosition: reads up to the end, a max position of 0 gives nothing, max size 0 nothing."""
    data = append_batch(seg40, 50, "hello", "there")
    assert seg40.read(50, 1000).data == data
    assert seg40.read(50, 1000, max_position=0, min_one_message=False).data == b""
    assert seg40.read(50, 0, min_one_message=False).data == b""


# ------------------------------------------------------------------ truncation

def test_truncate(seg40):
    """testTruncate: truncating to offset + 1 keeps the first of two single-record batches."""
    offset = 40
    for _ in range(30):
        b1 = append_batch(seg40, offset, "hello")
        b2 = append_batch(seg40, offset + 1, "hello")
        assert seg40.read(offset, 10000).data == b1 + b2
        seg40.truncate_to(offset + 1)
        assert seg40.read(offset, 10000).data == b1
        offset += 1


def test_truncate_is_batch_granular(tmp_path):
    seg = open_segment(tmp_path, 0)
    append_batch(seg, 0, "a", "b", "c")
    append_batch(seg, 3, "d", "e", "f")
    append_batch(seg, 6, "g", "h", "i")
    size_before = seg.size
    removed = seg.truncate_to(4)  # 4 lies inside the batch [3, 5]: the whole batch goes
    assert removed == size_before - seg.size > 0
    assert last_offsets(seg) == [2]
    assert seg.read_next_offset() == 3
    seg.close()


def test_truncate_to_gap(tmp_path):
    """shouldTruncateEvenIfOffsetPointsToAGapInTheLog."""
    seg = open_segment(tmp_path, 40)
    append_batch(seg, 40, "hello", "there")
    append_batch(seg, 50, "hello", "there")
    seg.truncate_to(45)
    assert last_offsets(seg) == [41]
    assert seg.read(45, 1000) is None
    seg.close()


def test_truncate_full_resets_roll_clock(tmp_path):
    """testTruncateFull: a segment truncated to empty restarts its create time; indexes not full."""
    seg = open_segment(tmp_path, 40, now_ms=0)
    append_batch(seg, 40, "hello", "there")
    assert seg.time_waited_for_roll(500, -1) == 500
    seg.truncate_to(0, now_ms=500)
    assert seg.size == 0
    assert seg.time_waited_for_roll(500, -1) == 0
    assert not seg.offset_index.is_full and not seg.time_index.is_full
    assert seg.read(0, 1024) is None
    append_batch(seg, 40, "hello", "there")
    assert offsets_in(present(seg.read(40, 1024)).data) == [40, 41]
    seg.close()


def test_truncate_empty_segment_reexpands_indexes(tmp_path):
    """testTruncateEmptySegment: a reopened (trimmed, zero-entry) segment truncated to empty gets room in its
    indexes again, so it is not rolled for a full index; it still rolls when the offset cannot fit."""
    max_segment_ms = 300000
    seg = open_segment(tmp_path, 0, now_ms=0)
    seg.close()
    reopened = open_segment(tmp_path, 0, now_ms=0, file_already_exists=True)
    assert reopened.offset_index.length == 0 and reopened.time_index.length == 0
    assert reopened.offset_index.is_full  # a trimmed empty index has no free slot until resized

    reopened.truncate_to(57, now_ms=500)
    assert reopened.time_waited_for_roll(500, -1) == 0
    assert not reopened.time_index.is_full and not reopened.offset_index.is_full

    def should_roll(now, max_offset=100):
        return reopened.should_roll(segment_bytes=INT32_MAX, max_segment_ms=max_segment_ms, messages_size=1024,
                                    max_timestamp=-1, max_offset=max_offset, now_ms=now)

    assert should_roll(500) is None
    # An empty segment is never rolled for time, even when segment.ms passed ...
    now = 500 + max_segment_ms + 1
    assert reopened.time_waited_for_roll(now, -1) == max_segment_ms + 1
    assert should_roll(now) is None
    # ... but it is when the next offset does not fit.
    assert should_roll(now, max_offset=INT32_MAX + 200) == "offset-overflow"
    reopened.close()


def test_reload_largest_timestamp_after_truncation(tmp_path):
    """testReloadLargestTimestampAndNextOffsetAfterTruncation."""
    seg = open_segment(tmp_path, 40)
    for i in range(10):
        append_batch(seg, 40 + i, f"msg{i}", timestamp=1000 + i)
    assert seg.max_timestamp_so_far == 1009
    assert seg.offset_of_max_timestamp_so_far == 49
    seg.truncate_to(45)
    assert seg.max_timestamp_so_far == 1004
    assert seg.offset_of_max_timestamp_so_far == 44
    assert seg.read_next_offset() == 45
    assert seg.largest_timestamp() == 1004
    seg.truncate_to(40)
    assert seg.size == 0
    assert seg.read_next_offset() == 40
    seg.close()


# ------------------------------------------------------------------ timestamps and next offset

def test_find_offset_by_timestamp(tmp_path):
    """testFindOffsetByTimestamp: an index entry every other append (interval = record size * 2 - 1)."""
    size = len(batch(0, "msg00", timestamp=0))
    seg = open_segment(tmp_path, 40, index_interval_bytes=size * 2 - 1)
    for i in range(40, 50):
        append_batch(seg, i, f"msg{i}", timestamp=i * 10)
    assert seg.time_index.entries > 0  # some timestamps are indexed, some are not
    assert seg.largest_timestamp() == 490
    # an indexed timestamp
    assert present(seg.find_offset_by_timestamp(420, 0))[1] == 42
    assert present(seg.find_offset_by_timestamp(421, 0))[1] == 43
    # an un-indexed timestamp
    assert present(seg.find_offset_by_timestamp(430, 0))[1] == 43
    assert present(seg.find_offset_by_timestamp(431, 0))[1] == 44
    # beyond the last timestamp
    assert seg.find_offset_by_timestamp(491, 0) is None
    # before the first indexed timestamp, before the first timestamp
    assert present(seg.find_offset_by_timestamp(401, 0))[1] == 41
    assert seg.find_offset_by_timestamp(399, 0) == (400, 40)
    # a starting offset skips earlier records
    assert present(seg.find_offset_by_timestamp(399, 45))[1] == 45
    seg.close()


def test_next_offset_calculation(seg40):
    """testNextOffsetCalculation."""
    assert seg40.read_next_offset() == 40
    append_batch(seg40, 50, "hello", "there", "you")
    assert seg40.read_next_offset() == 53


def test_rolling_timestamp_is_first_batch_max_timestamp(tmp_path):
    """testGetFirstBatchTimestamp: the roll clock runs from the first batch's max timestamp."""
    seg = open_segment(tmp_path, 0, now_ms=0)
    assert seg.first_batch_timestamp() == -1
    append_batch(seg, 0, "a", timestamp=1000)
    append_batch(seg, 1, "b", timestamp=5000)
    assert seg.first_batch_timestamp() == 1000
    assert seg.time_waited_for_roll(now_ms=10**9, message_timestamp=3000) == 2000
    seg.close()
    reopened = open_segment(tmp_path, 0, file_already_exists=True, now_ms=10**9)
    assert reopened.time_waited_for_roll(now_ms=10**9, message_timestamp=3000) == 2000
    reopened.close()


def test_roll_clock_asked_while_empty_then_appended(tmp_path):
    """Asking an empty segment how long it waited must not pin the roll clock to wall time: once a batch
    with a timestamp is appended, the clock runs from that batch (Kafka sets it at position 0)."""
    seg = open_segment(tmp_path, 0, now_ms=0)
    assert seg.time_waited_for_roll(100, -1) == 100
    append_batch(seg, 0, "a", timestamp=7000)
    assert seg.time_waited_for_roll(now_ms=100, message_timestamp=7500) == 500
    seg.close()


def test_change_file_suffixes(tmp_path):
    """testChangeFileSuffixes: every file renamed; a missing index file is tolerated and not created."""
    seg = open_segment(tmp_path, 40)
    append_batch(seg, 40, "hello")
    log_path, index_path, time_path = seg.log.path, seg.offset_index.path, seg.time_index.path
    os.remove(time_path)
    seg.change_file_suffixes("", layout.DELETED_SUFFIX)
    assert seg.log.path == log_path + ".deleted"
    assert seg.offset_index.path == index_path + ".deleted"
    assert seg.time_index.path == time_path + ".deleted"
    assert os.path.exists(log_path + ".deleted") and not os.path.exists(log_path)
    assert os.path.exists(index_path + ".deleted") and not os.path.exists(index_path)
    assert not os.path.exists(time_path + ".deleted") and not os.path.exists(time_path)
    # the segment still reads through its renamed files
    assert offsets_in(present(seg.read(40, 1000)).data) == [40]
    seg.change_file_suffixes(layout.DELETED_SUFFIX, "")
    assert os.path.exists(log_path) and os.path.exists(index_path)
    seg.close()


# ------------------------------------------------------------------ recovery

def write_nonsense(path: str, position: int, size: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(rng.randrange(256) for _ in range(size)))


def test_recovery_fixes_corrupt_index(tmp_path):
    """testRecoveryFixesCorruptIndex."""
    seg = open_segment(tmp_path, 0)
    for i in range(100):
        append_batch(seg, i, str(i))
    entries = seg.offset_index.entries
    write_nonsense(seg.offset_index.path, 5, seg.offset_index.length - 5)
    res = recover_segment(seg)
    assert res.bytes_truncated == 0 and res.batches == 100
    assert seg.offset_index.entries == entries
    seg.offset_index.sanity_check()
    for i in range(100):
        assert offsets_in(present(seg.read(i, 1)).data)[0] == i
    seg.close()


def test_recovery_fixes_corrupt_time_index(tmp_path):
    """testRecoveryFixesCorruptTimeIndex."""
    seg = open_segment(tmp_path, 0, max_index_size=4096)
    for i in range(100):
        append_batch(seg, i, str(i), timestamp=i * 10)
    write_nonsense(seg.time_index.path, 5, seg.time_index.length - 5)
    recover_segment(seg)
    seg.time_index.sanity_check()
    for i in range(100):
        assert present(seg.find_offset_by_timestamp(i * 10, 0))[1] == i
        if i < 99:
            assert present(seg.find_offset_by_timestamp(i * 10 + 1, 0))[1] == i + 1
    seg.close()


def test_recovery_truncates_at_flipped_byte(tmp_path):
    """A byte flipped inside the CRC-covered part of a middle batch: recovery keeps the batches before it,
    truncates the rest and reports how many bytes it removed."""
    seg = open_segment(tmp_path, 0)
    for i in range(20):
        append_batch(seg, i, f"value-{i}")
    size = seg.size
    _, position, _ = present(seg.log.search_for_offset_with_size(9, 0))
    path = seg.log.path
    with open(path, "r+b") as f:
        f.seek(position + 70)  # inside the record payload of the batch holding offset 9
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    res = recover_segment(seg)
    assert res.bytes_truncated == size - position
    assert res.valid_bytes == position
    assert res.error is not None and "crc" in res.error
    assert last_offsets(seg) == list(range(9))
    assert os.path.getsize(path) == position
    assert seg.read_next_offset() == 9
    seg.offset_index.sanity_check()
    seg.close()


def test_recovery_with_corrupt_message(tmp_path):
    """testRecoveryWithCorruptMessage: nonsense from somewhere inside a random batch to the end."""
    rng = random.Random(42)
    for attempt in range(10):
        d = tmp_path / str(attempt)
        d.mkdir()
        seg = open_segment(d, 0)
        for i in range(20):
            append_batch(seg, i, str(i))
        corrupt_from = rng.randrange(20)
        _, position, _ = present(seg.log.search_for_offset_with_size(corrupt_from, 0))
        position += rng.randrange(15)
        write_nonsense(seg.log.path, position, seg.size - position, seed=attempt)
        recover_segment(seg)
        assert last_offsets(seg) == list(range(corrupt_from))
        seg.close()


def test_recovery_rebuilds_sparse_index_like_appends(tmp_path):
    """The index recovery rebuilds is the one appends built (same sparse rule)."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=150)
    for i in range(50):
        append_batch(seg, i, "v" * (i % 7 + 1), timestamp=1000 + i)
    expected = [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)]
    expected_time = [seg.time_index.entry(n) for n in range(seg.time_index.entries)]
    recover_segment(seg)
    assert [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)] == expected
    # recovery adds the final (max timestamp, offset) entry that roll/close would add
    assert [seg.time_index.entry(n) for n in range(seg.time_index.entries)][:len(expected_time)] == expected_time
    assert seg.time_index.last_entry == (1049, 49)
    seg.close()


# ------------------------------------------------------------------ the sparse index rule

def test_sparse_index_rule(tmp_path):
    """testIndexResizingAtTruncation's arithmetic: 10 single-record appends with index.interval.bytes =
    record size - 1 give 9 entries (the first append of a segment never creates one); an entry maps the last
    offset of an append to where the append starts."""
    size = len(batch(0, "test", timestamp=0))
    seg = open_segment(tmp_path, 0, index_interval_bytes=size - 1, max_index_size=10 * 1024 * 1024)
    for i in range(10):
        append_batch(seg, i, "test", timestamp=1000 + i)
    assert seg.offset_index.entries == 9
    assert seg.time_index.entries == 9
    assert [seg.offset_index.entry(n) for n in range(9)] == [(i, i * size) for i in range(1, 10)]
    assert [seg.time_index.entry(n) for n in range(9)] == [(1000 + i, i) for i in range(1, 10)]
    seg.on_become_inactive_segment()
    assert seg.offset_index.max_entries == 9 and seg.time_index.max_entries == 9
    assert os.path.getsize(seg.offset_index.path) == 9 * 8
    assert os.path.getsize(seg.time_index.path) == 9 * 12
    seg.close()


# ------------------------------------------------------------------ preallocation

PREALLOCATE = 64 * 1024 * 1024


def test_preallocated_segment_append_and_read(tmp_path):
    """testCreateWithInitFileSizeAppendMessage."""
    seg = open_segment(tmp_path, 40, preallocate_bytes=PREALLOCATE)
    assert os.path.getsize(seg.log.path) == PREALLOCATE
    assert seg.size == 0
    append_batch(seg, 50, "hello", "there")
    second = append_batch(seg, 60, "alpha", "beta")
    assert present(seg.read(55, 200)).data == second
    seg.close()


def test_preallocated_segment_trimmed_on_close(tmp_path):
    """testCreateWithInitFileSizeClearShutdown: close trims the file to its logical size, reopen sees it all."""
    seg = open_segment(tmp_path, 40, preallocate_bytes=PREALLOCATE)
    append_batch(seg, 50, "hello", "there")
    second = append_batch(seg, 60, "alpha", "beta")
    size = seg.size
    assert os.path.getsize(seg.log.path) == PREALLOCATE
    seg.close()
    assert os.path.getsize(segment_path(tmp_path, 40)) == size
    reopened = open_segment(tmp_path, 40, file_already_exists=True, preallocate_bytes=PREALLOCATE)
    assert reopened.size == size == os.path.getsize(reopened.log.path)
    assert present(reopened.read(55, 200)).data == second
    assert reopened.read_next_offset() == 62
    reopened.close()


def test_preallocated_segment_trimmed_on_roll(tmp_path):
    seg = open_segment(tmp_path, 0, preallocate_bytes=PREALLOCATE)
    append_batch(seg, 0, "hello", "there")
    seg.on_become_inactive_segment()
    assert os.path.getsize(seg.log.path) == seg.size
    assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
    assert os.path.getsize(seg.time_index.path) == seg.time_index.entries * 12
    seg.close()
