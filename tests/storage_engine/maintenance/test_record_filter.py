"""The compaction kernels against their Python twins: the key-map table (put/get), filling the map from a batch,
the record filter (in-process and sorted maps) and the sorted map's probes. Hypothesis draws the batches (codecs,
timestamp types, tombstones, keyless records, headers, offset gaps, delete horizons), the map contents and the
round's parameters; both sides must leave byte-identical tables, return byte-identical batches and count the same
statistics, or raise the same error. Mutated records sections check that the compiled side never accepts what
the Python decoder rejects. Also: the map's resident size stays within the dedupe buffer (RSS of a subprocess).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from types import ModuleType
from typing import cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine.maintenance import record_filter
from storage_engine.maintenance.cleaner import CleanerStats
from storage_engine.maintenance.offset_map import (InProcessOffsetMap, SortedHashOffsetMap, _py_table_get,
                                                   _py_table_put, key_hash)
from storage_engine.record import codecs
from storage_engine.record import kernels as record_kernels
from storage_engine.record.record_batch import LOG_APPEND_TIME, RecordBatch, build_batch
from storage_engine.record.records import SimpleRecord
from tests.paths import REPO
from tests.storage_engine.kernels import use
from tests.storage_engine.record.test_speedups import mutate

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(record_kernels.COMPILED is None, reason="C speedups not built")]
K = cast(ModuleType, record_kernels.COMPILED)   # (every test here is skipped when it is None)
PROPERTY = settings(deadline=None, max_examples=250,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
KEYS = [b"a", b"b", b"c", b"key-4", b"", b"\x00\x01"]


@pytest.fixture(params=["c"])
def kernels():
    """Overrides the package's two-implementation fixture: these tests call both sides themselves."""
    return "c"


# -- the table ---------------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 40), st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.integers(0, 10**6)),
                                    max_size=120))
def test_table_put_and_get_identical(slots, ops):
    # Few slots and hashes forced into a few home slots: wrap-around, long Robin Hood chains, a full table.
    tc, tp = array("q", [0]) * (3 * slots), array("q", [0]) * (3 * slots)
    entries_c = entries_p = 0
    for is_put, k, offset in ops:
        hi, lo = ((k % 4) << 62) - (1 << 63), k      # 4 home regions only
        if is_put:
            rc = K.table_put(tc, slots, entries_c, hi, lo, offset)
            rp = _py_table_put(tp, slots, entries_p, hi, lo, offset)
            assert rc == rp
            entries_c += max(rc, 0)
            entries_p += max(rp, 0)
        else:
            assert K.table_get(tc, slots, hi, lo) == _py_table_get(tp, slots, hi, lo)
        assert tc.tobytes() == tp.tobytes()
    for k in range(61):
        hi, lo = ((k % 4) << 62) - (1 << 63), k
        assert K.table_get(tc, slots, hi, lo) == _py_table_get(tp, slots, hi, lo)


def test_map_agrees_with_a_dict_at_full_load(monkeypatch):
    for impl in ("c", "python"):
        use(monkeypatch, impl)
        m = InProcessOffsetMap(24 * 1000, load_factor=1.0)
        model = {}
        for i in range(3000):
            key = b"k%d" % (i * 7919 % 1400)
            if m.size < m.slots or key in model:
                m.put(key, i)
                model[key] = i
        assert m.size == len(model) == m.slots
        assert all(m.get(k) == v for k, v in model.items())
        assert all(m.get(b"absent%d" % i) == -1 for i in range(500))
        m.clear()
        assert m.size == 0 and m.get(b"k0") == -1


def test_key_hash_matches_the_python_hash():
    for key in KEYS + [os.urandom(n) for n in (1, 15, 16, 17, 129, 240, 241, 5000)]:
        assert K.key_hash(key) == key_hash(key)


# -- batches -----------------------------------------------------------------------------------------------

headers = st.lists(st.tuples(st.sampled_from(["h", "\udcff", "ü"]), st.one_of(st.none(), st.binary(max_size=4))),
                   max_size=2).map(tuple)


