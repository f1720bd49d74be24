"""Tests of storage_engine.segment.file_records (the ``.log`` file): Kafka's file reading rules (spec 1.1/2.4),
FileRecordsTest (partial tails, truncation, searches, preallocation), segments written by real Kafka, and a
mutation property: damaged segments of every magic raise typed StorageErrors naming the file, nothing else.
"""
from __future__ import annotations

import os
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.paths import REAL_KAFKA_FIXTURES
from tests.storage_engine.os_failures import storage_error_when_failing
from tests.storage_engine.helpers import present
from storage_engine.record import codecs
from storage_engine.errors import CorruptRecordError, StorageError
from storage_engine.segment.file_records import MAX_FILE_SIZE, FileRecords, batch_at, iter_batches
from storage_engine.record.legacy_records import LegacyBatch, build_legacy_batch
from storage_engine.record.record_batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_APPEND_TIME,
    RecordBatch,
    build_batch,
    build_control_batch,
    build_empty_batch,
)
from storage_engine.record.records import SimpleRecord
pytestmark = pytest.mark.unit


VALUES = [b"abcd", b"efgh", b"ijkl"]


# -- helpers ----------------------------------------------------------------------------------------------

@pytest.fixture
def new_file(tmp_path):
    """Create FileRecords in tmp_path; all are closed at teardown."""
    opened = []

    def make(data: bytes = b"", name: str = "00000000000000000000.log", **kw) -> FileRecords:
        path = tmp_path / name
        if kw.get("create"):
            fr = FileRecords(str(path), **kw)
            if data:
                fr.append(data)
        else:
            path.write_bytes(data)
            fr = FileRecords(str(path), **kw)
        opened.append(fr)
        return fr

    yield make
    for fr in opened:
        fr.close()


def assert_located(exc: CorruptRecordError, path: str, position: int) -> None:
    assert exc.path == path and exc.position == position
    assert path in str(exc) and f"byte position {position}" in str(exc)


def three_batches() -> bytes:
    """FileRecordsTest's set-up: three single-record batches at offsets 0, 1, 2."""
    return b"".join(build_batch([SimpleRecord(None, v, 1000 + i)], base_offset=i) for i, v in enumerate(VALUES))


def mixed_segment() -> list[bytes]:
    """Entries of every magic and codec, as one segment's worth of batches."""
    recs = [SimpleRecord(b"k%d" % i if i % 2 else None, b"v%d" % i * (i + 1), 5000 + i,
                         (("h", b"x"), ("\u00e9", None)) if i % 3 == 0 else ()) for i in range(5)]
    entries = [build_legacy_batch(recs[:2], magic=0, base_offset=0),
               build_legacy_batch(recs, magic=0, codec=codecs.LZ4, base_offset=2),
               build_legacy_batch(recs, magic=1, codec=codecs.GZIP, base_offset=7),
               build_legacy_batch(recs[:1], magic=1, base_offset=12)]
    offset = 13
    for codec in (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD):
        entries.append(build_batch(recs, base_offset=offset, codec=codec, producer_id=9, producer_epoch=1,
                                   base_sequence=offset, is_transactional=codec == codecs.GZIP))
        offset += 5
    entries.append(build_control_batch(1, base_offset=offset, timestamp=6000, producer_id=9, producer_epoch=1))
    entries.append(build_empty_batch(RecordBatch(entries[-2])))
    entries.append(build_batch(recs, base_offset=offset + 1, timestamp_type=LOG_APPEND_TIME,
                               log_append_time_ms=7000))
    entries.append(build_batch(recs, base_offset=offset + 6, codec=codecs.LZ4, delete_horizon_ms=5002))
    return entries


# -- iteration ----------------------------------------------------------------------------------------------

def test_iterates_every_magic_in_one_file(new_file):
    entries = mixed_segment()
    fr = new_file(b"".join(entries))
    batches = list(fr.batches(strict=True))
    positions, pos = [], 0
    for e in entries:
        n = len(e)
        while n:  # uncompressed legacy batches are one entry per record
            (size,) = struct.unpack_from(">i", e, len(e) - n + 8)
            positions.append(pos)
            pos += 12 + size
            n -= 12 + size
    assert [b.file_position for b in batches] == positions
    assert [type(b) for b in batches[:5]] == [LegacyBatch] * 5
    assert {b.magic for b in batches} == {0, 1, 2}
    for b in batches:
        b.ensure_valid()
        assert b.path == fr.path
    offsets = [r.offset for b in batches for r in b.records()]
    assert offsets == list(range(len(offsets)))
    assert fr.batch_at(positions[5]).file_position == positions[5]


def test_batch_count_of_mixed_segment_matches_entry_headers(new_file):
    data = b"".join(mixed_segment())
    count, pos = 0, 0
    while pos < len(data):
        count += 1
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    assert len(list(new_file(data).batches(strict=True))) == count


def test_iter_batches_over_a_buffer_range():
    data = three_batches()
    size = len(data) // 3
    assert [b.base_offset for b in iter_batches(data, size)] == [1, 2]
    assert [b.base_offset for b in iter_batches(data, 0, 2 * size)] == [0, 1]
    assert [b.file_position for b in iter_batches(data, size, file_offset=1000)] == [1000 + size, 1000 + 2 * size]
    assert list(iter_batches(b"")) == []


def test_empty_file(new_file):
    fr = new_file(b"")
    assert list(fr.batches(strict=True)) == []
    assert fr.search_for_offset_with_size(0, 0) is None
    assert fr.largest_timestamp_after(0) == (-1, -1)


# -- partial tails and truncation (FileRecordsTest.testIterationOverPartialAndTruncation) -------------------

