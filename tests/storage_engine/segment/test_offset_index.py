"""Tests of the ``.index`` file, after Kafka's OffsetIndexTest plus the cross-process and corruption cases."""
from __future__ import annotations

import bisect
import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
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
from storage_engine.segment.offset_index import OffsetIndex

pytestmark = pytest.mark.unit

BASE_OFFSET = 45
REPO = str(REPO_PATH)


@pytest.fixture
def index_path(tmp_path):
    return str(tmp_path / "00000000000000000045.index")


@pytest.fixture
def index(index_path):
    idx = OffsetIndex(index_path, BASE_OFFSET, 30 * 8)
    yield idx
    idx.close()


def monotonic_seq(rng: random.Random, base: int, length: int) -> list[int]:
    seq, last = [], base
    for _ in range(length):
        last += rng.randint(1, 15)
        seq.append(last)
    return seq


def write_raw(path, entries, fmt=">ii") -> None:
    with open(path, "wb") as f:
        for e in entries:
            f.write(struct.pack(fmt, *e))


# ------------------------------------------------------------------ file layout


@pytest.mark.parametrize("max_index_size, expected", [(30 * 8, 240), (100, 96), (8, 8), (10485760, 10485760)])
def test_new_file_is_preallocated_to_whole_entries(tmp_path, max_index_size, expected):
    path = str(tmp_path / "0.index")
    idx = OffsetIndex(path, 0, max_index_size)
    assert os.path.getsize(path) == expected
    assert idx.max_entries == expected // 8
    assert idx.entries == 0 and idx.size_in_bytes == 0
    with open(path, "rb") as f:
        assert not any(f.read(4096))
    idx.close()
    assert os.path.getsize(path) == 0  # close trims to the valid size


def test_max_index_size_below_entry_size_is_a_config_error(tmp_path):
    path = str(tmp_path / "0.index")
    with pytest.raises(ConfigError, match="7"):
        OffsetIndex(path, 0, 7)
    assert not os.path.exists(path)


def test_byte_layout_is_big_endian_relative_offset_then_position(index, index_path):
    index.append(BASE_OFFSET + 5, 1234)
    index.append(BASE_OFFSET + 2**31 - 1, 2**31 - 1)
    index.flush()
    with open(index_path, "rb") as f:
        raw = f.read(24)
    assert raw == struct.pack(">ii", 5, 1234) + struct.pack(">ii", 2**31 - 1, 2**31 - 1) + bytes(8)


def test_existing_file_written_elsewhere_is_read(tmp_path):
    path = str(tmp_path / "0.index")
    write_raw(path, [(3, 100), (7, 250), (12, 900)])
    idx = OffsetIndex(path, 1000)
    assert idx.entries == 3 and idx.max_entries == 3 and idx.is_full
    assert idx.last_offset == 1012
    assert idx.lookup(1008) == (1007, 250)
    idx.sanity_check()
    idx.close()


# ------------------------------------------------------------------ lookups (OffsetIndexTest)


