"""Recovery's compiled batch walk against the Python loop: segments of random batches (magic 2 and legacy, offset
gaps, timestamps going up and down, offsets going backwards), then corrupted (bytes flipped, cut, appended),
recovered once per implementation. The ``.log``, ``.index`` and ``.timeindex`` files, the result and any error
must be identical; the compiled CRC-32C must equal the ``crc32c`` package's."""
from __future__ import annotations

import os
import shutil

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine.record import kernels as record_kernels
from storage_engine.record.legacy_records import build_legacy_batch
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.recovery import recover_segment
from tests.storage_engine.helpers import open_segment, present
from tests.storage_engine.kernels import use

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(record_kernels.COMPILED is None, reason="C speedups not built")]
PROPERTY = settings(deadline=None, max_examples=300,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
BASE = 100


@pytest.fixture(params=["c"])
def kernels():
    """Overrides the package's two-implementation fixture: these tests run both sides themselves."""
    return "c"


@st.composite
def segment_bytes(draw):
    out = bytearray()
    offset = BASE + draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 12))):
        n = draw(st.integers(1, 4))
        ts = draw(st.integers(-1, 50))
        recs = [SimpleRecord(b"k", b"v" * draw(st.integers(0, 40)), ts + i) for i in range(n)]
        kind = draw(st.sampled_from(["v2", "v2", "v2", "legacy", "backwards"]))
        if kind == "legacy":
            out += build_legacy_batch(recs, magic=1, base_offset=offset)
        else:
            base = offset - 5 if kind == "backwards" and offset - 5 >= BASE else offset
            out += build_batch(recs, base_offset=base)
        offset += n + draw(st.integers(0, 3))
    return bytes(out)


def corrupt(data: bytes, draw) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["flip", "cut", "append"]))
        i = draw(st.integers(0, max(0, len(out) - 1)))
        if op == "flip" and out:
            out[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del out[i:]
        else:
            out += draw(st.binary(min_size=1, max_size=30))
    return bytes(out)


def recover(tmp_path, name: str, data: bytes, interval: int, index_bytes: int):
    d = tmp_path / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    seg = open_segment(d, BASE, index_interval_bytes=interval, max_index_size=index_bytes)
    seg.log.append(data)
    outcome: tuple[object, ...]
    try:
        result = recover_segment(seg)
        outcome = ("ok", result, seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far)
    except Exception as exc:  # noqa: BLE001 - compared by type and message
        outcome = ("error", type(exc).__name__, str(exc))
    seg.close()
    files = {}
    for f in sorted(os.listdir(d)):
        with open(d / f, "rb") as fh:
            files[f] = fh.read()
    return outcome, files


@PROPERTY
@given(segment_bytes(), st.data(), st.sampled_from([1, 10, 100, 4096]), st.sampled_from([24, 48, 96, 1200]))
def test_recovery_identical(tmp_path, monkeypatch, data, draw, interval, index_bytes):
    data = corrupt(data, draw.draw)
    use(monkeypatch, "c")
    fast = recover(tmp_path, "seg", data, interval, index_bytes)   # same path: error messages name the file
    use(monkeypatch, "python")
    slow = recover(tmp_path, "seg", data, interval, index_bytes)
    assert fast == slow


def test_recovery_identical_when_the_offset_index_fills_after_a_batch_taken_the_python_way(tmp_path, monkeypatch):
    """Kafka's LogSegment.recover adds an offset index entry every index.interval.bytes and fails on a full index.
    The compiled walk resumes after a legacy batch, which the Python way indexed, with only the room the index has
    left: it stops where the Python walk stops, with the same error and the same files."""
    v2 = [build_batch([SimpleRecord(b"k", b"v", 5)], base_offset=100 + i) for i in range(2)]
    legacy = build_legacy_batch([SimpleRecord(b"k", b"v", 5)], magic=1, base_offset=102)
    more = [build_batch([SimpleRecord(b"k", b"v", 5)], base_offset=103 + i) for i in range(160)]
    data = b"".join(v2 + [legacy] + more)
    # 1200-byte indexes: 150 offset entries; one timestamp, so the time index holds one entry and never fills
    use(monkeypatch, "c")
    fast = recover(tmp_path, "seg", data, 1, 1200)
    use(monkeypatch, "python")
    slow = recover(tmp_path, "seg", data, 1, 1200)
    assert fast == slow
    assert fast[0][:2] == ("error", "IndexFullError") and "full offset index" in fast[0][2]
    assert len(fast[1]["00000000000000000100.index"]) == 1200


@given(st.binary(max_size=300))
def test_crc32c_matches(data):
    assert present(record_kernels.COMPILED).crc32c(data) == crc32c(data)
