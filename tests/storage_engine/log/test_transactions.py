"""Producer state and transactions in the log: idempotent appends, markers, .txnindex, LSO, read_committed,
snapshots and their rebuild (Kafka's UnifiedLogTest/LogLoaderTest/ProducerStateManagerTest cases), on real files."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.errors import (InvalidProducerEpochError, InvalidRecordError, InvalidTxnStateError,
                                   OutOfOrderSequenceError, TransactionCoordinatorFencedError)
from storage_engine.log.reads import READ_COMMITTED
from storage_engine.record.record_batch import RecordBatch, build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment import producer_snapshot
from storage_engine.segment.file_records import iter_batches
from storage_engine.segment.txn_index import AbortedTxn

from .. import helpers
from ..conftest import T0

pytestmark = pytest.mark.unit

EPOCH = 0


def producer(log, pid: int, epoch: int = EPOCH, transactional: bool = True):
    """Kafka's LogTestUtils.appendTransactionalAsLeader/appendIdempotentAsLeader: n records per call with values
    "<pid>-<seq>", sequences continuing from the last call."""
    state = {"seq": 0}

    def append(n: int):
        seq = state["seq"]
        recs = [SimpleRecord(None, f"{pid}-{s}".encode()) for s in range(seq, seq + n)]
        info = log.append_records(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  is_transactional=transactional)
        state["seq"] += n
        return info
    return append


def plain(log, n: int, tag: str = "p"):
    return log.append_records([SimpleRecord(None, f"{tag}{i}".encode()) for i in range(n)])


def all_aborted(log) -> list[AbortedTxn]:
    return [t for seg in log.segments for t in seg.txn_index.all_aborted_txns()]


def values(log, **kw) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in log.read_records(**kw)]


def kafka_mixed_log(log):
    """LogLoaderTest.testFullTransactionIndexRecovery's log: four producers, two aborts, two commits, plain data."""
    p1, p2, p3, p4 = (producer(log, pid) for pid in (1, 2, 3, 4))
    p1(5)                                 # 5
    plain(log, 3)                         # 8
    p2(2)                                 # 10
    p1(4)                                 # 14
    p3(3)                                 # 17
    plain(log, 2)                         # 19
    p1(10)                                # 29
    log.append_end_txn(1, EPOCH, commit=False)   # 30
    p2(6)                                 # 36
    p4(3)                                 # 39
    plain(log, 10)                        # 49
    p3(9)                                 # 58
    log.append_end_txn(3, EPOCH, commit=True)    # 59
    p4(8)                                 # 67
    p2(7)                                 # 74
    log.append_end_txn(2, EPOCH, commit=False)   # 75
    plain(log, 10)                        # 85
    p4(4)                                 # 89
    log.append_end_txn(4, EPOCH, commit=True)    # 90
    assert log.log_end_offset == 90


KAFKA_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]


# -- idempotence --------------------------------------------------------------------------------------------------

def test_a_retried_batch_returns_its_first_offsets_and_writes_nothing(logs):
    log = logs()
    p = producer(log, 7, transactional=False)
    first = p(3)
    plain(log, 2)
    size = log.size_in_bytes()
    retry = log.append_records([SimpleRecord(None, b"7-0"), SimpleRecord(None, b"7-1"), SimpleRecord(None, b"7-2")],
                               producer_id=7, producer_epoch=EPOCH, base_sequence=0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.size_in_bytes() == size and log.log_end_offset == 5
    # a client-encoded retry (append_batches) is recognised the same way
    again = log.append_batches(build_batch([SimpleRecord(None, b"x")] * 3, producer_id=7, producer_epoch=EPOCH,
                                           base_sequence=0))
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 2)
    assert [v for _, v in values(log)] == [b"7-0", b"7-1", b"7-2", b"p0", b"p1"]


def test_only_the_last_five_batches_are_remembered(logs):
    log = logs()
    p = producer(log, 3, transactional=False)
    for _ in range(6):
        p(1)
    with pytest.raises(OutOfOrderSequenceError):   # seq 0 fell out of the 5 remembered batches
        log.append_records([SimpleRecord(None, b"x")], producer_id=3, producer_epoch=EPOCH, base_sequence=0)
    assert log.append_records([SimpleRecord(None, b"x")], producer_id=3, producer_epoch=EPOCH,
                              base_sequence=1).duplicate


