"""Record batches, magic 2 (Kafka's ``DefaultRecordBatch``/``DefaultRecord``): the format every new batch uses.

Batch header, 61 bytes, big-endian::

    offset size field
       0    8   base_offset            int64
       8    4   length                 int32  = batch size - 12
      12    4   partition_leader_epoch int32  (-1 unknown; NOT covered by the CRC)
      16    1   magic                  int8   = 2
      17    4   crc                    uint32 CRC-32C of bytes [21, end of batch)
      21    2   attributes             int16, low byte only: bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
                                              4 transactional, 5 control, 6 delete horizon in base_timestamp
      23    4   last_offset_delta      int32  last offset = base_offset + last_offset_delta
      27    8   base_timestamp         int64  first record's timestamp, or the delete horizon if bit 6 is set
      35    8   max_timestamp          int64
      43    8   producer_id            int64  (-1 none)
      51    2   producer_epoch         int16  (-1 none)
      53    4   base_sequence          int32  (-1 none)
      57    4   records_count          int32
      61    .   records                plain, or one compressed stream of all records (the header stays plain)

Record (inside the records section), varints are protobuf zig-zag LEB128::

    length varint (bytes that follow) | attributes int8 (0) | timestamp_delta varlong | offset_delta varint |
    key_length varint (-1 = null) | key | value_length varint (-1 = null: a tombstone) | value |
    header_count varint | per header: key_length varint (>= 0, UTF-8) | key | value_length varint (-1 = null) | value

The CRC excludes base offset, length, leader epoch and magic, so assigning offsets never recomputes it.
LogAppendTime batches report max_timestamp as every record's timestamp. Compaction may leave gaps, so
last_offset_delta can exceed records_count - 1 and offset deltas can skip values.
"""
from __future__ import annotations

import os
import struct
from typing import Iterable, NamedTuple, Sequence

from crc32c import crc32c

from storage_engine.record import codecs
from storage_engine.errors import CompressionError, CorruptRecordError

MAGIC_V2 = 2
LOG_OVERHEAD = 12                 # offset int64 + size int32 in front of every entry, all magics
HEADER_SIZE_UP_TO_MAGIC = 17      # enough bytes to know the magic of an entry
MIN_ENTRY_SIZE_FIELD = 14         # smallest legal size field (v0 record overhead), checked for every magic
BATCH_OVERHEAD = 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_RECORD_OVERHEAD = 21

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH_AND_EPOCH = struct.Struct(">qii")
_CRC = struct.Struct(">I")

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP_TYPE = -1
TIMESTAMP_TYPE_NAMES = {NO_TIMESTAMP_TYPE: "NoTimestampType", CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 2**31 - 1

CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


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


def read_varint(buf, pos: int, max_bytes: int = 5) -> tuple[int, int]:
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
# sequence arithmetic

def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


# ---------------------------------------------------------------------------------------------------------------
# reading

class RecordBatch:
    """A magic-2 batch over ``buf[pos:pos+size_in_bytes]``. Header fields are parsed eagerly, records lazily.

    ``path`` (for errors) names the file the bytes came from; ``file_position`` their position in it.
    """

    __slots__ = ("buf", "pos", "path", "file_position", "base_offset", "length", "partition_leader_epoch",
                 "magic", "crc", "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count")

    def __init__(self, buf, pos: int = 0, path: object = None, file_position: int | None = None):
        if len(buf) - pos < BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch is corrupt: {len(buf) - pos} bytes are smaller than the minimum allowed "
                f"overhead {BATCH_OVERHEAD}", path, pos if file_position is None else file_position)
        (self.base_offset, self.length, self.partition_leader_epoch, self.magic, self.crc, attrs,
         self.last_offset_delta, self.base_timestamp, self.max_timestamp, self.producer_id,
         self.producer_epoch, self.base_sequence, self.records_count) = BATCH_HEADER.unpack_from(buf, pos)
        self.attributes = attrs & 0xFF
        self.buf = buf
        self.pos = pos
        self.path = path
        self.file_position = pos if file_position is None else file_position

    # -- header properties ----------------------------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else NO_TIMESTAMP

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def raw(self) -> bytes:
        """The batch's exact bytes."""
        return bytes(self.buf[self.pos:self.pos + LOG_OVERHEAD + self.length])

    # -- validation -----------------------------------------------------------------------------------------
    def compute_crc(self) -> int:
        return crc32c(memoryview(self.buf)[self.pos + ATTRIBUTES_OFFSET:self.pos + LOG_OVERHEAD + self.length])

    def is_valid(self) -> bool:
        return self.length + LOG_OVERHEAD >= BATCH_OVERHEAD and self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        if self.length + LOG_OVERHEAD < BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch is corrupt: its size {self.length + LOG_OVERHEAD} is smaller than the minimum "
                f"allowed overhead {BATCH_OVERHEAD}", self.path, self.file_position)
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch is corrupt (stored crc = {self.crc}, computed crc = {computed})",
                self.path, self.file_position)

    # -- records --------------------------------------------------------------------------------------------
    def records_payload(self, max_output_bytes: int | None = None) -> bytes:
        """The records section, decompressed."""
        start = self.pos + BATCH_OVERHEAD
        end = self.pos + LOG_OVERHEAD + self.length
        codec = self.attributes & COMPRESSION_CODEC_MASK
        if codec == codecs.NONE:
            return bytes(self.buf[start:end])
        try:
            return codecs.decompress(codec, memoryview(self.buf)[start:end], magic=2,
                                     max_output_bytes=max_output_bytes)
        except CompressionError as exc:
            raise CompressionError(f"cannot decompress batch at offset {self.base_offset}: {exc.reason}",
                                   self.path, self.file_position + BATCH_OVERHEAD +
                                   (exc.position or 0)) from None

    def records(self) -> list[Record]:
        """Decode every record. Raises CorruptRecordError (naming file and batch position) on bad structure."""
        if self.records_count < 0:
            raise CorruptRecordError(f"found invalid record count {self.records_count}", self.path,
                                     self.file_position)
        if self.records_count == 0:
            return []
        payload = self.records_payload()
        log_append = bool(self.attributes & TIMESTAMP_TYPE_MASK)
        try:
            return decode_records(payload, self.records_count, self.base_offset, self.base_timestamp,
                                  self.max_timestamp if log_append else None)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc.reason}", self.path,
                                     self.file_position) from None

    def __iter__(self):
        return iter(self.records())

    def control_type(self) -> str | None:
        """For a control batch, the type name of its (single) control record's key."""
        if not self.is_control:
            return None
        recs = self.records()
        if not recs:
            return None
        key = recs[0].key
        if key is None or len(key) < 4:
            raise CorruptRecordError("control record key is shorter than 4 bytes", self.path, self.file_position)
        version, ctype = struct.unpack_from(">hh", key, 0)
        if version < 0:
            raise CorruptRecordError(f"invalid control record version {version}", self.path, self.file_position)
        return CONTROL_TYPES.get(ctype, "UNKNOWN")

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, size={self.size_in_bytes})")


