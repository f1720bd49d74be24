"""Kafka's consumer-side ``read_committed`` filter over a partition's batches in offset order.

A fetch answer carries the aborted transactions overlapping its range (from the ``.txnindex`` files: producer id
and first offset). The consumer walks the batches in order: once a batch reaches an aborted transaction's first
offset, that producer's transactional batches are aborted until its ABORT marker (a control batch). The local
read (:mod:`storage_engine.log.reads`), the remote part of a log (:mod:`storage_engine.tiered.whole_log`) and the
message browser (:mod:`storage_engine.inspection.browse`) all filter with this one walk.
"""
from __future__ import annotations

import collections
from collections.abc import Iterable

from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch
from storage_engine.segment.txn_index import AbortedTxn


class AbortedFilter:
    """The walk over one range's batches; :meth:`is_aborted` is called for each batch in offset order."""

    def __init__(self, aborted: Iterable[AbortedTxn]):
        self._pending = collections.deque(sorted(aborted, key=lambda t: t.first_offset))
        self._aborted_pids: set[int] = set()

    def is_aborted(self, batch: RecordBatch | LegacyBatch) -> bool:
        """True for a transactional data batch of an aborted transaction; advances the walk past ``batch`` (a
        control batch is never aborted: an ABORT marker ends its producer's aborted transaction)."""
        if batch.magic < 2 or batch.producer_id < 0:
            return False
        while self._pending and self._pending[0].first_offset <= batch.last_offset:
            self._aborted_pids.add(self._pending.popleft().producer_id)
        if batch.is_control:
            if is_abort_marker(batch):
                self._aborted_pids.discard(batch.producer_id)
            return False
        return batch.is_transactional and batch.producer_id in self._aborted_pids


def is_abort_marker(batch: RecordBatch | LegacyBatch) -> bool:
    """A control batch whose control record's type (the key's second int16) is ABORT (0)."""
    recs = batch.records()
    return bool(recs) and recs[0].key is not None and recs[0].key[2:4] == b"\x00\x00"
