"""Fetch reads as file slices (storage_engine.segment.slice_read) and the verified ranges behind them
(storage_engine.segment.verified): the same batches as the checked read, bytes checked once, and no mark ever
covering bytes it did not check (a truncation, a swap, a shorter file)."""
from __future__ import annotations

import os
import tracemalloc

import pytest

from storage_engine.errors import CorruptRecordError
from storage_engine.record.record_batch import ENTRY_HEADER, LOG_OVERHEAD
from storage_engine.segment.file_slice import FileSlice
from storage_engine.segment.slice_read import PIECE_BYTES, SliceData, WouldBlock, nonblocking, read_slice
from storage_engine.segment.verified import STARTS_PER_FILE, VerifiedRanges
from tests.storage_engine.helpers import append_batch, open_segment

pytestmark = pytest.mark.unit
NO_BOUND = 1 << 62


def _cut(data: bytes, bound: int) -> bytes:
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        base, length = ENTRY_HEADER.unpack_from(data, pos)
        if base >= bound:
            break
        pos += LOG_OVERHEAD + length
    return data[:pos]


def _bytes(found: SliceData | None) -> bytes | None:
    if found is None:
        return None
    if found.slice is None:
        return b""
    if isinstance(found.slice, bytes):
        return found.slice
    try:
        return bytes(found.slice)
    finally:
        found.slice.close()


def _key(seg) -> tuple[int, int]:
    st = os.fstat(seg.log.fileno())
    return st.st_dev, st.st_ino


def _filled(tmp_path, batches: int = 40):
    seg = open_segment(tmp_path, 0, index_interval_bytes=200, max_index_size=100000)
    for i in range(batches):
        append_batch(seg, 3 * i, f"a{i}" * (i % 5 + 1), f"b{i}", f"c{i}")
    return seg


def test_slices_hold_the_checked_reads_batches_and_a_second_read_uses_the_mark(tmp_path):
    seg = _filled(tmp_path)
    marks = VerifiedRanges()
    end = 120
    for round_ in range(2):
        for start in range(0, end + 2, 5):
            for max_size in (1, 90, 400, 100000):
                for first in (True, False):
                    for bound in (NO_BOUND, 61):
                        want = seg.read(start, max_size, min_one_message=first, upper_bound=end)
                        got = _bytes(read_slice(seg, start, max_size, first, end, bound, 7, marks, inline=0))
                        if want is None:
                            assert got is None, (start, max_size, first)
                        else:
                            assert got == _cut(want.data, bound), (round_, start, max_size, first, bound)
        # every byte was read once: the whole file is verified at this generation
        assert marks.lookup(_key(seg), 7, seg.size) == (0, seg.size)


def test_a_mark_of_another_generation_is_never_used_after_a_truncation(tmp_path):
    """The truncation of the file in place (a process bumps the shared generation first, then cuts), then new
    batches where checked ones were, one of them damaged: the read checks them, and raises."""
    seg = _filled(tmp_path)
    marks = VerifiedRanges()
    assert _bytes(read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 1, marks, inline=0))
    assert marks.lookup(_key(seg), 1, seg.size) == (0, seg.size)
    size = seg.size
    seg.truncate_to(30)
    while seg.size < size:
        append_batch(seg, seg.read_next_offset(), "new" * 50, "x" * 40)
    at = seg.translate_offset(31)
    assert at is not None
    with open(seg.path, "r+b") as f:            # a flipped bit in the new bytes, below the old mark
        f.seek(at[1] + at[2] - 3)
        b = f.read(1)
        f.seek(at[1] + at[2] - 3)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(CorruptRecordError):
        read_slice(seg, 31, 1 << 20, True, seg.read_next_offset(), NO_BOUND, 2, marks, inline=0)
    assert marks.lookup(_key(seg), 1, seg.size) is None     # the old mark is gone


