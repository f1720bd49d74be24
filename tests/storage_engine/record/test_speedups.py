"""The compiled speedups (storage_engine/record/_speedups.c) under the same tests as the pure-Python record loops.

Every behaviour test runs against both implementations of ``decode_records``/``encode_records`` (the ``impl``
fixture); the C one is skipped only when the extension was not built. Differential tests then drive both with
hypothesis-generated records and with mutated, truncated and random payloads: the encoded bytes must be equal,
and decoding must give equal records or the same CorruptRecordError (message and position) on both sides,
never a crash and never another exception type.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc
from typing import Any, Callable, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.util import encode_varint as kp_encode_varint

from storage_engine.record import kernels, records
from storage_engine.errors import CorruptRecordError
from storage_engine.record.record_batch import LOG_APPEND_TIME, RecordBatch, build_batch
from storage_engine.record.records import Record, SimpleRecord

pytestmark = pytest.mark.unit

PROPERTY = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
NOT_BUILT = "storage_engine.record._speedups is not built (no C compiler when the package was installed)"


class Impl(NamedTuple):
    name: str
    decode: Callable[..., Any]
    encode: Callable[..., Any]


PYTHON = Impl("python", records._py_decode_records, records._py_encode_records)
C = Impl("c", records._c_decode_records, records._c_encode_records)
needs_c = pytest.mark.skipif(kernels.COMPILED is None, reason=NOT_BUILT)


@pytest.fixture(params=[pytest.param(PYTHON, id="python"), pytest.param(C, id="c", marks=needs_c)])
def impl(request) -> Impl:
    return request.param


# -- helpers ----------------------------------------------------------------------------------------------

def varint(value: int) -> bytes:
    """kafka-python's zig-zag encoding, independent of the engine's writer."""
    out = bytearray()
    kp_encode_varint(value, out.append)
    return bytes(out)


def body(*, ts_delta: int = 0, offset_delta: int = 0, key=b"k", value=b"v", headers=(), tail: bytes | None = None,
         header_count: int | None = None) -> bytes:
    """One record body (after its length varint); ``tail`` replaces everything after the offset delta."""
    out = bytearray(b"\x00") + varint(ts_delta) + varint(offset_delta)
    if tail is not None:
        return bytes(out + tail)
    for field in (key, value):
        out += varint(-1) if field is None else varint(len(field)) + field
    out += varint(len(headers) if header_count is None else header_count)
    for hkey, hval in headers:
        out += varint(len(hkey)) + hkey
        out += varint(-1) if hval is None else varint(len(hval)) + hval
    return bytes(out)


def framed(record_body: bytes, length: int | None = None) -> bytes:
    return varint(len(record_body) if length is None else length) + record_body


def decode_outcome(decode, payload, count, base_offset=0, base_timestamp=0, log_append_time=None):
    """("ok", records) or ("invalid", message, position); any other exception propagates and fails the test."""
    try:
        return ("ok", decode(payload, count, base_offset, base_timestamp, log_append_time))
    except CorruptRecordError as exc:
        assert type(exc) is CorruptRecordError
        return ("invalid", exc.reason, exc.position)


def encode_outcome(encode, *args):
    try:
        return ("ok", encode(*args))
    except (ValueError, TypeError, OverflowError) as exc:
        return ("error", type(exc), str(exc))


def expected_records(recs, offsets, base_offset, base_timestamp) -> list[Record]:
    """What decoding an encoded section must give back (header keys come back as str)."""
    offsets = range(base_offset, base_offset + len(recs)) if offsets is None else offsets
    out = []
    for off, r in zip(offsets, recs):
        headers = tuple((k if isinstance(k, str) else bytes(k).decode("utf-8", "surrogateescape"),
                         None if v is None else bytes(v)) for k, v in r.headers)
        out.append(Record(off, r.timestamp, None if r.key is None else bytes(r.key),
                          None if r.value is None else bytes(r.value), headers))
    return out


# -- strategies -------------------------------------------------------------------------------------------

blobs = st.one_of(st.none(), st.just(b""), st.binary(max_size=40))
header_keys = st.one_of(
    st.text(max_size=6),
    st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape")),  # lone \udc80-\udcff escapes
    st.binary(max_size=6),
)
headers = st.lists(st.tuples(header_keys, blobs), max_size=3).map(tuple)
timestamps = st.one_of(st.integers(-1, 2**41), st.integers(-1, 2**63 - 1), st.sampled_from([-1, 0, 2**63 - 1]))
simple_records = st.builds(SimpleRecord, blobs, blobs, timestamps, headers)


@st.composite
def batches(draw, representable: bool = False):
    """(records, offsets or None, base_offset, base_timestamp); ``representable`` keeps every delta readable."""
    recs = draw(st.lists(simple_records, max_size=12))
    base_offset = draw(st.one_of(st.integers(0, 2**40), st.integers(0, 2**63 - 1)))
    if draw(st.booleans()):
        offsets = None
    else:
        big_gaps = not representable and draw(st.booleans())
        gaps = draw(st.lists(st.integers(1, 2**33 if big_gaps else 1000), min_size=len(recs),
                             max_size=len(recs)))
        offsets, off = [], base_offset + draw(st.integers(0, 5))
        for gap in gaps:
            offsets.append(off)
            off += gap
    if representable or draw(st.booleans()):
        base_timestamp = recs[0].timestamp if recs else -1
    else:
        base_timestamp = draw(st.integers(-2**63, 2**63 - 1))  # a delete horizon
    if representable:
        base_offset = min(base_offset, 2**62)
        if offsets is not None:
            offsets = [base_offset + (o - offsets[0]) for o in offsets] if offsets else []
        recs = [r._replace(timestamp=max(-1, min(r.timestamp, base_timestamp + 2**62))) for r in recs]
    return recs, offsets, base_offset, base_timestamp


@st.composite
def near_valid_sections(draw):
    """(payload, count): records whose every length, count and size is right or off by a little."""
    def sized(length: int) -> bytes:
        return varint(length) + draw(st.binary(min_size=max(0, length + draw(st.sampled_from([0, 0, -1, 1]))),
                                               max_size=max(0, length + 1)))
    small = st.integers(-2, 4)
    out = bytearray()
    n = draw(st.integers(1, 3))
    for _ in range(n):
        rec = bytearray(b"\x00") + varint(draw(st.integers(-3, 3))) + varint(draw(st.integers(-3, 3)))
        rec += sized(draw(small)) + sized(draw(small))
        rec += varint(draw(st.integers(-1, 3)))
        for _ in range(draw(st.integers(0, 3))):
            rec += sized(draw(small)) + sized(draw(small))
        out += varint(len(rec) + draw(st.sampled_from([0, 0, 0, -2, -1, 1, 2]))) + rec
    out += draw(st.sampled_from([b"", b"", b"\x00", b"\x01", b"\x10\x00"]))
    return bytes(out), n + draw(st.integers(-1, 1))


def mutate(data: bytes, draw) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "truncate", "insert", "delete", "append"]))
        i = draw(st.integers(0, len(out)))
        if op == "set" and i < len(out):
            out[i] = draw(st.integers(0, 255))
        elif op == "truncate":
            del out[i:]
        elif op == "insert":
            out[i:i] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete":
            del out[i:i + draw(st.integers(1, 4))]
        else:
            out += draw(st.binary(min_size=1, max_size=6))
    return bytes(out)


# -- dispatch ---------------------------------------------------------------------------------------------

def test_public_names_follow_implementation():
    if kernels.IMPLEMENTATION == "c":
        assert kernels.KERNELS is kernels.COMPILED is not None
        assert records.decode_records is records._c_decode_records
        assert records.encode_records is records._c_encode_records
    else:
        assert kernels.IMPLEMENTATION == "python"
        assert kernels.KERNELS is None
        assert records.decode_records is records._py_decode_records
        assert records.encode_records is records._py_encode_records


def test_pure_python_env_var_forces_python():
    code = ("from storage_engine.record import kernels as k, records as r; "
            "assert r.decode_records is r._py_decode_records and r.encode_records is r._py_encode_records; "
            "assert k.KERNELS is None; print(k.IMPLEMENTATION)")
    env = dict(os.environ, STORAGE_ENGINE_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "python"


@needs_c
def test_c_is_the_default_when_built():
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_ENGINE_PURE_PYTHON"}
    code = "from storage_engine.record import kernels as k; print(k.IMPLEMENTATION)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "c"


# -- behaviour, run against both implementations -----------------------------------------------------------

def test_spec_vector(impl):
    # Spec 1.7: one record k/v at the base timestamp and offset.
    section = bytes.fromhex("10000000026b027600")
    assert impl.encode([SimpleRecord(b"k", b"v", 1000)], None, 0, 1000) == section
    assert impl.decode(section, 1, 5, 1000, None) == [Record(5, 1000, b"k", b"v", ())]


def test_round_trip_with_everything(impl):
    recs = [SimpleRecord(None, None, -1),
            SimpleRecord(b"", b"", 0, ()),
            SimpleRecord(b"\x00\xff" * 100, bytes(range(256)) * 3, 2**63 - 1),
            SimpleRecord(b"k", b"v", 5, (("a", b"1"), ("\u00e9\u4e2d", None), ("\udcff", b""), (b"\xfe", b"x")))]
    offsets = [10, 11, 500, 2**31 + 9]  # the last delta is the largest varint
    section = impl.encode(recs, offsets, 10, 0)
    assert section == records._py_encode_records(recs, offsets, 10, 0)
    decoded = impl.decode(section, len(recs), 10, 0, None)
    assert decoded == [
        Record(10, -1, None, None, ()),
        Record(11, 0, b"", b"", ()),
        Record(500, 2**63 - 1, b"\x00\xff" * 100, bytes(range(256)) * 3, ()),
        Record(2**31 + 9, 5, b"k", b"v", (("a", b"1"), ("\u00e9\u4e2d", None), ("\udcff", b""), ("\udcfe", b"x"))),
    ]
    assert all(type(r) is Record for r in decoded)
    assert all(type(r.headers) is tuple for r in decoded)


def test_log_append_time_overrides_every_timestamp(impl):
    section = impl.encode([SimpleRecord(b"a", b"1", 7), SimpleRecord(b"b", b"2", 9)], None, 0, 7)
    assert [r.timestamp for r in impl.decode(section, 2, 0, 7, 12345)] == [12345, 12345]


def test_offsets_and_timestamps_beyond_int64_are_exact(impl):
    section = impl.encode([SimpleRecord(b"a", b"1", 2), SimpleRecord(b"b", b"2", 3)], None, 0, 2)
    assert [(r.offset, r.timestamp) for r in impl.decode(section, 2, 2**63 - 1, 2**63 - 2, None)] == [
        (2**63 - 1, 2**63 - 2), (2**63, 2**63 - 1)]
    assert [(r.offset, r.timestamp) for r in impl.decode(section, 2, 2**70, -2**70, None)] == [
        (2**70, -2**70), (2**70 + 1, -2**70 + 1)]


def test_bytes_like_inputs(impl):
    recs = [SimpleRecord(bytearray(b"key"), memoryview(b"value"), 1, ((bytearray(b"h"), memoryview(b"v")),))]  # type: ignore[arg-type]  # bytes-like fields, which the encoders accept
    section = impl.encode(recs, None, 0, 1)
    assert section == impl.encode([SimpleRecord(b"key", b"value", 1, (("h", b"v"),))], None, 0, 1)
    for payload in (section, bytearray(section), memoryview(section)):
        assert impl.decode(payload, 1, 0, 1, None) == [Record(0, 1, b"key", b"value", (("h", b"v"),))]


def test_plain_tuples_and_list_headers(impl):
    section = impl.encode([(b"k", b"v", 3, [["h", b"x"]])], [4], 4, 3)
    assert impl.decode(section, 1, 4, 3, None) == [Record(4, 3, b"k", b"v", (("h", b"x"),))]


def test_empty(impl):
    assert impl.encode([], None, 0, -1) == b""
    assert impl.encode([], [], 0, -1) == b""
    assert impl.decode(b"", 0, 0, 0, None) == []
    assert impl.decode(b"", -3, 0, 0, None) == []


@pytest.mark.parametrize("offsets, base_offset, message", [
    ([5, 5], 0, "offsets must increase, got 5 after 5"),
    ([5, 4], 0, "offsets must increase, got 4 after 5"),
    ([1, 2], 2, "offset 1 is below the base offset 2"),
    ([2**70, 2**70 - 1], 0, f"offsets must increase, got {2**70 - 1} after {2**70}"),
    ([1], 0, "offsets and records differ in length"),
])
def test_encode_rejects_bad_offsets(impl, offsets, base_offset, message):
    recs = [SimpleRecord(b"k", b"v", 0), SimpleRecord(b"k", b"v", 0)]
    with pytest.raises(ValueError) as info:
        impl.encode(recs, offsets, base_offset, 0)
    assert str(info.value) == message


@pytest.mark.parametrize("record, error", [
    (SimpleRecord("str key", b"v", 0), TypeError),  # type: ignore[arg-type]  # deliberately the wrong type: the test checks it is refused
    (SimpleRecord(b"k", 12, 0), TypeError),  # type: ignore[arg-type]  # deliberately the wrong type: the test checks it is refused
    (SimpleRecord(b"k", b"v", 0, (("h", "str value"),)), TypeError),
    (SimpleRecord(b"k", b"v", 0, ((None, b"x"),)), TypeError),
    (SimpleRecord(b"k", b"v", 0, (("a", b"1", b"2"),)), ValueError),
    (SimpleRecord(b"k", b"v", 0, (("a",),)), ValueError),
    (SimpleRecord(b"k", b"v", 0, 5), TypeError),  # type: ignore[arg-type]  # deliberately the wrong type: the test checks it is refused
    (SimpleRecord(b"k", b"v", 1.5), TypeError),  # type: ignore[arg-type]  # deliberately the wrong type: the test checks it is refused
    ((b"k", b"v", 0), ValueError),
    (SimpleRecord(b"k", b"v", 0, (("\ud800", b"x"),)), UnicodeEncodeError),  # not a surrogateescape byte
])
def test_encode_rejects_bad_fields_alike(impl, record, error):
    with pytest.raises(error):
        impl.encode([SimpleRecord(b"ok", b"ok", 0), record], None, 0, 0)


def test_failed_encode_releases_buffers(impl):
    key, value, hval = bytearray(b"k"), bytearray(b"v"), bytearray(b"h")
    bad = SimpleRecord(key, value, 0, (("h", hval), ("bad", "not bytes")))  # type: ignore[arg-type]  # bytearray fields (accepted) and a str header value (refused)
    with pytest.raises(TypeError):
        impl.encode([bad], None, 0, 0)
    for buf in (key, value, hval):
        buf.append(1)  # BufferError if an export were still held


# Malformed sections: (payload, count, message prefix, position). Positions are offsets into the section.
_BODY = body()
MALFORMED = {
    "length varint too long": (b"\xff\xff\xff\xff\xff\x01", 1, "varint is too long", 0),
    "length varint truncated": (b"\xff\xff", 1, "premature end of buffer inside a varint", 0),
    "timestamp varlong too long": (framed(body(tail=b"")[:1] + b"\xff" * 10 + b"\x01" + b"\x00" * 4), 1,
                                   "varlong is too long", 2),
    "negative key size -2": (framed(body(tail=varint(-2) + b"\x02v\x00")), 1, "invalid negative key size -2", 5),
    "negative value size -2": (framed(body(tail=b"\x02k" + varint(-2) + b"\x00")), 1,
                               "invalid negative value size -2", 7),
    "negative header count": (framed(body(header_count=-1)), 1, "found invalid number of record headers -1", 9),
    "header count over the record": (framed(body(header_count=5)), 1,
                                      "found invalid number of record headers 5", 9),
    "header count one over the record": (framed(body(header_count=1)), 1,
                                         "found invalid number of record headers 1", 9),
    "negative header key size": (framed(body(tail=b"\x02k\x02v\x02" + varint(-3) + b"\x00\x00")), 1,
                                 "invalid negative header key size -3", 10),
    "header key past the record": (framed(body(tail=b"\x02k\x02v\x02\x0ab\x01")) + b"\x00" * 6, 1,
                                   "header key runs past the record", 10),
    "header key ends the record": (framed(body(tail=b"\x02k\x02v\x02\x02h")) + b"\x01", 1,
                                   "invalid record size: expected to read 10 bytes in record payload, "
                                   "but instead read 11", 12),
    "header value past the record": (framed(body(tail=b"\x02k\x02v\x02\x02h\x0ax")) + b"\x00" * 6, 1,
                                     "header value runs past the record", 12),
    "negative header value size": (framed(body(tail=b"\x02k\x02v\x02\x02h" + varint(-2))), 1,
                                   "invalid negative header value size -2", 12),
    # _BODY is 8 bytes: attributes, timestamp delta, offset delta, key 1 + 1, value 1 + 1, header count.
    "record length over the remaining bytes": (framed(_BODY, 60), 1,
                                               "record size 60 is larger than the 8 bytes remaining", 1),
    "negative record length": (framed(_BODY, -1), 1, "record size -1 is larger than the 8 bytes remaining", 1),
    "body shorter than declared": (framed(_BODY + b"\x00", len(_BODY) + 1), 1,
                                   "invalid record size: expected to read 9 bytes in record payload, "
                                   "but instead read 8", 9),
    "body longer than declared": (framed(_BODY, len(_BODY) - 2) + b"\x00", 1,
                                  "invalid record size: expected to read 6 bytes in record payload, "
                                  "but instead read 8", 9),
    "trailing bytes": (framed(_BODY) + b"\x07", 1,
                       "incorrect declared batch size, records still remaining in file", 9),
    "fewer records than the count": (framed(_BODY), 2, "premature EOF while reading records", 9),
    "key runs past the payload": (framed(body(tail=b"\x7e")), 1, "premature EOF while reading records", 68),
    "header count past the payload": (framed(body(tail=b"\x02k\x02v")), 1, "premature EOF while reading records", 8),
    "zero-length record": (framed(b"", 0) + b"\x00" * 6, 1,
                           "invalid record size: expected to read 0 bytes in record payload, but instead read 6", 7),
    "records but count 0": (framed(_BODY), 0, "incorrect declared batch size", 0),
    "records but count negative": (framed(_BODY), -1, "incorrect declared batch size", 0),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_sections(impl, case):
    payload, count, message, position = MALFORMED[case]
    with pytest.raises(CorruptRecordError) as info:
        impl.decode(payload, count, 0, 0, None)
    assert type(info.value) is CorruptRecordError
    assert info.value.reason.startswith(message)
    assert info.value.position == position
    assert info.value.path is None


def test_malformed_record_inside_a_batch_names_batch(impl, monkeypatch):
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v", 0)], base_offset=40))
    batch[61 + 4] = 0x03  # key length varint (after length, attributes, timestamp and offset deltas): -2
    monkeypatch.setattr(records, "decode_records", impl.decode)
    with pytest.raises(CorruptRecordError, match="batch at offset 40: invalid negative key size -2"):
        RecordBatch(bytes(batch)).records()


def test_build_batch_uses_encode_records(impl, monkeypatch):
    recs = [SimpleRecord(b"k%d" % i, b"v" * 100, 1000 + i, (("h", b"%d" % i),)) for i in range(50)]
    monkeypatch.setattr(records, "encode_records", impl.encode)
    monkeypatch.setattr(records, "decode_records", impl.decode)
    data = build_batch(recs, base_offset=7, offsets=[7 + 2 * i for i in range(50)], last_offset=200)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.last_offset == 200
    assert batch.records() == expected_records(recs, [7 + 2 * i for i in range(50)], 7, 1000)
    appended = RecordBatch(build_batch(recs, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=99))
    assert {r.timestamp for r in appended.records()} == {99}


def test_record_class_other_than_a_namedtuple():
    class Plain:
        def __init__(self, *fields):
            self.fields = fields

        def __eq__(self, other):
            return self.fields == other.fields

    section = PYTHON.encode([SimpleRecord(b"k", b"v", 3)], None, 0, 3)
    if kernels.COMPILED is None:
        pytest.skip(NOT_BUILT)
    [rec] = kernels.COMPILED.decode_records(section, 1, 0, 3, None, Plain, CorruptRecordError)
    assert rec == Plain(0, 3, b"k", b"v", ())


# -- differential: C against Python ------------------------------------------------------------------------

@needs_c
@PROPERTY
@given(batches())
def test_differential_encode_and_decode(batch):
    recs, offsets, base_offset, base_timestamp = batch
    py = encode_outcome(PYTHON.encode, recs, offsets, base_offset, base_timestamp)
    c = encode_outcome(C.encode, recs, offsets, base_offset, base_timestamp)
    assert c == py
    if py[0] == "ok":
        section = py[1]
        for log_append_time in (None, 77):
            assert decode_outcome(C.decode, section, len(recs), base_offset, base_timestamp, log_append_time) == \
                decode_outcome(PYTHON.decode, section, len(recs), base_offset, base_timestamp, log_append_time)


@settings(PROPERTY, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches(representable=True))
def test_round_trip(impl, batch):  # impl is an immutable parameter, safe to share between examples
    recs, offsets, base_offset, base_timestamp = batch
    section = impl.encode(recs, offsets, base_offset, base_timestamp)
    assert impl.decode(section, len(recs), base_offset, base_timestamp, None) == \
        expected_records(recs, offsets, base_offset, base_timestamp)


@needs_c
@PROPERTY
@given(batches(), st.data())
def test_differential_mutated_payloads(batch, data):
    recs, offsets, base_offset, base_timestamp = batch
    section = PYTHON.encode(recs, offsets, base_offset, base_timestamp)
    payload = mutate(section, data.draw)
    count = len(recs) + data.draw(st.integers(-2, 2))
    py = decode_outcome(PYTHON.decode, payload, count, base_offset, base_timestamp)
    c = decode_outcome(C.decode, payload, count, base_offset, base_timestamp)
    assert c == py


@needs_c
@PROPERTY
@given(st.binary(max_size=80), st.integers(-1, 6))
def test_differential_random_bytes(payload, count):
    assert decode_outcome(C.decode, payload, count) == decode_outcome(PYTHON.decode, payload, count)


@needs_c
@settings(PROPERTY, max_examples=1500)
@given(near_valid_sections())
def test_differential_near_valid_sections(section):
    # Lengths and counts at and around the right value: every bounds check sees both of its sides.
    payload, count = section
    assert decode_outcome(C.decode, payload, count) == decode_outcome(PYTHON.decode, payload, count)


@needs_c
@PROPERTY
@given(st.lists(st.sampled_from([b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80", b"\xff", b"\x0e", b"\x10"]),
                max_size=40).map(b"".join), st.integers(0, 4))
def test_differential_varint_heavy_bytes(payload, count):
    # Bytes chosen to hit continuation bits, -1/-2 lengths and short records far more often than random data.
    assert decode_outcome(C.decode, payload, count) == decode_outcome(PYTHON.decode, payload, count)


@needs_c
def test_differential_non_canonical_varints():
    # Five-byte varints whose high bits Java (and read_varint) drop; ten-byte varlongs likewise.
    for length in (b"\x90\x80\x80\x80\x70", b"\x90\x80\x80\x80\x00", b"\x90\x80\x80\x80\x10"):
        payload = length + _BODY
        assert decode_outcome(C.decode, payload, 1) == decode_outcome(PYTHON.decode, payload, 1)
    for ts in (b"\xff" * 9 + b"\x7f", b"\x80" * 9 + b"\x01", b"\x81" + b"\x80" * 8 + b"\x7e"):
        section = framed(b"\x00" + ts + b"\x00\x02k\x02v\x00")
        assert decode_outcome(C.decode, section, 1) == decode_outcome(PYTHON.decode, section, 1)


# -- resources --------------------------------------------------------------------------------------------

@needs_c
def test_no_leaks_in_loops():
    recs = [SimpleRecord(b"k%d" % i, b"v" * 100, i, (("h", b"x"), ("\udcff", None))) for i in range(20)]
    section = C.encode(recs, None, 0, 0)
    bad_records = [SimpleRecord(b"k", bytearray(b"v"), 0, (("h", b"x"), ("bad", "str")))]  # type: ignore[arg-type]  # a str header value: the encode that fails

    def work():
        C.encode(recs, None, 0, 0)
        C.encode(recs, list(range(20)), 0, 2**64)  # the slow, exact path for deltas beyond int64
        C.decode(section, 20, 0, 0, None)
        C.decode(section, 20, 2**70, 2**70, None)
        for payload, count, _, _ in MALFORMED.values():
            try:
                C.decode(payload, count, 0, 0, None)
            except CorruptRecordError:
                pass
        try:
            C.encode(bad_records, None, 0, 0)
        except TypeError:
            pass

    for _ in range(50):
        work()
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(20):
            work()
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(1000):
            work()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One leaked object per call would be ~1000 * 12 * 32 bytes; allow for allocator and cache noise.
    assert after - before < 64 * 1024
