"""``scan_records``: the record decoder's checks without the records (what a leader append needs of a client's
batch), compiled and pure Python. Both must refuse exactly what ``decode_records`` refuses, with the same message
and position, and otherwise report the first record whose offset delta is not its index and the first record
without a key, as decoding the records and looking at them does; the validator's errors stay what they were."""
from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine.config import LogConfig
from storage_engine.errors import CorruptRecordError, InvalidRecordError, InvalidRecordForTopicError
from storage_engine.log import validator
from storage_engine.record import codecs, kernels, records
from storage_engine.record.record_batch import RecordBatch, build_batch
from storage_engine.record.records import SimpleRecord
from tests.storage_engine.record.test_speedups import MALFORMED, PYTHON, batches, mutate, near_valid_sections

pytestmark = pytest.mark.unit

PROPERTY = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
needs_c = pytest.mark.skipif(kernels.COMPILED is None or not hasattr(kernels.COMPILED, "scan_records"),
                             reason="storage_engine.record._speedups is not built with scan_records")
SCANS = [pytest.param(records._py_scan_records, id="python"),
         pytest.param(records._c_scan_records, id="c", marks=needs_c)]


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    try:
        return ("ok", fn(*args))
    except CorruptRecordError as exc:
        assert type(exc) is CorruptRecordError
        return ("invalid", exc.reason, exc.position)


def expected(payload: bytes, count: int) -> tuple[Any, ...]:
    """What decoding the records and looking at each says."""
    got = outcome(PYTHON.decode, payload, count, 0, 0, None)
    if got[0] != "ok":
        return got
    recs = got[1]
    bad = [i for i, r in enumerate(recs) if r.offset != i]
    keyless = [i for i, r in enumerate(recs) if r.key is None]
    return ("ok", (bad[0] if bad else -1, recs[bad[0]].offset if bad else 0, keyless[0] if keyless else -1))


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_sections_refused_as_the_decoder_refuses_them(scan, case):
    payload, count, _, _ = MALFORMED[case]
    assert outcome(scan, payload, count) == expected(payload, count)
    assert outcome(scan, payload, count)[0] == "invalid"


@pytest.mark.parametrize("scan", SCANS)
def test_deltas_and_keys(scan):
    recs = [SimpleRecord(None if i in (3, 5) else b"k", b"v", 0) for i in range(8)]
    section = PYTHON.encode(recs, None, 0, 0)
    assert scan(section, 8) == (-1, 0, 3)
    gapped = PYTHON.encode(recs, [0, 1, 2, 9, 10, 11, 12, 13], 0, 0)
    assert scan(gapped, 8) == (3, 9, 3)
    assert scan(memoryview(b"xx" + gapped)[2:], 8) == (3, 9, 3)     # a view, read in place
    assert scan(b"", 0) == (-1, 0, -1)


@needs_c
@PROPERTY
@given(batches(), st.data())
def test_differential_mutated_payloads(batch, data):
    recs, offsets, base_offset, base_timestamp = batch
    section = PYTHON.encode(recs, offsets, 0, base_timestamp)
    payload = mutate(section, data.draw) if data.draw(st.booleans()) else section
    count = len(recs) + data.draw(st.integers(-2, 2))
    want = expected(payload, count)
    assert outcome(records._c_scan_records, payload, count) == want
    assert outcome(records._py_scan_records, payload, count) == want


@needs_c
@settings(PROPERTY, max_examples=500)
@given(near_valid_sections())
def test_differential_near_valid_sections(section):
    payload, count = section
    assert outcome(records._c_scan_records, payload, count) == expected(payload, count)


@needs_c
@PROPERTY
@given(st.binary(max_size=80), st.integers(-1, 6))
def test_differential_random_bytes(payload, count):
    assert outcome(records._c_scan_records, payload, count) == expected(payload, count)


# -- the leader append's validation ----------------------------------------------------------------------------

def _assign(data: bytes, *, compact: bool = False) -> tuple[int, int, int, int]:
    config = LogConfig().with_overrides({"cleanup.policy": "compact"} if compact else {})
    buf, batches_ = validator.parse_client_batches("t-0", "t", config, data)
    return validator.assign_offsets("t-0", "t", config, buf, batches_, first_offset=100, now_ms=0)


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP])
def test_validator_errors_name_the_record(codec):
    recs = [SimpleRecord(b"k%d" % i, b"v", 5) for i in range(4)]
    assert _assign(build_batch(recs, codec=codec)) == (104, 5, 103, 4)
    with pytest.raises(InvalidRecordError, match="record 2 has offset delta 7"):
        _assign(build_batch(recs, codec=codec, offsets=[0, 1, 7, 8], last_offset=8))
    keyless = [*recs[:1], SimpleRecord(None, b"v", 5), *recs[2:]]
    assert _assign(build_batch(keyless, codec=codec)) == (104, 5, 103, 4)
    with pytest.raises(InvalidRecordForTopicError, match=r"record without a key \(record 1 of the batch\)"):
        _assign(build_batch(keyless, codec=codec), compact=True)


def test_validator_refuses_a_damaged_record_with_the_decoders_message():
    data = bytearray(build_batch([SimpleRecord(b"k", b"v", 0)]))
    data[61 + 4] = 0x03           # the key length varint: -2
    data[17:21] = RecordBatch(data).compute_crc().to_bytes(4, "big")     # a valid CRC over the damage
    with pytest.raises(CorruptRecordError, match="batch at offset 0: invalid negative key size -2"):
        _assign(bytes(data))
    with pytest.raises(CorruptRecordError, match="batch at offset 0: invalid negative key size -2"):
        RecordBatch(bytes(data)).records()