def test_a_file_seen_shorter_than_its_mark_drops_the_mark_even_at_the_same_generation(tmp_path):
    seg = _filled(tmp_path)
    marks = VerifiedRanges()
    _bytes(read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 3, marks, inline=0))
    seg.truncate_to(60)
    assert marks.lookup(_key(seg), 3, seg.size) is None
    got = _bytes(read_slice(seg, 0, 1 << 20, True, 60, NO_BOUND, 3, marks, inline=0))
    want = seg.read(0, 1 << 20, upper_bound=60)
    assert want is not None and got == want.data


def test_a_swapped_file_has_no_mark_and_a_slice_taken_before_still_sends_the_old_bytes(tmp_path):
    seg = _filled(tmp_path)
    marks = VerifiedRanges()
    found = read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 5, marks, inline=0)
    assert found is not None and isinstance(found.slice, FileSlice)
    old = seg.log.read(0, seg.size)
    # a cleaner-style swap: a new file (damaged) renamed over the segment, the segment reopened
    damaged = bytearray(old)
    damaged[-5] ^= 0x01
    with open(seg.path + ".swap", "wb") as f:
        f.write(damaged)
    os.replace(seg.path + ".swap", seg.path)
    base, path_dir = seg.base_offset, seg.dir
    seg.close(trim=False)
    seg2 = open_segment(path_dir, base, index_interval_bytes=200, max_index_size=100000, file_already_exists=True)
    assert marks.lookup(_key(seg2), 5, seg2.size) is None
    with pytest.raises(CorruptRecordError):
        read_slice(seg2, 0, 1 << 20, True, 120, NO_BOUND, 5, marks, inline=0)
    assert bytes(found.slice) == old[:len(found.slice)]      # the old inode, through the duplicated descriptor
    found.slice.close()


def test_a_cut_under_a_slice_is_reported_never_other_bytes(tmp_path):
    seg = _filled(tmp_path)
    found = read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 1, VerifiedRanges(), inline=0)
    assert found is not None and isinstance(found.slice, FileSlice)
    seg.truncate_to(9)
    with pytest.raises(CorruptRecordError, match="cut"):
        found.slice.check_whole()
    with pytest.raises(CorruptRecordError):
        bytes(found.slice)
    found.slice.close()


def test_a_huge_read_checks_in_bounded_pieces(tmp_path):
    """A 64 MiB read of ~12 MB of unverified batches allocates about one piece at a time, not the range."""
    seg = open_segment(tmp_path, 0, index_interval_bytes=4096, max_index_size=100000)
    value = os.urandom(1000)
    offset = 0
    while seg.size < 12_000_000:
        append_batch(seg, offset, *([value] * 100))
        offset += 100
    marks = VerifiedRanges()
    tracemalloc.start()
    try:
        found = read_slice(seg, 0, 64 << 20, True, offset, NO_BOUND, 1, marks, inline=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found is not None and isinstance(found.slice, FileSlice)
    assert len(found.slice) == seg.size
    assert peak < 3 * PIECE_BYTES, peak
    assert marks.lookup(_key(seg), 1, seg.size) == (0, seg.size)
    assert bytes(found.slice) == seg.log.read(0, seg.size)
    found.slice.close()


def test_damage_in_unverified_bytes_raises_and_marks_only_what_passed(tmp_path):
    seg = _filled(tmp_path)
    at = seg.translate_offset(90)
    assert at is not None
    with open(seg.path, "r+b") as f:
        f.seek(at[1] + at[2] - 2)
        b = f.read(1)
        f.seek(at[1] + at[2] - 2)
        f.write(bytes([b[0] ^ 0x40]))
    marks = VerifiedRanges()
    with pytest.raises(CorruptRecordError):
        read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 1, marks, inline=0)
    mark = marks.lookup(_key(seg), 1, seg.size)
    assert mark is None or mark[1] <= at[1]
    good = read_slice(seg, 0, at[1], True, 120, NO_BOUND, 1, marks, inline=0)       # the batches before it still read
    assert good is not None and good.next_offset == 90 and isinstance(good.slice, FileSlice)
    good.slice.close()
    with pytest.raises(CorruptRecordError):
        read_slice(seg, 90, 1 << 20, True, 120, NO_BOUND, 1, marks, inline=0)