@pytest.mark.parametrize("tail", [0, 2, 4, 5, 6, 16])
def test_iteration_over_partial_zero_tail(new_file, tail):
    data = three_batches()
    fr = new_file(data + b"\x00" * tail)
    assert [r.value for b in fr.batches() for r in b.records()] == VALUES
    if tail:
        with pytest.raises(CorruptRecordError, match="truncated entry") as info:
            list(fr.batches(strict=True))
        assert_located(info.value, fr.path, len(data))


def test_bytes_beyond_the_logical_size_are_not_read(new_file):
    fr = new_file(three_batches(), create=True)
    with open(fr.path, "ab") as f:  # Kafka writes to the channel directly; the logical size is unchanged
        f.write(b"\x00" * 40)
    assert [r.value for b in fr.batches(strict=True) for r in b.records()] == VALUES


@pytest.mark.parametrize("cut", [1, 12, 16, 17, 30, 60, 69])
def test_partial_trailing_batch_stops_silently_unless_strict(new_file, cut):
    data = three_batches()
    tail = build_batch([SimpleRecord(b"k", b"v", 9)], base_offset=3)[:cut]
    fr = new_file(data + tail)
    assert [b.base_offset for b in fr.batches()] == [0, 1, 2]
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        list(fr.batches(strict=True))
    assert_located(info.value, fr.path, len(data))


@pytest.mark.parametrize("magic", [0, 1])
def test_partial_trailing_legacy_message(new_file, magic):
    data = three_batches()
    fr = new_file(data + build_legacy_batch([SimpleRecord(b"k", b"v" * 30, 9)], magic=magic)[:40])
    assert len(list(fr.batches())) == 3
    with pytest.raises(CorruptRecordError):
        list(fr.batches(strict=True))


@pytest.mark.parametrize("size_field", [-1, 0, 13, -2**31])
@pytest.mark.parametrize("strict", [False, True])
def test_size_field_below_14_is_corrupt(new_file, size_field, strict):
    data = three_batches()
    bad = bytearray(build_batch([SimpleRecord(b"k", b"v", 9)], base_offset=3))
    struct.pack_into(">i", bad, 8, size_field)
    fr = new_file(data + bytes(bad))
    with pytest.raises(CorruptRecordError, match="minimum record overhead") as info:
        list(fr.batches(strict=strict))
    assert_located(info.value, fr.path, len(data))


@pytest.mark.parametrize("size_field", [71, 10_000, 2**31 - 1])
def test_huge_size_field(new_file, size_field):
    data = three_batches()
    bad = bytearray(build_batch([SimpleRecord(b"k", b"v", 9)], base_offset=3))
    struct.pack_into(">i", bad, 8, size_field)
    fr = new_file(data + bytes(bad))
    assert [b.base_offset for b in fr.batches()] == [0, 1, 2]  # Kafka: a partial trailing batch
    with pytest.raises(CorruptRecordError, match="truncated batch") as info:
        list(fr.batches(strict=True))
    assert_located(info.value, fr.path, len(data))


@pytest.mark.parametrize("magic", [3, 4, 127, 128, 255])
@pytest.mark.parametrize("strict", [False, True])
def test_unknown_magic(new_file, magic, strict):
    data = three_batches()
    bad = bytearray(build_batch([SimpleRecord(b"k", b"v", 9)], base_offset=3))
    bad[16] = magic
    fr = new_file(data + bytes(bad) + data)
    with pytest.raises(CorruptRecordError, match=rf"unknown magic {magic}\b") as info:
        list(fr.batches(strict=strict))
    assert_located(info.value, fr.path, len(data))


def test_v2_entry_smaller_than_a_batch_header(new_file):
    # Size 14..48 passes the framing check but cannot hold a v2 header (spec 1.2: isValid needs 61 bytes).
    small = bytearray(build_batch([SimpleRecord(b"k", b"v", 9)]))[:40]
    struct.pack_into(">i", small, 8, 28)
    fr = new_file(bytes(small))
    with pytest.raises(CorruptRecordError) as info:
        for b in fr.batches(strict=True):
            b.ensure_valid()
    assert_located(info.value, fr.path, 0)
    fr2 = new_file(three_batches() + bytes(small) + three_batches(), name="00000000000000000009.log")
    batches = list(fr2.batches(strict=True))
    bad = batches[3]
    with pytest.raises(CorruptRecordError, match="minimum allowed overhead 61") as info:
        bad.ensure_valid()
    assert_located(info.value, fr2.path, len(three_batches()))
    with pytest.raises(StorageError):
        bad.records()


