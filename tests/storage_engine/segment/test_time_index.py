"""Tests of the ``.timeindex`` file, after Kafka's TimeIndexTest plus the cross-process and corruption cases."""
from __future__ import annotations

import bisect
import json
import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import REPO as REPO_PATH
from storage_engine.errors import (
    ConfigError,
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    StorageIOError,
)
from storage_engine.segment.time_index import NO_TIMESTAMP, TimeIndex

pytestmark = pytest.mark.unit

BASE_OFFSET = 45
MAX_ENTRIES = 30
REPO = str(REPO_PATH)


@pytest.fixture
def index_path(tmp_path):
    return str(tmp_path / "00000000000000000045.timeindex")


@pytest.fixture
def idx(index_path):
    index = TimeIndex(index_path, BASE_OFFSET, MAX_ENTRIES * 12)
    yield index
    index.close()


def append_entries(index, n):
    for i in range(1, n + 1):
        index.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def write_raw(path, entries):
    with open(path, "wb") as f:
        for timestamp, relative in entries:
            f.write(struct.pack(">qi", timestamp, relative))


# ------------------------------------------------------------------ file layout


@pytest.mark.parametrize("max_index_size, expected", [(30 * 12, 360), (100, 96), (12, 12), (10485760, 10485756)])
def test_new_file_is_preallocated_to_whole_entries(tmp_path, max_index_size, expected):
    path = str(tmp_path / "0.timeindex")
    index = TimeIndex(path, 0, max_index_size)
    assert os.path.getsize(path) == expected
    assert index.max_entries == expected // 12
    with open(path, "rb") as f:
        assert not any(f.read(4096))
    index.close()
    assert os.path.getsize(path) == 0


def test_default_size_holds_873813_entries(tmp_path):
    index = TimeIndex(str(tmp_path / "0.timeindex"), 0)
    assert index.max_entries == 873813
    index.close()


def test_max_index_size_below_entry_size_is_a_config_error(tmp_path):
    path = str(tmp_path / "0.timeindex")
    with pytest.raises(ConfigError):
        TimeIndex(path, 0, 11)
    assert not os.path.exists(path)


def test_byte_layout_is_big_endian_timestamp_then_relative_offset(idx, index_path):
    idx.maybe_append(1_700_000_000_123, BASE_OFFSET + 7)
    idx.maybe_append(2**63 - 1, BASE_OFFSET + 2**31 - 1)
    idx.flush()
    with open(index_path, "rb") as f:
        raw = f.read(36)
    assert raw == (struct.pack(">qi", 1_700_000_000_123, 7) + struct.pack(">qi", 2**63 - 1, 2**31 - 1)
                   + bytes(12))


# ------------------------------------------------------------------ TimeIndexTest


def test_lookup(idx):
    assert idx.lookup(100) == (-1, BASE_OFFSET)
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.lookup(9) == (-1, BASE_OFFSET)
    assert idx.lookup(25) == (20, 65)
    assert idx.lookup(30) == (30, 75)
    assert idx.lookup(10**12) == (290, 335)


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(0, 2**40),
    steps=st.lists(st.tuples(st.integers(1, 2**40), st.integers(0, 2**16)), max_size=40),
    targets=st.lists(st.integers(-5, 2**46), max_size=40),
)
def test_lookup_equals_a_sorted_floor_query(tmp_path_factory, base, steps, targets):
    path = str(tmp_path_factory.mktemp("tidx") / "x.timeindex")
    # Timestamps start at 1: an entry (0, base) looks like an empty slot to a reader of an
    # untrimmed file (see test_timestamp_zero_at_base_offset_...).
    timestamps, offsets, timestamp, offset = [], [], 0, base
    for timestamp_step, offset_step in steps:
        timestamp, offset = timestamp + timestamp_step, offset + offset_step
        timestamps.append(timestamp)
        offsets.append(offset)
    with TimeIndex(path, base, 64 * 12) as index:
        for t, o in zip(timestamps, offsets):
            index.maybe_append(t, o)
        assert index.entries == len(timestamps)
        for target in targets + timestamps + [t - 1 for t in timestamps]:
            i = bisect.bisect_right(timestamps, target) - 1
            assert index.lookup(target) == ((-1, base) if i < 0 else (timestamps[i], offsets[i]))
        reader = TimeIndex(path, base, writable=False)
        assert reader.entries == len(timestamps)
        assert reader.last_entry == index.last_entry
        reader.close()


