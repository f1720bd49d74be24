"""``__transaction_state`` records in Kafka's schemas (``transaction-coordinator/src/main/resources/common/message``
``TransactionLogKey.json`` and ``TransactionLogValue.json``), version 0, as Kafka writes them unless
``transaction.version`` >= 1:

* key: int16 version 0, ``TransactionLogKey`` {TransactionalId string};
* value: int16 version 0, ``TransactionLogValue`` {ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs
  int32, TransactionStatus int8, TransactionPartitions nullable [Topic string, PartitionIds [int32]],
  TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64};
* a null value is a tombstone (the transactional id expired).

Version 1 is flexible (compact strings and arrays, tagged fields): it is read too, so a log written by a newer
Kafka loads. The partition of a transactional id is ``abs(javaHashCode(id)) %
transaction.state.log.num.partitions``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from storage_engine.server.groups.records import Reader, RecordFormatError, put_string

KEY_VERSION = 0
VALUE_VERSION = 0

# TransactionStatus
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence")


@dataclass
class TxnRecord:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1


def key(transactional_id: str) -> bytes:
    out = bytearray(struct.pack(">h", KEY_VERSION))
    put_string(out, transactional_id)
    return bytes(out)


def value(r: TxnRecord) -> bytes:
    out = bytearray(struct.pack(">hqhib", VALUE_VERSION, r.producer_id, r.producer_epoch, r.timeout_ms, r.state))
    if r.state == EMPTY and not r.partitions:
        out += struct.pack(">i", -1)      # Kafka writes a null list for a transaction without partitions
    else:
        out += struct.pack(">i", len(r.partitions))
        for topic in sorted(r.partitions):
            put_string(out, topic)
            parts = sorted(r.partitions[topic])
            out += struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">qq", r.last_update_ms, r.start_ms)
    return bytes(out)


def parse_key(data: bytes) -> str:
    r = Reader(data)
    version = r.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"transaction log key version {version} is not 0")
    txn_id = r.string()
    if txn_id is None:
        raise RecordFormatError("transaction log key with a null transactional id")
    return txn_id


class _Compact(Reader):
    """The flexible (v1) encodings: unsigned varint lengths + 1, tagged fields."""

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint longer than 5 bytes")

    def string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._take(n).decode("utf-8")

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def parse_value(data: bytes) -> TxnRecord:
    version = Reader(data).i16()
    if version not in (0, 1):
        raise RecordFormatError(f"transaction log value version {version} is not 0 or 1")
    r: Reader = _Compact(data) if version == 1 else Reader(data)
    r.i16()
    producer_id, epoch, timeout = r.i64(), r.i16(), r.i32()
    state = r.i8()
    if state >= len(STATE_NAMES):
        raise RecordFormatError(f"transaction status {state} is unknown")
    partitions: dict[str, list[int]] = {}
    count = r.uvarint() - 1 if isinstance(r, _Compact) else r.i32()
    for _ in range(max(count, 0)):
        topic = r.string()
        if topic is None:
            raise RecordFormatError("transaction partition entry with a null topic")
        n = r.uvarint() - 1 if isinstance(r, _Compact) else r.i32()
        partitions.setdefault(topic, []).extend(r.i32() for _ in range(max(n, 0)))
        if isinstance(r, _Compact):
            r.skip_tags()
    last_update, start = r.i64(), r.i64()
    return TxnRecord(producer_id, epoch, timeout, state, partitions, last_update, start)
