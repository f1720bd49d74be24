"""Legacy messages, magic 0 and 1 (Kafka's ``LegacyRecord``/``AbstractLegacyRecordBatch``): read, and rewritten
in their own format by the cleaner. New data is always written as magic 2.

Log entry = offset int64 + size int32 + message (size bytes), big-endian::

    field        v0     v1
    crc          4      4    uint32 CRC-32 (IEEE, zlib.crc32) of bytes from magic to the end of the message
    magic        1      1
    attributes   1      1    bits 0-2 codec (none/gzip/snappy/lz4; zstd illegal), bit 3 timestamp type (v1 only)
    timestamp    -      8    int64
    key_length   4      4    int32, -1 = null
    key
    value_length 4      4    int32, -1 = null
    value

An uncompressed message is its own "batch". A compressed wrapper has a null key and, as value, the compressed
bytes of an inner message set (inner entries offset+size+message, each uncompressed). The wrapper's offset is
the offset of the last inner message. v0 inner messages carry absolute offsets; v1 inner messages carry offsets
relative to the first (absolute = wrapper offset - last inner relative + inner relative; a wrapper offset of 0,
as some clients write, means the inner offsets are used as they are). A v1 wrapper's timestamp is the max inner
timestamp (CreateTime) or the append time (LogAppendTime, which inner messages then report).
"""
from __future__ import annotations

import struct
import zlib
from typing import Iterator, Sequence

from storage_engine.record import codecs
from storage_engine.errors import CompressionError, CorruptRecordError
from storage_engine.record.record_batch import (CREATE_TIME, LOG_APPEND_TIME, LOG_OVERHEAD, BatchBuffer,
                                                NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                                                NO_SEQUENCE, NO_TIMESTAMP_TYPE)
from storage_engine.record.records import NO_TIMESTAMP, Record, SimpleRecord

MAGIC_V0 = 0
MAGIC_V1 = 1
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
_ENTRY_V0 = struct.Struct(">qiIbb")          # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CRC_START = LOG_OVERHEAD + 4                  # crc covers magic..end
TIMESTAMP_TYPE_MASK = 0x08
CODEC_MASK = 0x07