def test_verified_ranges_merge_forget_and_stay_bounded():
    marks = VerifiedRanges(capacity=3)
    marks.add((1, 1), 4, 0, 100)
    marks.add((1, 1), 4, 100, 250)
    assert marks.lookup((1, 1), 4, 250) == (0, 250)
    marks.add((1, 1), 4, 400, 500)                   # apart: replaces
    assert marks.lookup((1, 1), 4, 500) == (400, 500)
    marks.add((1, 1), 5, 450, 600)                   # another generation: replaces
    assert marks.lookup((1, 1), 4, 600) is None      # and a lookup at the old one drops it
    marks.add((1, 1), 5, 0, 10)
    marks.remember((1, 1), 5, 77, 10)
    assert marks.start_of((1, 1), 5, 77) == 10
    assert marks.start_of((1, 1), 6, 77) is None
    for i in range(STARTS_PER_FILE + 5):
        marks.remember((1, 1), 5, 1000 + i, 5)
    assert marks.start_of((1, 1), 5, 77) is None     # the oldest remembered start went
    for ino in range(2, 6):
        marks.add((1, ino), 1, 0, 10)
    assert len(marks) == 3 and marks.lookup((1, 1), 5, 10) is None
    marks.forget((1, 5))
    assert marks.lookup((1, 5), 1, 10) is None


def test_file_slice_owns_its_descriptor(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        part = FileSlice.of(fd, 2, 5, str(path))
        assert part.fd != fd and bytes(part) == b"23456" and len(part) == 5
        part.close()
        part.close()
        assert os.read(fd, 3) == b"012"                # the original stays open
    finally:
        os.close(fd)


def test_a_small_read_comes_as_bytes_and_a_larger_one_as_a_slice(tmp_path):
    seg = _filled(tmp_path)
    small = read_slice(seg, 0, 1000, True, 120, NO_BOUND, 1, VerifiedRanges())
    want = seg.read(0, 1000, upper_bound=120)
    assert small is not None and want is not None and small.slice == want.data
    big = read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 1, VerifiedRanges(), inline=100)
    assert big is not None and isinstance(big.slice, FileSlice) and len(big.slice) > 100
    big.slice.close()


def test_offset_index_positions_inside_batches_are_not_trusted_in_verified_bytes(tmp_path):
    """A damaged ``.index`` (derived data) pointing into the middle of verified batches: the walk proves a position
    by checking the batch there before it trusts headers, and falls back to the segment's start."""
    seg = _filled(tmp_path)
    marks = VerifiedRanges()
    assert _bytes(read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 1, marks, inline=0))
    index = seg.offset_index
    assert index.entries >= 3
    with open(index.path, "r+b") as f:
        for i in range(index.entries):
            f.seek(i * 8 + 4)
            pos = int.from_bytes(f.read(4), "big")
            f.seek(i * 8 + 4)
            f.write((pos + 7).to_bytes(4, "big"))      # inside the batch the entry named
    seg.close(trim=False)
    seg = open_segment(tmp_path, 0, index_interval_bytes=200, max_index_size=100000, file_already_exists=True)
    assert marks.lookup(_key(seg), 1, seg.size) == (0, seg.size)
    for start in range(0, 120, 7):
        want = seg.read(start, 5000, upper_bound=120)
        assert want is not None
        assert _bytes(read_slice(seg, start, 5000, True, 120, NO_BOUND, 1, marks, inline=0)) == want.data, start


