"""The ``leader-epoch-checkpoint`` file and Kafka's ``LeaderEpochFileCache`` rules (after LeaderEpochFileCacheTest,
LeaderEpochCheckpointFileWithFailureHandlerTest and LogSegmentTest.testRecoveryRebuildsEpochCache)."""
from __future__ import annotations

import os

import pytest

from storage_engine import durable, layout
from storage_engine.errors import CorruptCheckpointError
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment import leader_epoch
from storage_engine.segment.leader_epoch import (NOT_READ, UNDEFINED_EPOCH, EpochEntry, LeaderEpochCheckpointFile,
                                                 LeaderEpochFileCache, format_leader_epoch_checkpoint,
                                                 parse_leader_epoch_checkpoint)
from storage_engine.segment.recovery import recover_segment

from ..helpers import open_segment

pytestmark = pytest.mark.unit

E = EpochEntry
UNDEFINED = (UNDEFINED_EPOCH, -1)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / layout.LEADER_EPOCH_CHECKPOINT)


@pytest.fixture
def cache(path):
    return LeaderEpochFileCache(path)


def content(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def writes(monkeypatch):
    """The paths written through ``atomic_write`` by the leader epoch module."""
    done: list[str] = []
    real = durable.atomic_write

    def counting(p: str, data: bytes, *, sync: bool = True) -> None:
        done.append(p)
        real(p, data, sync=sync)

    monkeypatch.setattr(leader_epoch, "atomic_write", counting)
    return done


# ------------------------------------------------------------------ the file

def test_the_file_is_kafkas_checkpoint_container_byte_for_byte(path):
    assert format_leader_epoch_checkpoint([]) == b"0\n0\n"
    assert format_leader_epoch_checkpoint([E(0, 0)]) == b"0\n1\n0 0\n"
    assert format_leader_epoch_checkpoint([E(0, 1), E(1, 2)]) == b"0\n2\n0 1\n1 2\n"   # Kafka's javadoc example
    LeaderEpochCheckpointFile(path).write([E(2, 6), E(3, 1500)])
    assert content(path) == b"0\n2\n2 6\n3 1500\n"
    assert not os.path.exists(path + layout.TMP_SUFFIX)


def test_persist_overwrite_and_reload(path):
    """LeaderEpochCheckpointFileWithFailureHandlerTest.shouldPersistAndOverwriteAndReloadFile."""
    f = LeaderEpochCheckpointFile(path)
    f.write([E(0, 1), E(1, 2), E(2, 3)])
    assert f.read() == [E(0, 1), E(1, 2), E(2, 3)]
    f.write([E(3, 4), E(4, 5)])
    assert LeaderEpochCheckpointFile(path).read() == [E(3, 4), E(4, 5)]


def test_missing_and_empty_files(path):
    f = LeaderEpochCheckpointFile(path)
    assert f.read() is None
    f.create_empty()                     # Kafka's CheckpointFile constructor: an empty file
    assert content(path) == b"" and f.read() == []
    f.write([E(1, 2)])
    f.create_empty()                     # never truncates an existing file
    assert f.read() == [E(1, 2)]


def test_reading_accepts_what_kafkas_reader_accepts():
    assert parse_leader_epoch_checkpoint(b"0\n2\n0  5\n3\t9 \n") == [E(0, 5), E(3, 9)]
    with pytest.raises(CorruptCheckpointError):       # Java's split keeps a leading empty field: 3 fields
        parse_leader_epoch_checkpoint(b"0\n1\n 3 9\n")
    assert parse_leader_epoch_checkpoint(b"0\n1\n+2 +7\r\n") == [E(2, 7)]
    assert parse_leader_epoch_checkpoint(b"") == []


@pytest.mark.parametrize("data,where", [
    (b"1\n0\n", "unrecognised version"),
    (b"0\n1\n0 1 2\n", "expected '<epoch> <start offset>'"),
    (b"0\n1\n0\n", "expected '<epoch> <start offset>'"),
    (b"0\n1\n-1 5\n", "malformed epoch"),
    (b"0\n1\n2147483648 5\n", "malformed epoch"),
    (b"0\n1\n1 -5\n", "malformed start offset"),
    (b"0\n1\n1 x\n", "malformed start offset"),
    (b"0\n2\n1 5\n", "expected 2 entries but found 1"),
    (b"0\n1\n1 5", "not terminated by a newline"),
    (b"0\n", "missing entry count line"),
])
def test_damage_is_a_corrupt_checkpoint_error_naming_the_line(data, where):
    with pytest.raises(CorruptCheckpointError) as err:
        parse_leader_epoch_checkpoint(data, "lec")
    assert where in str(err.value) and "lec" in str(err.value)


def test_a_file_out_of_order_reads_as_kafkas_cache_holds_it(path):
    """The constructor assigns every entry in turn: later entries truncate non-monotonic earlier ones."""
    with open(path, "wb") as f:
        f.write(b"0\n3\n1 5\n2 6\n1 7\n")
    cache = LeaderEpochFileCache(path)
    cache.reload(0)
    assert cache.entries == [E(1, 7)]


# ------------------------------------------------------------------ assign

def test_add_epoch_and_message_offset(cache):
    """shouldAddEpochAndMessageOffsetToCache."""
    cache.assign(2, 10)
    assert cache.latest_epoch == 2 and cache.entries == [E(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_same_epoch_is_not_reassigned(cache, path):
    """shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned, shouldNotUpdateEpochAndStartOffset..."""
    assert cache.assign(2, 9)
    assert not cache.assign(2, 10)
    assert cache.entries == [E(2, 9)] and content(path) == b"0\n1\n2 9\n"


def test_same_epoch_at_an_earlier_offset_replaces_it(cache):
    """shouldTruncateIfMatchingEpochButEarlierStartingOffset."""
    for epoch, offset in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, offset)
    cache.assign(7, 12)
    assert cache.entries == [E(5, 11), E(7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12) and cache.end_offset_for(6, 0) == (5, 12)


def test_a_new_epoch_at_the_latest_start_offset_replaces_the_latest(cache):
    """shouldEnforceMonotonicallyIncreasingStartOffsets."""
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.entries == [E(3, 9)]


def test_epochs_and_offsets_stay_monotonic(cache):
    """shouldEnforceMonotonicallyIncreasingEpochs, shouldEnforceOffsetsIncreaseMonotonically."""
    cache.assign(1, 5)
    cache.assign(2, 6)
    cache.assign(1, 7)
    assert cache.latest_epoch == 1 and cache.entries == [E(1, 7)]
    assert cache.end_offset_for(1, 8) == (1, 8) and cache.end_offset_for(2, 8) == UNDEFINED
    other = LeaderEpochFileCache(cache.path + "2")
    other.assign(2, 6)
    other.assign(3, 5)
    assert other.entries == [E(3, 5)]


def test_negative_epochs_and_offsets_are_refused(cache):
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_the_append_rule_takes_only_newer_non_negative_epochs(cache, writes):
    assert not cache.maybe_assign(-1, 0)
    assert cache.maybe_assign(0, 0)
    assert not cache.maybe_assign(0, 5)
    assert cache.maybe_assign(3, 10)
    assert not cache.maybe_assign(2, 20)      # an older epoch never regresses the cache (Kafka's assign would)
    assert cache.entries == [E(0, 0), E(3, 10)]
    assert len(writes) == 2                   # written once per new epoch, never for a known one


def test_track_epochs_as_leaders_change(cache):
    """shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes / ...AsFollowerReceivesManyMessages."""
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 0) == (1, 0) and cache.end_offset_for(0, 0) == (0, 0)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5) and cache.end_offset_for(0, 10) == (0, 0)
    follower = LeaderEpochFileCache(cache.path + "2")
    for epoch, offset in ((0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8)):
        follower.assign(epoch, offset)
    assert follower.entries == [E(0, 0), E(1, 3), E(2, 6)]
    assert follower.end_offset_for(0, 9) == (0, 3) and follower.end_offset_for(1, 9) == (1, 6)


# ------------------------------------------------------------------ end offsets and lookups

def test_end_offset_for(cache):
    assert cache.end_offset_for(0, 0) == UNDEFINED                       # shouldReturnUnsupportedIfNoEpochRecorded
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    for epoch, offset in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(4, 0) == (4, 11)        # shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED
    assert cache.end_offset_for(8, 100) == UNDEFINED
    gaps = LeaderEpochFileCache(cache.path + "2")
    for epoch, offset in ((0, 10), (2, 13), (4, 17)):
        gaps.assign(epoch, offset)
    # shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested
    assert [gaps.end_offset_for(e, 0) for e in (1, 2, 3)] == [(0, 13), (2, 17), (2, 17)]


def test_epoch_for_offset(cache):
    """shouldFetchEpochForGivenOffset."""
    for epoch, offset in ((0, 10), (1, 20), (5, 30)):
        cache.assign(epoch, offset)
    assert [cache.epoch_for_offset(o) for o in (25, 20, 30, 50, 5)] == [1, 1, 5, 5, None]


# ------------------------------------------------------------------ truncation

@pytest.fixture
def three(cache):
    for epoch, offset in ((2, 6), (3, 8), (4, 11)):
        cache.assign(epoch, offset)
    return cache


@pytest.mark.parametrize("end,expected", [
    (8, [E(2, 6)]),                           # shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries
    (9, [E(2, 6), E(3, 8)]),                  # shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest
    (12, [E(2, 6), E(3, 8), E(4, 11)]),
    (-1, [E(2, 6), E(3, 8), E(4, 11)]),       # shouldNotResetEpochHistoryTailIfUndefinedPassed
    (0, []),
])
def test_truncate_from_end(three, end, expected):
    changed = three.truncate_from_end(end)
    assert three.entries == expected and changed == (expected != [E(2, 6), E(3, 8), E(4, 11)])
    assert LeaderEpochCheckpointFile(three.path).read() == expected


@pytest.mark.parametrize("start,expected", [
    (8, [E(3, 8), E(4, 11)]),                 # shouldPreserveResetOffsetOnClearEarliestIfOneExists
    (1, [E(2, 6), E(3, 8), E(4, 11)]),        # shouldNotClearAnythingIfOffsetTooEarly
    (6, [E(2, 6), E(3, 8), E(4, 11)]),        # shouldNotClearAnythingIfOffsetIsFirstOffset
    (11, [E(4, 11)]),                         # shouldRetainLatestEpochOnClearAllEarliest
    (9, [E(3, 9), E(4, 11)]),                 # shouldUpdateOffsetBetweenEpochBoundariesOnClearEarliest
    (15, [E(4, 15)]),                         # shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset
    (-1, [E(2, 6), E(3, 8), E(4, 11)]),       # shouldNotResetEpochHistoryHeadIfUndefinedPassed
])
def test_truncate_from_start(three, writes, start, expected):
    three.truncate_from_start(start)
    assert three.entries == expected
    assert LeaderEpochCheckpointFile(three.path).read() == expected
    assert len(writes) == (0 if expected == [E(2, 6), E(3, 8), E(4, 11)] else 1)   # only when it changed


def test_truncate_from_start_between_the_first_two_epochs(cache):
    """shouldUpdateOffsetBetweenFirstTwoEpochBoundariesOnClearEarliest."""
    for epoch, offset in ((0, 0), (1, 7), (2, 10)):
        cache.assign(epoch, offset)
    cache.truncate_from_start(5)
    assert cache.entries == [E(0, 5), E(1, 7), E(2, 10)]


def test_write_checkpoint_on_truncation(three, path):
    """shouldWriteCheckpointOnTruncation."""
    three.truncate_from_end(11)
    three.truncate_from_start(8)
    assert LeaderEpochCheckpointFile(path).read() == [E(3, 8)]
    assert content(path) == b"0\n1\n3 8\n"


def test_clear_writes_an_empty_checkpoint(three, path):
    """shouldClearAllEntries (clearAndFlush)."""
    three.clear()
    assert three.entries == [] and three.latest_epoch is None and content(path) == b"0\n0\n"


def test_empty_cache_operations(cache, path):
    """shouldFetchLatestEpochOfEmptyCache, shouldClearEarliestOnEmptyCache, shouldClearLatestOnEmptyCache."""
    assert cache.latest_epoch is None and cache.end_offset_for(7, 0) == UNDEFINED
    assert not cache.truncate_from_start(7) and not cache.truncate_from_end(7)
    assert not os.path.exists(path)


def test_persist_between_instances(path):
    """shouldPersistEpochsBetweenInstances."""
    LeaderEpochFileCache(path).assign(2, 6)
    again = LeaderEpochFileCache(path)
    again.reload(0)
    assert again.entries == [E(2, 6)]


def test_changes_deferred_with_write_false_are_flushed_once(cache, path, writes):
    cache.maybe_assign(1, 0, write=False)
    cache.maybe_assign(2, 5, write=False)
    cache.truncate_from_start(3, write=False)
    assert not os.path.exists(path) and cache.dirty
    assert cache.flush() and not cache.flush()
    assert content(path) == b"0\n2\n1 3\n2 5\n" and writes == [path]


# ------------------------------------------------------------------ several processes

def test_an_epoch_assigned_by_another_process_is_never_regressed(path, writes):
    mine, theirs = LeaderEpochFileCache(path), LeaderEpochFileCache(path)
    assert mine.maybe_assign_at(1, 0, generation=7)
    assert theirs.maybe_assign_at(3, 10, generation=7)    # another process, same generation: re-reads, adds 3
    assert content(path) == b"0\n2\n1 0\n3 10\n"
    # This process still believes 1 is the latest: a batch of epoch 1 is decided without I/O...
    assert not mine.maybe_assign_at(1, 20, generation=7)
    assert len(writes) == 2
    # ... a batch of epoch 2 re-reads the file first and finds 3 there: nothing to do, no regression.
    assert not mine.maybe_assign_at(2, 20, generation=7)
    assert mine.entries == [E(1, 0), E(3, 10)] and content(path) == b"0\n2\n1 0\n3 10\n"
    assert mine.maybe_assign_at(4, 30, generation=7)
    assert content(path) == b"0\n3\n1 0\n3 10\n4 30\n"


def test_a_new_generation_re_reads_the_file(path):
    """A truncation by another process (which moves the generation) lowered the latest epoch: an append of an
    epoch this process thought known must see it."""
    mine, theirs = LeaderEpochFileCache(path), LeaderEpochFileCache(path)
    mine.maybe_assign_at(1, 0, generation=1)
    mine.maybe_assign_at(2, 5, generation=1)
    theirs.sync(2).truncate_from_end(5)
    assert mine.maybe_assign_at(2, 7, generation=2)
    assert content(path) == b"0\n2\n1 0\n2 7\n"


def test_a_cache_never_read_reads_before_deciding(path):
    LeaderEpochFileCache(path).assign(5, 100)
    fresh = LeaderEpochFileCache(path)
    assert fresh.generation == NOT_READ
    assert not fresh.maybe_assign_at(0, 200, generation=3)    # re-read: 5 is newer
    assert fresh.entries == [E(5, 100)] and fresh.generation == 3


def test_a_damaged_file_reads_as_empty_and_the_next_change_replaces_it(path, caplog):
    with open(path, "wb") as f:
        f.write(b"0\n1\ngarbage\n")
    cache = LeaderEpochFileCache(path)
    cache.reload(1)
    assert cache.entries == [] and cache.dirty
    assert "damaged" in caplog.text
    cache.maybe_assign_at(2, 9, generation=1)
    assert content(path) == b"0\n1\n2 9\n"


# ------------------------------------------------------------------ recovery

def _batch(base: int, epoch: int, *values: str) -> bytes:
    return build_batch([SimpleRecord(None, v.encode(), 1000) for v in values], base_offset=base,
                       partition_leader_epoch=epoch)


@pytest.mark.parametrize("small", [True, False])
def test_recovery_rebuilds_the_epoch_cache(tmp_path, path, monkeypatch, small):
    """LogSegmentTest.testRecoveryRebuildsEpochCache: each v2 batch assigns its epoch at its base offset if newer;
    a -1 epoch assigns nothing. Through both replays: the segment's bytes read (small) or mapped."""
    from storage_engine.segment import recovery
    if not small:
        monkeypatch.setattr(recovery, "_READ_NOT_MAP_BYTES", 0)
    seg = open_segment(tmp_path, 0)
    for base, epoch in ((0, -1), (1, 0), (2, 1), (3, 1), (4, 2), (5, 1)):
        data = _batch(base, epoch, "v")
        seg.append(base, 1000, base, data)
    cache = LeaderEpochFileCache(path)
    recover_segment(seg, None, cache)
    assert cache.entries == [E(0, 1), E(1, 2), E(2, 4)]
    assert not os.path.exists(path) and cache.dirty          # written by the caller (the load), once
    seg.close(trim=False)
