"""Producer state (``.snapshot``) and transaction indexes (``.txnindex``) through the lifecycle: a moved partition
keeps its producers (also those whose batches retention removed), its aborted transactions, its LSO and its
duplicate detection; a deleted partition takes its producer files along; a legacy segment split on load keeps
its ``.txnindex`` entries in the new segment holding each ABORT marker."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log import mover
from storage_engine.log.loader import open_log
from storage_engine.log.manager import LogManager
from storage_engine.log.split import split_overflowed_segment
from storage_engine.log.producer_state import ABORT
from storage_engine.log.producer_state_manager import ProducerStateManager
from storage_engine.jobs import batches, housekeeping
from storage_engine.record.record_batch import build_batch, build_control_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.txn_index import AbortedTxn, TransactionIndex
from storage_engine.inspection.verify import verify_log_dirs
from tests.storage_engine.helpers import get_log

from .test_split import INT_MAX, legacy_messages

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
COMMITTED = "read_committed"


def _config(tmp_path):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")],
                                           "log.segment.bytes": 1024}})


def _rec(i: int) -> list[SimpleRecord]:
    return [SimpleRecord(b"k%d" % i, b"v%05d" % i + b"x" * 80, T0 + i)]


def _files(folder: str, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(suffix))


def _producers(psm) -> tuple:
    """The state a snapshot keeps, without the last batch's own timestamp (a snapshot stores one timestamp per
    producer, so a state rebuilt from one has the producer's last timestamp there, whatever moved it)."""
    return (psm.map_end_offset, sorted(psm.ongoing_txns.items()),
            sorted((pid, e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset,
                    [(b.last_seq, b.last_offset, b.offset_delta) for b in e.batches[-1:]])
                   for pid, e in psm.producers.items()))


def _observed(log) -> dict:
    log.refresh()
    return {"state": _producers(log.producer_state),
            "aborted": log.aborted_transactions(log.log_start_offset, log.log_end_offset),
            "lso": log.last_stable_offset, "end": log.log_end_offset, "start": log.log_start_offset,
            "committed": [(r.offset, r.value) for r in log.read_records(isolation_level=COMMITTED)],
            "all": [(r.offset, r.value) for r in log.read_records()]}