@st.composite
def batches(draw):
    n = draw(st.integers(0, 12))
    ts0 = draw(st.sampled_from([0, 1_700_000_000_000]))
    recs = [SimpleRecord(draw(st.one_of(st.none(), st.sampled_from(KEYS))),
                         draw(st.one_of(st.none(), st.binary(max_size=20))),
                         ts0 + draw(st.integers(-1, 5000)) if draw(st.booleans()) else -1, draw(headers))
            for _ in range(n)]
    base = draw(st.integers(0, 1000))
    offsets = None
    if recs and draw(st.booleans()):
        offsets, off = [], base
        for _ in recs:
            offsets.append(off)
            off += draw(st.integers(1, 4))
    last = None if not recs else (offsets[-1] if offsets else base + n - 1) + draw(st.integers(0, 3))
    codec = draw(st.sampled_from([codecs.NONE, codecs.NONE, codecs.GZIP, codecs.LZ4, codecs.ZSTD]))
    log_append = draw(st.booleans())
    horizon = draw(st.one_of(st.none(), st.integers(ts0, ts0 + 10_000)))
    producer = draw(st.sampled_from([(-1, -1, -1, False), (7, 2, 100, True), (7, 2, 100, False)]))
    data = build_batch(recs, base_offset=base, codec=codec, timestamp_type=LOG_APPEND_TIME if log_append else 0,
                       log_append_time_ms=ts0 + 77 if log_append else None, producer_id=producer[0],
                       producer_epoch=producer[1], base_sequence=producer[2], is_transactional=producer[3],
                       partition_leader_epoch=draw(st.integers(-1, 5)), delete_horizon_ms=horizon, offsets=offsets,
                       last_offset=last)
    return data


def outcome(fn, *args):
    stats = CleanerStats()
    try:
        result = fn(*args, stats)
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return ("error", type(exc).__name__, str(exc))
    if result is not None:
        result = (bytes(result[0]), result[1])
    s = stats.as_dict()
    return ("ok", result, {k: s[k] for k in ("messages_read", "messages_written", "invalid_messages_read",
                                             "tombstones_removed")})


def filled_map(entries, latest):
    m = InProcessOffsetMap(24 * 64)
    for key, offset in entries:
        m.put(key, offset)
    m.latest_offset = latest
    return m


def filter_both(monkeypatch, data, offset_map, now_ms, retention_ms, upper):
    batch = RecordBatch(data, 0)
    args = (batch, offset_map, now_ms, retention_ms, True, upper)
    use(monkeypatch, "c")
    c = outcome(record_filter.filter_batch, *args)
    use(monkeypatch, "python")
    py = outcome(record_filter.filter_batch, *args)
    return c, py


map_entries = st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 1100)), max_size=8)


@PROPERTY
@given(batches(), map_entries, st.integers(-1, 1100), st.integers(1_699_999_999_000, 1_700_000_020_000),
       st.sampled_from([0, 1000, 86_400_000]), st.booleans())
def test_filter_batch_identical(monkeypatch, data, entries, latest, now_ms, retention_ms, upper):
    c, py = filter_both(monkeypatch, data, filled_map(entries, latest), now_ms, retention_ms, upper)
    assert c == py


@PROPERTY
@given(batches(), map_entries, st.integers(-1, 1100))
def test_filter_batch_with_a_sorted_map_identical(monkeypatch, data, entries, latest):
    model = dict(entries)
    hashes = sorted((key_hash(k), o) for k, o in model.items())
    hi = np.array([h[0][0] for h in hashes], dtype=np.int64)
    lo = np.array([h[0][1] for h in hashes], dtype=np.int64)
    off = np.array([h[1] for h in hashes], dtype=np.int64)
    sorted_map = SortedHashOffsetMap(hi, lo, off, 0, latest + 1)
    in_process = filled_map(entries, latest)
    c, py = filter_both(monkeypatch, data, sorted_map, 1_700_000_000_000, 1000, False)
    assert c == py
    assert c == filter_both(monkeypatch, data, in_process, 1_700_000_000_000, 1000, False)[0]


