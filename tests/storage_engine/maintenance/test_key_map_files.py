"""A key map built elsewhere, read back: the layout the Spark job writes (``<out>/keymap.json`` and
``<out>/data/bucket=<n>/part-*.parquet``, int64 columns ``key_hash_hi``, ``key_hash_lo``, ``offset``), written here
with pyarrow so the reader's rules are pinned without a JVM: the file order (buckets by number, not by name), the
manifest's checks (partition and offset range, with the messages the job's callers show), the column types, and
what the loaded map answers (its latest offset is the manifest's end offset - 1: no partial round)."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage_engine.errors import StorageError
from storage_engine.maintenance.offset_map import MANIFEST, SortedHashOffsetMap, key_hash, map_files

pytestmark = pytest.mark.unit


def write_part(path, rows, *, offset_type=None, row_group_size=None) -> None:
    """One Parquet file of (hi, lo, offset) rows, as the job's bucket task writes it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    hi, lo, off = (list(c) for c in zip(*rows)) if rows else ([], [], [])
    table = pa.table({"key_hash_hi": pa.array(hi, pa.int64()), "key_hash_lo": pa.array(lo, pa.int64()),
                      "offset": pa.array(off, offset_type or pa.int64())})
    pq.write_table(table, path, row_group_size=row_group_size)


def write_manifest(out, **fields) -> None:
    manifest = {"topic": "kv", "partition": 3, "start_offset": 10, "end_offset": 250}
    manifest.update(fields)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump(manifest, f)


def key_rows(keys_offsets):
    return sorted((*key_hash(k), o) for k, o in keys_offsets)