def test_entry(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.entry(0) == (10, 55)
    assert idx.entry(1) == (20, 65)
    assert idx.entry(2) == (30, 75)
    assert idx.entry(3) == (40, 85)


def test_entry_overflow(idx):
    with pytest.raises(InvalidOffsetError):
        idx.entry(0)


def test_append(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    with pytest.raises(IndexFullError):
        idx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    idx.maybe_append(10000, 1000, skip_full_check=True)  # the reserved last slot
    assert idx.entries == MAX_ENTRIES and idx.last_entry == (10000, 1000)
    with pytest.raises(IndexFullError):  # no slot left at all
        idx.maybe_append(10001, 1001, skip_full_check=True)
    idx.maybe_append(10000, 1000, skip_full_check=True)  # same entry again: a no-op, even when full


def test_is_full(idx):
    assert not idx.is_full
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.is_full
    assert idx.entries == idx.max_entries - 1


def test_only_larger_timestamps_are_appended(idx):
    idx.maybe_append(NO_TIMESTAMP, BASE_OFFSET + 1)  # message format v0: never indexed
    assert idx.entries == 0
    idx.maybe_append(100, BASE_OFFSET + 1)
    idx.maybe_append(100, BASE_OFFSET + 5)  # equal timestamp: ignored
    assert idx.entries == 1 and idx.last_entry == (100, BASE_OFFSET + 1)
    idx.maybe_append(150, BASE_OFFSET + 1)  # same offset, larger timestamp (roll/close entry)
    assert idx.entries == 2 and idx.last_entry == (150, BASE_OFFSET + 1)


def test_timestamp_going_backwards_is_rejected(idx, index_path):
    idx.maybe_append(100, BASE_OFFSET + 1)
    with pytest.raises(CorruptIndexError) as info:
        idx.maybe_append(99, BASE_OFFSET + 2)
    assert info.value.path == index_path
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(200, BASE_OFFSET)
    assert idx.entries == 1


@pytest.mark.parametrize("offset", [BASE_OFFSET - 1, BASE_OFFSET + 2**31])
def test_append_offset_overflow(idx, offset):
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(5, offset)
    assert idx.entries == 0


def test_truncate(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    idx.reset()
    assert idx.entries == 0 and idx.last_entry == (-1, BASE_OFFSET)

    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate_to(10 + BASE_OFFSET)
    assert idx.entries == 0


def test_truncate_three_cases_by_offset(idx):
    append_entries(idx, 5)  # (10,55) (20,65) (30,75) (40,85) (50,95)
    idx.truncate_to(200)
    assert idx.entries == 5, "past the end: unchanged"
    idx.truncate_to(95)
    assert idx.last_entry == (40, 85), "an entry equal to the offset is removed"
    idx.truncate_to(80)
    assert idx.last_entry == (30, 75), "no entry for the offset: keep those below"
    idx.maybe_append(35, 78)
    assert idx.last_entry == (35, 78)
    idx.truncate_to(50)
    assert idx.entries == 0 and idx.last_entry == (-1, BASE_OFFSET)
    idx.maybe_append(5, 46)


def test_truncate_removes_every_entry_sharing_the_offset(idx):
    idx.maybe_append(10, 50)
    idx.maybe_append(20, 60)
    idx.maybe_append(30, 60)  # same offset, larger timestamp
    idx.maybe_append(40, 70)
    idx.truncate_to(60)
    assert idx.entries == 1 and idx.last_entry == (10, 50)


def test_sanity_check(idx, index_path):
    idx.sanity_check()
    append_entries(idx, 5)
    idx.sanity_check()
    idx.trim_to_valid_size()
    idx.close()
    good = open(index_path, "rb").read()

    def corrupt_with(data):
        with open(index_path, "wb") as f:
            f.write(data)
        index = TimeIndex(index_path, BASE_OFFSET, MAX_ENTRIES * 12)
        try:
            with pytest.raises(CorruptIndexError) as info:
                index.sanity_check()
        finally:
            index.close()
        assert info.value.path == index_path and index_path in str(info.value)
        return info.value

    last = 4 * 12
    # last offset below the base offset
    err = corrupt_with(good[:last] + struct.pack(">qi", 50, -1))
    assert "base offset" in str(err) and err.position == last
    # last timestamp below the first timestamp
    err = corrupt_with(good[:last] + struct.pack(">qi", 9, 50))
    assert "first timestamp" in str(err) and err.position == last
    # length not a multiple of 12
    err = corrupt_with(good[:-1])
    assert err.position == len(good) - 1
    # back to the good bytes: sane again
    with open(index_path, "wb") as f:
        f.write(good)
    with TimeIndex(index_path, BASE_OFFSET) as index:
        index.sanity_check()
        assert index.entries == 5 and index.last_entry == (50, 95)


@pytest.mark.parametrize("entries, bad_slot", [
    ([(10, 1), (30, 2), (20, 3), (40, 4)], 2),   # timestamps go backwards in the middle
    ([(10, 1), (10, 2), (40, 4)], 1),            # repeated timestamp
    ([(10, 1), (20, 5), (30, 3), (40, 6)], 2),   # offsets go backwards
    ([(-5, 1), (20, 5)], 0),                     # negative timestamp
    ([(10, -3), (20, 5)], 0),                    # first offset below the base
])
def test_entries_out_of_order_are_corrupt(index_path, entries, bad_slot):
    write_raw(index_path, entries)
    with TimeIndex(index_path, BASE_OFFSET) as index:
        with pytest.raises(CorruptIndexError) as info:
            index.sanity_check()
        for target in (0, 15, 25, 10**6):
            index.lookup(target)  # nonsense answers, but no crash
    assert info.value.path == index_path and info.value.position == bad_slot * 12


def test_random_bytes_are_corrupt(index_path):
    rng = random.Random(45)
    with open(index_path, "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(50 * 12)))
    with TimeIndex(index_path, BASE_OFFSET) as index:
        with pytest.raises(CorruptIndexError) as info:
            index.sanity_check()
    assert info.value.path == index_path


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400), base=st.integers(0, 2**33),
       targets=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5))
def test_garbage_never_raises_raw_errors(tmp_path_factory, data, base, targets):
    path = str(tmp_path_factory.mktemp("garbage") / "x.timeindex")
    with open(path, "wb") as f:
        f.write(data)
    index = TimeIndex(path, base, 10 * 12)
    try:
        try:
            index.sanity_check()
        except CorruptIndexError as err:
            assert err.path == path
        assert 0 <= index.entries <= len(data) // 12
        for n in range(index.entries):
            index.entry(n)
        for target in targets:
            index.lookup(target)
        index.refresh()
        if targets:
            index.truncate_to(base + targets[0] % 2**32)
        last_timestamp, last_offset = index.last_entry
        try:
            index.maybe_append(min(last_timestamp + 1, 2**63 - 1), last_offset + 1, skip_full_check=True)
        except (IndexFullError, IndexOffsetOverflowError):
            pass
    finally:
        index.close()


def test_resize(idx):
    assert idx.resize(MAX_ENTRIES * 12) is False
    assert idx.resize(MAX_ENTRIES // 2 * 12) is True
    assert idx.resize(MAX_ENTRIES * 2 * 12) is True
    assert idx.max_entries == MAX_ENTRIES * 2


def test_last_entry(idx, index_path):
    assert idx.last_entry == (NO_TIMESTAMP, BASE_OFFSET)
    idx.maybe_append(1, 1 + BASE_OFFSET)
    assert idx.last_entry == (1, BASE_OFFSET + 1)
    idx.close()
    with TimeIndex(index_path, BASE_OFFSET) as reopened:
        assert reopened.last_entry == (1, BASE_OFFSET + 1)
        assert reopened.entries == 1 and reopened.is_full


def test_newly_created_then_resized_to_zero(tmp_path):
    """What the loader does for a missing .timeindex (LogSegment.sanityCheck(timeIndexFileNewlyCreated))."""
    path = str(tmp_path / "0.timeindex")
    index = TimeIndex(path, 0, 12 * 10)
    assert index.resize(0) is True
    assert os.path.getsize(path) == 0 and index.max_entries == 0 and index.is_full
    assert index.lookup(5) == (-1, 0)
    index.sanity_check()
    index.reset()
    assert index.max_entries == 10
    index.maybe_append(7, 3)
    index.close()
    assert os.path.getsize(path) == 12


def test_timestamp_zero_at_base_offset_is_an_empty_slot_only_at_the_end_of_an_untrimmed_file(tmp_path):
    path = str(tmp_path / "0.timeindex")
    write_raw(path, [(0, 0), (5, 2), (9, 4)])  # trimmed: every slot counts, as in Kafka
    with TimeIndex(path, 0) as index:
        assert index.entries == 3 and index.entry(0) == (0, 0)
        index.sanity_check()
    write_raw(path, [(0, 0)] + [(0, 0)] * 3)  # the only entry, untrimmed: looks empty
    with TimeIndex(path, 0) as index:
        assert index.entries == 0 and index.lookup(0) == (-1, 0)


# ------------------------------------------------------------------ another process


_READER = textwrap.dedent("""
    import json, sys
    from storage_engine.segment.time_index import TimeIndex
    idx = TimeIndex(sys.argv[1], int(sys.argv[2]), writable=False)
    for line in sys.stdin:
        idx.refresh()
        print(json.dumps({"entries": [idx.entry(n) for n in range(idx.entries)],
                          "last": idx.last_entry, "lookup": idx.lookup(int(line))}), flush=True)
    idx.close()
""")


@pytest.mark.slow
def test_reader_in_another_process_sees_appends_after_refresh(index_path):
    writer = TimeIndex(index_path, BASE_OFFSET, 64 * 12)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    reader = subprocess.Popen([sys.executable, "-c", _READER, index_path, str(BASE_OFFSET)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(target):
        assert reader.stdin is not None
        reader.stdin.write(f"{target}\n")
        reader.stdin.flush()
        assert reader.stdout is not None
        return json.loads(reader.stdout.readline())

    def expected(n):
        return [[i * 10, i * 10 + BASE_OFFSET] for i in range(1, n + 1)]

    try:
        assert ask(100) == {"entries": [], "last": [-1, BASE_OFFSET], "lookup": [-1, BASE_OFFSET]}
        append_entries(writer, 12)
        answer = ask(55)
        assert answer["entries"] == expected(12)
        assert answer["last"] == [120, 165] and answer["lookup"] == [50, 95]
        writer.truncate_to(BASE_OFFSET + 60)
        assert ask(1000)["entries"] == expected(5)
        writer.maybe_append(70, BASE_OFFSET + 70)
        writer.close()  # trimmed to 6 entries; the reader remaps
        answer = ask(1000)
        assert answer["entries"] == expected(5) + [[70, BASE_OFFSET + 70]]
        assert answer["lookup"] == [70, BASE_OFFSET + 70]
    finally:
        assert reader.stdin is not None
        reader.stdin.close()
        assert reader.wait(timeout=60) == 0
        assert reader.stdout is not None
        reader.stdout.close()


def test_storage_errors_name_the_file(tmp_path, idx):
    missing = str(tmp_path / "missing.timeindex")
    with pytest.raises(StorageIOError) as info:
        TimeIndex(missing, 0, writable=False)
    assert info.value.path == missing
    idx.close()
    with pytest.raises(StorageIOError, match="closed"):
        idx.lookup(0)