@PROPERTY
@given(batches(), st.data())
def test_mutated_records_sections_identical(monkeypatch, data, draw):
    # Corrupt the records section of an uncompressed batch: the compiled side hands back whatever the decoder
    # rejects, so both sides raise the same InvalidRecordError or return the same result.
    batch = RecordBatch(data, 0)
    if batch.compression != codecs.NONE:
        return
    body = mutate(data[61:], draw.draw)
    corrupt = bytearray(data[:61]) + body
    corrupt[8:12] = (len(corrupt) - 12).to_bytes(4, "big")
    count = batch.records_count + draw.draw(st.integers(-1, 1))
    corrupt[57:61] = count.to_bytes(4, "big", signed=True)
    offset_map = filled_map([(b"a", 3), (b"b", 5)], draw.draw(st.integers(-1, 50)))
    c, py = filter_both(monkeypatch, bytes(corrupt), offset_map, 1_700_000_000_000, 1000, 10**6)
    assert c == py
    for impl in ("c", "python"):
        use(monkeypatch, impl)
        m = InProcessOffsetMap(24 * 64)
        got: tuple[object, ...]
        try:
            got = ("ok", record_filter.map_batch(RecordBatch(bytes(corrupt), 0), m, 0, 10**6), m.table.tobytes(),
                   m.entries, m.latest_offset)
        except Exception as exc:  # noqa: BLE001
            got = ("error", type(exc).__name__, str(exc), m.table.tobytes())
        if impl == "c":
            first = got
    assert got == first


@PROPERTY
@given(st.lists(batches(), min_size=1, max_size=4), st.integers(2, 12), st.integers(0, 400), st.integers(0, 1200))
def test_map_batch_identical(monkeypatch, datas, capacity, start, end):
    tables = []
    for impl in ("c", "python"):
        use(monkeypatch, impl)
        m = InProcessOffsetMap(24 * 16, load_factor=(capacity + 0.5) / 16)
        steps = []
        for data in datas:
            read, full = record_filter.map_batch(RecordBatch(data, 0), m, start, end)
            steps.append((read, full, m.entries, m.latest_offset))
            if full:
                break
        tables.append((m.table.tobytes(), steps))
    assert tables[0] == tables[1]


def test_sorted_map_probes_identical(monkeypatch):
    rng = np.random.default_rng(5)
    keys = [b"user-%d" % i for i in range(20_000)]
    hashes = [key_hash(k) for k in keys]
    hi = np.array([h[0] for h in hashes], dtype=np.int64)
    lo = np.array([h[1] for h in hashes], dtype=np.int64)
    off = rng.integers(0, 10**9, len(keys)).astype(np.int64)
    order = rng.permutation(len(keys))          # unsorted input: the constructor sorts
    m = SortedHashOffsetMap(hi[order], lo[order], off[order], 0, 10**9)
    probes = keys[::7] + [b"absent-%d" % i for i in range(3000)]
    use(monkeypatch, "c")
    fast = m.get_many(probes)
    assert [m.get(k) for k in probes[:50]] == fast[:50]
    use(monkeypatch, "python")
    assert m.get_many(probes) == fast
    expected = dict(zip(keys, off.tolist()))
    assert fast == [expected.get(k, -1) for k in probes]


# -- memory ------------------------------------------------------------------------------------------------

PROBE = """
import json, sys
from storage_engine.maintenance.offset_map import InProcessOffsetMap
from storage_engine.maintenance import record_filter
from storage_engine.record.record_batch import RecordBatch, build_batch
from storage_engine.record.records import SimpleRecord
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
batches = [build_batch([SimpleRecord(b"key-%09d" % (b * 1000 + i), b"v") for i in range(1000)], base_offset=b * 1000)
           for b in range(int(sys.argv[2]) // 1000)]
before = status("VmRSS")
m = InProcessOffsetMap(int(sys.argv[1]))
for b in batches:
    read, full = record_filter.map_batch(RecordBatch(b, 0), m, 0, 1 << 62)
    if full:
        break
print(json.dumps({"entries": m.entries, "max_entries": m.max_entries, "grew": status("VmHWM") - before}))
"""


@pytest.mark.slow     # a second process filling 1.4 million keys: a memory bound, not a compaction rule
@pytest.mark.parametrize("impl", ["c", "python"])
def test_in_process_map_resident_size_stays_within_the_dedupe_buffer(impl):
    # RSS, not a count: a fresh interpreter fills a 32 MiB map to its load factor, peak RSS growth is measured.
    buffer = 32 << 20
    keys = 1_400_000 if impl == "c" else 60_000
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if impl == "python":
        env["STORAGE_ENGINE_PURE_PYTHON"] = "1"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(buffer), str(keys)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["entries"] == min(keys, got["max_entries"])
    assert got["grew"] <= buffer + (4 << 20), got