def test_sequence_and_epoch_rules(logs):
    log = logs()
    p = producer(log, 9, epoch=2, transactional=False)
    p(2)
    with pytest.raises(OutOfOrderSequenceError, match="OUT_OF_ORDER|Out of order sequence number for producer 9"):
        log.append_records([SimpleRecord(None, b"gap")], producer_id=9, producer_epoch=2, base_sequence=5)
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 2") as exc:
        log.append_records([SimpleRecord(None, b"old")], producer_id=9, producer_epoch=1, base_sequence=2)
    assert exc.value.kafka_name == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(OutOfOrderSequenceError, match="Invalid sequence number for new epoch"):
        log.append_records([SimpleRecord(None, b"new")], producer_id=9, producer_epoch=3, base_sequence=4)
    log.append_records([SimpleRecord(None, b"new")], producer_id=9, producer_epoch=3, base_sequence=0)
    assert log.producer_state.producers[9].producer_epoch == 3
    # a producer the log does not know may start at any sequence (its records may have been deleted)
    log.append_records([SimpleRecord(None, b"late")], producer_id=10, producer_epoch=0, base_sequence=42)
    assert log.log_end_offset == 4
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1"):
        log.append_records([SimpleRecord(None, b"x")], producer_id=11, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control records"):
        log.append_batches(bytes(build_batch([SimpleRecord(b"\0\0\0\1", b"\0\0\0\0\0\0")], producer_id=1,
                                             producer_epoch=0, is_transactional=True, is_control=True)))


def test_transactional_state_rules(logs):
    log = logs()
    p = producer(log, 4)
    p(2)
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write from producer 4"):
        log.append_records([SimpleRecord(None, b"x")], producer_id=4, producer_epoch=EPOCH, base_sequence=2)
    log.append_end_txn(4, EPOCH, commit=True, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError, match="3 \\(zombie\\), 5 \\(current\\)"):
        log.append_end_txn(4, EPOCH, commit=True, coordinator_epoch=3)
    # a new epoch starts over at sequence 0; markers of the old epoch are then fenced
    log.append_records([SimpleRecord(None, b"y")], producer_id=4, producer_epoch=1, base_sequence=0,
                       is_transactional=True)                                          # 3
    with pytest.raises(InvalidProducerEpochError):
        log.append_end_txn(4, 0, commit=False, coordinator_epoch=5)
    log.append_end_txn(4, 1, commit=False, coordinator_epoch=5)                         # 4
    log.append_end_txn(4, 1, commit=False, coordinator_epoch=5)                         # 5: empty transaction
    # markers of empty transactions change nothing in the .txnindex
    assert all_aborted(log) == [AbortedTxn(4, 3, 4, 5)]


# -- transactions, LSO and reads ------------------------------------------------------------------------------------

def test_interleaved_commit_and_abort_with_an_idempotent_retry(logs):
    """The whole scenario: read_committed returns exactly the committed records in offset order,
    read_uncommitted every data record and no marker, and the retried batch appears once."""
    log = logs()
    committer, aborter = producer(log, 100), producer(log, 200)
    idem = producer(log, 300, transactional=False)
    committer(2)                                   # 0-1
    aborter(2)                                     # 2-3
    assert log.last_stable_offset == 0
    idem(1)                                        # 4
    retry = log.append_records([SimpleRecord(None, b"300-0")], producer_id=300, producer_epoch=EPOCH,
                               base_sequence=0)
    assert retry.duplicate and retry.first_offset == 4
    committer(1)                                   # 5
    aborter(1)                                     # 6
    assert values(log, isolation_level=READ_COMMITTED) == []
    log.append_end_txn(100, EPOCH, commit=True)    # 7
    assert log.last_stable_offset == 2             # the aborter's transaction is still open
    assert values(log, isolation_level=READ_COMMITTED) == [(0, b"100-0"), (1, b"100-1")]
    idem(1)                                        # 8
    log.append_end_txn(200, EPOCH, commit=False)   # 9
    assert log.last_stable_offset == log.log_end_offset == 10
    assert all_aborted(log) == [AbortedTxn(200, 2, 9, 10)]
    committed = values(log, isolation_level=READ_COMMITTED)
    assert committed == [(0, b"100-0"), (1, b"100-1"), (4, b"300-0"), (5, b"100-2"), (8, b"300-1")]
    uncommitted = values(log)
    assert [o for o, _ in uncommitted] == [0, 1, 2, 3, 4, 5, 6, 8]
    assert [v for _, v in uncommitted].count(b"300-0") == 1
    # reads starting inside the log and limited reads agree
    assert values(log, start_offset=3, isolation_level=READ_COMMITTED) == committed[2:]
    assert values(log, start_offset=0, max_records=2, isolation_level=READ_COMMITTED) == committed[:2]
    # markers are in the log, with Kafka's control record layout
    batches = [b for s in log.segments for b in s.batches()]
    markers = [(b.base_offset, b.control_type()) for b in batches if b.is_control]
    assert markers == [(7, "COMMIT"), (9, "ABORT")]
    assert all(b.partition_leader_epoch == 0 for b in batches)


def test_lso_is_the_first_offset_of_the_earliest_open_transaction(logs):
    log = logs()
    a, b = producer(log, 1), producer(log, 2)
    plain(log, 3)
    a(1)                       # 3
    b(1)                       # 4
    assert log.last_stable_offset == 3
    log.append_end_txn(1, EPOCH, commit=False)
    assert log.last_stable_offset == 4
    assert all_aborted(log) == [AbortedTxn(1, 3, 5, 4)]    # the LSO recorded is b's open transaction
    log.append_end_txn(2, EPOCH, commit=True)
    assert log.last_stable_offset == 7
    with pytest.raises(InvalidRecordError, match="isolation level"):
        list(log.read_records(isolation_level="read_whatever"))


# -- snapshots --------------------------------------------------------------------------------------------------------

def snapshots(log) -> list[int]:
    return sorted(layout.offset_from_filename(n) for n in os.listdir(log.dir) if n.endswith(layout.SNAPSHOT_SUFFIX))


def test_snapshot_on_roll_and_close(logs):
    log = logs()
    p = producer(log, 5)
    p(3)
    log.roll()
    assert snapshots(log) == [3]
    entries = producer_snapshot.read_snapshot(log.producer_state.snapshot_path(3))
    assert entries == [producer_snapshot.SnapshotEntry(5, 0, 2, 2, 2, T0, -1, 0)]
    log.append_end_txn(5, EPOCH, commit=True, coordinator_epoch=2)
    log.roll()   # Kafka's testProducerSnapshotAfterSegmentRollOnAppend
    assert snapshots(log) == [3, 4]
    assert producer_snapshot.read_snapshot(log.producer_state.snapshot_path(4)) == \
        [producer_snapshot.SnapshotEntry(5, 0, 2, 2, 2, T0, 2, -1)]
    log.close(clean=True)
    assert snapshots(log) == [3, 4]          # unchanged log end: no new snapshot (testSkipSnapshotIfOffsetUnchanged)


def reopen(log_dir, cfg=None, **kw):
    return helpers.open_log(log_dir, cfg, now_ms=T0, **kw)[0]


def state(log, as_snapshot: bool = False):
    return log.producer_state.state_key(as_snapshot=as_snapshot)


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_rebuilds_the_same_state(log_dir, clean):
    cfg = helpers.config(segment_bytes=600)
    log, _ = helpers.open_log(log_dir, cfg, now_ms=T0)
    kafka_mixed_log(log)
    producer(log, 6)(2)   # an open transaction at the end
    assert len(log.segments) > 3
    # a reload rebuilds from snapshots, which keep each producer's last batch only
    before = (state(log, True), all_aborted(log), values(log, isolation_level=READ_COMMITTED),
              log.last_stable_offset)
    log.close(clean=clean)
    again = reopen(log_dir, cfg, had_clean_shutdown=clean)
    try:
        after = (state(again), all_aborted(again), values(again, isolation_level=READ_COMMITTED),
                 again.last_stable_offset)
        assert after == before and again.last_stable_offset == 90
    finally:
        again.close(clean=False)


@pytest.mark.parametrize("case", ["full", "last-segment", "last-segment-no-snapshots"])
def test_transaction_index_recovery(log_dir, case):
    """LogLoaderTest.testFullTransactionIndexRecovery / testRecoverOnlyLastSegment /
    testRecoverLastSegmentWithNoSnapshots: the exact AbortedTxn entries (with their LSO) are rebuilt."""
    log, _ = helpers.open_log(log_dir, helpers.config(segment_bytes=128 * 5), now_ms=T0)
    kafka_mixed_log(log)
    assert all_aborted(log) == KAFKA_ABORTED
    segs = log.segments
    assert len(segs) > 2
    recovery_point = 0
    if case == "full":
        targets = segs
    else:
        targets = segs[-1:]
        recovery_point = segs[-1].base_offset
    if case == "last-segment-no-snapshots":
        for name in os.listdir(log.dir):
            if name.endswith(layout.SNAPSHOT_SUFFIX):
                os.remove(os.path.join(log.dir, name))
    for seg in targets:
        for suffix in (layout.INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX):
            path = layout.segment_file(log.dir, seg.base_offset, suffix)
            if os.path.exists(path):
                os.remove(path)
    log.close(clean=False)
    again = reopen(log_dir, helpers.config(segment_bytes=1024 * 5), recovery_point_checkpoint=recovery_point)
    try:
        assert all_aborted(again) == KAFKA_ABORTED
        assert again.last_stable_offset == 90 and not again.producer_state.ongoing_txns
    finally:
        again.close(clean=False)


def test_corrupt_and_stray_snapshots_at_load(log_dir):
    """testLoadFromCorruptSnapshotFile / testRemoveStraySnapshots*: a corrupt newest snapshot is skipped and
    deleted, an older one used; of the stray snapshots only the largest at or above the last base survives."""
    cfg = helpers.config(segment_bytes=400)
    log, _ = helpers.open_log(log_dir, cfg, now_ms=T0)
    kafka_mixed_log(log)
    expected = state(log, True)
    bases = [s.base_offset for s in log.segments]
    log.close(clean=True)
    snaps = sorted(n for n in os.listdir(log.dir) if n.endswith(layout.SNAPSHOT_SUFFIX))
    newest = os.path.join(log.dir, snaps[-1])
    with open(newest, "r+b") as f:      # flip a byte under the CRC
        f.seek(12)
        b = f.read(1)
        f.seek(12)
        f.write(bytes([b[0] ^ 0xFF]))
    stray_low = layout.segment_file(log.dir, bases[1] + 1, layout.SNAPSHOT_SUFFIX)
    with open(stray_low, "wb") as f:
        f.write(producer_snapshot.encode_snapshot([]))
    again = reopen(log_dir, cfg, had_clean_shutdown=True)
    try:
        assert state(again) == expected
        left = snapshots(again)
        assert bases[1] + 1 not in left          # a stray below the last base is removed
        assert left[-1] == 90                    # rewritten after the corrupt one went
    finally:
        again.close(clean=False)


def test_truncation_drops_later_snapshots_and_txn_entries(logs):
    log = logs(helpers.config(segment_bytes=600))
    kafka_mixed_log(log)
    log.truncate_to(40)       # batch granular: the plain batch 39-48 goes
    assert log.log_end_offset == 39
    assert all(o <= 39 for o in snapshots(log))
    assert all_aborted(log) == [AbortedTxn(1, 0, 29, 8)]
    # pid 2's and pid 4's transactions are open again, pid 3's too
    assert log.last_stable_offset == 8
    assert sorted(log.producer_state.ongoing_txns.values()) == [2, 3, 4]
    # appending goes on from the rebuilt state
    log.append_end_txn(2, EPOCH, commit=False)
    assert all_aborted(log)[-1] == AbortedTxn(2, 8, 39, 14)


def test_retention_deletes_snapshots_and_txn_indexes_with_their_segments(logs):
    log = logs(helpers.config(segment_bytes=600))
    kafka_mixed_log(log)
    first = log.segments[0]
    assert first.txn_index.exists or any(s.txn_index.exists for s in log.segments)
    with log.locked():
        gone = log.delete_segments_locked(log.segments[:2], T0)
    for seg in gone:
        for suffix in (layout.SNAPSHOT_SUFFIX, layout.TXN_INDEX_SUFFIX):
            assert not os.path.exists(layout.segment_file(log.dir, seg.base_offset, suffix))


def test_truncate_fully_removes_every_snapshot(logs):
    log = logs(helpers.config(segment_bytes=600))
    kafka_mixed_log(log)
    log.truncate_fully_and_start_at(200)
    assert snapshots(log) == [] and log.producer_state.producers == {}
    assert log.last_stable_offset == 200


def test_client_batches_continue_the_producer_sequence(logs):
    """append_batches (client-encoded) and append_records share one producer state."""
    log = logs()
    producer(log, 8, transactional=False)(2)
    info = log.append_batches(build_batch([SimpleRecord(None, b"x")], producer_id=8, producer_epoch=0,
                                          base_sequence=2))
    assert info.first_offset == 2 and not info.duplicate
    assert log.producer_state.producers[8].last_seq == 2
    batch = list(iter_batches(log.active_segment.log.read(0, log.active_segment.size)))[-1]
    assert isinstance(batch, RecordBatch) and batch.base_offset == 2 and batch.partition_leader_epoch == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append_batches(build_batch([SimpleRecord(None, b"y")], producer_id=8, producer_epoch=0,
                                       base_sequence=4))