def test_random_lookup_like_kafka(index):
    rng = random.Random(20241025)
    assert index.lookup(92) == (BASE_OFFSET, 0)
    offsets = monotonic_seq(rng, BASE_OFFSET + 1, index.max_entries)
    positions = monotonic_seq(rng, 0, index.max_entries)
    for offset, position in zip(offsets, positions):
        index.append(offset, position)
    for offset, position in zip(offsets, positions):
        assert index.lookup(offset) == (offset, position)
    targets = list(range(BASE_OFFSET, offsets[-1]))
    rng.shuffle(targets)
    for target in targets[:30]:
        i = bisect.bisect_right(offsets, target) - 1
        assert index.lookup(target) == ((BASE_OFFSET, 0) if i < 0 else (offsets[i], positions[i]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.integers(0, 2**40),
    gaps=st.lists(st.tuples(st.integers(1, 2**20), st.integers(1, 2**16)), max_size=40),
    targets=st.lists(st.integers(-10, 2**26), max_size=40),
)
def test_lookup_equals_a_sorted_floor_query(tmp_path_factory, base, gaps, targets):
    path = str(tmp_path_factory.mktemp("idx") / "x.index")
    offsets, positions, offset, position = [], [], base, 0
    for offset_gap, position_gap in gaps:
        offset, position = offset + offset_gap, position + position_gap
        offsets.append(offset)
        positions.append(position)
    with OffsetIndex(path, base, 64 * 8) as idx:
        for o, p in zip(offsets, positions):
            idx.append(o, p)
        for target in [base + t for t in targets] + offsets + [o - 1 for o in offsets]:
            i = bisect.bisect_right(offsets, target) - 1
            expected = (base, 0) if i < 0 else (offsets[i], positions[i])
            assert idx.lookup(target) == expected
        # the same answers from a second handle that counts entries from the untrimmed file
        reader = OffsetIndex(path, base, writable=False)
        assert reader.entries == len(offsets)
        for target in offsets:
            assert reader.lookup(target) == idx.lookup(target)
        reader.close()


def test_lookup_extreme_cases(index):
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET + index.max_entries) == (BASE_OFFSET + index.max_entries, index.max_entries - 1)
    assert index.lookup(BASE_OFFSET - 1) == (BASE_OFFSET, 0)
    assert index.lookup(2**63) == (BASE_OFFSET + index.max_entries, index.max_entries - 1)


def test_entry(index):
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == (BASE_OFFSET + i, i)


@pytest.mark.parametrize("n", [0, -1, 1])
def test_entry_out_of_range(index, n):
    with pytest.raises(InvalidOffsetError):
        index.entry(n)


def test_fetch_upper_bound_offset(index):
    first, second, third, fourth = (BASE_OFFSET, 0), (BASE_OFFSET + 1, 10), (BASE_OFFSET + 2, 23), (BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first[1], 5) is None
    for offset, position in (first, second, third, fourth):
        index.append(offset, position)
    assert index.fetch_upper_bound_offset(first[1], 5) == second
    assert index.fetch_upper_bound_offset(first[1], 10) == second
    assert index.fetch_upper_bound_offset(first[1], 23) == third
    assert index.fetch_upper_bound_offset(first[1], 22) == third
    assert index.fetch_upper_bound_offset(second[1], 24) == fourth
    assert index.fetch_upper_bound_offset(fourth[1], 1) is None
    assert index.fetch_upper_bound_offset(first[1], 200) is None
    assert index.fetch_upper_bound_offset(second[1], 200) is None


# ------------------------------------------------------------------ appends


def test_append_too_many(index):
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full
    with pytest.raises(IndexFullError):
        index.append(BASE_OFFSET + index.max_entries + 1, 1)


def test_append_out_of_order(index):
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)  # equal is out of order too
    assert index.entries == 1


@pytest.mark.parametrize("offset", [BASE_OFFSET - 1, BASE_OFFSET + 2**31, 0])
def test_append_offset_overflow(index, offset):
    with pytest.raises(IndexOffsetOverflowError):
        index.append(offset, 0)
    assert index.entries == 0


@pytest.mark.parametrize("position", [-1, 2**31])
def test_append_position_out_of_int32(index, position):
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET + 1, position)
    assert index.entries == 0


# ------------------------------------------------------------------ reopen, truncate, resize


def test_reopen(index, index_path):
    first, second = (51, 0), (52, 1)
    index.append(*first)
    index.append(*second)
    index.close()
    assert os.path.getsize(index_path) == 16
    reopened = OffsetIndex(index_path, BASE_OFFSET)
    assert reopened.lookup(first[0]) == first
    assert reopened.lookup(second[0]) == second
    assert reopened.last_offset == second[0]
    assert reopened.entries == 2
    with pytest.raises(IndexFullError):  # a trimmed index is full until it is resized
        reopened.append(53, 1)
    reopened.close()
    read_only = OffsetIndex(index_path, BASE_OFFSET, writable=False)
    assert read_only.entries == 2 and read_only.last_offset == 52
    with pytest.raises(IndexFullError):
        read_only.append(53, 1)
    read_only.close()
    assert os.path.getsize(index_path) == 16