def _py_decode_records(payload, count: int, base_offset: int, base_timestamp: int,
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
                headers = ()
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


def _decode_headers(payload, pos: int, body_end: int):
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

def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers) -> None:
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


def _py_encode_records(records, offsets, base_offset: int, base_timestamp: int) -> bytes:
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


def build_batch(records: Sequence[SimpleRecord] | Iterable[tuple], *, base_offset: int = 0,
                codec: int = codecs.NONE, timestamp_type: int = CREATE_TIME,
                log_append_time_ms: int | None = None,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, is_transactional: bool = False, is_control: bool = False,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                delete_horizon_ms: int | None = None, offsets: Sequence[int] | None = None,
                last_offset: int | None = None, compression_level: int | None = None) -> bytes:
    """Encode a magic-2 batch exactly as Kafka's ``MemoryRecordsBuilder`` does.

    ``records`` are ``SimpleRecord``s (or ``(key, value, timestamp, headers)`` tuples). ``offsets`` gives each
    record's absolute offset (gaps allowed, as after compaction); default ``base_offset + i``. ``last_offset``
    overrides the batch's last offset (the cleaner keeps the original one). ``delete_horizon_ms`` sets bit 6
    and stores the horizon as base timestamp, so timestamp deltas are relative to it (KIP-534).
    """
    recs = [r if isinstance(r, SimpleRecord) else SimpleRecord(*r) for r in records]
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"invalid timestamp type {timestamp_type} for a magic 2 batch")
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise ValueError("cannot write a transactional batch without a producer id")
    if offsets is not None and len(offsets) != len(recs):
        raise ValueError("offsets and records differ in length")
    timestamps = [r.timestamp for r in recs]
    for ts in timestamps:
        if ts < NO_TIMESTAMP:
            raise ValueError(f"invalid negative timestamp {ts}")
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time_ms is None:
            raise ValueError("LogAppendTime batches need log_append_time_ms")
        timestamps = [log_append_time_ms] * len(recs)
    if recs:
        first_ts = timestamps[0]
        max_ts = max(timestamps)
        # Kafka's builder tracks the offset of the first record holding the max; only the value matters on disk.
    else:
        first_ts = NO_TIMESTAMP
        max_ts = NO_TIMESTAMP
    base_ts = delete_horizon_ms if delete_horizon_ms is not None else first_ts
    if timestamp_type == LOG_APPEND_TIME:
        assert log_append_time_ms is not None, "a LogAppendTime batch needs log_append_time_ms"
        recs = [SimpleRecord(key, value, log_append_time_ms, headers) for key, value, _, headers in recs]
    payload = encode_records(recs, offsets, base_offset, base_ts)  # also checks the offsets
    if not recs:
        prev = None
    else:
        prev = base_offset + len(recs) - 1 if offsets is None else offsets[-1]
    if last_offset is None:
        last_offset = prev if prev is not None else base_offset
    elif prev is not None and last_offset < prev:
        raise ValueError(f"last_offset {last_offset} is below the last record's offset {prev}")
    if codec != codecs.NONE:
        payload = codecs.compress(codec, bytes(payload), magic=2, level=compression_level)
    attributes = (codec & COMPRESSION_CODEC_MASK)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    return _finish_batch(payload, base_offset, last_offset - base_offset, partition_leader_epoch, attributes,
                         base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(recs))


