"""The cleaner's transaction rules one batch at a time, on real encoded batches: Kafka's
``CleanedTransactionMetadata.onControlBatchRead`` / ``onBatchRead`` (which markers and which data batches may go)
and ``LogCleaner.Cleaner.checkBatchRetention`` (what the copy does with each batch before looking at records).
The end-to-end cases (LogCleanerTest's transaction tests on real logs) are in ``test_cleaner_txn.py``."""
from __future__ import annotations

import struct

import pytest

from storage_engine.log.producer_state import LastRecord
from storage_engine.maintenance.txn_cleaning import (DELETE, DELETE_EMPTY, RETAIN_EMPTY, BatchDecision,
                                                     CleanedTransactionMetadata, batch_retention)
from storage_engine.record.record_batch import RecordBatch, build_batch, build_control_batch, build_empty_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.txn_index import AbortedTxn

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
PID, OTHER = 7, 8


def data(base: int, n: int = 1, pid: int = PID, transactional: bool = True, epoch: int = 0) -> RecordBatch:
    recs = [SimpleRecord(b"k%d" % (base + i), b"v", T0) for i in range(n)]
    return RecordBatch(build_batch(recs, base_offset=base, producer_id=pid, producer_epoch=epoch, base_sequence=base,
                                   is_transactional=transactional), 0)


def marker(ctype: int, base: int, pid: int = PID, epoch: int = 0) -> RecordBatch:
    return RecordBatch(build_control_batch(ctype, base_offset=base, timestamp=T0, producer_id=pid,
                                           producer_epoch=epoch), 0)


ABORT, COMMIT = 0, 1


def control_with_key(key: bytes | None, base: int = 0, pid: int = PID, horizon: int | None = None) -> RecordBatch:
    """A control batch whose one record has this key (Kafka's ControlRecordType.parse reads the type at bytes
    2-3 of the key, after the version)."""
    return RecordBatch(build_batch([SimpleRecord(key, struct.pack(">hi", 0, 0), T0)], base_offset=base,
                                   producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True,
                                   delete_horizon_ms=horizon), 0)


# -- CleanedTransactionMetadata.onControlBatchRead ------------------------------------------------------------

def test_commit_marker_kept_while_its_data_was_read_then_the_next_may_go():
    # Kafka: case COMMIT => if (ongoingCommittedTxns.remove(producerId)) false (retain) else true: each commit marker
    # closes the transaction whose data was read; a second marker of the producer with no data read in between may go
    txn = CleanedTransactionMetadata()
    assert txn.on_batch_read(data(0)) is False
    assert txn.on_control_batch_read(marker(COMMIT, 1)) is False
    assert txn.on_control_batch_read(marker(COMMIT, 2)) is True
    assert txn.on_batch_read(data(3)) is False
    assert txn.on_control_batch_read(marker(COMMIT, 4)) is False


def test_commit_marker_of_another_producer_may_go():
    txn = CleanedTransactionMetadata()
    txn.on_batch_read(data(0, pid=OTHER))
    assert txn.on_control_batch_read(marker(COMMIT, 1)) is True          # PID: none of its data was read
    assert txn.on_control_batch_read(marker(COMMIT, 2, pid=OTHER)) is False


def test_non_transactional_data_opens_no_transaction():
    # Kafka: onBatchRead only tracks transactional batches
    txn = CleanedTransactionMetadata()
    assert txn.on_batch_read(data(0, transactional=False)) is False
    assert txn.on_control_batch_read(marker(COMMIT, 1)) is True


def test_abort_marker_kept_while_aborted_data_was_read_and_its_txn_goes_to_the_cleaned_index():
    # Kafka: case ABORT => abortedTransactionMetadata.lastObservedBatchOffset match { Some(_) => cleanedIndex.append
    # (abortedTxn); false; None => true }
    class Index(list):
        append = list.append
    index = Index()
    aborted = AbortedTxn(PID, 0, 2, 3)
    txn = CleanedTransactionMetadata(index)  # type: ignore[arg-type]  # a list stands in for the index: only append is called
    txn.add_aborted_transactions([aborted])
    assert txn.on_batch_read(data(0, 2)) is True          # aborted data: may be discarded
    assert txn.on_control_batch_read(marker(ABORT, 2)) is False
    assert index == [aborted]
    # the transaction is closed: the producer's next data is not aborted, and a second abort marker may go
    assert txn.on_batch_read(data(3)) is False
    assert txn.on_control_batch_read(marker(ABORT, 4)) is True
    assert index == [aborted]