def test_close_without_trim_keeps_the_preallocated_tail(index, index_path):
    index.append(BASE_OFFSET + 1, 10)
    index.close(trim=False)
    assert os.path.getsize(index_path) == 240
    with OffsetIndex(index_path, BASE_OFFSET, 30 * 8) as reopened:
        assert reopened.entries == 1 and reopened.max_entries == 30
        reopened.append(BASE_OFFSET + 2, 20)
    assert os.path.getsize(index_path) == 16


def test_read_only_index_refuses_writes(index, index_path):
    index.append(50, 10)
    reader = OffsetIndex(index_path, BASE_OFFSET, writable=False)
    assert reader.entries == 1
    with pytest.raises(StorageIOError, match="read-only"):
        reader.append(60, 20)
    with pytest.raises(StorageIOError, match="read-only"):
        reader.resize(8)
    with pytest.raises(StorageIOError, match="read-only"):
        reader.truncate_to(BASE_OFFSET)
    reader.close()
    assert os.path.getsize(index_path) == 240  # a reader's close never trims


def test_reopen_untrimmed_counts_only_written_entries(index, index_path):
    for i in range(1, 8):
        index.append(BASE_OFFSET + i * 3, i * 100)
    second = OffsetIndex(index_path, BASE_OFFSET, 30 * 8)
    assert second.entries == 7 and second.max_entries == 30
    assert second.last_offset == BASE_OFFSET + 21
    second.sanity_check()
    second.close()  # trims the file to the 7 entries it counted
    assert os.path.getsize(index_path) == 7 * 8


def test_truncate(tmp_path):
    with OffsetIndex(str(tmp_path / "0.index"), 0, 10 * 8) as idx:
        idx.reset()
        for i in range(1, 10):
            idx.append(i, i)

        idx.truncate_to(12)
        assert idx.lookup(10) == (9, 9), "unchanged by truncate past the end"
        assert idx.last_offset == 9

        idx.append(10, 10)
        idx.truncate_to(10)
        assert idx.lookup(10) == (9, 9), "an entry equal to the offset is removed"
        assert idx.last_offset == 9
        idx.append(10, 10)

        idx.truncate_to(9)
        assert idx.lookup(10) == (8, 8)
        assert idx.last_offset == 8
        idx.append(9, 9)

        idx.truncate_to(5)
        assert idx.lookup(10) == (4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)

        idx.truncate_to(0)
        assert idx.entries == 0 and idx.last_offset == 0
        idx.append(1, 1)

        idx.reset()
        assert idx.entries == 0, "full truncation leaves no entries"
        idx.append(0, 0)


def test_truncate_between_sparse_entries(tmp_path):
    with OffsetIndex(str(tmp_path / "100.index"), 100, 10 * 8) as idx:
        for offset in (110, 120, 130):
            idx.append(offset, offset * 10)
        idx.truncate_to(125)  # no entry for 125: keep everything <= 120
        assert idx.entries == 2 and idx.last_offset == 120
        idx.truncate_to(105)  # no entry <= 105: everything goes
        assert idx.entries == 0 and idx.last_offset == 100


def test_truncate_zeroes_dropped_slots(index, index_path):
    for i in range(1, 11):
        index.append(BASE_OFFSET + i, i * 10)
    index.truncate_to(BASE_OFFSET + 4)
    index.flush()
    with open(index_path, "rb") as f:
        raw = f.read()
    assert raw[:24] == b"".join(struct.pack(">ii", i, i * 10) for i in (1, 2, 3))
    assert not any(raw[24:])
    reader = OffsetIndex(index_path, BASE_OFFSET, writable=False)
    assert reader.entries == 3 and reader.last_offset == BASE_OFFSET + 3
    reader.close()


