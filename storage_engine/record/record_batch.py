"""Record batches, magic 2 (Kafka's ``DefaultRecordBatch``): the format every new batch uses. Reading one is
:class:`RecordBatch`, writing one :func:`build_batch` (and :func:`build_empty_batch`, :func:`build_control_batch`);
the records inside are :mod:`storage_engine.record.records`.

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

The CRC excludes base offset, length, leader epoch and magic, so assigning offsets never recomputes it.
LogAppendTime batches report max_timestamp as every record's timestamp. Compaction may leave gaps, so
last_offset_delta can exceed records_count - 1 and offset deltas can skip values.
"""
from __future__ import annotations

import mmap
import struct
from typing import Iterable, Iterator, Sequence, TypeAlias

from crc32c import crc32c

from storage_engine.record import codecs
from storage_engine.errors import CompressionError, CorruptRecordError
from storage_engine.record.records import (NO_TIMESTAMP, Record, SimpleRecord, decode_records, encode_records,
                                          scan_records)

MAGIC_V2 = 2
LOG_OVERHEAD = 12                 # offset int64 + size int32 in front of every entry, all magics
HEADER_SIZE_UP_TO_MAGIC = 17      # enough bytes to know the magic of an entry
MIN_ENTRY_SIZE_FIELD = 14         # smallest legal size field (v0 record overhead), checked for every magic
BATCH_OVERHEAD = 61
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
ENTRY_HEADER = struct.Struct(">qi")   # base offset and length: the LOG_OVERHEAD bytes before every entry, all magics
_CRC = struct.Struct(">I")

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP_TYPE = -1
TIMESTAMP_TYPE_NAMES = {NO_TIMESTAMP_TYPE: "NoTimestampType", CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 2**31 - 1

# What batches are parsed from: bytes (a pread window, an append), a bytearray (a batch being validated), a memory
# map of a segment (recovery, the Spark sources) or a view of one of these.
BatchBuffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


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

    def __init__(self, buf: BatchBuffer, pos: int = 0, path: object = None,
                 file_position: int | None = None) -> None:
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

    def scan_records(self) -> tuple[int, int, int]:
        """The checks of :meth:`records` (same errors), without building the records: (the first record whose
        offset delta is not its index, or -1; that delta, or 0; the first record without a key, or -1). An
        uncompressed records section is read in place."""
        if self.records_count < 0:
            raise CorruptRecordError(f"found invalid record count {self.records_count}", self.path,
                                     self.file_position)
        if self.records_count == 0:
            return -1, 0, -1
        start, end = self.pos + BATCH_OVERHEAD, self.pos + LOG_OVERHEAD + self.length
        payload = (memoryview(self.buf)[start:end] if self.attributes & COMPRESSION_CODEC_MASK == codecs.NONE
                   else self.records_payload())
        try:
            return scan_records(payload, self.records_count)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc.reason}", self.path,
                                     self.file_position) from None

    def __iter__(self) -> Iterator[Record]:
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


# ---------------------------------------------------------------------------------------------------------------
# writing

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
    return finish_batch(payload, base_offset, last_offset - base_offset, partition_leader_epoch, attributes,
                        base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(recs))


def finish_batch(payload: bytes, base_offset: int, last_offset_delta: int, leader_epoch: int, attributes: int,
                 base_ts: int, max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int,
                 count: int) -> bytes:
    """The whole batch around an encoded (and compressed, if the attributes' codec says so) records section
    ``payload``: the header with these fields, written as given (no checks: :func:`build_batch` makes them), and
    its CRC-32C. The cleaner uses it to wrap a records section its compiled filter re-encoded."""
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
    return finish_batch(b"", template.base_offset, template.last_offset_delta, template.partition_leader_epoch,
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

