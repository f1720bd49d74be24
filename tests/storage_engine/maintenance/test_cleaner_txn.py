"""The cleaner's transaction rules: Kafka's LogCleanerTest transaction cases, reproduced on real files with the
same appends and the same expected keys, offsets and batch boundaries."""
from __future__ import annotations

import pytest

from storage_engine.config import CleanerConfig
from storage_engine.maintenance.cleaner import Cleaner
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord

from .test_cleaner import DAY, T0, all_batches, compact_cfg, ltc_for, make_log  # noqa: F401 (fixture)

pytestmark = pytest.mark.unit

LARGE_TIMESTAMP = T0 + 10 * DAY   # Kafka's tests clean at a "largeTimestamp"


def appender(log, pid: int, epoch: int = 0, transactional: bool = True):
    """LogCleanerTest.appendTransactionalAsLeader/appendIdempotentAsLeader: keys k -> record (k, k)."""
    state = {"seq": 0}

    def append(keys):
        recs = [SimpleRecord(str(k).encode(), str(k).encode(), T0) for k in keys]
        info = log.append_records(recs, producer_id=pid, producer_epoch=epoch, base_sequence=state["seq"],
                                  is_transactional=transactional)
        state["seq"] += len(recs)
        return info
    return append


def commit(log, pid, epoch=0):
    log.append_end_txn(pid, epoch, commit=True)


def abort(log, pid, epoch=0):
    log.append_end_txn(pid, epoch, commit=False)


def keys_in_log(log) -> list[int]:
    """LogTestUtils.keysInLog: keys of data records (control batches excluded)."""
    return [int(r.key) for bt in all_batches(log) if not bt.is_control for r in bt.records()]


def offsets_in_log(log) -> list[int]:
    """offsetsInLog: the offsets of every record, markers included."""
    return [r.offset for bt in all_batches(log) for r in bt.records()]


def last_offsets_per_batch(log) -> list[int]:
    return [bt.last_offset for bt in all_batches(log)]


def last_sequences(log) -> dict[int, int]:
    return {bt.producer_id: bt.last_sequence for bt in all_batches(log) if bt.producer_id >= 0 and not bt.is_control}


def do_clean(log, first_dirty: int, now: int, cc: CleanerConfig | None = None) -> int:
    """Kafka's cleaner.doClean(LogToClean(tp, log, firstDirty, activeSegment.baseOffset), now): the end offset.

    Kafka's tests clean with a FakeOffsetMap whose clear() keeps the last offset, so a round over an empty dirty
    section still re-copies every segment below the previous end. A real map (Kafka's SkimpyOffsetMap, and this
    engine's) has nothing to do then; the equivalent real round re-maps from the log start."""
    if first_dirty >= log.active_segment.base_offset:
        first_dirty = 0
    res = Cleaner(cc or CleanerConfig()).clean(ltc_for(log, first_dirty, log.active_segment.base_offset), now)
    return res.end_offset


def two_pass(log, first_dirty: int, now: int) -> int:
    """runTwoPassClean: a pass at ``now`` then one past the delete horizon."""
    do_clean(log, first_dirty, now)
    return do_clean(log, first_dirty, now + DAY + 1)


def aborted(log):
    return log.aborted_transactions(0, 100)


def test_basic_transaction_aware_cleaning(make_log):
    log = make_log(compact_cfg(segment_bytes=2048))
    p1, p2 = appender(log, 1), appender(log, 2)
    p1([1, 2])
    p2([2, 3])
    p1([3, 4])
    abort(log, 1)
    commit(log, 2)
    p1([2])
    commit(log, 1)
    before = log.aborted_transactions(log.log_start_offset, log.log_end_offset)
    log.roll()
    do_clean(log, 0, T0)
    assert keys_in_log(log) == [3, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == before


def test_commit_marker_removal(make_log):
    log = make_log(compact_cfg(segment_bytes=256))
    p = appender(log, 1)
    p([1])
    p([2, 3])
    commit(log, 1)
    p([2])
    commit(log, 1)
    log.roll()
    dirty = do_clean(log, 0, LARGE_TIMESTAMP)      # the markers' transactions still have records
    assert keys_in_log(log) == [1, 3, 2]
    assert offsets_in_log(log) == [0, 2, 3, 4, 5]
    p([1, 3])
    commit(log, 1)
    log.roll()
    dirty = do_clean(log, dirty, LARGE_TIMESTAMP)  # the marker at 3 stays: its horizon is only stamped now
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    dirty = do_clean(log, dirty, LARGE_TIMESTAMP)  # same time: not removed early
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    do_clean(log, dirty, 2**63 - 1)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8]