def test_sanity_last_offset_equal_to_base_offset(tmp_path):
    """Kafka's testSanityLastOffsetEqualToBaseOffset: an index whose last entry is at the base offset (relative
    offset 0) holds that entry and is sane; only a last offset below the base offset is corrupt."""
    base = 20
    with OffsetIndex(str(tmp_path / "20.index"), base, 10 * 8) as idx:
        idx.append(base, 0)
        assert idx.entries == 1 and idx.entry(0) == (base, 0)
        assert idx.last_offset == base
        idx.sanity_check()
        assert idx.lookup(base + 3) == (base, 0)
        with pytest.raises(InvalidOffsetError, match="no larger than the last offset appended"):
            idx.append(base, 8)          # the entry is there: the base offset again is refused
        idx.append(base + 1, 8)
        assert idx.entries == 2 and idx.last_offset == base + 1
        idx.sanity_check()


def test_resize_and_trim(index, index_path):
    assert index.resize(30 * 8) is False
    assert index.resize(15 * 8 + 5) is True  # rounded down to whole entries
    assert os.path.getsize(index_path) == 120 and index.max_entries == 15
    for i in range(1, 5):
        index.append(BASE_OFFSET + i, i)
    assert index.resize(60 * 8) is True
    assert index.max_entries == 60 and index.entries == 4
    assert index.lookup(BASE_OFFSET + 3) == (BASE_OFFSET + 3, 3)
    index.trim_to_valid_size()
    assert os.path.getsize(index_path) == 32 and index.is_full
    index.trim_to_valid_size()  # idempotent
    assert index.resize(16) is True  # shrinking below the entries drops the ones that no longer fit
    assert index.entries == 2 and index.last_offset == BASE_OFFSET + 2
    with pytest.raises(ConfigError):
        index.resize(-8)


def test_reset_drops_entries_and_regrows(index, index_path):
    for i in range(1, 6):
        index.append(BASE_OFFSET + i, i)
    index.trim_to_valid_size()
    assert os.path.getsize(index_path) == 40
    index.reset()
    assert index.entries == 0 and index.last_offset == BASE_OFFSET and index.max_entries == 30
    assert os.path.getsize(index_path) == 240
    with open(index_path, "rb") as f:
        assert not any(f.read())
    index.append(BASE_OFFSET + 1, 7)


def test_empty_existing_file(tmp_path):
    path = str(tmp_path / "0.index")
    open(path, "wb").close()
    idx = OffsetIndex(path, 7, 10 * 8)
    assert idx.entries == 0 and idx.max_entries == 0 and idx.is_full
    assert idx.lookup(100) == (7, 0)
    assert idx.fetch_upper_bound_offset(0, 1) is None
    idx.truncate_to(0)
    idx.refresh()
    idx.sanity_check()
    idx.flush()
    with pytest.raises(IndexFullError):
        idx.append(8, 1)
    idx.reset()
    assert idx.max_entries == 10
    idx.append(8, 1)
    idx.close()
    reader = OffsetIndex(path, 7, writable=False)
    assert reader.entries == 1 and reader.entry(0) == (8, 1)
    reader.close()


# ------------------------------------------------------------------ corruption


def assert_corrupt(path, base=BASE_OFFSET, **kwargs) -> CorruptIndexError:
    idx = OffsetIndex(path, base, **kwargs)
    try:
        with pytest.raises(CorruptIndexError) as info:
            idx.sanity_check()
    finally:
        idx.close()
    assert info.value.path == path and path in str(info.value)
    return info.value


def test_last_offset_below_base_is_corrupt(index_path):
    write_raw(index_path, [(1, 10), (-1, 20)])
    err = assert_corrupt(index_path)
    assert "less than the base offset" in str(err) and err.position == 8


