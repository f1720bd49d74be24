"""Producer state of one partition: one producer's entry (Kafka's ``ProducerStateEntry``), the checks of an append
(``ProducerAppendInfo``; :func:`analyze` and :func:`apply`, Kafka's ``analyzeAndValidateProducerState``) and the
rebuild from snapshots and the log (:func:`rebuild`, Kafka's ``rebuildProducerState``). The map of a partition's
producers and its ``.snapshot`` files are
:class:`~storage_engine.log.producer_state_manager.ProducerStateManager`'s.

Per producer id the state holds the producer epoch, the metadata of its last 5 data batches (last sequence,
last offset, offset delta, max timestamp), the coordinator epoch of the last transaction marker, the time of
its last write and the first offset of its open transaction, if any. It is what lets the log:

* recognise a retried batch (same producer, epoch and sequence range as one of the last 5): the append
  returns the offsets the batch got the first time and writes nothing;
* refuse a batch from a fenced producer (an older epoch: ``INVALID_PRODUCER_EPOCH``), a sequence that does
  not follow the last one (``OUT_OF_ORDER_SEQUENCE_NUMBER``; a new epoch must start at 0; a producer without
  state may start anywhere), a non-transactional batch inside an open transaction (``INVALID_TXN_STATE``) and
  a marker from a zombie coordinator (``TRANSACTION_COORDINATOR_FENCED``);
* know the open transactions, hence the first unstable offset and the last stable offset (LSO), and the
  transactions that an ABORT marker completes (they go to the segment's ``.txnindex``).

Batches appended by a client are checked (origin ``client``) and markers by the coordinator (``coordinator``);
batches replayed from the log (a load, a recovery, another process's appends) are applied without checks
(``replication``), as Kafka's follower does.

The state is a function of the log: it is written to ``<offset>.snapshot`` files
(:mod:`storage_engine.segment.producer_snapshot`) at each roll and at close, and rebuilt from the newest valid
snapshot at or below the log end plus a replay of the batches after it (:func:`rebuild`). Every process using a
partition keeps its own copy and keeps it current the same way it keeps its view of the segments (see
:mod:`storage_engine.log.view`): under the partition lock it replays what others appended, and after a change of
the segment set it rebuilds from the snapshots, so all processes see one state. Producer expiry
(``producer.id.expiration.ms``) therefore happens only as a maintenance step that writes a snapshot at the log
end and makes every other process rebuild (Kafka also expires on load; here a load does not, so that two
processes never disagree about which producers exist).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from storage_engine.errors import (CorruptRecordError, InvalidProducerEpochError, InvalidTxnStateError,
                                   OutOfOrderSequenceError, TransactionCoordinatorFencedError)
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import (INT32_MAX, NO_PRODUCER_EPOCH, NO_SEQUENCE, RecordBatch,
                                                decrement_sequence)
from storage_engine.record.records import NO_TIMESTAMP
from storage_engine.segment.producer_snapshot import SnapshotEntry

NUM_BATCHES_TO_RETAIN = 5
CLIENT, COORDINATOR, REPLICATION = "client", "coordinator", "replication"
ABORT, COMMIT = 0, 1


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class LastRecord(NamedTuple):
    """What the cleaner keeps of an active producer: its last data offset (None if it has none) and epoch."""
    last_data_offset: int | None
    producer_epoch: int


# What ProducerStateEntry._key compares: producer id and epoch, coordinator epoch, last timestamp, txn first
# offset, batches.
EntryKey = tuple[int, int, int, int, int | None, tuple[BatchMetadata, ...]]


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp", "current_txn_first_offset",
                 "batches")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = NO_TIMESTAMP, current_txn_first_offset: int | None = None,
                 batches: list | None = None):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: list[BatchMetadata] = batches if batches is not None else []

    def copy_without_batches(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                                  self.current_txn_first_offset)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        if self.producer_epoch != epoch:
            self.batches.clear()
            self.producer_epoch = epoch
            return True
        return False

    def _add_batch_metadata(self, meta: BatchMetadata) -> None:
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.batches.append(meta)

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self._add_batch_metadata(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update_from(self, nxt: "ProducerStateEntry") -> None:
        """Kafka's ``update(nextEntry)``: take the epoch, batches, coordinator epoch, txn and timestamp of ``nxt``."""
        self.maybe_update_producer_epoch(nxt.producer_epoch)
        for meta in nxt.batches:
            self._add_batch_metadata(meta)
        self.coordinator_epoch = nxt.coordinator_epoch
        self.current_txn_first_offset = nxt.current_txn_first_offset
        self.last_timestamp = nxt.last_timestamp

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def to_snapshot_entry(self) -> SnapshotEntry:
        return SnapshotEntry(self.producer_id, self.producer_epoch, self.last_seq, self.last_data_offset,
                             self.last_offset_delta, self.last_timestamp, self.coordinator_epoch,
                             -1 if self.current_txn_first_offset is None else self.current_txn_first_offset)

    @classmethod
    def from_snapshot_entry(cls, e: SnapshotEntry) -> "ProducerStateEntry":
        batches = [BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)] \
            if e.last_offset >= 0 else []
        return cls(e.producer_id, e.epoch, e.coordinator_epoch, e.timestamp,
                   e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None, batches)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerStateEntry) and self._key() == other._key()

    def _key(self) -> EntryKey:
        return (self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                self.current_txn_first_offset, tuple(self.batches))

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producerId={self.producer_id}, producerEpoch={self.producer_epoch}, "
                f"currentTxnFirstOffset={self.current_txn_first_offset}, coordinatorEpoch={self.coordinator_epoch}, "
                f"lastTimestamp={self.last_timestamp}, batchMetadata={self.batches})")


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppendInfo:
    """The changes one append makes to one producer, checked as Kafka checks them; applied by
    :meth:`~storage_engine.log.producer_state_manager.ProducerStateManager.update` only once the append is
    written."""

    def __init__(self, partition: str, producer_id: int, current: ProducerStateEntry, origin: str):
        self.partition = partition
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.copy_without_batches()
        self.started_txn_offsets: list[int] = []

    def _check_producer_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch and self.origin != REPLICATION:
            raise InvalidProducerEpochError(
                f"Epoch of producer {self.producer_id} at offset {offset} in {self.partition} is {epoch}, which is "
                f"smaller than the last seen epoch {self.updated.producer_epoch}")

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated, self.current
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in "
                    f"partition {self.partition}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch)")
            return
        if not updated.is_empty:
            current_last = updated.last_seq
        elif epoch == current.producer_epoch:
            current_last = current.last_seq
        else:
            current_last = NO_SEQUENCE
        # A producer without state (its records were all deleted) may go on with any sequence.
        if not (current.producer_epoch == NO_PRODUCER_EPOCH or _in_sequence(current_last, first_seq)):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.partition}: {first_seq} (incoming seq. number), {current_last} (current end sequence "
                f"number)")

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int, first_offset: int,
                          last_offset: int, is_transactional: bool) -> None:
        self._check_producer_epoch(epoch, first_offset)
        if self.origin == CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        txn_first = self.updated.current_txn_first_offset
        if txn_first is not None and not is_transactional:
            raise InvalidTxnStateError(f"Expected transactional write from producer {self.producer_id} at offset "
                                       f"{first_offset} in partition {self.partition}")
        if txn_first is None and is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_txn_offsets.append(first_offset)

    def append_end_txn_marker(self, control_type: int, coordinator_epoch: int, epoch: int, offset: int,
                              timestamp: int) -> CompletedTxn | None:
        self._check_producer_epoch(epoch, offset)
        if self.updated.coordinator_epoch > coordinator_epoch and self.origin != REPLICATION:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset} in partition "
                f"{self.partition}: {coordinator_epoch} (zombie), {self.updated.coordinator_epoch} (current)")
        # Only a non-empty transaction completes: an empty one changes neither the LSO nor the .txnindex.
        first = self.updated.current_txn_first_offset
        completed = CompletedTxn(self.producer_id, first, offset, control_type == ABORT) if first is not None else None
        self.updated.maybe_update_producer_epoch(epoch)
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = None
        self.updated.last_timestamp = timestamp
        return completed

    def append(self, batch: RecordBatch | LegacyBatch) -> CompletedTxn | None:
        """Apply one batch read from the log (any origin)."""
        if batch.is_control:
            records = batch.records()
            if not records:
                return None  # an empty control batch: its transaction was cleaned away entirely
            rec = records[0]
            control_type, coordinator_epoch = parse_end_txn_marker(rec.key, rec.value, batch)
            if control_type not in (ABORT, COMMIT):
                return None
            return self.append_end_txn_marker(control_type, coordinator_epoch, batch.producer_epoch,
                                              batch.base_offset, rec.timestamp)
        self.append_data_batch(batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.max_timestamp,
                               batch.base_offset, batch.last_offset, batch.is_transactional)
        return None


def parse_end_txn_marker(key: bytes | None, value: bytes | None,
                         batch: RecordBatch | LegacyBatch | None = None) -> tuple[int, int]:
    """(control type, coordinator epoch) of a control record (epoch -1 when it is not a COMMIT/ABORT marker)."""
    where = (batch.path, batch.file_position) if batch is not None else (None, None)
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key is shorter than 4 bytes", *where)
    version, ctype = struct.unpack_from(">hh", key, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid control record version {version}", *where)
    if ctype not in (ABORT, COMMIT):
        return ctype, -1
    if value is None or len(value) < 6:
        raise CorruptRecordError("end transaction marker value is shorter than 6 bytes", *where)
    _v, coordinator_epoch = struct.unpack_from(">hi", value, 0)
    return ctype, coordinator_epoch