def test_abort_marker_without_aborted_data_may_go():
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions([AbortedTxn(PID, 0, 1, 2)])
    assert txn.on_control_batch_read(marker(ABORT, 1)) is True


def test_aborted_transaction_starts_at_its_first_offset():
    # Kafka: consumeAbortedTxnsUpTo(batch.lastOffset): an aborted txn whose first offset is past the batch is not
    # ongoing yet, one starting at the batch's last offset is
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions([AbortedTxn(PID, 5, 9, 10)])
    assert txn.on_batch_read(data(3, 2)) is False          # offsets 3..4: before the aborted txn
    assert txn.on_batch_read(data(4, 2)) is True           # offsets 4..5: reaches its first offset


def test_aborted_transactions_are_consumed_in_first_offset_order():
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions([AbortedTxn(OTHER, 10, 11, 12)])
    txn.add_aborted_transactions([AbortedTxn(PID, 2, 3, 4)])
    assert txn.on_batch_read(data(2, pid=OTHER)) is False
    assert txn.on_batch_read(data(3)) is True
    assert txn.on_batch_read(data(10, pid=OTHER)) is True


@pytest.mark.parametrize("key", [None, b"", b"\x00", b"\x00\x00\x00"])
def test_control_record_with_a_short_key_is_kept(key):
    # Kafka's ControlRecordType.parse: a key under 4 bytes has no type; the cleaner keeps what it cannot classify
    # (onControlBatchRead: case _ => false), even with aborted data of the producer read
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions([AbortedTxn(PID, 0, 0, 1)])
    assert txn.on_batch_read(data(0)) is True
    assert txn.on_control_batch_read(control_with_key(key, 1)) is False
    # the aborted transaction is still open: the producer's next data is aborted too
    assert txn.on_batch_read(data(2)) is True


@pytest.mark.parametrize("ctype, discardable", [(0, True), (1, True), (2, False), (0x100, False), (0x0101, False),
                                                (-1, False), (0x7FFF, False)])
def test_control_type_is_the_signed_short_at_key_bytes_2_and_3(ctype, discardable):
    # Kafka: ControlRecordType.parse: type = key.getShort(2); 0 ABORT, 1 COMMIT, anything else UNKNOWN (kept)
    key = struct.pack(">hh", 0, ctype)
    txn = CleanedTransactionMetadata()
    assert txn.on_control_batch_read(control_with_key(key)) is discardable


@pytest.mark.parametrize("tail", [b"\x00", b"\x00\x00\x00\x09"])
def test_control_type_ignores_bytes_after_the_type(tail):
    # a longer key (a later key version) still has its type at bytes 2-3
    txn = CleanedTransactionMetadata()
    txn.on_batch_read(data(0))
    assert txn.on_control_batch_read(control_with_key(struct.pack(">hh", 0, COMMIT) + tail, 1)) is False
    assert txn.on_control_batch_read(control_with_key(struct.pack(">hh", 0, COMMIT) + tail, 2)) is True


def test_an_empty_control_batch_may_go():
    # Kafka: onControlBatchRead: if (!controlRecordIterator.hasNext) true (a marker an earlier round emptied)
    empty = RecordBatch(build_empty_batch(marker(COMMIT, 4)), 0)
    txn = CleanedTransactionMetadata()
    txn.on_batch_read(data(0))
    assert txn.on_control_batch_read(empty) is True
    assert txn.on_control_batch_read(marker(COMMIT, 5)) is False     # the open transaction is untouched


# -- checkBatchRetention ------------------------------------------------------------------------------------