def test_length_not_a_multiple_of_entry_size_is_corrupt(index_path):
    with open(index_path, "wb") as f:
        f.write(struct.pack(">ii", 1, 10) + struct.pack(">ii", 2, 20) + b"\x01\x02\x03")
    err = assert_corrupt(index_path)
    assert err.position == 19
    idx = OffsetIndex(index_path, BASE_OFFSET)
    assert idx.entries == 2 and idx.lookup(BASE_OFFSET + 5) == (BASE_OFFSET + 2, 20)
    idx.close()


@pytest.mark.parametrize("entries, bad_slot", [
    ([(1, 10), (5, 20), (3, 30), (9, 40)], 2),     # offsets go backwards in the middle
    ([(1, 10), (5, 20), (5, 30)], 2),              # repeated offset
    ([(1, 10), (5, 30), (9, 20)], 2),              # positions go backwards
    ([(-4, 10), (5, 30), (9, 40)], 0),             # first entry below the base offset
    ([(1, -10), (5, 30)], 0),                      # negative position
])
def test_entries_out_of_order_are_corrupt(index_path, entries, bad_slot):
    write_raw(index_path, entries)
    err = assert_corrupt(index_path)
    assert err.position == bad_slot * 8


def test_random_bytes_are_corrupt(index_path):
    rng = random.Random(44)
    with open(index_path, "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(64 * 8)))
    assert_corrupt(index_path)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400), base=st.integers(0, 2**33),
       targets=st.lists(st.integers(-(2**34), 2**34), max_size=5))
def test_garbage_never_raises_raw_errors(tmp_path_factory, data, base, targets):
    path = str(tmp_path_factory.mktemp("garbage") / "x.index")
    with open(path, "wb") as f:
        f.write(data)
    idx = OffsetIndex(path, base, 10 * 8)
    try:
        try:
            idx.sanity_check()
        except CorruptIndexError as err:
            assert err.path == path
        assert 0 <= idx.entries <= len(data) // 8
        for n in range(idx.entries):
            idx.entry(n)
        for target in targets:
            idx.lookup(base + target)
            idx.fetch_upper_bound_offset(target, 10)
        idx.last_offset
        idx.refresh()
        if targets:
            idx.truncate_to(base + targets[0])
        try:
            idx.append(idx.last_offset + 1, 2**31 - 1)
        except (IndexFullError, IndexOffsetOverflowError):
            pass
    finally:
        idx.close()


def test_garbage_decreasing_file_lookup_does_not_crash(index_path):
    write_raw(index_path, [(90, 900), (50, 500), (70, 100), (10, 5)])
    idx = OffsetIndex(index_path, BASE_OFFSET)
    for target in range(BASE_OFFSET - 5, BASE_OFFSET + 100, 7):
        offset, position = idx.lookup(target)
        assert isinstance(offset, int) and isinstance(position, int)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close()


# ------------------------------------------------------------------ file operations and errors


def test_flush_rename_and_delete(index, index_path, tmp_path):
    index.append(BASE_OFFSET + 1, 10)
    index.flush()
    new_path = index_path + ".deleted"
    index.rename_to(new_path)
    assert index.path == new_path and os.path.exists(new_path) and not os.path.exists(index_path)
    index.append(BASE_OFFSET + 2, 20)  # still mapped: renaming does not disturb the mapping
    assert index.delete_if_exists() is True
    assert not os.path.exists(new_path)
    assert index.delete_if_exists() is False


def test_rename_tolerates_a_missing_file(index, index_path):
    os.remove(index_path)
    index.rename_to(index_path + ".swap")
    assert index.path == index_path + ".swap"
    assert not os.path.exists(index.path)


def test_closed_index_raises_storage_error(index):
    index.append(BASE_OFFSET + 1, 10)
    index.close()
    index.close()  # twice is fine
    with pytest.raises(StorageIOError, match="closed"):
        index.lookup(BASE_OFFSET)
    with pytest.raises(StorageIOError, match="closed"):
        index.append(BASE_OFFSET + 2, 20)