def test_legacy_entries_of_26_bytes_read_from_the_mark(tmp_path):
    """v0 messages with no key and no value are 26-byte entries, shorter than a magic-2 header: the header walk
    over verified bytes still frames them, up to the very last one."""
    from storage_engine.record.legacy_records import build_legacy_batch
    from storage_engine.record.records import SimpleRecord

    seg = open_segment(tmp_path, 0, index_interval_bytes=64, max_index_size=100000)
    for i in range(30):
        magic = 0 if i % 3 else 1
        value = None if magic == 0 else b"v%d" % i
        data = build_legacy_batch([SimpleRecord(None, value, 1000 + i)], magic=magic, base_offset=i)
        seg.append(i, 1000 + i, i, data)
    last = seg.translate_offset(29)
    assert last is not None and seg.size - last[1] == 26      # the last entry is a bare v0 message
    marks = VerifiedRanges()
    for round_ in range(2):
        for start in range(30):
            for max_size in (1, 60, 10000):
                want = seg.read(start, max_size, upper_bound=30)
                got = _bytes(read_slice(seg, start, max_size, True, 30, NO_BOUND, 1, marks, inline=0))
                assert want is not None and got == want.data, (round_, start, max_size)
        assert marks.lookup(_key(seg), 1, seg.size) == (0, seg.size)


# -- reads on the broker's event loop (slice_read.nonblocking) ----------------------------------------------------

def _evict(path: str) -> None:
    """Drop the file's (clean) pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _eviction_works(folder) -> bool:
    """Whether this file system drops pages on request, tried on a scratch file (a read that may not wait then
    finds none). The probe itself starts readahead, so it is never made on the file under test."""
    path = str(folder / "probe")
    with open(path, "wb") as f:
        f.write(b"p" * 65536)
    _evict(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(64)], 0, os.RWF_NOWAIT)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_a_nonblocking_read_serves_verified_bytes_and_refuses_everything_else(tmp_path):
    """On the event loop a read answers exactly what the read threads answer, from verified bytes only; bytes not
    yet verified, a damaged verified range, a segment whose files are closed: WouldBlock, nothing marked."""
    seg = _filled(tmp_path)
    marks = VerifiedRanges()
    with nonblocking(), pytest.raises(WouldBlock, match="not verified yet"):
        read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 4, marks, inline=0)
    assert marks.lookup(_key(seg), 4, seg.size) is None                  # refused before any check
    assert _bytes(read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 4, marks, inline=0))   # verifies them all
    # a consumer reading on from where its last read ended (a remembered batch start), as the read threads would
    first = read_slice(seg, 0, 500, True, 120, NO_BOUND, 4, marks, inline=0)
    assert first is not None and _bytes(first)
    start = first.next_offset
    for max_size, inline in ((500, 0), (300, 64 * 1024), (2000, 0), (1, 0), (100000, 0)):
        with nonblocking():
            got = read_slice(seg, start, max_size, True, 120, NO_BOUND, 4, marks, inline=inline)
        want = seg.read(start, max_size, min_one_message=True, upper_bound=120)
        assert got is not None and want is not None and isinstance(got.slice, bytes) == (inline > 0)
        assert _bytes(got) == want.data, (start, max_size)
        start = got.next_offset
    assert start == 120
    # an offset no read ended at: the offset index's position must be proven by checking the batch there first
    with nonblocking(), pytest.raises(WouldBlock, match="not verified yet"):
        read_slice(seg, 7, 500, True, 120, NO_BOUND, 4, marks, inline=0)
    with nonblocking(), pytest.raises(WouldBlock, match="not verified yet"):   # another generation: no mark
        read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 5, marks, inline=0)
    size = seg.size
    with open(seg.path, "r+b") as f:                        # a verified file cut shorter (by another process)
        f.truncate(size - 10)
    with nonblocking(), pytest.raises(WouldBlock):
        read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 4, marks, inline=0)
    seg.release()
    with nonblocking(), pytest.raises(WouldBlock, match="is not open"):
        read_slice(seg, 0, 1 << 20, True, 120, NO_BOUND, 4, marks, inline=0)


def test_a_nonblocking_read_never_waits_for_the_disk(tmp_path):
    """Verified bytes the page cache no longer holds are not read on the event loop (RWF_NOWAIT): WouldBlock, and
    the read threads' read gets them."""
    seg = _filled(tmp_path, batches=400)
    marks = VerifiedRanges()
    first = read_slice(seg, 0, 2000, True, 1200, NO_BOUND, 6, marks, inline=0)
    assert first is not None and _bytes(first)
    start = first.next_offset                    # a remembered batch start in verified bytes
    want = _bytes(read_slice(seg, start, 1 << 20, True, 1200, NO_BOUND, 6, marks, inline=1 << 20))
    with nonblocking():                          # in the cache: read on the spot
        assert _bytes(read_slice(seg, start, 1 << 20, True, 1200, NO_BOUND, 6, marks, inline=1 << 20)) == want
    if not _eviction_works(tmp_path):
        pytest.skip("this file system keeps the pages in the cache (posix_fadvise DONTNEED has no effect)")
    _evict(seg.path)
    with nonblocking(), pytest.raises(WouldBlock, match="not in the page cache"):
        read_slice(seg, start, 1 << 20, True, 1200, NO_BOUND, 6, marks, inline=1 << 20)
    assert _bytes(read_slice(seg, start, 1 << 20, True, 1200, NO_BOUND, 6, marks, inline=1 << 20)) == want