def _finish_batch(payload, base_offset, last_offset_delta, leader_epoch, attributes, base_ts, max_ts,
                  producer_id, producer_epoch, base_sequence, count) -> bytes:
    out = bytearray(BATCH_OVERHEAD + len(payload))
    BATCH_HEADER.pack_into(out, 0, base_offset, BATCH_OVERHEAD - LOG_OVERHEAD + len(payload), leader_epoch,
                           MAGIC_V2, 0, attributes, last_offset_delta, base_ts, max_ts, producer_id,
                           producer_epoch, base_sequence, count)
    out[BATCH_OVERHEAD:] = payload
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_empty_batch(template: RecordBatch) -> bytes:
    """Kafka's ``writeEmptyHeader``: a 61-byte batch with no records that keeps a batch's offsets and producer
    state (used by the cleaner). Compression none, base timestamp -1, delete-horizon bit cleared."""
    attributes = template.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    return _finish_batch(b"", template.base_offset, template.last_offset_delta, template.partition_leader_epoch,
                         attributes, NO_TIMESTAMP, template.max_timestamp, template.producer_id,
                         template.producer_epoch, template.base_sequence, 0)


def build_control_batch(control_type: int, *, base_offset: int, timestamp: int, producer_id: int,
                        producer_epoch: int, coordinator_epoch: int = 0,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transaction marker (0 ABORT, 1 COMMIT) as the coordinator writes it: transactional + control."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([SimpleRecord(key, value, timestamp)], base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=True, is_control=True,
                       partition_leader_epoch=partition_leader_epoch)


def set_base_offset(batch: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign offsets in place (the field is outside the CRC)."""
    struct.pack_into(">q", batch, pos, base_offset)


def set_partition_leader_epoch(batch: bytearray | memoryview, pos: int, epoch: int) -> None:
    struct.pack_into(">i", batch, pos + 12, epoch)


# ---------------------------------------------------------------------------------------------------------------
# compiled speedups: storage_engine/record/_speedups.c (built by setup.py when a compiler is present) replaces the two
# per-record loops; STORAGE_ENGINE_PURE_PYTHON=1 forces the Python ones. tests/storage_engine/record/test_speedups.py runs
# the same checks against both and compares them on random and mutated input.

try:
    from storage_engine.record import _speedups  # type: ignore[attr-defined]
except ImportError:  # built without a compiler: pure Python only
    _speedups = None

if _speedups is not None:
    _c_encode_records = _speedups.encode_records

    def _c_decode_records(payload, count: int, base_offset: int, base_timestamp: int,
                          log_append_time: int | None) -> list[Record]:
        return _speedups.decode_records(payload, count, base_offset, base_timestamp, log_append_time,
                                        Record, CorruptRecordError)
else:
    _c_decode_records = _c_encode_records = None  # type: ignore[assignment]

if _speedups is not None and os.environ.get("STORAGE_ENGINE_PURE_PYTHON", "") in ("", "0"):
    IMPLEMENTATION = "c"
    decode_records, encode_records = _c_decode_records, _c_encode_records
else:
    IMPLEMENTATION = "python"
    decode_records, encode_records = _py_decode_records, _py_encode_records

# The same extension's batch-level kernels (compaction record filter and key map, recovery walk, key columns of the
# Spark source; see _speedups.h): callers read ``records.KERNELS`` at call time, None meaning "pure Python".
KERNELS = _speedups if IMPLEMENTATION == "c" else None