def test_open_errors_are_storage_io_errors(tmp_path):
    missing_dir = str(tmp_path / "nope" / "0.index")
    with pytest.raises(StorageIOError) as info:
        OffsetIndex(missing_dir, 0)
    assert info.value.path == missing_dir
    missing = str(tmp_path / "missing.index")
    with pytest.raises(StorageIOError):
        OffsetIndex(missing, 0, writable=False)  # readers never create files
    assert not os.path.exists(missing)


# ------------------------------------------------------------------ another process


_READER = textwrap.dedent("""
    import json, sys
    from storage_engine.segment.offset_index import OffsetIndex
    path, base, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    idx = OffsetIndex(path, base, writable=False)
    if mode == "commands":
        print(json.dumps([idx.entry(n) for n in range(idx.entries)]), flush=True)
        for line in sys.stdin:
            idx.refresh()
            print(json.dumps({"entries": [idx.entry(n) for n in range(idx.entries)],
                              "lookup": idx.lookup(int(line)), "length": idx.length}), flush=True)
    else:  # race: refresh until the expected count, recording (count, last entry) at each refresh
        expected = int(mode)
        print("ready", flush=True)
        seen = []
        while idx.entries < expected:
            idx.refresh()
            seen.append([idx.entries, idx.entry(idx.entries - 1) if idx.entries else None])
        print(json.dumps({"seen": seen, "entries": [idx.entry(n) for n in range(idx.entries)]}), flush=True)
    idx.close()
""")


def start_reader(path, base, mode):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", _READER, path, str(base), mode], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def expected_entry(i):
    return [BASE_OFFSET + 3 * (i + 1), 100 * (i + 1)]


@pytest.mark.slow
def test_reader_in_another_process_sees_appends_after_refresh(index_path):
    import json

    writer = OffsetIndex(index_path, BASE_OFFSET, 64 * 8)
    for i in range(3):
        writer.append(*expected_entry(i))
    reader = start_reader(index_path, BASE_OFFSET, "commands")
    try:
        assert json.loads(reader.stdout.readline()) == [expected_entry(i) for i in range(3)]

        def ask(target):
            reader.stdin.write(f"{target}\n")
            reader.stdin.flush()
            return json.loads(reader.stdout.readline())

        for i in range(3, 20):
            writer.append(*expected_entry(i))
        answer = ask(BASE_OFFSET + 31)
        assert answer["entries"] == [expected_entry(i) for i in range(20)]
        assert answer["lookup"] == expected_entry(9)
        assert answer["length"] == 64 * 8

        writer.truncate_to(BASE_OFFSET + 3 * 11)  # keeps entries 0..9
        assert ask(BASE_OFFSET + 100)["entries"] == [expected_entry(i) for i in range(10)]

        writer.close()  # trim: the reader remaps to the shorter file
        answer = ask(BASE_OFFSET + 100)
        assert answer["entries"] == [expected_entry(i) for i in range(10)]
        assert answer["length"] == 80
    finally:
        reader.stdin.close()
        assert reader.wait(timeout=60) == 0
        reader.stdout.close()


@pytest.mark.slow
def test_reader_racing_the_writer_only_ever_sees_written_prefixes(index_path):
    import json

    count = 5000
    writer = OffsetIndex(index_path, BASE_OFFSET, count * 8)
    reader = start_reader(index_path, BASE_OFFSET, str(count))
    try:
        assert reader.stdout.readline().strip() == "ready"
        for i in range(count):
            writer.append(*expected_entry(i))
        report = json.loads(reader.stdout.readline())
    finally:
        reader.stdin.close()
        assert reader.wait(timeout=120) == 0
        reader.stdout.close()
        writer.close()
    assert report["entries"] == [expected_entry(i) for i in range(count)]
    previous = 0
    for observed_count, last in report["seen"]:
        assert observed_count >= previous
        assert last == (expected_entry(observed_count - 1) if observed_count else None)
        previous = observed_count
    assert previous == count