def spark_layout(tmp_path, keys_offsets, buckets: int = 3):
    """The job's output for these keys: hashes split into ``buckets`` ranges by the top bits, each sorted."""
    out = str(tmp_path / "km")
    rows = key_rows(keys_offsets)
    per = -(-len(rows) // buckets)
    for n in range(buckets):
        write_part(os.path.join(out, "data", f"bucket={n}", "part-00000-c000.snappy.parquet"),
                   rows[n * per:(n + 1) * per])
    write_manifest(out)
    return out


# -- the file order ------------------------------------------------------------------------------------------

def test_bucket_directories_in_numeric_order(tmp_path):
    # bucket=10 holds the highest hashes: after bucket=9, though "bucket=10" < "bucket=9" as text
    data = tmp_path / "data"
    for n in (10, 9, 0, 2):
        write_part(str(data / f"bucket={n}" / "part-1.parquet"), [])
    assert map_files(str(data)) == [str(data / f"bucket={n}" / "part-1.parquet") for n in (0, 2, 9, 10)]


def test_loose_files_first_then_buckets_and_names_sorted_within_a_directory(tmp_path):
    data = tmp_path / "data"
    write_part(str(data / "b.parquet"), [])
    write_part(str(data / "a.parquet"), [])
    write_part(str(data / "bucket=1" / "part-2.parquet"), [])
    write_part(str(data / "bucket=1" / "part-10.parquet"), [])
    write_part(str(data / "bucket=0" / "z.parquet"), [])
    # what else a Spark job leaves in its output is not a part file
    (data / "_SUCCESS").write_text("")
    (data / ".a.parquet.crc").write_bytes(b"x")
    (data / "bucket=1" / "_SUCCESS").write_text("")
    (data / "bucket=1" / ".part-2.parquet.crc").write_bytes(b"x")
    (data / "bucket=7").write_text("a file, not a bucket directory")
    assert map_files(str(data)) == [str(data / "a.parquet"), str(data / "b.parquet"),
                                    str(data / "bucket=0" / "z.parquet"),
                                    str(data / "bucket=1" / "part-10.parquet"),
                                    str(data / "bucket=1" / "part-2.parquet")]


def test_a_bucket_directory_without_a_number_is_refused(tmp_path):
    data = tmp_path / "data"
    (data / "bucket=x1").mkdir(parents=True)
    with pytest.raises(StorageError) as err:
        map_files(str(data))
    assert str(err.value) == f"key map directory {data / 'bucket=x1'} is not named bucket=<number>"


def test_other_directories_are_not_buckets(tmp_path):
    data = tmp_path / "data"
    write_part(str(data / "_temporary" / "part-0.parquet"), [])
    write_part(str(data / "bucket=3" / "part-0.parquet"), [])
    assert map_files(str(data)) == [str(data / "bucket=3" / "part-0.parquet")]


# -- loading -------------------------------------------------------------------------------------------------

def test_loaded_map_answers_the_latest_offset_of_each_key(tmp_path):
    keys = {b"k%d" % i: 10 + 3 * i for i in range(60)}
    out = spark_layout(tmp_path, keys.items())
    m = SortedHashOffsetMap.load(out, expect_start=10, expect_end=250, expect_partition=("kv", 3))
    assert m.size == m.max_entries == 60
    assert (m.start_offset, m.end_offset, m.latest_offset) == (10, 250, 249)   # the whole range: no partial round
    assert m.manifest == {"topic": "kv", "partition": 3, "start_offset": 10, "end_offset": 250}
    assert m.utilization == 1.0 and m.nbytes == 60 * 20          # two int64 hash halves, a uint32 offset
    assert [m.get(k) for k in keys] == list(keys.values())
    assert m.get(b"absent") == -1 and m.get_many([b"k0", b"absent", b"k59"]) == [10, -1, 187]
    rows = key_rows(keys.items())
    assert m._hi.tolist() == [r[0] for r in rows] and m._lo.tolist() == [r[1] for r in rows]
    assert m.offsets().tolist() == [r[2] for r in rows]


def test_rows_of_another_writer_are_sorted_on_load(tmp_path):
    keys = [(b"u%d" % i, i) for i in range(40)]
    out = str(tmp_path / "km")
    rows = key_rows(keys)[::-1]                     # descending: another writer's order
    write_part(os.path.join(out, "data", "part-0.parquet"), rows[:25], row_group_size=7)
    write_part(os.path.join(out, "data", "part-1.parquet"), rows[25:], offset_type=pa.int32())
    write_manifest(out, start_offset=0, end_offset=40)
    m = SortedHashOffsetMap.load(out)
    assert m._hi.tolist() == [r[0] for r in rows[::-1]] and m.offsets().tolist() == [r[2] for r in rows[::-1]]
    assert [m.get(k) for k, _ in keys] == [o for _, o in keys]


def test_many_row_groups_and_an_empty_bucket(tmp_path):
    rows = [(h, h * 7, h * 2 + 600) for h in range(-300, 300)]
    out = str(tmp_path / "km")
    write_part(os.path.join(out, "data", "bucket=0", "p.parquet"), rows[:250], row_group_size=16)
    write_part(os.path.join(out, "data", "bucket=1", "p.parquet"), [])
    write_part(os.path.join(out, "data", "bucket=2", "p.parquet"), rows[250:], row_group_size=100)
    write_manifest(out, start_offset=0, end_offset=1200)
    m = SortedHashOffsetMap.load(out)
    assert m.size == 600
    assert list(zip(m._hi.tolist(), m._lo.tolist(), m.offsets().tolist())) == rows


def test_an_empty_map(tmp_path):
    out = str(tmp_path / "km")
    write_part(os.path.join(out, "data", "bucket=0", "p.parquet"), [])
    write_manifest(out, start_offset=5, end_offset=5)
    m = SortedHashOffsetMap.load(out)
    assert (m.size, m.utilization, m.latest_offset, m.get(b"a")) == (0, 0.0, 4, -1)


def test_null_offsets_are_refused(tmp_path):
    out = str(tmp_path / "km")
    part = os.path.join(out, "data", "bucket=0", "p.parquet")
    os.makedirs(os.path.dirname(part))
    pq.write_table(pa.table({"key_hash_hi": pa.array([1, 2], pa.int64()), "key_hash_lo": pa.array([1, 2], pa.int64()),
                             "offset": pa.array([4, None], pa.int64())}), part)
    write_manifest(out)
    with pytest.raises(StorageError) as err:
        SortedHashOffsetMap.load(out)
    assert str(err.value) == f"key map file {part}: column offset has null values"


@pytest.mark.parametrize("content", [None, b"{not json"])
def test_a_missing_or_unreadable_manifest_is_refused(tmp_path, content):
    out = tmp_path / "km"
    write_part(str(out / "data" / "bucket=0" / "p.parquet"), [(1, 1, 1)])
    if content is not None:
        (out / MANIFEST).write_bytes(content)
    with pytest.raises(StorageError, match=rf"^key map at {out} has no readable keymap\.json: "):
        SortedHashOffsetMap.load(str(out))


@pytest.mark.parametrize("expect", [("kv", 4), ("other", 3)])
def test_a_map_of_another_partition_is_refused(tmp_path, expect):
    out = spark_layout(tmp_path, [(b"a", 11)])
    with pytest.raises(StorageError) as err:
        SortedHashOffsetMap.load(out, expect_partition=expect)
    assert str(err.value) == f"key map at {out} is for kv-3, not {expect[0]}-{expect[1]}"


def test_a_map_without_partition_fields_is_refused_when_one_is_expected(tmp_path):
    out = str(tmp_path / "km")
    write_part(os.path.join(out, "data", "p.parquet"), [(1, 1, 1)])
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump({"start_offset": "0", "end_offset": "9"}, f)      # numbers as text are read as numbers
    with pytest.raises(StorageError) as err:
        SortedHashOffsetMap.load(out, expect_partition=("kv", 3))
    assert str(err.value) == f"key map at {out} is for None-None, not kv-3"
    m = SortedHashOffsetMap.load(out, expect_start=0, expect_end=9)
    assert (m.start_offset, m.end_offset, m.latest_offset) == (0, 9, 8)


@pytest.mark.parametrize("start, end", [(11, 250), (9, 250), (10, 249), (10, 251), (None, 251), (11, None)])
def test_a_map_of_another_offset_range_is_refused(tmp_path, start, end):
    out = spark_layout(tmp_path, [(b"a", 11)])
    with pytest.raises(StorageError) as err:
        SortedHashOffsetMap.load(out, expect_start=start, expect_end=end)
    assert str(err.value) == f"key map at {out} covers [10, 250), expected [{start}, {end})"


@pytest.mark.parametrize("start, end", [(10, 250), (10, None), (None, 250), (None, None)])
def test_a_map_of_the_expected_range_loads(tmp_path, start, end):
    out = spark_layout(tmp_path, [(b"a", 11), (b"b", 12)])
    m = SortedHashOffsetMap.load(out, expect_start=start, expect_end=end, expect_partition=("kv", 3))
    assert (m.get(b"a"), m.get(b"b"), m.latest_offset) == (11, 12, 249)


def test_duplicate_hashes_are_refused_by_the_compiled_probe(tmp_path, kernels):
    out = str(tmp_path / "km")
    write_part(os.path.join(out, "data", "p.parquet"), [(1, 1, 11), (1, 1, 12), (2, 0, 13)])
    write_manifest(out)
    m = SortedHashOffsetMap.load(out)
    if kernels == "c":
        with pytest.raises(StorageError) as err:
            m.get(b"a")
        assert str(err.value) == "key map arrays are not strictly sorted by hash (a duplicate key hash?)"


# -- the offsets' width -----------------------------------------------------------------------------------------
# Kafka's SkimpyOffsetMap holds 24 bytes per entry (a 16-byte MD5 and an 8-byte offset). Every offset of a key map
# lies in the range it covers, so a map spanning fewer than 2**32 offsets holds them in 32 bits relative to its
# start: 20 bytes per key. Wider ranges keep 64-bit offsets.

@pytest.mark.parametrize("start, end, width", [
    (10**12, 10**12 + 500, 4),                 # offsets far above 2**32, a narrow range
    (7, 7 + 2**32, 4),                         # the widest range 32 bits hold: the last delta is 2**32 - 1
    (7, 8 + 2**32, 8),                         # one offset more
])
def test_offsets_are_held_relative_to_the_start_when_the_range_allows(tmp_path, start, end, width, kernels):
    keys = {b"first": start, b"mid": start + 3, b"last": end - 1}
    out = str(tmp_path / "km")
    write_part(os.path.join(out, "data", "p.parquet"), key_rows(keys.items()))
    write_manifest(out, start_offset=start, end_offset=end)
    m = SortedHashOffsetMap.load(out)
    assert m._off.dtype.itemsize == width and m.nbytes == 3 * (16 + width)
    if kernels == "c":          # the compiled probe reads the 32-bit layout itself
        assert m.kernel_spec is not None
        assert m.kernel_spec[0] == (2 if width == 4 else 1)
    assert [m.get(k) for k in keys] == list(keys.values())
    assert m.get_many([b"last", b"absent", b"first"]) == [end - 1, -1, start]
    assert sorted(m.offsets().tolist()) == sorted(keys.values())


@pytest.mark.parametrize("offset", [9, 250, -1])
def test_an_offset_outside_the_range_the_map_covers_is_refused(tmp_path, offset):
    # the manifest says the map covers [10, 250): a row outside it is not a record of that range
    out = str(tmp_path / "km")
    part = os.path.join(out, "data", "bucket=0", "p.parquet")
    write_part(part, [(1, 0, 10), (2, 0, offset), (3, 0, 249)])
    write_manifest(out)
    with pytest.raises(StorageError) as err:
        SortedHashOffsetMap.load(out)
    assert str(err.value) == f"key map file {part}: offset {offset} is outside the map's range [10, 250)"


@pytest.mark.parametrize("offsets, width, base", [
    ([2**40 + 5, 2**40, 2**40 + 2**32 - 1], 4, 2**40),   # 32 bits relative to the smallest offset
    ([0, 2**32, 1], 8, 0),                                # a span of 2**32 does not fit
    ([], 4, 0),
])
def test_a_map_built_from_absolute_offsets_narrows_them_when_it_can(offsets, width, base):
    n = len(offsets)
    m = SortedHashOffsetMap(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                            np.array(offsets, dtype=np.int64), 0, 2**41)
    assert (m._off.dtype.itemsize, m._base) == (width, base)
    assert m.offsets().dtype == np.int64 and m.offsets().tolist() == offsets and m.nbytes == n * (16 + width)


def test_a_prebuilt_map_cannot_be_cleared(tmp_path):
    # the cleaner clears an in-process map before a round; a map built by the job covers its range as is
    out = spark_layout(tmp_path, [(b"a", 11)])
    m = SortedHashOffsetMap.load(out)
    with pytest.raises(StorageError) as err:
        m.clear()
    assert str(err.value) == "a prebuilt key map cannot be rebuilt in place"
    assert m.get(b"a") == 11


# -- footers that disagree with their row groups ---------------------------------------------------------------

def _varint(v: int) -> bytes:
    out = b""
    while True:
        byte, v = v & 0x7F, v >> 7
        if not v:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def footer_says(path: str, rows: int, says: int) -> None:
    """Rewrite the file's footer row count (FileMetaData.num_rows, Thrift compact: field 3, i64 zigzag varint,
    followed by field 4, the row-group list) without touching its row groups."""
    data = open(path, "rb").read()
    meta_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - meta_len
    old, new = b"\x16" + _varint(2 * rows) + b"\x19", b"\x16" + _varint(2 * says) + b"\x19"
    assert len(old) == len(new) and data[start:-8].count(old) == 1
    open(path, "wb").write(data[:start] + data[start:-8].replace(old, new) + data[-8:])
    pf = pq.ParquetFile(path)
    assert (pf.metadata.num_rows, pf.metadata.row_group(0).num_rows) == (says, rows)


@pytest.mark.parametrize("says, message", [
    (99, "key map file {part} holds more rows than its footer says (99)"),
    (101, "key map file {part} holds 100 rows, its footer says 101"),
])
def test_a_file_whose_footer_miscounts_its_rows_is_refused(tmp_path, says, message):
    # the columns are sized from the footers: a file holding another count than its footer says is corrupt
    out = str(tmp_path / "km")
    part = os.path.join(out, "data", "bucket=1", "p.parquet")
    write_part(os.path.join(out, "data", "bucket=0", "p.parquet"), [(-5, 0, 11), (-4, 0, 12)])
    write_part(part, [(h, 0, h + 20) for h in range(100)])
    footer_says(part, 100, says)
    write_manifest(out)
    with pytest.raises(StorageError) as err:
        SortedHashOffsetMap.load(out)
    assert str(err.value) == message.format(part=part)


# -- JSON encodings of the manifest ----------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_the_manifest_is_json_in_any_encoding_json_detects(tmp_path, encoding):
    # keymap.json is parsed from its bytes (json.loads detects UTF-8 with or without a byte order mark, UTF-16,
    # UTF-32), not decoded as text in the process's locale first
    out = spark_layout(tmp_path, [(b"a", 11)])
    text = json.dumps({"topic": "kv-é", "partition": 3, "start_offset": 10, "end_offset": 250})
    with open(os.path.join(out, MANIFEST), "wb") as f:
        f.write(text.encode(encoding))
    m = SortedHashOffsetMap.load(out, expect_partition=("kv-é", 3))
    assert (m.get(b"a"), m.latest_offset) == (11, 249)


# -- the order the binary search relies on ---------------------------------------------------------------------

@pytest.mark.parametrize("hi, lo", [
    ([1, 0], [0, 0]),                  # two rows, out of order
    ([1, 0, 2], [0, 0, 0]),            # the first pair
    ([0, 1, 3, 2], [0, 0, 0, 0]),      # the last pair
    ([5, 5, 5], [1, 0, 2]),            # the low halves under one high half
    ([5, 5], [2, 1]),
    ([6, 5], [1, 2]),                  # a smaller high half with a larger low half
])
def test_rows_out_of_hash_order_are_sorted_by_high_then_low_half(hi, lo, kernels):
    # the probe is a binary search over (high, low): any pair out of that order must be found and sorted
    off = list(range(100, 100 + len(hi)))
    m = SortedHashOffsetMap(np.array(hi, dtype=np.int64), np.array(lo, dtype=np.int64), np.array(off, dtype=np.int64),
                            0, 1000)
    want = sorted(zip(hi, lo, off))
    assert list(zip(m._hi.tolist(), m._lo.tolist(), m.offsets().tolist())) == want


def test_probe_among_keys_sharing_the_high_half(tmp_path, kernels):
    # Entries with the probed key's high hash half but other low halves (any writer's rows, not only 128-bit
    # hashes of real keys): the probe scans that run in low-half order and stops at the first larger one
    hi, lo = key_hash(b"a")
    below = [(hi - 1, 0, 11), (hi - 1, 1, 12)]
    rows = below + [(hi, lo - 1, 13), (hi, lo, 14), (hi, lo + 1, 15)]
    out = str(tmp_path / "km")
    write_part(os.path.join(out, "data", "p.parquet"), rows)
    write_manifest(out)
    m = SortedHashOffsetMap.load(out)
    assert m.get(b"a") == 14 and m.get_many([b"a"]) == [14]
    out2 = str(tmp_path / "km2")
    write_part(os.path.join(out2, "data", "p.parquet"), below + [(hi, lo - 2, 13), (hi, lo - 1, 14), (hi, lo + 1, 15)])
    write_manifest(out2)
    m2 = SortedHashOffsetMap.load(out2)
    assert m2.get(b"a") == -1 and m2.get_many([b"a", b"b"]) == [-1, -1]


class CountingMap(SortedHashOffsetMap):
    """A map that answers get() itself (here: counting the probes): the compiled probe must not be used for it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.probes = 0

    def get(self, key: bytes) -> int:
        self.probes += 1
        return super().get(key)


def test_a_subclass_answering_get_itself_is_probed_in_python(tmp_path, kernels):
    keys = {b"k%d" % i: 10 + i for i in range(50)}
    out = spark_layout(tmp_path, keys.items())
    loaded = SortedHashOffsetMap.load(out)
    m = CountingMap(loaded._hi, loaded._lo, loaded.offsets(), 10, 250)
    assert m.kernel_spec is None
    assert [m.get(k) for k in keys] == list(keys.values()) and m.probes == 50
    assert m.get_many([b"k3", b"nope", b"k49"]) == [13, -1, 59]


def test_order_check_in_windows_finds_every_pair_out_of_order(kernels):
    # _is_sorted: strictly increasing by (high, low), checked window by window (``chunk`` pairs at a time) without
    # the compiled kernels: a pair out of order or a repeated hash anywhere, including across window borders,
    # means "not sorted"
    from storage_engine.maintenance.offset_map import _is_sorted

    def check(pairs, chunk):
        hi = np.array([p[0] for p in pairs], dtype=np.int64)
        lo = np.array([p[1] for p in pairs], dtype=np.int64)
        return _is_sorted(hi, lo, chunk)

    for n in range(0, 9):
        base = [(h // 2, h % 2) for h in range(n)]             # strictly increasing, pairs of equal high halves
        for chunk in (1, 2, 3, 8):
            assert check(base, chunk) is True, (n, chunk)
            for i in range(n - 1):
                swapped = base[:i] + [base[i + 1], base[i]] + base[i + 2:]
                assert check(swapped, chunk) is False, (n, chunk, i)
                repeated = base[:i] + [base[i], base[i]] + base[i + 2:]
                assert check(repeated, chunk) is False, (n, chunk, i)