def test_abort_marker_removal(make_log):
    log = make_log(compact_cfg(segment_bytes=256))
    p = appender(log, 1)
    p([1])
    p([2, 3])
    abort(log, 1)
    p([3])
    commit(log, 1)
    log.roll()
    dirty = do_clean(log, 0, LARGE_TIMESTAMP)      # aborted records go, the ABORT marker stays
    assert keys_in_log(log) == [3]
    assert offsets_in_log(log) == [3, 4, 5]
    two_pass(log, dirty, LARGE_TIMESTAMP)          # horizon stamped, then the marker removed
    assert keys_in_log(log) == [3]
    assert offsets_in_log(log) == [4, 5]


def test_abort_marker_retention_with_empty_batch(make_log):
    log = make_log(compact_cfg(segment_bytes=256))
    p = appender(log, 1)
    p([2, 3])                                      # batch last offset 1
    abort(log, 1)
    log.roll()

    def assert_indexed():
        txns = aborted(log)
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in txns] == [(1, 0, 2)]

    assert_indexed()
    dirty = do_clean(log, 0, LARGE_TIMESTAMP)
    assert_indexed()
    assert keys_in_log(log) == [] and offsets_in_log(log) == [2]
    assert last_offsets_per_batch(log) == [1, 2]   # the empty batch keeps the last sequence
    dirty = two_pass(log, dirty, LARGE_TIMESTAMP)
    assert_indexed()
    assert offsets_in_log(log) == [2] and last_offsets_per_batch(log) == [1, 2]
    p([1])
    log.roll()
    dirty = do_clean(log, dirty, LARGE_TIMESTAMP)
    assert_indexed()
    assert keys_in_log(log) == [1]
    assert offsets_in_log(log) == [2, 3]           # the marker stays: the empty batch was read this round
    assert last_offsets_per_batch(log) == [2, 3]   # but the empty batch goes
    two_pass(log, dirty, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [1] and offsets_in_log(log) == [3] and last_offsets_per_batch(log) == [3]
    assert aborted(log) == []                      # nothing of the aborted transaction is left to index


def test_commit_marker_retention_with_empty_batch(make_log):
    log = make_log(compact_cfg(segment_bytes=256))
    p = appender(log, 1)
    p([2, 3])
    commit(log, 1)
    p([3])           # overwrites key 3; key 2 survives
    commit(log, 1)
    log.roll()
    do_clean(log, 0, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [2, 3]
    # the producer's last write is a marker of its current epoch: kept (empty if need be) for fencing
    two_pass(log, 0, LARGE_TIMESTAMP)
    assert last_offsets_per_batch(log)[-1] == 4 and all_batches(log)[-1].is_control


def test_log_cleaner_retains_producer_last_sequence(make_log):
    log = make_log(compact_cfg(segment_bytes=1024))

    def record(key, value, **producer):
        return log.append_records([SimpleRecord(str(key).encode(), str(value).encode(), T0)], **producer)
    record(0, 0)                                                          # 0
    record(0, 1, producer_id=1, producer_epoch=0, base_sequence=0)        # 1
    record(0, 2, producer_id=2, producer_epoch=0, base_sequence=0)        # 2
    record(0, 3, producer_id=3, producer_epoch=0, base_sequence=0)        # 3
    record(1, 1, producer_id=2, producer_epoch=0, base_sequence=1)        # 4
    log.roll()
    do_clean(log, 0, T0)
    assert last_offsets_per_batch(log) == [1, 3, 4]
    assert last_sequences(log) == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(log) == [0, 1]
    assert offsets_in_log(log) == [3, 4]


def test_duplicate_check_after_cleaning(make_log):
    cfg = compact_cfg(segment_bytes=2048)
    log = make_log(cfg)
    p1, p2, p3 = (appender(log, pid, transactional=False) for pid in (1, 2, 3))
    p1([1, 2, 3])
    p2([3, 1, 4])
    p3([1, 4])
    log.roll()
    do_clean(log, 0, T0)
    assert last_offsets_per_batch(log) == [2, 5, 7]
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1}
    assert keys_in_log(log) == [2, 3, 1, 4]
    assert offsets_in_log(log) == [1, 3, 6, 7]
    log.close(clean=True)
    log = make_log(cfg, existing=True)   # reload: the state comes back from the cleaned log

    def retry(pid, keys, seq=0):
        return log.append_records([SimpleRecord(str(k).encode(), str(k).encode(), T0) for k in keys],
                                  producer_id=pid, producer_epoch=0, base_sequence=seq)
    assert (retry(1, [1, 2, 3]).first_offset, retry(1, [1, 2, 3]).last_offset) == (0, 2)
    assert (retry(3, [1, 4]).first_offset, retry(3, [1, 4]).last_offset) == (6, 7)
    assert (retry(2, [3, 1, 4]).first_offset, retry(2, [3, 1, 4]).last_offset) == (3, 5)
    appender(log, 4, transactional=False)([2])
    log.roll()
    do_clean(log, 0, T0)
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1, 4: 0}
    assert last_offsets_per_batch(log) == [2, 5, 7, 8]
    assert keys_in_log(log) == [3, 1, 4, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8]
    log.close(clean=True)
    log = make_log(cfg, existing=True)
    info = retry(1, [1, 2, 3])
    assert info.duplicate and (info.first_offset, info.last_offset) == (0, 2)