def test_header_bit_flip_is_detected_with_file_and_position(new_file):
    data = three_batches()
    flipped = bytearray(data)
    flipped[len(data) // 3 + 30] ^= 0x04  # base timestamp of the second batch
    fr = new_file(bytes(flipped))
    b0, b1, b2 = fr.batches(strict=True)
    b0.ensure_valid()
    b2.ensure_valid()
    with pytest.raises(CorruptRecordError, match="stored crc") as info:
        b1.ensure_valid()
    assert_located(info.value, fr.path, len(data) // 3)


def test_batch_at(new_file):
    data = three_batches()
    fr = new_file(data)
    size = len(data) // 3
    assert fr.batch_at(size).base_offset == 1
    assert fr.batch_at(len(data)) is None
    assert batch_at(data, 0, size - 1) is None  # the entry runs past ``end``
    with pytest.raises(CorruptRecordError):
        batch_at(data, 0, size - 1, "b.log", strict=True)


# -- truncation (FileRecordsTest.testTruncate*) -------------------------------------------------------------

def test_truncate(new_file):
    fr = new_file(three_batches(), create=True)
    first = next(fr.batches()).raw()
    _, end, _ = fr.search_for_offset_with_size(1, 0)
    assert fr.truncate_to(end) == len(three_batches()) - end
    assert [b.raw() for b in fr.batches(strict=True)] == [first]
    assert fr.size == len(first) == os.path.getsize(fr.path) == fr.physical_size()


def test_truncate_to_same_size_does_not_touch_the_file(new_file):
    fr = new_file(three_batches())
    mtime = os.stat(fr.path).st_mtime_ns
    os.utime(fr.path, ns=(mtime - 10**9, mtime - 10**9))
    assert fr.truncate_to(fr.size) == 0
    assert os.stat(fr.path).st_mtime_ns == mtime - 10**9


def test_truncate_beyond_size_or_negative_is_refused(new_file):
    fr = new_file(three_batches())
    for bad in (fr.size + 1, -1):
        with pytest.raises(ValueError):
            fr.truncate_to(bad)


def test_append_after_truncate_and_reopen(new_file, tmp_path):
    fr = new_file(three_batches(), create=True)
    _, end, _ = fr.search_for_offset_with_size(2, 0)
    fr.truncate_to(end)
    fr.append(build_batch([SimpleRecord(None, b"new", 5)], base_offset=2))
    assert [r.value for b in fr.batches(strict=True) for r in b.records()] == VALUES[:2] + [b"new"]
    fr.close()
    reopened = FileRecords(fr.path, writable=False)
    try:
        assert [b.base_offset for b in reopened.batches(strict=True)] == [0, 1, 2]
    finally:
        reopened.close()


# -- searches (FileRecordsTest.testSearch / testSearchForTimestamp) -----------------------------------------

def test_search_for_offset_with_size(new_file):
    data = three_batches() + build_batch([SimpleRecord(None, b"test", 5)], base_offset=50)
    fr = new_file(data)
    sizes = [b.size_in_bytes for b in fr.batches()]
    assert fr.search_for_offset_with_size(0, 0) == (0, 0, sizes[0])
    assert fr.search_for_offset_with_size(1, 0) == (1, sizes[0], sizes[1])
    assert fr.search_for_offset_with_size(1, sizes[0]) == (1, sizes[0], sizes[1])
    pos4 = sum(sizes[:3])
    assert fr.search_for_offset_with_size(3, pos4) == (50, pos4, sizes[3])  # non-existent offset
    assert fr.search_for_offset_with_size(50, pos4) == (50, pos4, sizes[3])
    assert fr.search_for_offset_with_size(3, 0) == (50, pos4, sizes[3])
    assert fr.search_for_offset_with_size(51, 0) is None
    # Starting after the batch holding the target returns the next batch (Kafka: lastOffset >= target).
    assert fr.search_for_offset_with_size(0, sizes[0]) == (1, sizes[0], sizes[1])


def test_search_for_offset_uses_last_offset_of_multi_record_batches(new_file):
    data = build_batch([SimpleRecord(b"a", b"1", 1)] * 3, base_offset=10, last_offset=20)
    data += build_legacy_batch([SimpleRecord(b"a", b"1", 1)] * 4, magic=1, codec=codecs.GZIP, base_offset=21)
    fr = new_file(data)
    first = len(data) - len(build_legacy_batch([SimpleRecord(b"a", b"1", 1)] * 4, magic=1, codec=codecs.GZIP,
                                               base_offset=21))
    assert fr.search_for_offset_with_size(15, 0) == (20, 0, first)
    assert fr.search_for_offset_with_size(21, 0) == (24, first, len(data) - first)


@pytest.mark.parametrize("magic", [1, 2])
def test_search_for_timestamp(new_file, magic):
    def one(offset, ts):
        if magic == 2:
            return build_batch([SimpleRecord(b"k", b"v", ts)], base_offset=offset)
        return build_legacy_batch([SimpleRecord(b"k", b"v", ts)], magic=1, base_offset=offset)

    fr = new_file(one(5, 10) + one(6, 11))
    assert fr.search_for_timestamp(9, 0, 0) == (10, 5)
    assert fr.search_for_timestamp(10, 0, 0) == (10, 5)
    assert fr.search_for_timestamp(11, 0, 0) == (11, 6)
    assert fr.search_for_timestamp(12, 0, 0) is None
    assert fr.search_for_timestamp(9, 0, 6) == (11, 6)  # starting offset filters records


def test_search_for_timestamp_within_batches(new_file):
    recs = [SimpleRecord(b"k", b"v", ts) for ts in (100, 300, 200, 400)]
    data = build_batch(recs, base_offset=0) + build_batch(recs, base_offset=4, codec=codecs.ZSTD)
    data += build_legacy_batch([SimpleRecord(b"k", b"v")], magic=0, base_offset=8)
    fr = new_file(data)
    assert fr.search_for_timestamp(250, 0, 0) == (300, 1)
    assert fr.search_for_timestamp(250, 0, 2) == (400, 3)
    assert fr.search_for_timestamp(250, 0, 4) == (300, 5)
    second = len(build_batch(recs, base_offset=0))
    assert fr.search_for_timestamp(0, second, 0) == (100, 4)
    assert fr.search_for_timestamp(401, 0, 0) is None
    # LogAppendTime batches: every record carries the append time.
    lat = new_file(build_batch(recs, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=999),
                   name="00000000000000000100.log")
    assert lat.search_for_timestamp(500, 0, 2) == (999, 2)


def test_largest_timestamp_after(new_file):
    data = build_batch([SimpleRecord(b"k", b"v", 50)], base_offset=0)
    data += build_batch([SimpleRecord(b"k", b"v", 90), SimpleRecord(b"k", b"v", 70)], base_offset=1)
    data += build_batch([SimpleRecord(b"k", b"v", 90)], base_offset=3)
    data += build_legacy_batch([SimpleRecord(b"k", b"v", 20)], magic=1, base_offset=4)
    fr = new_file(data)
    assert fr.largest_timestamp_after(0) == (90, 2)  # first batch holding the max
    pos3 = sum(b.size_in_bytes for b in list(fr.batches())[:2])
    assert fr.largest_timestamp_after(pos3) == (90, 3)
    assert fr.largest_timestamp_after(len(data)) == (-1, -1)


# -- preallocation (FileRecordsTest.testPreallocateTrue/False/ClearShutdown) --------------------------------

def test_preallocate_true(new_file):
    fr = new_file(create=True, preallocate_bytes=1024 * 1024)
    assert fr.size == 0
    assert fr.physical_size() == os.path.getsize(fr.path) == 1024 * 1024
    assert list(fr.batches(strict=True)) == []


def test_preallocate_false(new_file):
    fr = new_file(create=True)
    assert fr.size == 0 == fr.physical_size()


def test_preallocate_clear_shutdown(new_file):
    fr = new_file(create=True, preallocate_bytes=1024 * 1024)
    data = three_batches()
    assert fr.append(data) == len(data)
    assert fr.size == len(data) and fr.physical_size() == 1024 * 1024
    assert [r.value for b in fr.batches(strict=True) for r in b.records()] == VALUES
    fr.flush()
    fr.trim()
    assert fr.physical_size() == os.path.getsize(fr.path) == len(data)
    fr.close()
    reopened = FileRecords(fr.path)
    try:
        assert reopened.size == len(data)
        assert [b.base_offset for b in reopened.batches(strict=True)] == [0, 1, 2]
    finally:
        reopened.close()


def test_untrimmed_preallocated_file_reads_as_corrupt_after_reopen(new_file):
    # A crash before trim leaves zeros after the data; recovery sees a size-0 entry (spec 1.1).
    fr = new_file(create=True, preallocate_bytes=4096)
    fr.append(three_batches())
    fr.close()
    reopened = FileRecords(fr.path)
    try:
        assert reopened.size == 4096
        with pytest.raises(CorruptRecordError, match="record size 0") as info:
            list(reopened.batches())
        assert_located(info.value, fr.path, len(three_batches()))
    finally:
        reopened.close()


def test_file_larger_than_int_max_is_refused(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_SIZE + 1)  # sparse
    with pytest.raises(CorruptRecordError, match="larger than"):
        FileRecords(str(path))


def test_read_and_view(new_file):
    data = three_batches()
    fr = new_file(data, create=True)
    assert fr.read(0, 10) == data[:10]
    assert fr.read(len(data) - 5, 100) == data[-5:]
    assert bytes(fr.view()[:len(data)]) == data
    more = build_batch([SimpleRecord(None, b"more", 5)], base_offset=3)
    fr.append(more)
    assert [b.base_offset for b in fr.batches(strict=True)] == [0, 1, 2, 3]


# -- segments written by real Kafka ---------------------------------------------------------------------------

REAL_SEGMENTS = {
    "cluster-metadata-a.00000000000000000000.log": ("00000000000000000000.log", [(0, 1), (1, 3)]),
    "cluster-metadata-b.00000000000000000001.log": ("00000000000000000001.log", [(1, 1), (2, 2)]),
}


@pytest.mark.parametrize("fixture", sorted(REAL_SEGMENTS))
def test_real_kafka_segments(tmp_path, fixture):
    name, expected = REAL_SEGMENTS[fixture]
    partition = tmp_path / "__cluster_metadata-0"
    partition.mkdir()
    shutil.copyfile(REAL_KAFKA_FIXTURES / fixture, partition / name)
    fr = FileRecords(str(partition / name), writable=False)
    try:
        batches = list(fr.batches(strict=True))
        assert [(b.base_offset, b.records_count) for b in batches] == expected
        end = 0
        for b in batches:
            assert isinstance(b, RecordBatch) and b.magic == 2 and b.compression == codecs.NONE
            b.ensure_valid()
            assert b.file_position == end
            end += b.size_in_bytes
            records = b.records()
            assert len(records) == b.records_count
            assert [r.offset for r in records] == list(range(b.base_offset, b.last_offset + 1))
            assert records[0].timestamp == b.base_timestamp
            assert max(r.timestamp for r in records) == b.max_timestamp
            assert all(r.value for r in records)
        assert end == fr.size
        next_offset = batches[-1].next_offset
        assert present(fr.search_for_offset_with_size(next_offset - 1, 0))[0] == next_offset - 1
    finally:
        fr.close()


def test_real_kafka_segment_bytes_match_the_engine_writer():
    # Re-encoding each real batch's records with the engine's writer reproduces it byte for byte.
    for fixture in sorted(REAL_SEGMENTS):
        data = (REAL_KAFKA_FIXTURES / fixture).read_bytes()
        for b in iter_batches(data, strict=True):
            rebuilt = build_batch([SimpleRecord(r.key, r.value, r.timestamp, r.headers) for r in b.records()],
                                  base_offset=b.base_offset, partition_leader_epoch=b.partition_leader_epoch,
                                  producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                                  base_sequence=b.base_sequence, is_transactional=b.is_transactional,
                                  is_control=b.is_control, last_offset=b.last_offset)
            assert rebuilt == b.raw()


# -- mutation property: only typed errors escape ---------------------------------------------------------------

SEGMENT = b"".join(mixed_segment())


def consume(buf: bytes, path: str) -> None:
    """What recovery, verify and dump-log do with a segment; any StorageError must name the file."""
    try:
        for batch in iter_batches(buf, strict=True, path=path):
            for step in (batch.ensure_valid, batch.records, batch.control_type):
                try:
                    step()
                except StorageError as exc:
                    assert path in str(exc)
            for field in ("base_offset", "last_offset", "max_timestamp", "records_count", "last_sequence"):
                try:
                    getattr(batch, field)
                except StorageError as exc:
                    assert path in str(exc)
    except StorageError as exc:
        assert path in str(exc)


mutations = st.lists(st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(SEGMENT) * 8 - 1)),
    st.tuples(st.just("truncate"), st.integers(0, len(SEGMENT) - 1)),
    st.tuples(st.just("overwrite"), st.integers(0, len(SEGMENT) - 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, len(SEGMENT) - 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("byte"), st.integers(0, len(SEGMENT) - 1), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])),
), min_size=1, max_size=4)