def _fill_with_producers(log) -> list[int]:
    """Producer 11 writes first (retention removes its batches later); 7 is idempotent; 8 aborts a transaction
    spanning rolls; 9 commits one; 10 leaves one open at the end. Returns the offsets of the aborted records."""
    i, aborted = 0, []
    for seq in range(3):
        log.append_records(_rec(i), producer_id=11, producer_epoch=0, base_sequence=seq)
        i += 1
    for n in range(30):
        log.append_records(_rec(i), producer_id=7, producer_epoch=2, base_sequence=n)
        i += 1
        if n % 3 == 0:
            aborted.append(log.append_records(_rec(i), producer_id=8, producer_epoch=0, base_sequence=n // 3,
                                              is_transactional=True).first_offset)
            i += 1
    log.append_end_txn(8, 0, commit=False)
    log.append_records(_rec(i), producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append_end_txn(9, 0, commit=True)
    log.append_records(_rec(i + 1), producer_id=10, producer_epoch=0, base_sequence=0, is_transactional=True)
    return aborted


def test_a_moved_partition_keeps_its_producers_aborted_transactions_lso_and_duplicates(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        aborted_offsets = _fill_with_producers(log)
        # Retention past producer 11's batches: it is known only from the snapshot at the new log start.
        first_seg_end = log.segments[1].base_offset
        log.delete_records(first_seg_end)
        housekeeping.retention_all(cfg, T0)
        log.refresh()
        assert log.segments[0].base_offset == first_seg_end and 11 in log.producer_state.producers
        before = _observed(log)
        assert before["aborted"] and before["lso"] < before["end"], "an aborted and an open transaction"
        source = mgr.dir_of(("t", 0))
        result = mgr.move_log("t", 0, [d for d in cfg.log_dirs if d != source][0])
        assert result["committed"] and log.log_dir == result["target_dir"]
        assert _observed(log) == before
        home = log.dir
        assert _files(home, ".snapshot"), "the new home has producer snapshots"
        assert _files(home, layout.TXN_INDEX_SUFFIX), "the new home indexes the aborted transaction"
    # A new process loads the moved partition from its new folder alone, with the same state.
    with LogManager.open(cfg, clock=ManualClock(T0 + 10)) as mgr:
        log = get_log(mgr, "t", 0)
        assert log.log_dir == result["target_dir"]
        assert _observed(log) == before
        end = log.log_end_offset
        # Retries of each producer's last batch are duplicates, at their first offsets; sequences continue.
        dup = log.append_records(_rec(29 + 10), producer_id=7, producer_epoch=2, base_sequence=29)
        assert dup.duplicate and dup.first_offset < end and log.log_end_offset == end
        dup11 = log.append_records(_rec(2), producer_id=11, producer_epoch=0, base_sequence=2)
        assert dup11.duplicate and dup11.first_offset == 2 and log.log_end_offset == end
        assert log.append_records(_rec(99), producer_id=11, producer_epoch=0, base_sequence=3).first_offset == end
        # The transaction left open before the move commits after it: the LSO reaches the end.
        log.append_end_txn(10, 0, commit=True)
        assert log.last_stable_offset == log.log_end_offset
        seen = _observed(log)
        assert [a.producer_id for a in seen["aborted"]] == [8]
        assert [o for o, _v in seen["committed"]] == [o for o, _v in seen["all"] if o not in aborted_offsets]
    report = verify_log_dirs(cfg)
    assert not report["damaged"], report["problems"]


def test_the_copy_restarted_after_retention_is_seeded_from_the_partition_state(tmp_path):
    """A copy started over (retention went past it) starts from the partition's state at its new start."""
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        _fill_with_producers(log)
        source = mgr.dir_of(("t", 0))
        target = [d for d in cfg.log_dirs if d != source][0]
        future_folder = layout.future_dir_name("t", 0)
        future = None
        try:
            future, _ = open_log(target, "t", 0, log.config, clock=ManualClock(T0), exclusive=True, create=True,
                                 folder=future_folder)
            start = log.segments[2].base_offset
            log.delete_records(start)
            mover._reconcile(log, future)
            assert future.log_start_offset <= start and future.log_end_offset <= start
            seeded = future.producer_state
            assert 11 in seeded.producers and 7 in seeded.producers
            assert os.path.exists(seeded.snapshot_path(future.log_end_offset))
            mover._copy_round(log, future)
            assert future.log_end_offset == log.log_end_offset
            assert _producers(future.producer_state) == _producers(log.producer_state)
            assert future.last_stable_offset == log.last_stable_offset
        finally:
            if future is not None:
                future.close(clean=False)


def test_a_deleted_partition_takes_its_producer_files_and_a_new_one_starts_without_producers(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        _fill_with_producers(log)
        log.append_end_txn(10, 0, commit=False)
        folder_files = {n for n in os.listdir(log.dir)
                        if n.endswith((".snapshot", layout.TXN_INDEX_SUFFIX))}
        assert any(n.endswith(".snapshot") for n in folder_files)
        assert any(n.endswith(layout.TXN_INDEX_SUFFIX) for n in folder_files)
        source = log.log_dir
        deleted = mgr.delete_log("t", 0)["deleted_folder"]
        gone = os.path.join(source, deleted)
        assert folder_files <= set(os.listdir(gone))
        fresh = mgr.get_or_create_log("t", 0)
        assert not fresh.producer_state.producers and fresh.log_end_offset == 0
        assert not _files(fresh.dir, ".snapshot") or fresh.producer_state.state_key()[2] == []
        assert not _files(fresh.dir, layout.TXN_INDEX_SUFFIX)
        # Producer 7 is unknown to the new partition: sequence 0 of a new epoch is its first batch.
        info = fresh.append_records(_rec(0), producer_id=7, producer_epoch=0, base_sequence=0)
        assert not info.duplicate and info.first_offset == 0


def test_a_split_legacy_segment_keeps_its_aborted_transactions_in_the_segment_of_the_marker(tmp_path):
    """An overflowed segment that also holds magic-2 batches after its legacy messages (a format upgrade): the
    aborted transaction indexed in the old segment's .txnindex goes to the new segment holding its marker.
    (Compacted, as overflowed segments are: the offset gap would be damage in a delete-policy topic.)"""
    cfg = config_from_mapping({"broker": {"log.dirs": str(tmp_path / "logs"), "log.cleanup.policy": "compact"}})
    folder = os.path.join(cfg.log_dirs[0], "t-0")
    os.makedirs(folder)
    legacy = [0, 1, 2, INT_MAX + 10]
    first_txn = INT_MAX + 11
    data = legacy_messages(legacy, magic=1)
    data += build_batch([SimpleRecord(b"a", b"aborted", T0)], base_offset=first_txn, producer_id=5,
                        producer_epoch=0, base_sequence=0, is_transactional=True)
    data += build_batch([SimpleRecord(b"c", b"kept", T0)], base_offset=first_txn + 1)
    data += build_control_batch(ABORT, base_offset=first_txn + 2, timestamp=T0, producer_id=5, producer_epoch=0)
    with open(layout.segment_file(folder, 0, layout.LOG_SUFFIX), "wb") as f:
        f.write(data)
    for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        open(layout.segment_file(folder, 0, suffix), "wb").close()
    entry = AbortedTxn(5, first_txn, first_txn + 2, first_txn + 3)
    with open(layout.segment_file(folder, 0, layout.TXN_INDEX_SUFFIX), "wb") as f:
        f.write(entry.encode())
    bases = split_overflowed_segment(folder, 0, cfg.log_config("t"), T0)
    assert bases == [0, INT_MAX + 10]
    assert TransactionIndex(layout.segment_file(folder, 0, layout.TXN_INDEX_SUFFIX), 0).all_aborted_txns() == []
    moved = TransactionIndex(layout.segment_file(folder, bases[1], layout.TXN_INDEX_SUFFIX), bases[1])
    assert moved.all_aborted_txns() == [entry], "the entry is in the segment of its marker"
    assert not [n for n in os.listdir(folder) if n.endswith((layout.SWAP_SUFFIX, layout.CLEANED_SUFFIX))]
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        bases = [s.base_offset for s in log.segments]
        assert bases[:2] == [0, INT_MAX + 10], bases
        assert log.segments[0].txn_index.all_aborted_txns() == []
        assert log.segments[1].txn_index.all_aborted_txns() == [entry]
        assert log.aborted_transactions(0, log.log_end_offset) == [entry]
        committed = [(r.offset, r.value) for r in log.read_records(isolation_level=COMMITTED)]
        assert (first_txn + 1, b"kept") in committed and all(v != b"aborted" for _o, v in committed)
        assert [o for o, _v in committed] == legacy + [first_txn + 1]
    assert not [n for n in os.listdir(folder) if n.endswith(layout.SWAP_SUFFIX)]
    report = verify_log_dirs(cfg)
    assert not report["damaged"], report["problems"]


def test_producer_expiry_applies_to_the_copy_of_a_moving_partition(tmp_path):
    """Both expiry jobs forget an idle producer in the partition and in the copy being made of it, so it does
    not come back when the copy takes over."""
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        _fill_with_producers(log)
        source = mgr.dir_of(("t", 0))
        target = [d for d in cfg.log_dirs if d != source][0]
        future, _ = open_log(target, "t", 0, log.config, clock=ManualClock(T0), exclusive=True, create=True,
                             folder=layout.future_dir_name("t", 0))
        try:
            mover._reconcile(log, future)
            mover._copy_round(log, future)
            assert 7 in future.producer_state.producers and 11 in future.producer_state.producers
        finally:
            future.close(clean=False)
    later = T0 + cfg.producer_id_expiration_ms + 1000
    batch = batches.expire_producers_batch(cfg, [["t", 0]], later)
    (result,) = batch["results"]
    # Producer 10's transaction is open: it stays; the others expire, in the partition and in its copy.
    assert result["expired_producer_ids"] == [7, 8, 9, 11]
    assert result["future"]["expired_producer_ids"] == [7, 8, 9, 11]
    # The copy's newest snapshot (at its end) holds the state after the expiry.
    folder = os.path.join(result["future"]["log_dir"], result["future"]["folder"])
    psm = ProducerStateManager(folder, "t-0")
    assert psm.load_from_snapshot(0, 1 << 62, delete_corrupt=False) == psm.snapshot_offsets()[-1]
    assert sorted(psm.producers) == [10]
    whole = housekeeping.expire_producers(cfg, later)
    assert whole["producers_expired"] == 0 and len(whole["partitions"]) == 2
    assert [p.get("future", False) for p in whole["partitions"]] == [False, True]