def test_cleaning_with_keys_conflicting_with_txn_marker_keys(make_log):
    log = make_log(compact_cfg(segment_bytes=1024))
    appender(log, 1)([1])
    commit(log, 1)
    commit_key = b"\x00\x00\x00\x01"   # ControlRecordType.COMMIT's record key
    log.append_batches(build_batch([SimpleRecord(commit_key, b"foo", T0)], producer_id=2, producer_epoch=0,
                                   base_sequence=0, is_transactional=True))
    commit(log, 2)
    log.roll()
    assert offsets_in_log(log) == [0, 1, 2, 3]
    do_clean(log, 0, T0)
    assert last_offsets_per_batch(log) == [0, 1, 2, 3]
    assert offsets_in_log(log) == [0, 1, 2, 3]


def test_aborted_transaction_spanning_segments(make_log):
    log = make_log(compact_cfg(segment_bytes=128))
    appender(log, 1)([1])
    log.roll()
    abort(log, 1)
    log.roll()
    # the batch stays (empty) as the producer's last entry; the marker stays while a batch of its transaction does
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, log.active_segment.base_offset), LARGE_TIMESTAMP)
    assert offsets_in_log(log) == [1]
    assert last_offsets_per_batch(log) == [0, 1]
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, log.active_segment.base_offset), 2**63 - 1)
    assert offsets_in_log(log) == [1]
    assert last_offsets_per_batch(log) == [0, 1]


def test_interleaved_transactions_and_a_retry_compact_to_the_committed_state(make_log):
    """Interleaved transactions and a retry on a compacted topic: aborted data goes in the first round, the markers
    once no data of their transaction is left and their horizon has passed; reads never change what they return."""
    log = make_log(compact_cfg(segment_bytes=100_000, delete_retention_ms=DAY))
    c, a = appender(log, 100), appender(log, 200)
    idem = appender(log, 300, transactional=False)
    c([1, 2])                                               # 0-1
    a([3])                                                  # 2 (aborted below)
    idem([4])                                               # 3
    retry = log.append_records([SimpleRecord(b"4", b"4", T0)], producer_id=300, producer_epoch=0, base_sequence=0)
    assert retry.duplicate and retry.first_offset == 3
    commit(log, 100)                                        # 4
    abort(log, 200)                                         # 5
    log.append_records([SimpleRecord(b"1", b"1'", T0), SimpleRecord(b"2", b"2'", T0)])   # 6-7 overwrite c's
    a([3])                                                  # 8
    commit(log, 200)                                        # 9
    log.append_records([SimpleRecord(b"7", b"7", T0)], producer_id=100, producer_epoch=0, base_sequence=2)  # 10
    log.roll()

    def reads():
        return ([(r.offset, r.key, r.value) for r in log.read_records(isolation_level="read_committed")],
                [(r.offset, r.key, r.value) for r in log.read_records()])
    committed, uncommitted = reads()
    assert [o for o, _, _ in committed] == [0, 1, 3, 6, 7, 8, 10]
    assert [o for o, _, _ in uncommitted] == [0, 1, 2, 3, 6, 7, 8, 10]     # no markers, the retry once
    latest = {k: (o, v) for o, k, v in committed}
    expected = sorted((o, k, v) for k, (o, v) in latest.items())

    do_clean(log, 0, T0)                                    # aborted data and overwritten values go
    assert reads() == (expected, expected)
    assert [b.last_offset for b in all_batches(log) if b.is_control] == [4, 5, 9]
    do_clean(log, 0, T0)                                    # no data of 100's first and 200's aborted txn left:
    horizons = {b.last_offset: b.delete_horizon_ms for b in all_batches(log) if b.is_control}
    assert horizons == {4: T0 + DAY, 5: T0 + DAY, 9: -1}    # their markers get a horizon
    do_clean(log, 0, T0 + DAY)                              # and go once it has passed
    assert [b.last_offset for b in all_batches(log) if b.is_control] == [9]
    assert reads() == (expected, expected)
    assert aborted(log) == []
    assert [o for o, _, _ in expected] == [3, 6, 7, 8, 10]


