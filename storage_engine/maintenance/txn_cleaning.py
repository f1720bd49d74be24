"""The cleaner's transaction rules (Kafka's ``CleanedTransactionMetadata`` and ``cleanInto``'s batch policy).

The key map and the copy both walk the log in offset order, carrying a :class:`CleanedTransactionMetadata` fed
with the aborted transactions of the ``.txnindex`` files:

* an aborted transaction becomes "ongoing aborted" for its producer once a batch reaching its first offset is
  read; a transactional data batch of that producer is then **aborted**: the key map skips it and the copy drops
  its records (Kafka removes aborted records at once, whatever their keys);
* an ABORT marker is **kept** (and its transaction written to the cleaned segment's ``.txnindex``) while data of
  that transaction was read in this round; otherwise it may go. A COMMIT marker may go if no data of its
  transaction was read in this round. Other control types are kept; an empty control batch may go;
* a marker that may go first gets a delete horizon (now + ``delete.retention.ms``, KIP-534) and is removed by a
  later round once the horizon has passed: markers, like tombstones, take two rounds.

:meth:`CleanedTransactionMetadata.is_aborted_data` is the rule every key map reads the log by: the cleaner's map
(:func:`storage_engine.maintenance.cleaner.build_offset_map`) and the Spark sources (``spark_jobs/segment_source.py``),
so a Spark-built map equals the in-process one.

:func:`batch_retention` is the batch-level decision the copy makes for each batch before looking at records:

* the last batch of an active producer (its last data batch, or, for a producer whose last write was a marker,
  that marker of its current epoch) is kept, **as an empty batch** if all its records go, so that the producer
  state (sequence, epoch) survives cleaning;
* the last batch of the round is kept likewise (KAFKA-17076), so the log end offset survives;
* a batch whose records all go by the transaction rules is dropped without reading its records;
* any other batch is dropped only if none of its records survives the key rules.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from storage_engine.record.record_batch import NO_PRODUCER_ID
from storage_engine.segment.txn_index import AbortedTxn

if TYPE_CHECKING:
    from storage_engine.log.producer_state import LastRecord
    from storage_engine.record.legacy_records import LegacyBatch
    from storage_engine.record.record_batch import RecordBatch
    from storage_engine.segment.txn_index import TransactionIndex

RETAIN_EMPTY = "retain_empty"
DELETE = "delete"
DELETE_EMPTY = "delete_empty"

_ABORT, _COMMIT = 0, 1


class _AbortedMetadata:
    __slots__ = ("txn", "last_observed_batch_offset")

    def __init__(self, txn: AbortedTxn):
        self.txn = txn
        self.last_observed_batch_offset: int | None = None


def _control_type(batch: RecordBatch | LegacyBatch) -> int | None:
    """The control record type of a control batch, or None when it holds no record (cleaned empty)."""
    recs = batch.records()
    if not recs:
        return None
    key = recs[0].key
    if key is None or len(key) < 4:
        return -1
    return int.from_bytes(key[2:4], "big", signed=True)


class CleanedTransactionMetadata:
    """Transaction state carried through one cleaning round (map or copy), batch by batch in offset order."""

    def __init__(self, cleaned_index: TransactionIndex | None = None) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedMetadata] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []   # heap by first offset
        self._seq = 0
        self.cleaned_index = cleaned_index                       # the cleaned segment's TransactionIndex

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        for t in txns:
            heapq.heappush(self._aborted, (t.first_offset, self._seq, t))
            self._seq += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedMetadata(txn))

    def on_control_batch_read(self, batch: RecordBatch | LegacyBatch) -> bool:
        """Whether the control batch may be discarded."""
        self._consume_aborted_up_to(batch.last_offset)
        ctype = _control_type(batch)
        if ctype is None:
            return True            # an empty control batch was already cleaned
        pid = batch.producer_id
        if ctype == _ABORT:
            meta = self._ongoing_aborted.pop(pid, None)
            if meta is not None and meta.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(meta.txn)
                return False       # kept until every batch of the transaction is gone
            return True
        if ctype == _COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, batch: RecordBatch | LegacyBatch) -> bool:
        """Whether the data batch belongs to an aborted transaction (may be discarded)."""
        self._consume_aborted_up_to(batch.last_offset)
        if batch.is_transactional:
            meta = self._ongoing_aborted.get(batch.producer_id)
            if meta is not None:
                meta.last_observed_batch_offset = batch.last_offset
                return True
            self._ongoing_committed.add(batch.producer_id)
        return False

    def is_aborted_data(self, batch: RecordBatch | LegacyBatch) -> bool:
        """Kafka's ``buildOffsetMap`` rule for the next batch read in offset order, data or control: whether it is a
        data batch of an aborted transaction, which a key map leaves out. Every batch must be passed, markers
        included (an ABORT marker ends its transaction), from a read start whose aborted transactions were added
        (those overlapping [start, end), as ``Log.aborted_transactions`` or ``.txnindex`` entries with last offset
        >= start)."""
        if batch.is_control:
            self.on_control_batch_read(batch)
            return False
        return self.on_batch_read(batch)


class BatchDecision(NamedTuple):
    retention: str                  # RETAIN_EMPTY | DELETE | DELETE_EMPTY
    discard_records: bool           # every record goes (the batch may still stay as an empty batch)
    marker_for_empty_txn: bool      # a discardable control batch: it needs a delete horizon


def batch_retention(batch: RecordBatch | LegacyBatch, txn: CleanedTransactionMetadata,
                    last_records: dict[int, LastRecord], upper_bound_offset: int, now_ms: int) -> BatchDecision:
    """Kafka's ``checkBatchRetention`` for one batch read by the copy (updates ``txn``)."""
    if batch.is_control:
        can_discard = txn.on_control_batch_read(batch)
        discard = can_discard and batch.has_delete_horizon and batch.delete_horizon_ms <= now_ms
    else:
        can_discard = txn.on_batch_read(batch)
        discard = can_discard
    last_of_producer = False
    if batch.producer_id > NO_PRODUCER_ID:
        last = last_records.get(batch.producer_id)
        if last is not None:
            if last.last_data_offset is not None:
                last_of_producer = batch.last_offset == last.last_data_offset
            else:
                last_of_producer = batch.is_control and batch.producer_epoch == last.producer_epoch
    if last_of_producer or batch.next_offset == upper_bound_offset:
        retention = RETAIN_EMPTY
    elif discard:
        retention = DELETE
    else:
        retention = DELETE_EMPTY
    return BatchDecision(retention, discard, can_discard and batch.is_control)
