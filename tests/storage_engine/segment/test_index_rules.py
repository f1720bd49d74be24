"""The ``.index`` / ``.timeindex`` files at their exact boundaries, and every error naming what failed where
(MUTATION.md: what the mutants of _index_file.py, offset_index.py and time_index.py showed the other tests let
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

import pytest

from storage_engine.errors import (ConfigError, CorruptIndexError, IndexFullError, IndexOffsetOverflowError,
                                   InvalidOffsetError, StorageIOError)
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex, peek_last_entry

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
    failure = OSError(errno.EIO, "Input/output error")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, os_call, fail)
    with pytest.raises(StorageIOError) as err:
        action(idx)
    monkeypatch.undo()
    assert err.value.__cause__ is failure
    assert err.value.path == oi_path
    assert str(err.value) == f"{message}: {oi_path}: {failure}"
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