def test_a_marker_that_may_go_is_removed_only_once_its_delete_horizon_passed():
    # Kafka: discardBatchRecords = canDiscardBatch && batch.deleteHorizonMs().isPresent &&
    # batch.deleteHorizonMs().getAsLong <= currentTime; containsMarkerForEmptyTxn = canDiscardBatch && isControl
    horizon = T0 + 1000
    for now, expected in ((horizon - 1, BatchDecision(DELETE_EMPTY, False, True)),
                          (horizon, BatchDecision(DELETE, True, True)),
                          (horizon + 1, BatchDecision(DELETE, True, True))):
        got = batch_retention(control_with_key(struct.pack(">hh", 0, COMMIT), 9, horizon=horizon),
                              CleanedTransactionMetadata(), {}, 100, now)
        assert got == expected, now
    # without a delete horizon it stays (it gets one first)
    assert batch_retention(marker(COMMIT, 9), CleanedTransactionMetadata(), {}, 100, T0 + 10**9) == \
        BatchDecision(DELETE_EMPTY, False, True)


def test_a_marker_that_must_stay_keeps_its_records_whatever_its_horizon():
    txn = CleanedTransactionMetadata()
    txn.on_batch_read(data(0))
    got = batch_retention(control_with_key(struct.pack(">hh", 0, COMMIT), 1, horizon=T0), txn, {}, 100, T0 + 5)
    assert got == BatchDecision(DELETE_EMPTY, False, False)


def test_aborted_data_is_deleted_without_reading_its_records():
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions([AbortedTxn(PID, 0, 1, 2)])
    assert batch_retention(data(0), txn, {}, 100, T0) == BatchDecision(DELETE, True, False)
    assert batch_retention(data(1, pid=OTHER), txn, {}, 100, T0) == BatchDecision(DELETE_EMPTY, False, False)


def test_the_last_batch_of_the_round_is_retained_empty():
    # KAFKA-17076: batch.nextOffset == upperBoundOffsetOfCleaningRound => RETAIN_EMPTY, even when aborted
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions([AbortedTxn(PID, 0, 1, 2)])
    assert batch_retention(data(0, 2), txn, {}, 2, T0) == BatchDecision(RETAIN_EMPTY, True, False)
    assert batch_retention(data(2, 2, pid=OTHER), txn, {}, 5, T0).retention == DELETE_EMPTY      # next offset 4
    assert batch_retention(data(2, 2, pid=OTHER), CleanedTransactionMetadata(), {}, 3, T0).retention == DELETE_EMPTY


def test_the_last_data_batch_of_an_active_producer_is_retained_empty():
    # Kafka: lastRecordsOfActiveProducers(producerId).lastDataOffset: batch.lastOffset == lastDataOffset
    last = {PID: LastRecord(5, 0)}
    assert batch_retention(data(4, 2), CleanedTransactionMetadata(), last, 100, T0).retention == RETAIN_EMPTY
    assert batch_retention(data(3, 2), CleanedTransactionMetadata(), last, 100, T0).retention == DELETE_EMPTY
    assert batch_retention(data(5, 2), CleanedTransactionMetadata(), last, 100, T0).retention == DELETE_EMPTY
    assert batch_retention(data(4, 2, pid=OTHER), CleanedTransactionMetadata(), last, 100, T0).retention == \
        DELETE_EMPTY


def test_the_marker_of_a_producer_without_data_is_retained_in_its_epoch():
    # Kafka: lastDataOffset empty => batch.isControlBatch && batch.producerEpoch == lastRecord.producerEpoch
    last = {PID: LastRecord(None, 3)}
    assert batch_retention(marker(COMMIT, 9, epoch=3), CleanedTransactionMetadata(), last, 100, T0).retention == \
        RETAIN_EMPTY
    assert batch_retention(marker(COMMIT, 9, epoch=2), CleanedTransactionMetadata(), last, 100, T0).retention == \
        DELETE_EMPTY
    assert batch_retention(data(9, epoch=3), CleanedTransactionMetadata(), last, 100, T0).retention == DELETE_EMPTY


def test_batches_without_a_producer_are_never_a_producers_last():
    # Kafka: if (batch.hasProducerId) ...: producer id -1 is no producer, even if the map has an entry for it
    last = {-1: LastRecord(0, -1)}
    plain = RecordBatch(build_batch([SimpleRecord(b"k", b"v", T0)], base_offset=0), 0)
    assert batch_retention(plain, CleanedTransactionMetadata(), last, 100, T0).retention == DELETE_EMPTY
    zero = {0: LastRecord(0, 0)}
    assert batch_retention(data(0, pid=0, transactional=False), CleanedTransactionMetadata(), zero, 100, T0) \
        .retention == RETAIN_EMPTY