class LegacyBatch:
    """One v0/v1 log entry over ``buf[pos:pos+size_in_bytes]`` with the batch interface of ``RecordBatch``."""

    __slots__ = ("buf", "pos", "path", "file_position", "offset", "size", "crc", "magic", "attributes",
                 "timestamp", "_inner")

    is_transactional = False
    is_control = False
    has_delete_horizon = False
    delete_horizon_ms = NO_TIMESTAMP
    partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
    producer_id = NO_PRODUCER_ID
    producer_epoch = NO_PRODUCER_EPOCH
    base_sequence = NO_SEQUENCE
    last_sequence = NO_SEQUENCE
    has_producer_id = False

    def __init__(self, buf: BatchBuffer, pos: int = 0, path: object = None,
                 file_position: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.path = path
        self.file_position = pos if file_position is None else file_position
        if len(buf) - pos < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
            raise CorruptRecordError("legacy message is shorter than the minimum record overhead", path,
                                     self.file_position)
        self.offset, self.size, self.crc, self.magic, attrs = _ENTRY_V0.unpack_from(buf, pos)
        self.attributes = attrs & 0xFF
        if self.magic not in (MAGIC_V0, MAGIC_V1):
            raise CorruptRecordError(f"invalid magic byte {self.magic} for a legacy message", path,
                                     self.file_position)
        if self.size < (RECORD_OVERHEAD_V0 if self.magic == 0 else RECORD_OVERHEAD_V1):
            raise CorruptRecordError(f"legacy message size {self.size} is below the minimum for magic "
                                     f"{self.magic}", path, self.file_position)
        self.timestamp = (_TIMESTAMP.unpack_from(buf, pos + LOG_OVERHEAD + 6)[0] if self.magic == MAGIC_V1
                          else NO_TIMESTAMP)
        self._inner: list[Record] | None = None

    # -- batch interface --------------------------------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.size

    @property
    def length(self) -> int:
        return self.size

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic == MAGIC_V0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        if self.compression == codecs.NONE:
            return self.offset
        inner = self.records()
        return inner[0].offset

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def records_count(self) -> int:
        return 1 if self.compression == codecs.NONE else len(self.records())

    def raw(self) -> bytes:
        return bytes(self.buf[self.pos:self.pos + LOG_OVERHEAD + self.size])

    def compute_crc(self) -> int:
        return zlib.crc32(memoryview(self.buf)[self.pos + _CRC_START:self.pos + LOG_OVERHEAD + self.size])

    def is_valid(self) -> bool:
        return self.size >= RECORD_OVERHEAD_V0 and self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(f"record is corrupt (stored crc = {self.crc}, computed crc = {computed})",
                                     self.path, self.file_position)

    def key_value(self) -> tuple[bytes | None, bytes | None]:
        """The message's own key and value (for a wrapper: null key, compressed value)."""
        return _key_value(self.buf, self.pos, self.size, self.magic, self.path, self.file_position)

    def records(self) -> list[Record]:
        if self._inner is not None:
            return self._inner
        key, value = self.key_value()
        codec = self.compression
        if codec == codecs.NONE:
            self._inner = [Record(self.offset, self.timestamp, key, value, ())]
            return self._inner
        if codec == codecs.ZSTD:
            raise CorruptRecordError(f"compression type zstd is not allowed with magic {self.magic}", self.path,
                                     self.file_position)
        if value is None:
            raise CorruptRecordError("found invalid compressed record set with null value", self.path,
                                     self.file_position)
        try:
            inner = codecs.decompress(codec, value, magic=self.magic)
        except CompressionError as exc:
            raise CompressionError(f"cannot decompress legacy wrapper at offset {self.offset}: {exc.reason}",
                                   self.path, self.file_position) from None
        self._inner = self._read_inner(inner)
        return self._inner

    def _read_inner(self, inner: bytes) -> list[Record]:
        entries = []
        pos = 0
        end = len(inner)
        while pos < end:
            if end - pos < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
                raise CorruptRecordError("truncated inner message in a compressed wrapper", self.path,
                                         self.file_position)
            off, size, _crc, magic, attrs = _ENTRY_V0.unpack_from(inner, pos)
            if size < RECORD_OVERHEAD_V0 or pos + LOG_OVERHEAD + size > end:
                raise CorruptRecordError(f"inner message size {size} is invalid", self.path, self.file_position)
            if magic not in (MAGIC_V0, MAGIC_V1):
                raise CorruptRecordError(f"invalid inner magic {magic}", self.path, self.file_position)
            if attrs & CODEC_MASK:
                raise CorruptRecordError("inner messages must not be compressed", self.path, self.file_position)
            ts = _TIMESTAMP.unpack_from(inner, pos + LOG_OVERHEAD + 6)[0] if magic == MAGIC_V1 else NO_TIMESTAMP
            key, value = _key_value(inner, pos, size, magic, self.path, self.file_position)
            entries.append((off, ts, key, value, magic))
            pos += LOG_OVERHEAD + size
        if not entries:
            raise CorruptRecordError("found invalid compressed record set with no inner records", self.path,
                                     self.file_position)
        log_append = self.magic == MAGIC_V1 and self.attributes & TIMESTAMP_TYPE_MASK
        if self.magic == MAGIC_V1:
            last_relative = entries[-1][0]
            if self.offset == 0:
                absolute_base = 0
            else:
                if self.offset < last_relative:
                    raise CorruptRecordError(
                        f"found invalid wrapper offset {self.offset} in compressed v1 message set, "
                        f"last inner relative offset {last_relative}", self.path, self.file_position)
                absolute_base = self.offset - last_relative
        else:
            absolute_base = 0
        out = []
        for off, ts, key, value, _magic in entries:
            out.append(Record(absolute_base + off, self.timestamp if log_append else ts, key, value, ()))
        return out

    def message_checksums(self) -> list[tuple[int, bool]]:
        """(stored CRC, whether it matches) of each message :meth:`records` returns: the message itself, or each
        inner message of a compressed wrapper (what Kafka's DumpLogSegments prints per record)."""
        if self.compression == codecs.NONE:
            return [(self.crc, self.is_valid())]
        _key, value = self.key_value()
        inner = codecs.decompress(self.compression, value or b"", magic=self.magic)
        out, pos = [], 0
        while pos + LOG_OVERHEAD + RECORD_OVERHEAD_V0 <= len(inner):
            _off, size, crc, _magic, _attrs = _ENTRY_V0.unpack_from(inner, pos)
            end = pos + LOG_OVERHEAD + size
            out.append((crc, size >= RECORD_OVERHEAD_V0 and end <= len(inner)
                        and zlib.crc32(inner[pos + _CRC_START:end]) == crc))
            pos = end
        return out

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def control_type(self) -> str | None:
        return None

    def __repr__(self) -> str:
        return f"LegacyBatch(magic={self.magic}, offset={self.offset}, size={self.size_in_bytes})"


def _key_value(buf: BatchBuffer, pos: int, size: int, magic: int, path: object,
               file_position: int) -> tuple[bytes | None, bytes | None]:
    p = pos + LOG_OVERHEAD + 6 + (8 if magic == MAGIC_V1 else 0)
    end = pos + LOG_OVERHEAD + size
    try:
        klen = _INT32.unpack_from(buf, p)[0]
        p += 4
        if klen >= 0:
            key = bytes(buf[p:p + klen])
            p += klen
        elif klen == -1:
            key = None
        else:
            raise CorruptRecordError(f"invalid key size {klen}", path, file_position)
        vlen = _INT32.unpack_from(buf, p)[0]
        p += 4
        if vlen >= 0:
            value = bytes(buf[p:p + vlen])
            p += vlen
        elif vlen == -1:
            value = None
        else:
            raise CorruptRecordError(f"invalid value size {vlen}", path, file_position)
    except struct.error:
        raise CorruptRecordError("legacy message runs past its declared size", path, file_position) from None
    if p != end:
        raise CorruptRecordError(f"legacy message declares {size} bytes but its fields take {p - pos - 12}",
                                 path, file_position)
    return key, value


# ---------------------------------------------------------------------------------------------------------------
# writing

def encode_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    """One log entry (offset + size + message) with its CRC-32."""
    body = bytearray()
    body += struct.pack(">bb", magic, attributes)
    if magic == MAGIC_V1:
        body += _TIMESTAMP.pack(timestamp)
    if key is None:
        body += _INT32.pack(-1)
    else:
        body += _INT32.pack(len(key)) + key
    if value is None:
        body += _INT32.pack(-1)
    else:
        body += _INT32.pack(len(value)) + value
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def build_legacy_batch(records: Sequence[SimpleRecord], *, magic: int, base_offset: int = 0,
                       codec: int = codecs.NONE, timestamp_type: int = CREATE_TIME,
                       log_append_time_ms: int | None = None, offsets: Sequence[int] | None = None) -> bytes:
    """Encode records as v0/v1 messages: one entry per record if uncompressed, else one compressed wrapper."""
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"legacy magic must be 0 or 1, got {magic}")
    if codec == codecs.ZSTD:
        raise ValueError(f"compression type zstd is not allowed with magic {magic}")
    recs = [r if isinstance(r, SimpleRecord) else SimpleRecord(*r) for r in records]
    if not recs:
        raise ValueError("a legacy batch needs at least one record")
    if offsets is None:
        offsets = list(range(base_offset, base_offset + len(recs)))
    ts_attr = TIMESTAMP_TYPE_MASK if (magic == MAGIC_V1 and timestamp_type == LOG_APPEND_TIME) else 0
    timestamps = [r.timestamp for r in recs]
    if magic == MAGIC_V0:
        timestamps = [NO_TIMESTAMP] * len(recs)
    elif timestamp_type == LOG_APPEND_TIME:
        if log_append_time_ms is None:
            raise ValueError("LogAppendTime needs log_append_time_ms")
        timestamps = [log_append_time_ms] * len(recs)
    if codec == codecs.NONE:
        return b"".join(encode_message(o, magic, ts_attr, ts, r.key, r.value)
                        for o, ts, r in zip(offsets, timestamps, recs))
    first = offsets[0]
    inner = b"".join(encode_message(o - first if magic == MAGIC_V1 else o, magic, ts_attr, ts, r.key, r.value)
                     for o, ts, r in zip(offsets, timestamps, recs))
    wrapper_value = codecs.compress(codec, inner, magic=magic)
    wrapper_ts = max(timestamps)  # with LogAppendTime every inner timestamp is the append time
    return encode_message(offsets[-1], magic, codec | ts_attr, wrapper_ts, None, wrapper_value)