def test_a_transaction_aborted_by_a_marker_past_the_cleaned_range_does_not_shadow_older_values(make_log):
    """The dirty range ends at the active segment's base; an aborted transaction whose data lies below it and
    whose ABORT marker went into the active segment is indexed there. Its records must still be left out of the
    key map (Kafka's collectAbortedTransactions searches on until complete), else the key's committed value is
    removed as superseded and the aborted record then removed as aborted: the key is gone."""
    log = make_log(compact_cfg(segment_bytes=2048))
    idem, txn = appender(log, 2, transactional=False), appender(log, 1)
    idem([1])
    idem([2])       # the batch holding key 1 is not its producer's last: nothing else keeps it
    txn([5])
    abort(log, 1)   # an earlier aborted transaction, indexed in the cleaned range
    txn([1])
    log.roll()
    abort(log, 1)   # in the active segment, past the cleaned range
    assert len(log.aborted_transactions(0, log.active_segment.base_offset)) == 2
    do_clean(log, 0, T0)
    assert {r.key: r.value for r in log.read_records(isolation_level="read_committed")} == {b"1": b"1", b"2": b"2"}


def test_round_counts_aborted_records_and_markers_as_read(make_log):
    # The round's figures (Kafka's CleanerStats.readMessages / recopyMessages): aborted records count as read
    # whether their batch goes or stays empty (a producer's last), markers kept count as read and written
    log = make_log(compact_cfg(segment_bytes=4096))
    log.clock.set(T0)
    log.append_records([SimpleRecord(b"9", b"9", T0)])      # 0
    p1, p2 = appender(log, 1), appender(log, 2)
    p1([1, 2])                                              # 1-2 aborted, not p1's last: deleted
    abort(log, 1)                                           # 3 kept: its data was read this round
    p2([7, 8])                                              # 4-5 aborted, p2's last data: kept empty
    abort(log, 2)                                           # 6 kept
    p1([4])                                                 # 7
    commit(log, 1)                                          # 8 kept: its data was read this round
    log.roll()
    res = Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 9), LARGE_TIMESTAMP)
    assert keys_in_log(log) == [9, 4]
    assert [(bt.base_offset, bt.last_offset, bt.records_count) for bt in all_batches(log)] == \
        [(0, 0, 1), (3, 3, 1), (4, 5, 0), (6, 6, 1), (7, 7, 1), (8, 8, 1)]
    assert (res.stats.messages_read, res.stats.messages_written) == (9, 5)


def test_an_empty_marker_goes_unless_it_is_the_last_batch_of_the_round(log_dir, make_log):
    # A marker an earlier round emptied (onControlBatchRead: no record => may go) has no delete horizon, so
    # checkBatchRetention says DELETE_EMPTY: with no record to keep it goes, unless it must stay as an empty batch
    # (KAFKA-17076: the round's last batch; here also its producer's last marker)
    from .test_cleaner import build_segment_files, pdir
    from storage_engine.record.record_batch import RecordBatch, build_control_batch, build_empty_batch

    def empty_marker(offset, pid):
        marker = build_control_batch(1, base_offset=offset, timestamp=T0, producer_id=pid, producer_epoch=0)
        return build_empty_batch(RecordBatch(marker, 0))

    def idempotent(key, offset, pid, seq):
        return build_batch([SimpleRecord(key, key, T0)], base_offset=offset, producer_id=pid, producer_epoch=0,
                           base_sequence=seq)

    d = pdir(log_dir)
    build_segment_files(d, 0, [build_batch([SimpleRecord(b"1", b"1", T0)]), empty_marker(1, 9),
                               idempotent(b"2", 2, 9, 0)])
    build_segment_files(d, 3, [empty_marker(3, 10)])
    build_segment_files(d, 4, [build_batch([SimpleRecord(b"3", b"3", T0)], base_offset=4)])
    log = make_log(compact_cfg(), existing=True)
    Cleaner(CleanerConfig()).clean(ltc_for(log, 0, 4), LARGE_TIMESTAMP)
    got = [(bt.base_offset, bt.is_control, bt.records_count) for bt in all_batches(log)]
    assert got == [(0, False, 1), (2, False, 1), (3, True, 0), (4, False, 1)]
