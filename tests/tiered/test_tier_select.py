"""Which segments tiering copies and what it copies of each (Kafka's ``LogSegmentData``), on real logs: only
sealed segments below the last stable offset, the high watermark and the recovery point, above what is already
remote; each with its indexes, its ``.txnindex`` when it has one, the producer snapshot at its end + 1 (rebuilt
when the roll's file is gone) and the leader-epoch entries up to its end. And the tiering claim is exclusive
across processes."""
from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import pytest

from storage_engine import layout
from storage_engine.segment import producer_snapshot
from storage_engine.segment.leader_epoch import parse_leader_epoch_checkpoint
from storage_engine.tiered import copy as copy_mod
from storage_engine.tiered.locks import TieringClaim
from tests.paths import REPO
from tests.storage_engine.helpers import config, open_log, recs

pytestmark = [pytest.mark.tiered]

T0 = 1_700_000_000_000


def _filled(tmp_path, n: int = 12):
    log, _ = open_log(tmp_path, config(segment_bytes=300), now_ms=T0)
    for i in range(n):
        log.append_records(recs(f"value-{i:04d}" * 3, timestamp=T0 + i))
    log.flush()
    return log


def test_sealed_segments_below_every_bound_and_above_the_remote_copy(tmp_path):
    log = _filled(tmp_path)
    segs = log.segments
    assert len(segs) >= 4
    with log.locked():
        every = copy_mod.eligible(log, -1)
    # every sealed segment, never the active one, each ending where the next begins
    assert [c.base_offset for c in every] == [s.base_offset for s in segs[:-1]]
    assert [c.end_offset for c in every] == [s.base_offset - 1 for s in segs[1:]]
    assert [c.size_bytes for c in every] == [s.size for s in segs[:-1]]
    with log.locked():
        after = copy_mod.eligible(log, every[1].end_offset)
    assert [c.base_offset for c in after] == [c.base_offset for c in every[2:]]
    with log.locked():
        assert copy_mod.eligible(log, every[-1].end_offset) == []
    # lag: what is sealed and not remote
    with log.locked():
        lag = copy_mod.lag(log, every[1].end_offset)
    assert lag == {"lag_segments": len(every) - 2, "lag_bytes": sum(c.size_bytes for c in every[2:])}
    log.close(clean=True)


def test_an_open_transaction_holds_back_the_segments_it_reaches(tmp_path):
    log = _filled(tmp_path, 4)
    first_open = log.append_records(recs("in-txn" * 10, timestamp=T0), producer_id=7, producer_epoch=0,
                                    base_sequence=0, is_transactional=True).first_offset
    for i in range(8):
        log.append_records(recs(f"after-{i:04d}" * 3, timestamp=T0 + 100 + i))
    log.flush()
    assert log.last_stable_offset == first_open < log.high_watermark
    with log.locked():
        chosen = copy_mod.eligible(log, -1)
    assert chosen and all(c.end_offset < first_open for c in chosen)
    sealed_after = [s for s, n in zip(log.segments, log.segments[1:]) if n.base_offset > first_open]
    assert sealed_after, "segments were sealed past the open transaction"
    log.append_end_txn(7, 0, commit=True)
    with log.locked():
        released = copy_mod.eligible(log, -1)
    assert len(released) == len(log.segments) - 1      # the LSO moved to the end: every sealed segment goes
    log.close(clean=True)


def test_unflushed_segments_wait_for_the_recovery_point(tmp_path):
    log = _filled(tmp_path)
    with log.locked():
        every = copy_mod.eligible(log, -1)
        # as if the roll's flush had not happened: nothing past the recovery point is copied
        log.recovery_point = every[1].end_offset + 1
        held = copy_mod.eligible(log, -1)
    assert [c.base_offset for c in held] == [c.base_offset for c in every[:2]]
    log.close(clean=False)


def test_the_parts_of_a_segment(tmp_path):
    log, _ = open_log(tmp_path, config(segment_bytes=400), now_ms=T0)
    log.append_records(recs("plain", timestamp=T0))
    log.append_records(recs("aborted" * 5, timestamp=T0 + 1), producer_id=3, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    log.append_end_txn(3, 0, commit=False)
    for i in range(10):
        log.append_records(recs(f"v{i:03d}" * 8, timestamp=T0 + 2 + i), producer_id=4, producer_epoch=0,
                           base_sequence=i)
    log.flush()
    with log.locked():
        cands = copy_mod.eligible(log, -1)
    assert len(cands) >= 2
    first, second = cands[0], cands[1]
    with copy_mod.prepare(log, first) as prep:
        assert prep is not None
        assert set(prep.paths) == {"log", "index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint"}
        d = log.dir
        for part, suffix in copy_mod.SEGMENT_PARTS + (copy_mod.TXN_PART,):
            assert filecmp.cmp(prep.paths[part], layout.segment_file(d, first.base_offset, suffix), shallow=False)
            assert prep.sizes[part] == os.path.getsize(layout.segment_file(d, first.base_offset, suffix))
        roll_snapshot = layout.segment_file(d, first.end_offset + 1, layout.SNAPSHOT_SUFFIX)
        assert filecmp.cmp(prep.paths["snapshot"], roll_snapshot, shallow=False)
        entries = parse_leader_epoch_checkpoint(open(prep.paths["leader-epoch-checkpoint"], "rb").read())
        assert entries and all(e.start_offset <= first.end_offset for e in entries)
        assert prep.leader_epochs == {entries[-1].epoch: first.base_offset}
    with copy_mod.prepare(log, second) as prep:
        assert prep is not None
        # the roll's snapshot is gone: the state at end + 1 is rebuilt, equal to the one the roll wrote
        roll_snapshot = layout.segment_file(log.dir, second.end_offset + 1, layout.SNAPSHOT_SUFFIX)
        expected = producer_snapshot.read_snapshot(roll_snapshot)
    os.rename(roll_snapshot, roll_snapshot + ".kept")
    with copy_mod.prepare(log, second) as prep:
        assert prep is not None
        rebuilt = producer_snapshot.read_snapshot(prep.paths["snapshot"])
    assert sorted(rebuilt) == sorted(expected) and expected
    assert not os.path.exists(roll_snapshot), "preparing a copy never writes into the partition folder"
    log.close(clean=False)


def test_a_segment_replaced_since_it_was_chosen_is_not_prepared(tmp_path):
    log = _filled(tmp_path)
    with log.locked():
        cand = copy_mod.eligible(log, -1)[0]
    log.truncate_fully_and_start_at(log.log_end_offset)
    with copy_mod.prepare(log, cand) as prep:
        assert prep is None
    assert not copy_mod.still_there(log, cand)
    log.close(clean=False)


HOLD = """
import sys, time
from storage_engine.tiered.locks import TieringClaim
claim = TieringClaim(sys.argv[1], sys.argv[2])
assert claim.try_acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_the_tiering_claim_is_exclusive_across_processes(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "t-0"], cwd=str(REPO),
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        claim = TieringClaim(str(tmp_path), "t-0")
        assert not claim.try_acquire()
        assert TieringClaim(str(tmp_path), "t-1").try_acquire()     # another partition is free
    finally:
        holder.kill()
        holder.wait()
    assert claim.try_acquire(), "a claim dies with its process"
    assert not claim.sweep_pending()
    claim.owe_sweep(True)       # a run closed a dead process's copy: the next run lists the partition's objects
    claim.release()
    again = TieringClaim(str(tmp_path), "t-0")
    assert again.try_acquire() and again.sweep_pending()
    again.owe_sweep(False)
    assert not again.sweep_pending()
    again.release()