def test_a_sequential_reads_next_batch_header_is_remembered_and_used_only_inside_the_mark(tmp_path):
    """A read that stopped at a batch it read the header of (verified bytes) remembers that header with the next
    offset's start; the next read from there takes it instead of reading it again, and gives the same batches as
    a read without it. A remembered header is used only while its batch lies inside the file's mark."""
    seg = _filled(tmp_path)
    end = 120
    marks = VerifiedRanges()
    assert _bytes(read_slice(seg, 0, 100000, True, end, NO_BOUND, 3, marks, inline=0))   # verifies the file
    key = _key(seg)
    plain = VerifiedRanges()
    plain.add(key, 3, 0, seg.size)
    offset = 0
    while offset < end:
        found = read_slice(seg, offset, 90, True, end, NO_BOUND, 3, marks, inline=0)
        want = read_slice(seg, offset, 90, True, end, NO_BOUND, 3, plain, inline=0)
        assert found is not None and want is not None
        assert (found.position, found.next_offset) == (want.position, want.next_offset)
        assert _bytes(found) == _bytes(want)
        offset = found.next_offset
        if offset < end:
            looked = marks.find(key, 3, seg.size, offset)
            assert looked is not None
            start = looked[1]
            assert start is not None and start[0] == found.position + len(found) and start[1] is not None
            size, entry_offset, last = start[1]
            assert entry_offset == offset and last == offset + 2 and size > LOG_OVERHEAD
            # the header is the file's: the entry's size field says the same
            with open(seg.path, "rb") as f:
                f.seek(start[0])
                assert ENTRY_HEADER.unpack(f.read(LOG_OVERHEAD)) == (offset, size - LOG_OVERHEAD)
    # a remembered header whose batch would run past the mark is not taken: the bytes are read (and found wrong)
    looked = marks.find(key, 3, seg.size, 30)
    assert looked is not None and looked[1] is not None
    position = looked[1][0]
    marks.remember(key, 3, 30, position, (seg.size, 30, 32))
    assert _bytes(read_slice(seg, 30, 90, True, end, NO_BOUND, 3, marks, inline=0)) == _bytes(
        read_slice(seg, 30, 90, True, end, NO_BOUND, 3, plain, inline=0))
    # another generation: no mark, no remembered start
    assert marks.find(key, 4, seg.size, 30) is None
