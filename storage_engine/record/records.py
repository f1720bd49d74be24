"""Records inside a magic-2 batch (Kafka's ``DefaultRecord``): how each record of a batch's records section is
encoded and decoded, and the varints they are made of. The batch around them (header, CRC, building) is
:mod:`storage_engine.record.record_batch`.

Record (inside the records section), varints are protobuf zig-zag LEB128::

    length varint (bytes that follow) | attributes int8 (0) | timestamp_delta varlong | offset_delta varint |
    key_length varint (-1 = null) | key | value_length varint (-1 = null: a tombstone) | value |
    header_count varint | per header: key_length varint (>= 0, UTF-8) | key | value_length varint (-1 = null) | value

The per-record loops (:func:`decode_records`, :func:`encode_records`, and :func:`scan_records`, the decoder's checks
without the records, for a leader append) have compiled twins, bound at the end of
this module as :mod:`storage_engine.record.kernels` chooses (which also gives the extension's batch-level kernels).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence, cast

from storage_engine.errors import CorruptRecordError
from storage_engine.record import kernels

MAX_RECORD_OVERHEAD = 21
NO_TIMESTAMP = -1


class Record(NamedTuple):
    """One logical record as read back: offsets absolute, timestamp resolved (LogAppendTime applied)."""
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()          # ((str key, bytes | None value), ...)


class SimpleRecord(NamedTuple):
    """A record to write: what a producer supplies. ``timestamp`` -1 means none."""
    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP
    headers: tuple = ()


# ---------------------------------------------------------------------------------------------------------------
# varints (protobuf zig-zag)

def write_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag LEB128 encoding of a 64-bit signed ``value`` to ``out``."""
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def size_of_varint(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def read_varint(buf: bytes, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Decode one zig-zag varint (``max_bytes`` 5) or varlong (10) at ``pos``: (value, next position).

    Raises CorruptRecordError when the encoding is too long or runs past the buffer.
    """
    result = 0
    shift = 0
    for i in range(max_bytes):
        try:
            b = buf[pos + i]
        except IndexError:
            raise CorruptRecordError("premature end of buffer inside a varint", position=pos) from None
        result |= (b & 0x7F) << shift
        if b < 0x80:
            # Java's int/long accumulator drops bits shifted past 32/64: mask to decode as Kafka does.
            result &= 0xFFFFFFFF if max_bytes == 5 else 0xFFFFFFFFFFFFFFFF
            return (result >> 1) ^ -(result & 1), pos + i + 1
        shift += 7
    raise CorruptRecordError("varint is too long" if max_bytes == 5 else "varlong is too long", position=pos)


# ---------------------------------------------------------------------------------------------------------------
# reading

def _py_decode_records(payload: bytes, count: int, base_offset: int, base_timestamp: int,
                       log_append_time: int | None) -> list[Record]:
    """Decode ``count`` records from an uncompressed records section; it must be consumed exactly.

    Public as ``decode_records`` (the C version when built, see the end of this module).
    """
    out: list[Record] = []
    append = out.append
    pos = 0
    end = len(payload)
    try:
        for _ in range(count):
            # length varint (fast path for one byte)
            b = payload[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(payload, pos)
            body_end = pos + length
            if length < 0 or body_end > end:
                raise CorruptRecordError(
                    f"record size {length} is larger than the {end - pos} bytes remaining", position=pos)
            pos += 1  # attributes, unused
            ts_delta, pos = read_varint(payload, pos, 10)
            b = payload[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(payload, pos)
            b = payload[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = read_varint(payload, pos)
            if klen >= 0:
                key = payload[pos:pos + klen]
                pos += klen
            elif klen == -1:
                key = None
            else:
                raise CorruptRecordError(f"invalid negative key size {klen}", position=pos)
            b = payload[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = read_varint(payload, pos)
            if vlen >= 0:
                value = payload[pos:pos + vlen]
                pos += vlen
            elif vlen == -1:
                value = None
            else:
                raise CorruptRecordError(f"invalid negative value size {vlen}", position=pos)
            b = payload[pos]
            if b == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(payload, pos, body_end)
            if pos != body_end:
                raise CorruptRecordError(
                    f"invalid record size: expected to read {length} bytes in record payload, but instead read "
                    f"{length - (body_end - pos)}", position=pos)
            append(Record(base_offset + offset_delta,
                          log_append_time if log_append_time is not None else base_timestamp + ts_delta,
                          key, value, headers))
    except IndexError:
        raise CorruptRecordError("premature EOF while reading records", position=pos) from None
    if pos != end:
        raise CorruptRecordError("incorrect declared batch size, records still remaining in file", position=pos)
    return out


def _py_scan_records(payload: bytes | memoryview, count: int) -> tuple[int, int, int]:
    """What a leader append checks of each record of a client's batch, without keeping the records: (the first
    record whose offset delta is not its index, or -1; that delta, or 0; the first record without a key, or -1).
    Every structural check of :func:`_py_decode_records` applies, with the same errors.

    Public as ``scan_records`` (the C version when built, which builds no record at all).
    """
    # base offset 0: a record's offset is its delta; the decoder only indexes and slices, which a view does alike
    recs = _py_decode_records(cast(bytes, payload), count, 0, 0, None)
    bad = next((i for i, r in enumerate(recs) if r.offset != i), -1)
    return bad, recs[bad].offset if bad >= 0 else 0, next((i for i, r in enumerate(recs) if r.key is None), -1)


def _decode_headers(payload: bytes, pos: int, body_end: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = read_varint(payload, pos)
    if count < 0:
        raise CorruptRecordError(f"found invalid number of record headers {count}", position=pos)
    if count > body_end - pos:
        raise CorruptRecordError(f"found invalid number of record headers {count}", position=pos)
    headers = []
    for _ in range(count):
        hklen, pos = read_varint(payload, pos)
        if hklen < 0:
            raise CorruptRecordError(f"invalid negative header key size {hklen}", position=pos)
        if pos + hklen > body_end:
            raise CorruptRecordError("header key runs past the record", position=pos)
        hkey = bytes(payload[pos:pos + hklen]).decode("utf-8", "surrogateescape")
        pos += hklen
        hvlen, pos = read_varint(payload, pos)
        if hvlen >= 0:
            if pos + hvlen > body_end:
                raise CorruptRecordError("header value runs past the record", position=pos)
            hval = bytes(payload[pos:pos + hvlen])
            pos += hvlen
        elif hvlen == -1:
            hval = None
        else:
            raise CorruptRecordError(f"invalid negative header value size {hvlen}", position=pos)
        headers.append((hkey, hval))
    return tuple(headers), pos


# ---------------------------------------------------------------------------------------------------------------
# writing

def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str | bytes, bytes | None]]) -> None:
    """Append one record (length-prefixed) to ``out``."""
    body = bytearray(b"\x00")
    write_varint(timestamp_delta, body)
    write_varint(offset_delta, body)
    if key is None:
        body.append(1)
    else:
        write_varint(len(key), body)
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(len(value), body)
        body += value
    write_varint(len(headers), body)
    for hkey, hval in headers:
        hk = hkey.encode("utf-8", "surrogateescape") if isinstance(hkey, str) else bytes(hkey)
        write_varint(len(hk), body)
        body += hk
        if hval is None:
            body.append(1)
        else:
            write_varint(len(hval), body)
            body += hval
    write_varint(len(body), out)
    out += body


def _py_encode_records(records: Sequence[tuple[bytes | None, bytes | None, int, tuple]], offsets: Sequence[int] | None,
                       base_offset: int, base_timestamp: int) -> bytes:
    """The records section for ``records`` (``(key, value, timestamp, headers)`` each, e.g. SimpleRecord).

    ``offsets`` gives each record's absolute offset (increasing, >= ``base_offset``) or is None for
    ``base_offset + i``. Public as ``encode_records`` (the C version when built, see the end of this module).
    """
    if offsets is None:
        offsets = range(base_offset, base_offset + len(records))
    elif len(offsets) != len(records):
        raise ValueError("offsets and records differ in length")
    out = bytearray()
    prev = None
    for off, (key, value, timestamp, headers) in zip(offsets, records):
        if prev is not None and off <= prev:
            raise ValueError(f"offsets must increase, got {off} after {prev}")
        if off < base_offset:
            raise ValueError(f"offset {off} is below the base offset {base_offset}")
        prev = off
        encode_record(out, off - base_offset, timestamp - base_timestamp, key, value, headers)
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------
# compiled twins: storage_engine/record/_speedups.c replaces the two per-record loops when kernels.IMPLEMENTATION is
# "c" (the extension is built and STORAGE_ENGINE_PURE_PYTHON is not set). tests/storage_engine/record/test_speedups.py
# runs the same checks against both and compares them on random and mutated input.

if kernels.COMPILED is not None:
    _c_encode_records = kernels.COMPILED.encode_records
    _compiled_decode_records = kernels.COMPILED.decode_records

    def _c_decode_records(payload: bytes, count: int, base_offset: int, base_timestamp: int,
                          log_append_time: int | None) -> list[Record]:
        return _compiled_decode_records(payload, count, base_offset, base_timestamp, log_append_time, Record,
                                        CorruptRecordError)
else:
    _c_decode_records = _c_encode_records = None  # type: ignore[assignment]

# An extension built before scan_records existed lacks it: the Python twin then scans.
_compiled_scan_records = getattr(kernels.COMPILED, "scan_records", None)


def _c_scan_records(payload: bytes | memoryview, count: int) -> tuple[int, int, int]:
    assert _compiled_scan_records is not None
    return _compiled_scan_records(payload, count, CorruptRecordError)


if kernels.IMPLEMENTATION == "c":
    decode_records, encode_records = _c_decode_records, _c_encode_records
else:
    decode_records, encode_records = _py_decode_records, _py_encode_records
scan_records = (_c_scan_records if kernels.IMPLEMENTATION == "c" and _compiled_scan_records is not None
                else _py_scan_records)