def mutate(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for op in ops:
        if not buf:
            break
        kind, at = op[0], op[1] % (len(buf) * (8 if op[0] == "flip" else 1))
        if kind == "flip":
            buf[at // 8] ^= 1 << (at % 8)
        elif kind == "truncate":
            del buf[at:]
        elif kind == "overwrite":
            buf[at:at + len(op[2])] = op[2]
        elif kind == "insert":
            buf[at:at] = op[2]
        else:
            buf[at] = op[2]
    return bytes(buf)


@settings(deadline=None, max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(mutations)
def test_mutated_segments_raise_only_typed_errors(ops):
    consume(mutate(SEGMENT, ops), "fuzz/00000000000000000000.log")


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mutations, st.integers(0, len(mixed_segment()) - 1))
def test_mutated_batches_with_restamped_crc_raise_only_typed_errors(ops, which):
    # Re-stamp the CRC after damaging one v2 batch, so the record decoders (not the CRC) meet the damage.
    from crc32c import crc32c

    entries = mixed_segment()
    target = mutate(entries[which], ops)
    if len(target) >= 61 and target[16:17] == b"\x02":
        fixed = bytearray(target)
        (length,) = struct.unpack_from(">i", fixed, 8)
        struct.pack_into(">I", fixed, 17, crc32c(bytes(fixed[21:12 + length])))
        target = bytes(fixed)
    consume(b"".join(entries[:which]) + target + b"".join(entries[which + 1:]), "fuzz/seg.log")


def test_mutations_through_a_real_file(tmp_path):
    # The same rule with the mmap-backed reader: every single-byte change of the segment.
    path = tmp_path / "00000000000000000000.log"
    for at in range(0, len(SEGMENT), 7):
        data = bytearray(SEGMENT)
        data[at] ^= 0xA5
        path.write_bytes(bytes(data))
        fr = FileRecords(str(path), writable=False)
        try:
            consume_file(fr)
        finally:
            fr.close()


def consume_file(fr: FileRecords) -> None:
    try:
        for batch in fr.batches(strict=True):
            for step in (batch.ensure_valid, batch.records):
                try:
                    step()
                except StorageError as exc:
                    assert fr.path in str(exc)
    except StorageError as exc:
        assert fr.path in str(exc)


# -- the .log's size limit, its crash points and its errors ---------------------------------------------------------

def test_an_append_may_fill_the_file_to_int32_max_bytes_and_not_past_it(tmp_path):
    """Kafka's FileRecords.append: ``if (records.sizeInBytes() > Integer.MAX_VALUE - size.get())`` it refuses the
    append (a segment's positions are int32). The file here is sparse: only its last bytes are written."""
    path = tmp_path / "00000000000000000000.log"
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_SIZE - 10)
    fr = FileRecords(str(path))
    with pytest.raises(CorruptRecordError) as err:
        fr.append(b"x" * 11)
    assert (err.value.path, err.value.position) == (str(path), MAX_FILE_SIZE - 10)
    assert str(err.value) == (f"appending 11 bytes would make the log file larger than {MAX_FILE_SIZE} bytes "
                              f"(file {path}, byte position {MAX_FILE_SIZE - 10})")
    assert fr.size == os.path.getsize(path) == MAX_FILE_SIZE - 10
    assert fr.append(b"x" * 10) == 10
    assert fr.size == os.path.getsize(path) == MAX_FILE_SIZE
    fr.close()


def _die_in_child(step: str, path: str, data: bytes, stderr_path: str = os.devnull) -> int:
    """Append ``data`` to a new .log in a forked child that dies at ``step``; the child's exit status (its stderr
    goes to ``stderr_path``)."""
    from storage_engine import crashpoints
    pid = os.fork()
    if pid == 0:                                         # pragma: no cover - the child
        try:
            os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            crashpoints.arm(step)
            from tests.storage_engine.helpers import open_segment
            seg = open_segment(os.path.dirname(path), 0)
            seg.append(0, -1, 0, data)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.kills
def test_the_torn_append_crash_point_leaves_the_first_half_of_the_batch(tmp_path):
    """The crash tests' "append.torn" step: half of a batch is in the .log (max(1, n // 2) bytes), then SIGKILL."""
    import signal
    from tests.storage_engine.helpers import batch
    from tests.storage_engine.helpers import open_segment
    data = batch(0, "a" * 41)
    os.mkdir(tmp_path / "whole")
    whole = open_segment(tmp_path / "whole", 0)       # the same append, not interrupted
    whole.append(0, -1, 0, data)
    expected = open(whole.path, "rb").read()
    whole.close()
    assert expected == data
    path = str(tmp_path / "00000000000000000000.log")
    stderr_path = str(tmp_path / "stderr")
    status = _die_in_child("append.torn", path, data, stderr_path)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert open(path, "rb").read() == expected[:len(expected) // 2]
    # the dying process names its step on stderr, as every crash point does (the crash tests match on it)
    assert open(stderr_path, "rb").read() == b"CRASHPOINT append.torn\n"
    os.remove(path)
    status = _die_in_child("append.written", path, data)  # the batch is whole, its index entries not written
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert open(path, "rb").read() == expected


def test_an_fsync_failure_names_the_log_file(new_file, monkeypatch):
    import errno
    from storage_engine.errors import StorageIOError
    fr = new_file(three_batches())
    failure = OSError(errno.EIO, "Input/output error")

    def fail(fd):
        raise failure
    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(StorageIOError) as err:
        fr.flush()
    monkeypatch.undo()
    assert err.value.__cause__ is failure and err.value.path == fr.path
    assert str(err.value) == f"cannot fsync log file: {fr.path}: {failure}"


def test_a_short_write_is_completed_where_it_stopped(new_file, monkeypatch):
    """pwrite may write fewer bytes than asked (POSIX); the append writes the rest after them."""
    fr = new_file(b"", create=True)
    real_pwrite = os.pwrite
    calls = []

    def short_pwrite(fd, data, offset):
        calls.append((len(data), offset))
        return real_pwrite(fd, bytes(data)[:max(1, len(data) // 3)], offset)
    data = three_batches()
    monkeypatch.setattr(os, "pwrite", short_pwrite)
    assert fr.append(data) == len(data)
    monkeypatch.undo()
    assert len(calls) > 2 and calls[0] == (len(data), 0)
    assert open(fr.path, "rb").read() == data and fr.size == len(data)


# -- reading in windows: a batch larger than the window is read whole, a torn tail still stops the scan ---------------

@pytest.mark.parametrize("window", [1, 16, 17, 30, 61, 4096])
def test_batches_read_in_small_windows_are_the_batches_of_the_file(new_file, window):
    data = b"".join(mixed_segment())
    entries = [b.raw() for b in iter_batches(data)]
    positions = [b.file_position for b in iter_batches(data)]
    assert len(entries) > 4
    fr = new_file(data)
    assert [b.raw() for b in fr.read_batches(0, window=window)] == entries
    assert [b.file_position for b in fr.read_batches(positions[1], window=window)] == positions[1:]
    # an end inside the file: only the batches that end by it
    end = positions[3]
    assert [b.raw() for b in fr.read_batches(0, end, window=window)] == entries[:3]
    assert [b.raw() for b in fr.batches(0, end=end)] == entries[:3]
    assert [b.raw() for b in fr.read_batches(0, end - 1, window=window)] == entries[:2]


@pytest.mark.parametrize("window", [1, 17, 40, 4096])
@pytest.mark.parametrize("cut", [1, 16, 17, 40])
def test_a_torn_tail_read_in_small_windows_stops_silently_unless_strict(new_file, window, cut):
    whole = three_batches()
    last = build_batch([SimpleRecord(None, b"z" * 30, 5)], base_offset=3)
    fr = new_file(whole + last[:cut])
    assert [b.last_offset for b in fr.read_batches(0, window=window)] == [0, 1, 2]
    with pytest.raises(CorruptRecordError) as err:
        list(fr.read_batches(0, window=window, strict=True))
    assert err.value.position == len(whole)


def test_a_read_of_a_file_cut_meanwhile_ends_where_the_file_now_ends(new_file):
    """Another process may cut a .log (a torn tail, a truncation); a window read past the new end is short."""
    data = three_batches()
    fr = new_file(data)
    one = len(data) // 3
    os.truncate(fr.path, one + 5)
    assert [b.last_offset for b in fr.read_batches(0, window=one + 2)] == [0]
    assert [b.last_offset for b in fr.read_batches(0)] == [0]


def test_batch_at_reads_one_whole_entry_or_reports_a_short_header(new_file):
    data = three_batches()
    one = len(data) // 3
    fr = new_file(data + b"\x00" * 5)
    assert fr.batch_at(one).raw() == data[one:2 * one]
    assert fr.batch_at(len(data)) is None                       # 5 bytes: fewer than an entry header
    with pytest.raises(CorruptRecordError) as err:
        fr.batch_at(len(data), strict=True)
    assert "only 5 bytes left" in str(err.value) and err.value.position == len(data)
    small = new_file(struct.pack(">qi", 7, 13) + b"\x00" * 20, name="00000000000000000007.log")
    with pytest.raises(CorruptRecordError) as err:                # size 13 < 14: corrupt, whatever follows
        small.batch_at(0)
    assert str(err.value).startswith("record size 13 is smaller than the minimum record overhead (14)")
    exact = new_file(struct.pack(">qi", 7, 14) + b"\x00" * 20, name="00000000000000000008.log")
    assert exact.batch_at(0).size_in_bytes == 26                # size 14: an entry, read whole


def test_iter_batches_reads_positions_from_the_buffer_start_and_stops_at_a_torn_tail():
    """FileLogInputStream's rules over a buffer: positions count from its start; a partial last entry ends the
    iteration silently unless the reader is strict."""
    data = three_batches()
    one = len(data) // 3
    assert [b.file_position for b in iter_batches(data)] == [0, one, 2 * one]
    assert [b.last_offset for b in iter_batches(data + data[:one - 1])] == [0, 1, 2]
    with pytest.raises(CorruptRecordError):
        list(iter_batches(data + data[:one - 1], strict=True))


def test_batch_at_with_a_size_field_below_the_minimum_is_corrupt_not_a_torn_tail(new_file):
    fr = new_file(struct.pack(">qi", 7, 0) + b"\x02" * 30)
    with pytest.raises(CorruptRecordError) as err:
        fr.batch_at(0)
    assert str(err.value).startswith("record size 0 is smaller than the minimum record overhead (14)")


def test_the_recovery_view_covers_the_logical_size_read_only(new_file):
    """FileRecords.view: a read-only map of the logical size, re-mapped as the file grows, following a file cut
    shorter than known; an empty file is b""."""
    empty = new_file(b"", name="00000000000000000009.log")
    assert empty.view() == b""
    data = three_batches()
    fr = new_file(data[:len(data) // 3])
    view = fr.view()
    assert bytes(view) == data[:len(data) // 3]
    with pytest.raises(TypeError):
        view[0] = 1                                       # ACCESS_READ
    del view
    fr.append(data[len(data) // 3:])
    assert bytes(fr.view()) == data                       # grown: mapped again to the new size
    fr.drop_view()
    os.truncate(fr.path, 30)
    assert fr.view() is not None and fr.size == 30 and len(fr.view()) == 30


def test_a_map_failure_names_the_log_file(new_file, monkeypatch):
    import errno
    import mmap
    from storage_engine.errors import StorageIOError
    fr = new_file(three_batches())
    failure = OSError(errno.ENOMEM, "Cannot allocate memory")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(mmap, "mmap", fail)
    with pytest.raises(StorageIOError) as err:
        fr.view()
    monkeypatch.undo()
    assert err.value.__cause__ is failure
    assert str(err.value) == f"cannot map log file: {fr.path}: {failure}"


def test_a_new_log_file_is_created_rw_r__r__and_a_missing_one_is_named(tmp_path):
    from storage_engine.errors import StorageIOError
    umask = os.umask(0)
    os.umask(umask)
    path = str(tmp_path / "00000000000000000000.log")
    FileRecords(path, create=True).close()
    assert os.stat(path).st_mode & 0o777 == 0o644 & ~umask
    missing = str(tmp_path / "00000000000000000009.log")
    with pytest.raises(StorageIOError) as err:
        FileRecords(missing)
    assert isinstance(err.value.__cause__, FileNotFoundError)
    assert str(err.value) == f"cannot open log file: {missing}: {err.value.__cause__}"


def test_a_log_file_may_be_int32_max_bytes_long_and_not_longer(tmp_path):
    """Kafka's FileRecords: positions are int32, a file longer than Integer.MAX_VALUE is refused on open."""
    path = tmp_path / "00000000000000000000.log"
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_SIZE)
    fr = FileRecords(str(path))
    assert fr.size == MAX_FILE_SIZE
    fr.close()
    with open(path, "r+b") as f:
        f.truncate(MAX_FILE_SIZE + 1)
    with pytest.raises(CorruptRecordError) as err:
        FileRecords(str(path))
    assert (err.value.path, err.value.position) == (str(path), 0)
    assert str(err.value) == f"log file is larger than {MAX_FILE_SIZE} bytes (file {path}, byte position 0)"


@pytest.mark.parametrize("os_call, action, message", [
    ("pwrite", lambda fr: fr.append(b"x" * 30), "cannot append to log file"),
    ("pread", lambda fr: fr.read(0, 10), "cannot read log file"),
])
def test_os_errors_of_a_log_file_name_it(new_file, monkeypatch, os_call, action, message):
    fr = new_file(three_batches())
    size = fr.size
    err, failure = storage_error_when_failing(monkeypatch, os_call, action, fr)
    assert err.path == fr.path and str(err) == f"{message}: {fr.path}: {failure}"
    assert fr.size == size


def test_a_read_is_bounded_by_the_logical_size(new_file):
    data = three_batches()
    fr = new_file(data)
    assert fr.read(len(data) - 5, 100) == data[-5:]
    assert fr.read(len(data), 100) == b""
    assert fr.read(len(data) + 10, 100) == b""
    assert fr.read(3, 4) == data[3:7]
    assert fr.read(3, 0) == b""


def test_a_read_of_a_preallocated_file_stops_at_the_logical_size(new_file):
    """FileRecords.slice/readInto never go past ``sizeInBytes`` (the logical size): the zeroes of a preallocated tail
    are not records, whatever the physical size of the file."""
    data = three_batches()
    fr = new_file(data, create=True, preallocate_bytes=4096)
    assert (fr.size, fr.physical_size()) == (len(data), 4096)
    assert fr.read(len(data) - 5, 100) == data[-5:]
    assert fr.read(len(data), 100) == b""
    assert fr.read(len(data) - 1, 1) == data[-1:]
    assert [b.last_offset for b in fr.read_batches(0)] == [0, 1, 2]


def test_a_read_between_two_positions_inside_the_file_stops_at_the_end_position(new_file):
    """read_batches(start, end): the window read from ``start`` never covers bytes past ``end`` (Kafka's
    FileRecords.slice(position, size) view), however large the window."""
    data = b"".join(mixed_segment())
    entries = [b.raw() for b in iter_batches(data)]
    positions = [b.file_position for b in iter_batches(data)]
    fr = new_file(data)
    for window in (17, 4096, 10**6):
        got = [b.raw() for b in fr.read_batches(positions[1], positions[3], window=window)]
        assert got == entries[1:3], window
        assert [b.file_position for b in fr.read_batches(positions[2], positions[4], window=window)] == positions[2:4]


def _pread_log(monkeypatch) -> list[tuple[int, int]]:
    """Record (size, position) of every os.pread from now on (the real call is made)."""
    calls = []
    real = os.pread

    def logged(fd, size, position):
        calls.append((size, position))
        return real(fd, size, position)
    monkeypatch.setattr(os, "pread", logged)
    return calls


def test_a_windowed_read_issues_one_pread_per_window_and_none_past_the_end(new_file, monkeypatch):
    """FileLogInputStream reads an entry's 17-byte header (offset, size, magic) before the rest, and refuses a size
    field below 14 from that header alone; a file read in windows takes one pread per window and none once its
    end is reached."""
    data = three_batches()
    fr = new_file(data)
    calls = _pread_log(monkeypatch)
    assert [b.last_offset for b in fr.read_batches(0)] == [0, 1, 2]
    assert calls == [(len(data), 0)]
    one = len(data) // 3
    calls.clear()
    assert [b.last_offset for b in fr.read_batches(0, window=one)] == [0, 1, 2]
    assert calls == [(one, 0), (one, one), (one, 2 * one)]
    calls.clear()
    assert list(fr.read_batches(len(data))) == [] and list(fr.read_batches(one, one)) == []
    assert calls == []   # an empty range: the file is not read at all
    # a size field of 13 at a window's end: refused from the header read, nothing more is read
    bad = bytearray(data)
    struct.pack_into(">i", bad, 8, 13)
    bad_file = new_file(bytes(bad), name="00000000000000000100.log")
    calls.clear()
    with pytest.raises(CorruptRecordError) as err:
        list(bad_file.read_batches(0, window=HEADER_SIZE_UP_TO_MAGIC))
    assert_located(err.value, bad_file.path, 0)
    assert calls == [(HEADER_SIZE_UP_TO_MAGIC, 0)]


@pytest.mark.parametrize("window", [17, 20, 25, 4096])
def test_a_v0_message_of_the_minimum_size_read_across_a_window_boundary(new_file, window):
    """A v0 message with a null key and a null value is 14 bytes past its offset and size (LegacyRecord's
    RECORD_OVERHEAD_V0): the smallest legal size field, so a window ending inside it reads on, it is no torn tail."""
    smallest = build_legacy_batch([SimpleRecord(None, None, -1)], magic=0, base_offset=0)
    assert struct.unpack_from(">i", smallest, 8)[0] == 14 and len(smallest) == 26
    data = b"".join(build_legacy_batch([SimpleRecord(None, None, -1)], magic=0, base_offset=i) for i in range(4))
    fr = new_file(data)
    got = list(fr.read_batches(0, window=window))
    assert [(b.last_offset, b.file_position, b.size_in_bytes) for b in got] == [(i, 26 * i, 26) for i in range(4)]


def test_a_strict_read_names_the_bytes_that_follow_a_torn_header(new_file):
    """A torn last entry whose size field runs past the end of the file: the strict reader says how many of the
    declared bytes follow its 12-byte offset and size, counted from the entry's own position."""
    whole = three_batches()
    torn = bytearray(build_batch([SimpleRecord(None, b"z" * 30, 5)], base_offset=3))
    struct.pack_into(">i", torn, 8, 10_000)
    fr = new_file(whole + bytes(torn[:40]))
    for window in (17, 40, 4096, 10**6):
        assert [b.last_offset for b in fr.read_batches(0, window=window)] == [0, 1, 2]
        with pytest.raises(CorruptRecordError) as err:
            list(fr.read_batches(0, window=window, strict=True))
        assert str(err.value) == (f"truncated batch at offset 3: it declares 10000 bytes but only 28 follow "
                                  f"(file {fr.path}, byte position {len(whole)})"), window


def test_batch_at_positions_and_the_exact_truncation_messages():
    """FileLogInputStream.nextBatch: fewer than 17 bytes (offset, size, magic) end the stream; an entry running past
    the end is a partial trailing batch. Strict readers report both, with what was found."""
    data = three_batches()
    one = len(data) // 3
    found = batch_at(data, 0, len(data))
    assert found is not None and found.file_position == 0
    found = batch_at(data, one, len(data), file_offset=100)
    assert found is not None and found.file_position == 100 + one
    head = data[:HEADER_SIZE_UP_TO_MAGIC]                      # exactly the 17-byte header, no more
    assert batch_at(head, 0, len(head)) is None
    with pytest.raises(CorruptRecordError) as err:
        batch_at(head, 0, len(head), "f.log", strict=True)
    size = struct.unpack_from(">i", data, 8)[0]
    assert str(err.value) == (f"truncated batch at offset 0: it declares {size} bytes but only "
                              f"{HEADER_SIZE_UP_TO_MAGIC - 12} follow (file f.log, byte position 0)")
    with pytest.raises(CorruptRecordError) as err:
        batch_at(head[:16], 0, 16, "f.log", strict=True)
    assert str(err.value) == ("truncated entry: only 16 bytes left, fewer than the 17-byte entry header "
                              "(file f.log, byte position 0)")
    legacy = build_legacy_batch([SimpleRecord(None, b"v", 5)], magic=1, base_offset=7)
    found = batch_at(data + legacy, len(data), len(data) + len(legacy), file_offset=10)
    assert found is not None and found.file_position == 10 + len(data)


def test_a_log_file_holding_descriptor_zero_releases_it_and_closing_twice_closes_nothing_else(tmp_path):
    # A process started with its standard input closed hands out descriptor 0 to the first file it opens.
    path = str(tmp_path / "00000000000000000000.log")
    saved = os.dup(0)
    os.close(0)
    try:
        fr = FileRecords(path, create=True)
        os.fstat(0)                       # the .log holds it
        fr.close()
        with pytest.raises(OSError):
            os.fstat(0)                   # closed with the file, not leaked
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    fr = FileRecords(path)
    fr.close()
    sentinel = os.open(os.devnull, os.O_RDONLY)   # likely takes the number the file just freed
    try:
        fr.close()
        os.fstat(sentinel)
        os.fstat(1)
    finally:
        os.close(sentinel)
