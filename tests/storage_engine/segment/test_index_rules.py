"""The ``.index`` / ``.timeindex`` files at their exact boundaries, and every error naming what failed where
(MUTATION.md: what the mutants of index_file.py, offset_index.py and time_index.py showed the other tests let
through). Kafka's rules from the reference, sections 2.5 and 2.6:

* ``sanityCheck``: corrupt if entries > 0 and ``lastOffset < baseOffset`` (equal is fine,
  ``testSanityLastOffsetEqualToBaseOffset``), for the time index also if ``lastTimestamp < firstTimestamp``;
* ``TimeIndex.maybeAppend`` appends only a timestamp above the last one and ``isFull`` keeps the last slot;
* an index reopened from a trimmed file has ``length / entrySize`` entries.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
from typing import Any

import pytest

from storage_engine.errors import (ConfigError, CorruptIndexError, IndexFullError, IndexOffsetOverflowError,
                                   InvalidOffsetError, StorageIOError)
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex, peek_last_entry
from tests.storage_engine.os_failures import storage_error_when_failing

pytestmark = pytest.mark.unit

BASE = 45


def write_raw(path, entries, fmt) -> None:
    with open(path, "wb") as f:
        for e in entries:
            f.write(struct.pack(fmt, *e))


@pytest.fixture
def oi_path(tmp_path):
    return str(tmp_path / "00000000000000000045.index")


@pytest.fixture
def ti_path(tmp_path):
    return str(tmp_path / "00000000000000000045.timeindex")


# -- files on disk ----------------------------------------------------------------------------------------------

def test_a_new_index_file_is_created_rw_r__r__(oi_path):
    umask = os.umask(0)
    os.umask(umask)
    OffsetIndex(oi_path, BASE, 80).close()
    assert stat.S_IMODE(os.stat(oi_path).st_mode) == 0o644 & ~umask


def test_an_untrimmed_index_counts_its_entries_up_to_the_first_zero_slot(oi_path):
    with OffsetIndex(oi_path, BASE, 4 * 8) as idx:
        for i in range(3):                      # 3 of 4 slots: only the last slot is still zero
            idx.append(BASE + 1 + i, 10 * (i + 1))
        with OffsetIndex(oi_path, BASE, 4 * 8, writable=False) as reader:
            assert (reader.entries, reader.max_entries, reader.last_offset) == (3, 4, BASE + 3)
        idx.close(trim=False)


def test_a_reader_sees_an_index_that_grew_and_was_appended_to(oi_path):
    idx = OffsetIndex(oi_path, BASE, 2 * 8)
    idx.append(BASE + 1, 10)
    idx.append(BASE + 2, 20)
    reader = OffsetIndex(oi_path, BASE, 2 * 8, writable=False)
    assert (reader.entries, reader.length) == (2, 16)
    idx.resize(4 * 8)
    idx.append(BASE + 3, 30)
    reader.refresh()
    assert (reader.entries, reader.max_entries, reader.length, reader.last_offset) == (3, 4, 32, BASE + 3)
    assert reader.lookup(BASE + 9) == (BASE + 3, 30)
    reader.close()
    idx.close()


def test_repr_names_the_file_and_its_counts(oi_path, ti_path):
    with OffsetIndex(oi_path, BASE, 80) as idx:
        idx.append(BASE + 1, 0)
        assert repr(idx) == f"OffsetIndex(path={oi_path!r}, base_offset=45, entries=1, max_entries=10)"
    with TimeIndex(ti_path, BASE, 36) as ti:
        assert repr(ti) == f"TimeIndex(path={ti_path!r}, base_offset=45, entries=0, max_entries=3)"


def test_releasing_twice_closes_no_other_descriptor(oi_path):
    idx = OffsetIndex(oi_path, BASE, 80)
    idx.close()
    sentinel = os.open(os.devnull, os.O_RDONLY)   # likely takes the number the index just freed
    try:
        assert idx.delete_if_exists() is True
        os.fstat(sentinel)
        os.fstat(1)
    finally:
        os.close(sentinel)


# -- errors name the index, the file and the cause -----------------------------------------------------------------

def test_opening_a_missing_index_read_only_names_it(oi_path):
    with pytest.raises(StorageIOError) as err:
        OffsetIndex(oi_path, BASE, 80, writable=False)
    assert isinstance(err.value.__cause__, FileNotFoundError)
    assert str(err.value) == f"cannot open offset index: {oi_path}: {err.value.__cause__}"
    assert not os.path.exists(oi_path)


def test_using_a_closed_or_read_only_index_says_so(oi_path):
    writer = OffsetIndex(oi_path, BASE, 80)
    writer.append(BASE + 1, 0)
    writer.close(trim=False)
    reader = OffsetIndex(oi_path, BASE, 80, writable=False)
    for action, call in (("append", lambda: reader.append(BASE + 2, 10)),
                         ("truncate", lambda: reader.truncate_to(BASE)),
                         ("resize", lambda: reader.resize(160))):
        with pytest.raises(StorageIOError) as err:
            call()
        assert str(err.value) == f"cannot {action}: offset index was opened read-only: {oi_path}"
    reader.close()
    with pytest.raises(StorageIOError) as err:
        reader.lookup(BASE)
    assert str(err.value) == f"offset index is closed: {oi_path}" and err.value.path == oi_path


@pytest.mark.parametrize("os_call, action, message", [
    ("pread", lambda idx: idx.refresh(), "cannot read offset index"),
    ("fstat", lambda idx: idx.refresh(), "cannot refresh offset index"),
    ("ftruncate", lambda idx: idx.resize(16), "cannot resize offset index to 16 bytes"),
    ("fsync", lambda idx: idx.flush(), "cannot flush offset index"),
])
def test_os_errors_become_storage_errors_naming_the_index(oi_path, monkeypatch, os_call, action, message):
    idx = OffsetIndex(oi_path, BASE, 80)
    idx.append(BASE + 1, 0)
    err, failure = storage_error_when_failing(monkeypatch, os_call, action, idx)
    assert err.path == oi_path and str(err) == f"{message}: {oi_path}: {failure}"
    idx.close()


def test_deleting_an_index_that_cannot_be_removed_names_it(oi_path):
    idx = OffsetIndex(oi_path, BASE, 80)
    os.remove(oi_path)
    os.mkdir(oi_path)               # a directory now stands where the file was: os.remove fails
    with pytest.raises(StorageIOError) as err:
        idx.delete_if_exists()
    assert isinstance(err.value.__cause__, IsADirectoryError)
    assert str(err.value) == f"cannot delete offset index: {oi_path}: {err.value.__cause__}"


def test_only_a_writable_index_is_fsynced_and_a_rename_alone_syncs_nothing(oi_path, tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)
    idx = OffsetIndex(oi_path, BASE, 80)
    idx.append(BASE + 1, 0)
    reader = OffsetIndex(oi_path, BASE, 80, writable=False)
    monkeypatch.setattr(os, "fsync", spy)
    reader.flush()
    assert synced == []
    idx.flush()
    assert synced == [oi_path]
    synced.clear()
    idx.rename_to(oi_path + ".deleted")   # the caller syncs the directory once for all of a segment's files
    assert synced == [] and os.path.exists(oi_path + ".deleted")
    reader.close()
    idx.close()


def test_messages_of_out_of_range_requests(oi_path, ti_path):
    idx = OffsetIndex(oi_path, BASE, 16)
    err: pytest.ExceptionInfo[Any]   # one name for each refusal below
    with pytest.raises(IndexOffsetOverflowError) as err:
        idx.append(BASE - 1, 0)
    assert str(err.value) == (f"offset {BASE - 1} does not fit the offset index of base offset {BASE}: relative "
                              f"offset -1 is outside [0, 2147483647] ({oi_path})")
    idx.append(BASE + 1, 0)
    with pytest.raises(InvalidOffsetError) as err:
        idx.append(BASE + 1, 5)
    assert str(err.value) == (f"attempt to append an offset {BASE + 1} to position 1 no larger than the last "
                              f"offset appended ({BASE + 1}) to {oi_path}")
    with pytest.raises(InvalidOffsetError) as err:
        idx.append(BASE + 2, -1)
    assert str(err.value) == f"position -1 of offset {BASE + 2} is outside [0, 2147483647] ({oi_path})"
    idx.append(BASE + 2, 5)
    with pytest.raises(IndexFullError) as err:
        idx.append(BASE + 3, 9)
    assert str(err.value) == f"attempt to append to a full offset index (size = 2) ({oi_path})"
    with pytest.raises(InvalidOffsetError) as err:
        idx.entry(2)
    assert str(err.value) == f"attempt to fetch entry 2 from offset index {oi_path} which has size 2"
    with pytest.raises(ConfigError) as err:
        idx.resize(-1)
    assert str(err.value) == f"invalid index size -1 for {oi_path}: must be >= 0"
    idx.close()

    ti = TimeIndex(ti_path, BASE, 36)
    ti.maybe_append(100, BASE + 3)
    with pytest.raises(InvalidOffsetError) as err:
        ti.maybe_append(200, BASE + 2)
    assert str(err.value) == (f"attempt to append an offset ({BASE + 2}) to slot 1 no larger than the last "
                              f"offset appended ({BASE + 3}) to {ti_path}")
    with pytest.raises(CorruptIndexError) as err:
        ti.maybe_append(99, BASE + 4)
    assert err.value.position == 0
    assert str(err.value) == (f"attempt to append a timestamp (99) to slot 1 no larger than the last timestamp "
                              f"appended (100) (file {ti_path}, byte position 0)")
    ti.maybe_append(101, BASE + 4)
    with pytest.raises(CorruptIndexError) as err:
        ti.maybe_append(100, BASE + 5, skip_full_check=True)
    assert err.value.position == 12
    with pytest.raises(InvalidOffsetError) as err:
        ti.maybe_append(2**63, BASE + 5, skip_full_check=True)
    assert str(err.value) == f"timestamp {2**63} does not fit an int64 ({ti_path})"
    ti.close()


# -- sanity checks (Kafka's sanityCheck, plus the ordering scan) ---------------------------------------------------

def sanity_error(index_cls, path, entries, fmt) -> CorruptIndexError:
    write_raw(path, entries, fmt)
    idx = index_cls(path, BASE, 10**6, writable=False)
    with pytest.raises(CorruptIndexError) as err:
        idx.sanity_check()
    idx.close()
    return err.value


@pytest.mark.parametrize("entries, message, position", [
    ([(-1, 0), (5, 10)], "entry 0 has offset 44 below the base offset 45", 0),
    ([(0, -3), (5, 10)], "entry 0 has negative position -3", 0),
    ([(3, 0), (2, 10), (7, 20)], "entry 1 has offset 47, not above the previous entry's 48", 8),
    ([(3, 20), (4, 10), (7, 30)], "entry 1 has position 10, below the previous entry's 20", 8),
])
def test_offset_index_sanity_errors_name_the_entry(oi_path, entries, message, position):
    err = sanity_error(OffsetIndex, oi_path, entries, ">ii")
    assert str(err) == f"corrupt offset index: {message} (file {oi_path}, byte position {position})"


def test_offset_index_file_length_must_be_whole_entries(oi_path):
    with open(oi_path, "wb") as f:
        f.write(struct.pack(">ii", 1, 0) + b"\x00\x01\x02")
    idx = OffsetIndex(oi_path, BASE, 10**6, writable=False)
    with pytest.raises(CorruptIndexError) as err:
        idx.sanity_check()
    assert str(err.value) == (f"corrupt offset index: file length 11 is not a multiple of the entry size 8 "
                              f"(file {oi_path}, byte position 11)")
    idx.close()


@pytest.mark.parametrize("entries, message, position", [
    ([(-5, 1), (7, 2)], "entry 0 has negative timestamp -5", 0),
    ([(5, -1), (7, 2)], "entry 0 has offset 44 below the base offset 45", 0),
    ([(5, 1), (5, 2), (7, 3)], "entry 1 has timestamp 5, not above the previous entry's 5", 12),
    ([(5, 3), (6, 2), (7, 3)], "entry 1 has offset 47, below the previous entry's 48", 12),
])
def test_time_index_sanity_errors_name_the_entry(ti_path, entries, message, position):
    err = sanity_error(TimeIndex, ti_path, entries, ">qi")
    assert str(err) == f"corrupt time index: {message} (file {ti_path}, byte position {position})"


def test_a_time_index_whose_only_entry_is_at_the_base_offset_is_sane(ti_path):
    # Kafka: corrupt only if lastTimestamp < firstTimestamp or lastOffset < baseOffset; one entry has
    # last == first, and an entry at the base offset has last offset == base.
    write_raw(ti_path, [(7, 0)], ">qi")
    with TimeIndex(ti_path, BASE, 10**6, writable=False) as ti:
        ti.sanity_check()
        assert ti.last_entry == (7, BASE)


def test_an_offset_index_whose_last_entry_is_below_the_base_offset_is_corrupt(oi_path):
    err = sanity_error(OffsetIndex, oi_path, [(-1, 0)], ">ii")
    assert str(err) == (f"corrupt offset index: it has non-zero size but the last offset is 44 which is less than "
                        f"the base offset 45 (file {oi_path}, byte position 0)")


# -- the last time-index entry without opening the index -----------------------------------------------------------

def test_peek_last_entry(ti_path):
    assert peek_last_entry(ti_path, BASE) is None                   # missing
    write_raw(ti_path, [], ">qi")
    assert peek_last_entry(ti_path, BASE) == (-1, BASE)            # empty: Kafka's (-1, baseOffset)
    write_raw(ti_path, [(5, 1), (9, 4)], ">qi")
    assert peek_last_entry(ti_path, BASE) == (9, BASE + 4)
    write_raw(ti_path, [(5, 1), (9, 0)], ">qi")
    assert peek_last_entry(ti_path, BASE) == (9, BASE)             # relative offset 0 is a real entry ...
    write_raw(ti_path, [(5, 1), (0, 7)], ">qi")
    assert peek_last_entry(ti_path, BASE) == (0, BASE + 7)         # ... and so is timestamp 0
    write_raw(ti_path, [(5, 1), (0, 0)], ">qi")
    assert peek_last_entry(ti_path, BASE) is None                  # a zero slot: untrimmed, open it instead
    with open(ti_path, "ab") as f:
        f.write(b"\x00")
    assert peek_last_entry(ti_path, BASE) is None                  # not whole entries
    with open(ti_path, "wb") as f:
        f.write(b"\x01")
    assert peek_last_entry(ti_path, BASE) is None


def test_an_index_holding_descriptor_zero_releases_it(oi_path):
    # A process started with its standard input closed hands out descriptor 0 to the first file it opens.
    saved = os.dup(0)
    os.close(0)
    try:
        idx = OffsetIndex(oi_path, BASE, 80)
        os.fstat(0)                       # the index holds it
        idx.close()
        with pytest.raises(OSError):
            os.fstat(0)                   # closed with the index, not leaked
    finally:
        os.dup2(saved, 0)
        os.close(saved)


# -- entries packed by recovery's compiled walk: append_packed and rewrite -------------------------------------------
# Kafka's LogSegment.recover adds its index entries one by one (OffsetIndex.append, TimeIndex.maybeAppend); the
# compiled walk packs the same entries and hands them over in one piece, so the same AbstractIndex rules apply: an
# index takes at most maxEntries entries (isFull = entries >= maxEntries), lastOffset / lastEntry is the last entry
# written, and a rebuilt index is trimmed to entries * entrySize bytes (trimToValidSize).

def packed_oi(*entries) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def packed_ti(*entries) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def file_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_append_packed_writes_the_entries_after_the_last_one_in_the_file_format(oi_path):
    with OffsetIndex(oi_path, BASE, 5 * 8) as idx:
        idx.append(BASE + 1, 10)
        idx.append_packed(packed_oi((2, 20), (4, 40)))
        assert (idx.entries, idx.last_offset, idx.max_entries, idx.length) == (3, BASE + 4, 5, 40)
        assert [idx.entry(n) for n in range(3)] == [(BASE + 1, 10), (BASE + 2, 20), (BASE + 4, 40)]
        assert idx.lookup(BASE + 3) == (BASE + 2, 20) and idx.lookup(BASE + 9) == (BASE + 4, 40)
        # exact bytes: the new entries follow the first at byte 8, the preallocated tail stays zero
        assert file_bytes(oi_path) == packed_oi((1, 10), (2, 20), (4, 40)) + bytes(16)
        idx.append(BASE + 5, 50)          # Kafka: append requires offset > lastOffset, the last packed entry's
        with pytest.raises(InvalidOffsetError):
            idx.append(BASE + 5, 60)
    assert file_bytes(oi_path) == packed_oi((1, 10), (2, 20), (4, 40), (5, 50))   # trimmed on close
    with OffsetIndex(oi_path, BASE, 5 * 8, writable=False) as reader:
        assert (reader.entries, reader.last_offset) == (4, BASE + 5)


def test_append_packed_counts_whole_entries_only(oi_path):
    with OffsetIndex(oi_path, BASE, 4 * 8) as idx:
        idx.append_packed(packed_oi((1, 10), (2, 20)) + b"\x7f\x7f\x7f")   # a partial third entry is not one
        assert (idx.entries, idx.last_offset) == (2, BASE + 2)
        assert file_bytes(oi_path) == packed_oi((1, 10), (2, 20)) + bytes(16)


def test_append_packed_of_one_entry_counts_it(oi_path):
    with OffsetIndex(oi_path, BASE, 4 * 8) as idx:
        idx.append_packed(packed_oi((3, 30)))
        assert (idx.entries, idx.last_offset, idx.lookup(BASE + 3)) == (1, BASE + 3, (BASE + 3, 30))
        assert file_bytes(oi_path)[:8] == packed_oi((3, 30))


def test_append_packed_of_nothing_is_a_no_op_even_on_a_full_or_read_only_index(oi_path):
    with OffsetIndex(oi_path, BASE, 8) as idx:
        idx.append(BASE + 1, 10)
        assert idx.is_full
        idx.append_packed(b"")
        idx.append_packed(b"\x01\x02\x03")           # less than one entry: nothing to write
        assert (idx.entries, idx.last_offset) == (1, BASE + 1)
        with OffsetIndex(oi_path, BASE, 8, writable=False) as reader:
            reader.append_packed(b"")
            assert reader.entries == 1


def test_append_packed_fills_an_index_to_max_entries_and_not_one_more(oi_path):
    # AbstractIndex: isFull = entries >= maxEntries; an append to a full index fails
    with OffsetIndex(oi_path, BASE, 3 * 8) as idx:
        idx.append(BASE + 1, 10)
        idx.append_packed(packed_oi((2, 20), (3, 30)))          # exactly the room left
        assert (idx.entries, idx.is_full) == (3, True)
    with OffsetIndex(oi_path, BASE, 3 * 8) as idx:
        idx.resize(3 * 8)
        with pytest.raises(IndexFullError) as err:
            idx.append_packed(packed_oi((4, 40)))
        assert str(err.value) == f"attempt to append to a full offset index (size = 3) ({oi_path})"
        assert idx.entries == 3
    with OffsetIndex(oi_path + "2", BASE, 3 * 8) as idx:
        idx.append(BASE + 1, 10)
        with pytest.raises(IndexFullError) as err:                 # one entry too many: nothing written
            idx.append_packed(packed_oi((2, 20), (3, 30), (4, 40)))
        assert str(err.value) == f"attempt to append to a full offset index (size = 1) ({oi_path}2)"
        assert idx.entries == 1
        assert file_bytes(oi_path + "2") == packed_oi((1, 10)) + bytes(16)


def test_append_packed_refuses_a_read_only_index(oi_path):
    OffsetIndex(oi_path, BASE, 4 * 8).close(trim=False)
    with OffsetIndex(oi_path, BASE, 4 * 8, writable=False) as reader:
        with pytest.raises(StorageIOError) as err:
            reader.append_packed(packed_oi((1, 10)))
        assert str(err.value) == f"cannot append: offset index was opened read-only: {oi_path}"
        assert reader.entries == 0
    assert file_bytes(oi_path) == bytes(32)


def test_append_packed_to_a_time_index_moves_its_last_entry(ti_path):
    # TimeIndex: lastEntry is the last (timestamp, offset) written; maybeAppend appends only a larger timestamp
    with TimeIndex(ti_path, BASE, 5 * 12) as ti:
        ti.append_packed(packed_ti((100, 1), (200, 3)))
        assert (ti.entries, ti.last_entry) == (2, (200, BASE + 3))
        assert ti.lookup(150) == (100, BASE + 1)
        ti.maybe_append(200, BASE + 4)                # not above the last packed timestamp: no entry
        assert ti.entries == 2
        ti.maybe_append(300, BASE + 4)
        assert file_bytes(ti_path) == packed_ti((100, 1), (200, 3), (300, 4)) + bytes(24)


def test_append_packed_failing_to_write_names_the_index(oi_path, monkeypatch):
    idx = OffsetIndex(oi_path, BASE, 4 * 8)
    failure = OSError(errno.EIO, "Input/output error")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, "pwrite", fail)
    with pytest.raises(StorageIOError) as err:
        idx.append_packed(packed_oi((1, 10)))
    monkeypatch.undo()
    assert err.value.__cause__ is failure
    assert str(err.value) == f"cannot append to offset index: {oi_path}: {failure}"
    assert idx.entries == 0
    idx.close()


def test_rewrite_makes_the_file_exactly_the_entries_trimmed(oi_path):
    with OffsetIndex(oi_path, BASE, 8 * 8) as idx:
        for i in range(1, 6):
            idx.append(BASE + i, 10 * i)
        idx.rewrite(packed_oi((2, 15), (7, 70)) + b"\x01")         # a partial entry is dropped
        # trimmed: length = entries * entrySize, so the rebuilt index is full until resized (Kafka's reopen rule)
        assert (idx.entries, idx.length, idx.max_entries, idx.is_full) == (2, 16, 2, True)
        assert file_bytes(oi_path) == packed_oi((2, 15), (7, 70))
        assert idx.last_offset == BASE + 7
        assert [idx.entry(n) for n in range(2)] == [(BASE + 2, 15), (BASE + 7, 70)]
        assert idx.lookup(BASE + 6) == (BASE + 2, 15)
        with pytest.raises(IndexFullError):
            idx.append(BASE + 8, 80)
        assert idx.resize(4 * 8) is True
        idx.append(BASE + 8, 80)
    with OffsetIndex(oi_path, BASE, 8 * 8, writable=False) as reader:
        assert (reader.entries, reader.last_offset) == (3, BASE + 8)


def test_rewrite_with_no_entries_empties_the_file(oi_path, ti_path):
    with OffsetIndex(oi_path, BASE, 4 * 8) as idx:
        idx.append(BASE + 1, 10)
        idx.rewrite(b"")
        assert (idx.entries, idx.length, idx.max_entries, idx.last_offset) == (0, 0, 0, BASE)
        assert idx.lookup(BASE + 5) == (BASE, 0)
        assert file_bytes(oi_path) == b""
    with TimeIndex(ti_path, BASE, 4 * 12) as ti:
        ti.maybe_append(100, BASE + 1)
        ti.rewrite(b"")
        assert (ti.entries, ti.last_entry, os.path.getsize(ti_path)) == (0, (-1, BASE), 0)


def test_rewrite_of_a_time_index_sets_its_last_entry(ti_path):
    with TimeIndex(ti_path, BASE, 4 * 12) as ti:
        ti.maybe_append(50, BASE + 1)
        ti.rewrite(packed_ti((100, 2), (300, 6)))
        assert (ti.entries, ti.last_entry, ti.length) == (2, (300, BASE + 6), 24)
        assert ti.lookup(299) == (100, BASE + 2)
        assert file_bytes(ti_path) == packed_ti((100, 2), (300, 6))


def test_rewrite_refuses_a_read_only_index(oi_path):
    writer = OffsetIndex(oi_path, BASE, 4 * 8)
    writer.append(BASE + 1, 10)
    writer.close(trim=False)
    with OffsetIndex(oi_path, BASE, 4 * 8, writable=False) as reader:
        with pytest.raises(StorageIOError) as err:
            reader.rewrite(packed_oi((2, 20)))
        assert str(err.value) == f"cannot rewrite: offset index was opened read-only: {oi_path}"
        assert (reader.entries, reader.last_offset) == (1, BASE + 1)
    assert file_bytes(oi_path) == packed_oi((1, 10)) + bytes(24)


@pytest.mark.parametrize("os_call", ["ftruncate", "pwrite"])
def test_rewrite_failing_names_the_index(oi_path, monkeypatch, os_call):
    idx = OffsetIndex(oi_path, BASE, 4 * 8)
    failure = OSError(errno.EIO, "Input/output error")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, os_call, fail)
    with pytest.raises(StorageIOError) as err:
        idx.rewrite(packed_oi((1, 10)))
    monkeypatch.undo()
    assert err.value.__cause__ is failure
    assert str(err.value) == f"cannot rewrite offset index: {oi_path}: {failure}"
    idx.close()


# -- opening, refreshing and truncating at the edges ------------------------------------------------------------------

def test_an_index_created_by_another_process_between_two_opens_is_opened_as_it_is(oi_path, monkeypatch):
    # AbstractIndex: an existing file is opened as it is, never recreated or truncated; here the file appears after
    # the first open found none, so the exclusive create fails and the file is opened again.
    real_open = os.open
    calls = []

    def racing_open(path, flags, *args):
        calls.append(flags)
        if len(calls) == 1:
            with open(oi_path, "wb") as f:              # preallocated, one entry
                f.write(packed_oi((1, 10)) + bytes(24))
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return real_open(path, flags, *args)
    monkeypatch.setattr(os, "open", racing_open)
    idx = OffsetIndex(oi_path, BASE, 80)
    monkeypatch.undo()
    assert len(calls) == 3 and calls[1] & os.O_EXCL and not calls[2] & os.O_CREAT
    assert (idx.entries, idx.max_entries, idx.length, idx.last_offset) == (1, 4, 32, BASE + 1)
    idx.append(BASE + 2, 20)
    idx.close()
    assert file_bytes(oi_path) == packed_oi((1, 10), (2, 20))


def test_refresh_rereads_the_last_entry_a_reader_saw_half_written(ti_path):
    # A time-index entry is written timestamp first: a reader may hold (timestamp, base offset) for the last entry.
    with open(ti_path, "wb") as f:
        f.write(packed_ti((100, 1), (200, 0)) + bytes(24))
    with TimeIndex(ti_path, BASE, 4 * 12, writable=False) as reader:
        assert (reader.entries, reader.last_entry) == (2, (200, BASE))
        with open(ti_path, "r+b") as f:                 # the writer completes the entry and adds one more
            f.seek(12 + 8)
            f.write(struct.pack(">i", 3) + packed_ti((300, 5)))
        reader.refresh()
        assert (reader.entries, reader.last_entry) == (3, (300, BASE + 5))
        assert [reader.entry(n) for n in range(3)] == [(100, BASE + 1), (200, BASE + 3), (300, BASE + 5)]
        assert reader.lookup(250) == (200, BASE + 3)


def test_refresh_after_the_owner_truncated_holds_only_the_entries_left(oi_path):
    writer = OffsetIndex(oi_path, BASE, 4 * 8)
    for i in range(1, 4):
        writer.append(BASE + i, 10 * i)
    reader = OffsetIndex(oi_path, BASE, 4 * 8, writable=False)
    assert reader.entries == 3
    writer.truncate_to(BASE + 2)                        # Kafka: the entry at the offset and every later one go
    reader.refresh()
    assert (reader.entries, reader.last_offset, reader.lookup(BASE + 9)) == (1, BASE + 1, (BASE + 1, 10))
    reader.close()
    writer.close()


def test_an_index_shrunk_while_being_read_keeps_the_whole_entries_read(oi_path, monkeypatch):
    # The owner may shrink the file between the entry count and the read: a short read keeps its whole entries.
    write_raw(oi_path, [(1, 10), (2, 20), (3, 30)], ">ii")
    real_pread = os.pread

    def shrinking_pread(fd, n, offset):
        if n > 8:                                       # the read of the entries, after the count
            os.truncate(oi_path, 8 + 3)
        return real_pread(fd, n, offset)
    monkeypatch.setattr(os, "pread", shrinking_pread)
    idx = OffsetIndex(oi_path, BASE, 80)
    monkeypatch.undo()
    assert (idx.entries, idx.last_offset) == (1, BASE + 1)
    idx.resize(4 * 8)
    idx.append(BASE + 4, 40)
    assert [idx.entry(n) for n in range(2)] == [(BASE + 1, 10), (BASE + 4, 40)]
    assert idx.lookup(BASE + 5) == (BASE + 4, 40)
    idx.close()


def test_an_index_whose_entries_cannot_be_read_names_it_and_holds_no_descriptor(oi_path, monkeypatch):
    write_raw(oi_path, [(1, 10), (2, 20), (3, 30)], ">ii")
    failure = OSError(errno.EIO, "Input/output error")
    real_pread, real_close = os.pread, os.close
    closed = []

    def failing_pread(fd, n, offset):
        if n > 8:                                       # the count reads one slot; reading the entries fails
            raise failure
        return real_pread(fd, n, offset)

    def spy_close(fd):
        closed.append(fd)
        return real_close(fd)
    monkeypatch.setattr(os, "pread", failing_pread)
    monkeypatch.setattr(os, "close", spy_close)
    with pytest.raises(StorageIOError) as err:
        OffsetIndex(oi_path, BASE, 80, writable=False)
    monkeypatch.undo()
    assert err.value.__cause__ is failure and err.value.path == oi_path
    assert str(err.value) == f"cannot read offset index: {oi_path}: {failure}"
    assert len(closed) == 1


def test_an_append_that_cannot_be_written_names_the_index_and_counts_nothing(oi_path, ti_path, monkeypatch):
    idx = OffsetIndex(oi_path, BASE, 80)
    ti = TimeIndex(ti_path, BASE, 120)
    failure = OSError(errno.ENOSPC, "No space left on device")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, "pwrite", fail)
    with pytest.raises(StorageIOError) as err:
        idx.append(BASE + 1, 10)
    with pytest.raises(StorageIOError) as terr:
        ti.maybe_append(100, BASE + 1)
    monkeypatch.undo()
    assert err.value.__cause__ is failure and str(err.value) == f"cannot append to offset index: {oi_path}: {failure}"
    assert terr.value.__cause__ is failure and str(terr.value) == f"cannot append to time index: {ti_path}: {failure}"
    assert (idx.entries, ti.entries) == (0, 0)
    idx.close()
    ti.close()


def test_a_truncation_that_cannot_be_written_names_the_index(oi_path, monkeypatch):
    idx = OffsetIndex(oi_path, BASE, 80)
    idx.append(BASE + 1, 10)
    idx.append(BASE + 2, 20)
    failure = OSError(errno.EIO, "Input/output error")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, "pwrite", fail)
    with pytest.raises(StorageIOError) as err:
        idx.truncate_to(BASE + 2)
    monkeypatch.undo()
    assert err.value.__cause__ is failure and err.value.path == oi_path
    assert str(err.value) == f"cannot truncate offset index: {oi_path}: {failure}"
    assert idx.entries == 2
    idx.close()


def test_truncating_past_the_last_entry_is_a_no_op_even_read_only(oi_path):
    # Kafka's truncateTo: truncating past the end is a no-op
    writer = OffsetIndex(oi_path, BASE, 4 * 8)
    writer.append(BASE + 1, 10)
    writer.append(BASE + 2, 20)
    with OffsetIndex(oi_path, BASE, 4 * 8, writable=False) as reader:
        reader.truncate_to(BASE + 3)
        reader.truncate_to(BASE + 100)
        assert (reader.entries, reader.last_offset) == (2, BASE + 2)
    writer.close()


def test_truncation_zeroes_the_dropped_slots_and_keeps_the_file_length(oi_path, ti_path):
    # Kafka's truncateTo moves the position and keeps the file; the dropped slots are zeroed here so a reader
    # counting the non-zero prefix does not see them again.
    with OffsetIndex(oi_path, BASE, 4 * 8) as idx:
        for i in range(1, 5):
            idx.append(BASE + i, 10 * i)
        idx.truncate_to(BASE + 2)
        assert (idx.entries, idx.length, os.path.getsize(oi_path)) == (1, 32, 32)
        assert file_bytes(oi_path) == packed_oi((1, 10)) + bytes(24)
        with OffsetIndex(oi_path, BASE, 4 * 8, writable=False) as reader:
            assert reader.entries == 1
    with TimeIndex(ti_path, BASE, 3 * 12) as ti:
        ti.maybe_append(100, BASE + 1)
        ti.maybe_append(200, BASE + 2)
        ti.maybe_append(300, BASE + 3, skip_full_check=True)
        ti.truncate_to(BASE + 3)
        assert (ti.entries, ti.last_entry, os.path.getsize(ti_path)) == (2, (200, BASE + 2), 36)
        assert file_bytes(ti_path) == packed_ti((100, 1), (200, 2)) + bytes(12)
