"""Load rules at their boundaries (MUTATION.md: what the mutants of loader.py showed the other tests let through).

Kafka's ``LogLoader.removeTempFilesAndCollectSwapFiles`` deletes every temporary file it finds before loading; this
engine writes producer snapshots atomically (``<name>.snapshot.tmp``, fsync, rename), so a ``.snapshot.tmp`` is a
snapshot whose writer died before the rename, and the first opener deletes it (the snapshot itself is rebuilt).
"""
from __future__ import annotations

import os
import shutil
import struct
from typing import Any

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config import LogConfig
from storage_engine.errors import (PartitionDeletedError, PartitionMovedError, PartitionNotFoundError,
                                   StorageIOError)
from storage_engine.log.loader import open_log as load_log
from storage_engine.log.locks import DELETED, LIVE, MOVED, UNKNOWN, PartitionLock, PartitionState, lock_path
from storage_engine.record.record_batch import LOG_OVERHEAD, MIN_ENTRY_SIZE_FIELD

from ..helpers import PARTITION, TOPIC, batch, config, open_log, partition_dir, read_all, recs, segment_path

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_half_written_producer_snapshot_is_deleted_at_load(log_dir, clean):
    log, _ = open_log(log_dir, now_ms=T0)
    log.append_records(recs("a", "b", timestamp=T0), producer_id=3, producer_epoch=0, base_sequence=0)
    log.close(clean=True)
    pdir = partition_dir(log_dir)
    torn = os.path.join(pdir, layout.filename_prefix(2) + layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX)
    with open(torn, "wb") as f:
        f.write(b"\x00\x01")
    # a file that only looks alike is not the engine's and stays
    other = os.path.join(pdir, "notes.tmp")
    with open(other, "wb") as f:
        f.write(b"x")

    log, res = open_log(log_dir, now_ms=T0, had_clean_shutdown=clean)
    assert not os.path.exists(torn)
    assert os.path.basename(torn) in res.deleted_files
    assert os.path.exists(other)
    assert read_all(log) == [(0, b"a"), (1, b"b")]
    # the producer's state survived: a retry of its batch is a duplicate
    assert log.append_records(recs("a", "b", timestamp=T0), producer_id=3, producer_epoch=0,
                              base_sequence=0).duplicate
    log.close(clean=True)


# ------------------------------------------------------------------ the partition's shared state (open_log)
#
# Other processes leave their view of a partition in its lock file (storage_engine.log.locks): the generation,
# log start offset, recovery point, last flush time and the dir's crash epoch at the last full load. A test
# leaves that state the way such a process would: by writing it under the partition lock.

def _lock(log_dir, folder=None):
    return PartitionLock(lock_path(str(log_dir), folder or layout.partition_dir_name(TOPIC, PARTITION)))


def _state(log_dir, folder=None) -> PartitionState:
    lock = _lock(log_dir, folder)
    try:
        return lock.read_state()
    finally:
        lock.close()


def _leave_state(log_dir, state: PartitionState, folder=None) -> None:
    lock = _lock(log_dir, folder)
    try:
        with lock:
            lock.write_state(state)
    finally:
        lock.close()


def _segments_of_five(log_dir, n=20, cfg=None):
    """A closed log of ``n`` records, 5 per segment (bases 0, 5, 10, ...), closed as a crash leaves it."""
    cfg = cfg or config(segment_bytes=5 * len(batch(0, "v000", timestamp=T0)), index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(n):
        log.append_records(recs(f"v{i:03d}", timestamp=T0 + i))
    assert [s.base_offset for s in log.segments] == list(range(0, n, 5)) or n % 5 == 0
    log.close(clean=False)
    return cfg


def test_first_load_writes_the_partition_state_at_the_next_generation(log_dir):
    """A full load publishes what it found: generation + 1, the log start offset, the recovery point, the last
    flush (the one the previous process recorded) and the dir's crash epoch it was loaded in; the Log it returns
    starts from the same values."""
    cfg = _segments_of_five(log_dir, 10)
    before = _state(log_dir)
    log, res = open_log(log_dir, cfg, now_ms=T0 + 7, dir_epoch=4242, recovery_point_checkpoint=5)
    state = _state(log_dir)
    assert (state.generation, state.log_start_offset, state.recovery_point, state.last_flush_ms,
            state.loaded_epoch, state.status) == (before.generation + 1, 0, 5, before.last_flush_ms, 4242, LIVE)
    assert before.last_flush_ms not in (UNKNOWN, T0 + 7)
    assert (log.view.generation, log.log_start_offset, log.recovery_point, log.log_end_offset,
            log.last_flush_ms) == (state.generation, 0, 5, 10, before.last_flush_ms)
    assert (log.topic, log.partition, log.dir) == (TOPIC, PARTITION, partition_dir(log_dir))
    assert log.clock.milliseconds() == T0 + 7
    assert read_all(log) == [(i, f"v{i:03d}".encode()) for i in range(10)]
    log.close(clean=True)


def test_a_load_without_a_crash_epoch_keeps_the_recorded_one(log_dir):
    """``dir_epoch=None`` (a caller that does not track crash epochs) leaves the loaded epoch as recorded."""
    cfg = _segments_of_five(log_dir, 5)
    state = _state(log_dir)
    state.loaded_epoch = 77
    _leave_state(log_dir, state)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    assert _state(log_dir).loaded_epoch == 77
    log.close(clean=True)


def test_values_kept_by_other_processes_override_older_checkpoints(log_dir):
    """The lock file's log start offset is at least as fresh as the checkpoint's (the larger wins); of the two
    recovery points the lower is trusted (a truncation since the checkpoint lowered it), so recovery starts from
    the segment holding it (Kafka recoverLog: from the recovery point on). Its last flush time carries over:
    flush.ms counts from the last flush by any process."""
    cfg = _segments_of_five(log_dir, 20)
    _leave_state(log_dir, PartitionState(generation=1, log_start_offset=7, recovery_point=12,
                                         last_flush_ms=T0 - 500, loaded_epoch=UNKNOWN))
    pdir = partition_dir(log_dir)
    # a corrupt batch at offset 11, in the segment holding the state's recovery point 12 (far below the
    # checkpoint's 20): found only if recovery starts where the state says
    size = len(batch(0, "v000", timestamp=T0))
    with open(segment_path(pdir, 10), "r+b") as f:
        f.seek(size + 65)
        b = f.read(1)
        f.seek(size + 65)
        f.write(bytes([b[0] ^ 0x55]))
    log, res = open_log(log_dir, cfg, now_ms=T0, log_start_offset_checkpoint=3, recovery_point_checkpoint=20)
    assert log.log_start_offset == 7
    assert log.log_end_offset == 11
    assert log.recovery_point == 11
    assert log.last_flush_ms == T0 - 500
    assert res.bytes_truncated == 4 * size  # the rest of segment 10; segment 15 is deleted
    state = _state(log_dir)
    assert (state.generation, state.log_start_offset, state.recovery_point, state.last_flush_ms) == (2, 7, 11,
                                                                                                   T0 - 500)
    log.close(clean=True)


def test_state_of_a_partition_never_loaded_is_not_read(log_dir):
    """Generation 0 means no process loaded the partition: whatever else its lock file holds is not trusted,
    the checkpoints are."""
    cfg = _segments_of_five(log_dir, 20)
    _leave_state(log_dir, PartitionState(generation=0, log_start_offset=7, recovery_point=2, last_flush_ms=5))
    log, _ = open_log(log_dir, cfg, now_ms=T0, log_start_offset_checkpoint=3, recovery_point_checkpoint=20,
                      had_clean_shutdown=True)
    assert (log.log_start_offset, log.recovery_point, log.last_flush_ms) == (3, 20, 5)
    log.close(clean=True)


def test_unknown_values_in_the_state_fall_back_to_the_checkpoints(log_dir):
    """A lock file from before a value was kept (-1: unknown) leaves the checkpoint's value in place, and the
    flush clock starts at the load."""
    cfg = _segments_of_five(log_dir, 20)
    _leave_state(log_dir, PartitionState(generation=3))
    log, _ = open_log(log_dir, cfg, now_ms=T0 + 9, log_start_offset_checkpoint=3, recovery_point_checkpoint=20,
                      had_clean_shutdown=True)
    assert (log.log_start_offset, log.recovery_point, log.last_flush_ms) == (3, 20, T0 + 9)
    assert _state(log_dir).last_flush_ms == T0 + 9
    log.close(clean=True)


@pytest.mark.parametrize("state, starts_at", [
    (PartitionState(generation=0), 0),
    (PartitionState(generation=1, log_start_offset=0), 0),
    # delete-records by another process since the checkpoint: the lock file's value, the lower of the two
    (PartitionState(generation=2, log_start_offset=7), 7),
    # a fallback that is itself past the log end is no better
    (PartitionState(generation=2, log_start_offset=11), 0),
], ids=["never-loaded", "state-at-zero", "state-kept-by-other-processes", "state-past-the-end-too"])
def test_log_start_checkpoint_past_the_log_end_is_ignored(log_dir, state, starts_at):
    """A log start offset checkpoint past the log end (no operation puts it there; nothing was lost) is
    reported and ignored: the log starts at the lock file's log start when that is not past the log end either,
    else at its first segment's base (Kafka: max(checkpoint, first base))."""
    cfg = _segments_of_five(log_dir, 10)
    _leave_state(log_dir, state)
    log, res = open_log(log_dir, cfg, now_ms=T0, log_start_offset_checkpoint=50, recovery_point_checkpoint=10,
                        had_clean_shutdown=True)
    assert log.log_start_offset == starts_at
    assert res.messages == ["the log start offset checkpoint 50 is past the log end 10, which no operation can do, "
                            f"and recovery lost nothing: ignored (the log starts at {starts_at})"]
    assert read_all(log)[0] == (starts_at, b"v%03d" % starts_at)
    log.close(clean=True)


def test_fallback_exactly_at_the_log_end_is_used(log_dir):
    """At the boundary: a fallback equal to the log end is a valid (empty) log start."""
    cfg = _segments_of_five(log_dir, 10)
    _leave_state(log_dir, PartitionState(generation=2, log_start_offset=10))
    log, res = open_log(log_dir, cfg, now_ms=T0, log_start_offset_checkpoint=50, recovery_point_checkpoint=10,
                        had_clean_shutdown=True)
    assert log.log_start_offset == 10
    assert read_all(log) == []
    log.close(clean=True)


def test_load_without_a_fallback_starts_at_the_first_base(log_dir):
    """``load`` called without a fallback: an ignored checkpoint leaves the log start at the first base."""
    from storage_engine.log.loader import load
    _segments_of_five(log_dir, 10)
    cfg = config(segment_bytes=5 * len(batch(0, "v000", timestamp=T0)), index_interval_bytes=1)
    res = load(partition_dir(log_dir), cfg, recovery_point_checkpoint=10, log_start_offset_checkpoint=50,
               had_clean_shutdown=True, now_ms=T0)
    try:
        assert res.log_start_offset == 0
        assert res.next_offset == 10
        assert res.recovery_point == 10
    finally:
        for seg in res.segments:
            seg.close(trim=False)


def test_a_second_opener_of_a_loaded_partition_gets_a_view(log_dir):
    """A process joining a log dir in use (not exclusive) finds the partition loaded in this crash epoch and
    opens a view of it as the other process left it: nothing on disk changes (no temp file is removed, no
    generation is bumped) and its offsets are the shared state's."""
    cfg = _segments_of_five(log_dir, 7)
    owner, _ = open_log(log_dir, cfg, now_ms=T0, dir_epoch=9)
    owner.flush(6)
    owner.delete_records(2)
    before = _state(log_dir)
    assert before.generation == 1 or before.generation > 1
    pdir = partition_dir(log_dir)
    torn = os.path.join(pdir, layout.filename_prefix(3) + layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX)
    with open(torn, "wb") as f:
        f.write(b"\x00")
    joiner, res = open_log(log_dir, cfg, now_ms=T0 + 3, exclusive=False, create=False, dir_epoch=9)
    assert res is None
    assert os.path.exists(torn)
    after = _state(log_dir)
    assert after.generation == before.generation
    assert (joiner.log_dir, joiner.topic, joiner.partition, joiner.dir) == (str(log_dir), TOPIC, PARTITION, pdir)
    assert joiner.config is cfg
    assert joiner.lock.path == lock_path(str(log_dir), layout.partition_dir_name(TOPIC, PARTITION))
    assert (joiner.log_start_offset, joiner.recovery_point, joiner.log_end_offset) == (2, 6, 7)
    assert joiner.last_flush_ms == owner.last_flush_ms
    assert joiner.view.generation == after.generation
    assert joiner.clock.milliseconds() == T0 + 3
    assert read_all(joiner) == [(i, f"v{i:03d}".encode()) for i in range(2, 7)]
    joiner.append_records(recs("joined", timestamp=T0))
    assert read_all(joiner)[-1] == (7, b"joined")
    joiner.close(clean=False)
    owner.close(clean=True)


def test_a_joiner_without_a_crash_epoch_gets_a_view(log_dir):
    """dir_epoch=None: the caller does not track crash epochs; a loaded partition is viewed, not reloaded."""
    cfg = _segments_of_five(log_dir, 5)
    owner, _ = open_log(log_dir, cfg, now_ms=T0)
    generation = _state(log_dir).generation
    joiner, res = open_log(log_dir, cfg, now_ms=T0, exclusive=False, create=False)
    assert res is None and _state(log_dir).generation == generation
    assert joiner.log_end_offset == 5
    joiner.close(clean=False)
    owner.close(clean=True)


def test_a_view_opens_the_segments_at_its_own_time(log_dir):
    """A process that joins a loaded partition opens its segments itself: each is created when that process opens
    it (Kafka's LogSegment ``created``, from which ``timeWaitedForRoll`` counts), not when the owner did."""
    cfg = _segments_of_five(log_dir, 5)
    owner, _ = open_log(log_dir, cfg, now_ms=T0)
    joiner, res = open_log(log_dir, cfg, now_ms=T0 + 42, exclusive=False, create=False)
    assert res is None
    assert {s.created_ms for s in joiner.segments} == {T0 + 42} and len(joiner.segments) == len(owner.segments)
    joiner.close(clean=False)
    owner.close(clean=True)


def test_a_partition_not_loaded_since_the_last_unclean_shutdown_is_loaded_by_a_joiner(log_dir):
    """A joiner whose dir crash epoch differs from the partition's loaded epoch knows no process has it open
    (whoever opened it would have loaded it in this epoch): it loads and recovers it fully."""
    cfg = _segments_of_five(log_dir, 5)
    owner, _ = open_log(log_dir, cfg, now_ms=T0, dir_epoch=1)
    owner.close(clean=False)
    generation = _state(log_dir).generation
    log, res = open_log(log_dir, cfg, now_ms=T0, exclusive=False, create=False, dir_epoch=2)
    assert res is not None
    state = _state(log_dir)
    assert (state.generation, state.loaded_epoch) == (generation + 1, 2)
    log.close(clean=True)


def test_a_partition_never_loaded_is_loaded_by_a_joiner(log_dir):
    """Generation 0 (no process ever loaded it, e.g. a folder copied in): even a non-exclusive opener loads it."""
    cfg = _segments_of_five(log_dir, 5)
    PartitionLock.unlink_path(lock_path(str(log_dir), layout.partition_dir_name(TOPIC, PARTITION)))
    log, res = open_log(log_dir, cfg, now_ms=T0, exclusive=False, create=False)
    assert res is not None
    assert _state(log_dir).generation == 1
    log.close(clean=True)


def test_a_view_over_a_state_without_flush_time_starts_the_flush_clock_now(log_dir):
    """A lock file written before the last flush time was kept (24 bytes: generation, log start, recovery
    point) gives a view nothing to adopt: its flush.ms clock starts when it opens."""
    cfg = _segments_of_five(log_dir, 5)
    owner, _ = open_log(log_dir, cfg, now_ms=T0)
    path = lock_path(str(log_dir), layout.partition_dir_name(TOPIC, PARTITION))
    with open(path, "r+b") as f:
        f.write(struct.pack(">qqq", 5, 0, 5))
        f.truncate(24)
    joiner, res = open_log(log_dir, cfg, now_ms=T0 + 11, exclusive=False, create=False)
    assert res is None
    assert joiner.last_flush_ms == T0 + 11
    assert joiner.flush_due(T0 + 11) is False
    joiner.close(clean=False)
    owner.close(clean=False)


def test_open_defaults_to_an_unclean_load_from_offset_zero(log_dir):
    """Without the clean-shutdown marker and checkpoints (the defaults), recovery starts at offset 0 (Kafka
    recoverLog from the recovery point): a corrupt batch in the first segment cuts the log there and deletes
    every later segment; the recovery point stays at 0 (it advances on flush)."""
    cfg = _segments_of_five(log_dir, 10)
    pdir = partition_dir(log_dir)
    size = len(batch(0, "v000", timestamp=T0))
    with open(segment_path(pdir, 0), "r+b") as f:
        f.seek(3 * size + 65)
        b = f.read(1)
        f.seek(3 * size + 65)
        f.write(bytes([b[0] ^ 0x55]))
    log, res = load_log(str(log_dir), TOPIC, PARTITION, cfg, clock=ManualClock(T0), exclusive=True)
    assert log.log_end_offset == 3
    assert log.recovery_point == 0
    assert [s.base_offset for s in log.segments] == [0]
    assert not os.path.exists(segment_path(pdir, 5))
    log.close(clean=True)


def test_open_of_a_missing_partition_without_create_names_it(log_dir):
    """No folder and no ``create``: PartitionNotFoundError naming the folder and the log dir."""
    os.makedirs(str(log_dir), exist_ok=True)
    with pytest.raises(PartitionNotFoundError) as e:
        load_log(str(log_dir), TOPIC, PARTITION, LogConfig(), clock=ManualClock(T0), exclusive=True)
    assert str(e.value) == f"partition {TOPIC}-{PARTITION} does not exist in {log_dir}"
    assert not os.path.exists(partition_dir(log_dir))


@pytest.mark.parametrize("create", [False, True])
def test_a_partition_whose_lock_says_deleted_is_not_opened(log_dir, create):
    """A lock retired as deleted while the folder is still there (a delete a crashed process left half done,
    which the caller completes): PartitionDeletedError, even with ``create``."""
    cfg = _segments_of_five(log_dir, 5)
    lock = _lock(log_dir)
    with lock:
        lock.retire(DELETED)
    lock.close()
    with pytest.raises(PartitionDeletedError) as e:
        open_log(log_dir, cfg, now_ms=T0, create=create)
    assert str(e.value) == f"partition {TOPIC}-{PARTITION} in {log_dir} was deleted"
    assert os.path.isdir(partition_dir(log_dir))


def test_a_partition_whose_lock_says_moved_is_not_opened(log_dir):
    cfg = _segments_of_five(log_dir, 5)
    lock = _lock(log_dir)
    with lock:
        lock.retire(MOVED)
    lock.close()
    with pytest.raises(PartitionMovedError) as e:
        open_log(log_dir, cfg, now_ms=T0, create=True)
    assert str(e.value) == f"partition {TOPIC}-{PARTITION} moved away from {log_dir}"


def test_a_retired_lock_of_a_partition_that_is_gone_is_replaced_on_create(log_dir):
    """The folder is gone and the lock says deleted: a partition created under the same name gets a fresh lock
    file and starts from nothing."""
    cfg = _segments_of_five(log_dir, 5)
    lock = _lock(log_dir)
    with lock:
        lock.retire(DELETED)
    lock.close()
    shutil.rmtree(partition_dir(log_dir))
    log, res = open_log(log_dir, cfg, now_ms=T0, create=True)
    assert log.log_end_offset == 0 and read_all(log) == []
    state = _state(log_dir)
    assert (state.generation, state.status) == (1, LIVE)
    log.close(clean=True)


def test_a_live_lock_of_a_folder_that_is_gone_keeps_its_generation(log_dir):
    """A folder removed by hand under a live lock file: the new partition starts from nothing, at a generation
    nobody has seen (the old one + 1), without the old log start or recovery point."""
    cfg = _segments_of_five(log_dir, 5)
    _leave_state(log_dir, PartitionState(generation=6, log_start_offset=3, recovery_point=4, last_flush_ms=1))
    shutil.rmtree(partition_dir(log_dir))
    log, _ = open_log(log_dir, cfg, now_ms=T0, create=True)
    state = _state(log_dir)
    assert (state.generation, state.log_start_offset, state.recovery_point, state.last_flush_ms) == (7, 0, 0, T0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    log.close(clean=True)


def test_a_partition_folder_that_cannot_be_created_names_the_path(log_dir):
    """A file where the partition folder would go: StorageIOError naming the folder and the OS error."""
    os.makedirs(str(log_dir), exist_ok=True)
    path = partition_dir(log_dir)
    with open(path, "wb") as f:
        f.write(b"x")
    with pytest.raises(StorageIOError) as e:
        open_log(log_dir, now_ms=T0, create=True)
    assert isinstance(e.value.__cause__, FileExistsError)
    assert e.value.path == path
    assert str(e.value) == f"cannot create partition folder: {path}: {e.value.__cause__}"


def test_a_future_folder_is_opened_under_its_own_name(log_dir):
    """``folder``: a partition's copy being moved lives in its ``-future`` folder; the Log works there, with
    its own lock, for a load and for a view."""
    future = layout.future_dir_name(TOPIC, PARTITION, "0" * 32)
    log, _ = open_log(log_dir, now_ms=T0, create=True, folder=future)
    assert log.dir == os.path.join(str(log_dir), future)
    log.append_records(recs("f", timestamp=T0))
    assert os.path.exists(segment_path(os.path.join(str(log_dir), future), 0))
    assert not os.path.exists(partition_dir(log_dir))
    view_, res = open_log(log_dir, now_ms=T0, create=False, folder=future, exclusive=False)
    assert res is None
    assert view_.dir == log.dir
    assert read_all(view_) == [(0, b"f")]
    view_.close(clean=False)
    log.close(clean=True)


# ------------------------------------------------------------------ the active tail after a clean shutdown
#
# Kafka trusts a clean shutdown and recovers nothing. The marker vouches for nothing written after it, so the
# engine validates the active segment from its last offset-index entry: a torn or garbage tail, or an index
# naming data that is not there, gets the segment recovered (and the recovery point moved back to its base);
# a damaged batch followed by valid ones to the end is kept and reported.

SIZE = len(batch(0, "v000", timestamp=T0))


def _clean_log(log_dir, n, *, per_segment=5, index_interval_bytes=1):
    """A log of ``n`` one-record batches (values v000, v001, ...), ``per_segment`` batches a segment, closed
    cleanly (trimmed, final time-index entry written). Returns (cfg, active segment path)."""
    cfg = config(segment_bytes=per_segment * SIZE, index_interval_bytes=index_interval_bytes)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(n):
        log.append_records(recs(f"v{i:03d}", timestamp=T0 + i))
    active = log.active_segment.path
    log.close(clean=True)
    return cfg, active


def _clean_reopen(log_dir, cfg, n):
    return open_log(log_dir, cfg, now_ms=T0, create=False, had_clean_shutdown=True, recovery_point_checkpoint=n)


def _flip(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x55]))


def _strict_error(path, position) -> str:
    """What the strict reader says about the entry at ``position`` (the text the load reports)."""
    from storage_engine.errors import CorruptRecordError
    from storage_engine.segment.file_records import FileRecords
    records = FileRecords(path, writable=False)
    try:
        with pytest.raises(CorruptRecordError) as e:
            for b in records.read_batches(position, strict=True):
                b.ensure_valid()
    finally:
        records.close()
    return str(e.value)


def test_intact_log_after_a_clean_shutdown_is_not_recovered(log_dir):
    cfg, _ = _clean_log(log_dir, 12)
    log, res = _clean_reopen(log_dir, cfg, 12)
    assert (res.messages, res.recovered_segments, res.bytes_truncated) == ([], 0, 0)
    assert log.recovery_point == 12
    log.close(clean=True)


def test_clean_shutdown_trusts_data_before_the_last_index_entry(log_dir):
    """Kafka recovers nothing after a clean shutdown; the engine re-validates only the tail after the last
    offset-index entry, so a damaged batch below it is neither reported nor truncated at load."""
    cfg, active = _clean_log(log_dir, 13)
    _flip(active, SIZE + 65)  # offset 11, inside the CRC-covered payload; the index names offset 12
    size = os.path.getsize(active)
    log, res = _clean_reopen(log_dir, cfg, 13)
    assert (res.messages, res.recovered_segments) == ([], 0)
    assert os.path.getsize(active) == size and log.log_end_offset == 13
    log.close(clean=False)


def test_index_naming_a_position_at_the_end_of_the_log_gets_the_segment_recovered(log_dir):
    """The last offset-index entry must name a position inside the .log: at exactly its size (the last batch
    lost after the index was written) the segment is recovered, and the recovery point goes back to its base
    (the marker's claim is void for it; Kafka's recovery point is min(checkpoint, log end))."""
    cfg, active = _clean_log(log_dir, 15)
    with open(active, "r+b") as f:
        f.truncate(4 * SIZE)
    log, res = _clean_reopen(log_dir, cfg, 15)
    assert res.messages == [f"{layout.filename_prefix(10)}.log: recovered despite the clean-shutdown marker: its "
                            f"offset index names position {4 * SIZE}, past the {4 * SIZE} bytes of the .log; "
                            "0 bytes truncated"]
    assert (res.recovered_segments, res.bytes_truncated) == (1, 0)
    assert log.log_end_offset == 14
    assert log.recovery_point == 10
    assert log.active_segment.offset_index.last_offset == 13
    log.append_records(recs("next", timestamp=T0))
    assert read_all(log)[-2:] == [(13, b"v013"), (14, b"next")]
    log.close(clean=True)


def test_index_entry_past_an_empty_log_gets_the_segment_recovered(log_dir):
    """An offset index whose entry names position 1 of an empty .log: past the data, recovered."""
    cfg, active = _clean_log(log_dir, 1)
    with open(active, "r+b") as f:
        f.truncate(0)
    with open(active[:-len(layout.LOG_SUFFIX)] + layout.INDEX_SUFFIX, "wb") as f:
        f.write(struct.pack(">ii", 0, 1))
    log, res = _clean_reopen(log_dir, cfg, 1)
    assert res.messages == [f"{layout.filename_prefix(0)}.log: recovered despite the clean-shutdown marker: its "
                            "offset index names position 1, past the 0 bytes of the .log; 0 bytes truncated"]
    assert log.log_end_offset == 0 and log.active_segment.offset_index.entries == 0
    log.close(clean=True)


def test_time_index_naming_the_log_end_gets_the_segment_recovered(log_dir):
    """The time index's last entry must name an offset below the log end: the entry Kafka writes at close for
    the largest timestamp, once its batch is gone, names exactly the log end."""
    cfg, active = _clean_log(log_dir, 5, index_interval_bytes=4096)
    with open(active, "r+b") as f:
        f.truncate(4 * SIZE)
    log, res = _clean_reopen(log_dir, cfg, 5)
    assert res.messages == [f"{layout.filename_prefix(0)}.log: recovered despite the clean-shutdown marker: its "
                            "time index names offset 4, past the log end 4; 0 bytes truncated"]
    assert log.log_end_offset == 4
    assert log.active_segment.time_index.last_entry[1] == 3
    log.close(clean=True)


def test_time_index_entry_of_an_emptied_log_gets_the_segment_recovered(log_dir):
    """With no offset-index entry the log end to compare with is the segment's base: a time-index entry at
    the base offset of an empty .log names data that is not there."""
    cfg, active = _clean_log(log_dir, 1, index_interval_bytes=4096)
    with open(active, "r+b") as f:
        f.truncate(0)
    log, res = _clean_reopen(log_dir, cfg, 1)
    assert res.messages == [f"{layout.filename_prefix(0)}.log: recovered despite the clean-shutdown marker: its "
                            "time index names offset 0, past the log end 0; 0 bytes truncated"]
    assert log.log_end_offset == 0 and log.active_segment.time_index.entries == 0
    log.close(clean=True)


@pytest.mark.parametrize("cut", [SIZE // 2, LOG_OVERHEAD - 1], ids=["torn-batch", "torn-header"])
def test_torn_tail_after_a_clean_shutdown_is_truncated(log_dir, cut):
    """Bytes appended after the clean shutdown by a writer that died (half a batch, or fewer bytes than an
    entry header): the segment is recovered, the torn bytes cut, the records before them kept."""
    cfg, active = _clean_log(log_dir, 12)
    with open(active, "ab") as f:
        f.write(batch(12, "v012", timestamp=T0)[:cut])
    problem = _strict_error(active, 2 * SIZE)
    log, res = _clean_reopen(log_dir, cfg, 12)
    assert res.messages == [f"{layout.filename_prefix(10)}.log: recovered despite the clean-shutdown marker: "
                            f"{problem}; {cut} bytes truncated"]
    assert (res.recovered_segments, res.bytes_truncated) == (1, cut)
    assert os.path.getsize(active) == 2 * SIZE
    assert (log.log_end_offset, log.recovery_point) == (12, 10)
    log.close(clean=True)


@pytest.mark.parametrize("damaged", [0, 1], ids=["first-batch", "middle-batch"])
def test_damaged_batch_followed_by_valid_ones_is_kept_and_reported(log_dir, damaged):
    """A batch whose CRC fails, with valid batches after it to the end of the .log: flushed data, not a torn
    write; truncating would destroy the records after it, so it is kept (reads of it fail) and reported."""
    cfg, active = _clean_log(log_dir, 3, index_interval_bytes=4096)
    _flip(active, damaged * SIZE + 65)
    problem = _strict_error(active, damaged * SIZE)
    log, res = _clean_reopen(log_dir, cfg, 3)
    assert res.messages == [f"{layout.filename_prefix(0)}.log: kept a damaged batch followed by valid ones (reads "
                            f"of it fail, verify reports it): {problem}"]
    assert (res.recovered_segments, res.bytes_truncated) == (0, 0)
    assert os.path.getsize(active) == 3 * SIZE
    assert (log.log_end_offset, log.recovery_point) == (3, 3)
    log.close(clean=False)


def test_damaged_last_batch_is_a_garbage_tail(log_dir):
    """A damaged batch that ends exactly at the end of the .log has nothing valid after it: recovered (cut)."""
    cfg, active = _clean_log(log_dir, 3, index_interval_bytes=4096)
    _flip(active, 2 * SIZE + 65)
    problem = _strict_error(active, 2 * SIZE)
    log, res = _clean_reopen(log_dir, cfg, 3)
    assert res.messages == [f"{layout.filename_prefix(0)}.log: recovered despite the clean-shutdown marker: "
                            f"{problem}; {SIZE} bytes truncated"]
    assert os.path.getsize(active) == 2 * SIZE and log.log_end_offset == 2
    log.close(clean=True)


def test_two_damaged_batches_are_not_kept(log_dir):
    """Only one damaged batch is kept: a second one after it makes the tail garbage, recovered from the first."""
    cfg, active = _clean_log(log_dir, 4, index_interval_bytes=4096)
    _flip(active, 65)
    _flip(active, SIZE + 65)
    log, res = _clean_reopen(log_dir, cfg, 4)
    assert len(res.messages) == 1 and "recovered despite the clean-shutdown marker" in res.messages[0]
    assert res.messages[0].endswith(f"; {4 * SIZE} bytes truncated")
    assert log.log_end_offset == 0
    log.close(clean=True)


def test_damaged_entry_of_the_smallest_legal_size_is_skipped_over(log_dir):
    """An entry whose size field is the smallest legal one (14, a v0 record) can be stepped over: kept and
    reported when the rest parses; one field below that is garbage and recovered."""
    cfg, active = _clean_log(log_dir, 2, index_interval_bytes=4096)
    with open(active, "rb") as f:
        data = f.read()
    # a v0 record with no key and no value (exactly 14 bytes after the size field) whose CRC is wrong
    entry = struct.pack(">qiIbbii", 1, MIN_ENTRY_SIZE_FIELD, 0xDEADBEEF, 0, 0, -1, -1)
    assert len(entry) == LOG_OVERHEAD + MIN_ENTRY_SIZE_FIELD
    with open(active, "wb") as f:
        f.write(data[:SIZE] + entry + data[SIZE:])
    problem = _strict_error(active, SIZE)
    log, res = _clean_reopen(log_dir, cfg, 2)
    assert res.messages == [f"{layout.filename_prefix(0)}.log: kept a damaged batch followed by valid ones (reads "
                            f"of it fail, verify reports it): {problem}"]
    assert log.log_end_offset == 2
    log.close(clean=False)


# ------------------------------------------------------------------ recovery after an unclean shutdown

def _crashed(log_dir, n=20, per_segment=5):
    """``n`` one-record batches, ``per_segment`` a segment, closed as a crash leaves it. Returns (cfg, dir)."""
    cfg = config(segment_bytes=per_segment * SIZE, index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(n):
        log.append_records(recs(f"v{i:03d}", timestamp=T0 + i))
    log.close(clean=False)
    return cfg, partition_dir(log_dir)


def _unclean_reopen(log_dir, cfg, rp, **kw):
    return open_log(log_dir, cfg, now_ms=T0, create=False, recovery_point_checkpoint=rp, **kw)


def test_recovery_starts_at_the_segment_whose_base_is_the_recovery_point(log_dir):
    """Kafka recoverLog recovers from the segment holding the recovery point (floor): a recovery point equal to
    a segment's base starts there, and the segment below it is trusted (its damage goes unnoticed)."""
    cfg, d = _crashed(log_dir)
    _flip(segment_path(d, 5), SIZE + 65)
    log, res = _unclean_reopen(log_dir, cfg, 10)
    assert (res.recovered_segments, res.bytes_truncated, res.messages) == (2, 0, [])
    assert log.log_end_offset == 20 and log.recovery_point == 10
    log.close(clean=False)


def test_recovery_point_below_every_segment_recovers_from_the_first(log_dir):
    """After retention removed the first segments, a recovery point below every base (an older checkpoint)
    recovers from the first segment there is."""
    cfg, d = _crashed(log_dir)
    for suffix in layout.INDEX_SUFFIXES + (layout.LOG_SUFFIX,):
        if os.path.exists(segment_path(d, 0, suffix)):
            os.remove(segment_path(d, 0, suffix))
    _flip(segment_path(d, 5), SIZE + 65)
    log, res = _unclean_reopen(log_dir, cfg, 2, log_start_offset_checkpoint=5)
    assert [s.base_offset for s in log.segments] == [5]
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (5, 6, 2)
    assert res.bytes_truncated == 4 * SIZE
    log.close(clean=False)


def test_one_torn_byte_in_an_unflushed_segment_deletes_every_later_one(log_dir):
    """Kafka recoverLog: if recovery truncated any bytes of a segment (one is enough), every later unflushed
    segment is deleted and recovery stops; each step is reported."""
    cfg, d = _crashed(log_dir, 15)
    with open(segment_path(d, 5), "ab") as f:
        f.write(b"\x00")
    problem = _strict_error(segment_path(d, 5), 5 * SIZE)
    log, res = _unclean_reopen(log_dir, cfg, 0)
    assert res.messages == [
        f"{layout.filename_prefix(5)}.log: truncated 1 bytes at position {5 * SIZE}: {problem}",
        f"deleted {layout.filename_prefix(10)}.log after the corruption"]
    assert (res.recovered_segments, res.bytes_truncated) == (2, 1)
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert log.log_end_offset == 10
    assert not os.path.exists(segment_path(d, 10))
    log.close(clean=False)


def test_offsets_going_backwards_empty_the_segment_and_say_so(log_dir):
    """The base offset field is outside the CRC: a batch whose offset goes backwards cannot be indexed
    (InvalidOffsetException); Kafka empties the segment (truncates it to its base) and deletes later ones."""
    cfg, d = _crashed(log_dir, 15)
    with open(segment_path(d, 5), "r+b") as f:
        f.seek(3 * SIZE)
        f.write((6).to_bytes(8, "big"))
    log, res = _unclean_reopen(log_dir, cfg, 5)
    assert len(res.messages) == 2
    head = f"{layout.filename_prefix(5)}.log: truncated {5 * SIZE} bytes at position 0: invalid offset, segment " \
           f"emptied: "
    assert res.messages[0].startswith(head) and len(res.messages[0]) > len(head)
    assert res.messages[1] == f"deleted {layout.filename_prefix(10)}.log after the corruption"
    assert res.bytes_truncated == 5 * SIZE
    assert log.log_end_offset == 5
    log.close(clean=False)


@pytest.mark.parametrize("clean,rp", [(False, 15), (False, 0), (True, 20)],
                         ids=["unclean-from-15", "unclean-from-0", "clean"])
def test_sealed_segments_are_released_after_a_load(log_dir, clean, rp):
    """Only the active segment keeps its files open after a load (file descriptors: a log may have many
    segments); sealed ones reopen on use. Also for segments whose indexes the load rebuilt."""
    cfg, d = _crashed(log_dir, 20)
    os.remove(segment_path(d, 5, layout.INDEX_SUFFIX))
    if clean:
        with open(segment_path(d, 10, layout.INDEX_SUFFIX), "r+b") as f:
            f.write(b"\xff" * 8)   # fails the sanity check: rebuilt
    # unclean from 15: segment 5 is opened only to rebuild its missing index
    log, res = _unclean_reopen(log_dir, cfg, rp, had_clean_shutdown=clean)
    assert [s.is_open for s in log.segments] == [False, False, False, True]
    if clean:
        assert res.messages[0] == f"rebuilt missing index of {layout.filename_prefix(5)}.log"
        assert len(res.messages) == 2 and res.messages[1].startswith("rebuilt corrupt index: ")
        assert len(res.messages[1]) > len("rebuilt corrupt index: ")
        assert res.recovered_segments == 2
    assert read_all(log) == [(i, f"v{i:03d}".encode()) for i in range(20)]
    log.close(clean=False)


def test_load_totals_add_up_every_recovered_segment(log_dir):
    """A load's bytes truncated and segments recovered are the sums over every segment it recovered: two
    segments rebuilt for a missing .index (each with a torn last byte) and an unflushed one."""
    cfg, d = _crashed(log_dir, 15)
    for base in (0, 5):
        os.remove(segment_path(d, base, layout.INDEX_SUFFIX))
        with open(segment_path(d, base), "ab") as f:
            f.write(b"\x00\x00")
    log, res = _unclean_reopen(log_dir, cfg, 10)
    assert res.messages[:2] == [f"rebuilt missing index of {layout.filename_prefix(0)}.log",
                                f"rebuilt missing index of {layout.filename_prefix(5)}.log"]
    assert (res.recovered_segments, res.bytes_truncated) == (3, 4)
    log.close(clean=False)


def test_clean_load_totals_add_the_active_tail_to_rebuilt_indexes(log_dir):
    """After a clean shutdown: a segment rebuilt for its missing .index (2 torn bytes) and the active tail
    recovered (3 torn bytes) add up."""
    cfg, d = _crashed(log_dir, 10)
    os.remove(segment_path(d, 0, layout.INDEX_SUFFIX))
    with open(segment_path(d, 0), "ab") as f:
        f.write(b"\x00\x00")
    with open(segment_path(d, 5), "ab") as f:
        f.write(b"\x00\x00\x00")
    log, res = _unclean_reopen(log_dir, cfg, 10, had_clean_shutdown=True)
    assert (res.recovered_segments, res.bytes_truncated) == (2, 5)
    assert log.recovery_point == 5
    log.close(clean=False)


def test_log_start_checkpoint_at_the_log_end_is_kept(log_dir):
    """A log start offset equal to the log end is legal (delete-records up to the high watermark): the log
    is kept, empty from there, nothing reported."""
    cfg, _ = _crashed(log_dir, 10)
    log, res = _unclean_reopen(log_dir, cfg, 10, log_start_offset_checkpoint=10, had_clean_shutdown=True)
    assert (log.log_start_offset, log.log_end_offset, res.messages) == (10, 10, [])
    assert [s.base_offset for s in log.segments] == [0, 5]
    log.close(clean=False)


def test_log_cut_below_the_log_start_restarts_there_without_producer_state(log_dir):
    """Kafka recoverLog: when recovery leaves the log end below the log start checkpoint, every segment is
    deleted and the producer state reset at the log start (the records between were lost, the ones below were
    already deleted): no producer is remembered, and the log restarts there, empty."""
    cfg = config(segment_bytes=5 * SIZE, index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(10):
        if i == 8:   # a clean close at 8 leaves a producer snapshot at what becomes the log start
            log.close(clean=True)
            log, _ = open_log(log_dir, cfg, now_ms=T0, had_clean_shutdown=True, recovery_point_checkpoint=8)
        log.append_records(recs(f"p{i}", timestamp=T0), producer_id=7, producer_epoch=0, base_sequence=i)
    log.delete_records(8)
    log.close(clean=False)
    d = partition_dir(log_dir)
    assert 8 in _snapshots(d)
    with open(segment_path(d, 5), "r+b") as f:
        f.write(b"garbage!" * 4)
    log, res = _unclean_reopen(log_dir, cfg, 0, log_start_offset_checkpoint=8)
    assert res.messages[-1] == ("log end 5 is below the log start offset 8 after recovery cut the log: restarted "
                                "the log there")
    assert [s.base_offset for s in log.segments] == [8]
    assert (log.log_start_offset, log.log_end_offset) == (8, 8)
    assert log.producer_state.producers == {}
    log.close(clean=True)


def test_a_file_that_cannot_be_deleted_at_load_is_named(log_dir):
    """A half-written producer snapshot that cannot be removed (here: a directory of that name) fails the load
    with StorageIOError naming it."""
    cfg, d = _crashed(log_dir, 5)
    path = os.path.join(d, layout.filename_prefix(3) + layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX)
    os.makedirs(path)
    with pytest.raises(StorageIOError) as e:
        _unclean_reopen(log_dir, cfg, 5)
    assert isinstance(e.value.__cause__, OSError)
    assert e.value.path == path
    assert str(e.value) == f"cannot delete file during log load: {path}: {e.value.__cause__}"


def test_deleted_files_after_a_half_written_snapshot_are_still_purged(log_dir):
    """Every name is looked at: a ``.deleted`` file listed after a ``.snapshot.tmp`` is still removed once its
    file.delete.delay.ms has passed (Kafka deletes every *.deleted at load); a folder with such a name is not a
    file and stays."""
    cfg, d = _crashed(log_dir, 5)
    tmp = os.path.join(d, layout.filename_prefix(1) + layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(b"\x00")
    old = os.path.join(d, layout.filename_prefix(7) + layout.LOG_SUFFIX + layout.DELETED_SUFFIX)
    with open(old, "wb") as f:
        f.write(b"old")
    folder = os.path.join(d, "extra" + layout.DELETED_SUFFIX)
    os.makedirs(folder)
    past = (T0 - cfg.file_delete_delay_ms) / 1000
    for p in (old, folder):
        os.utime(p, (past, past))
    log, res = _unclean_reopen(log_dir, cfg, 5)
    assert not os.path.exists(tmp) and not os.path.exists(old)
    assert os.path.isdir(folder)
    assert sorted(res.deleted_files) == sorted([os.path.basename(tmp), os.path.basename(old)])
    log.close(clean=False)


def test_live_segment_files_are_never_purged_as_deleted(log_dir):
    """Only ``.deleted`` names are purged by age: a live segment far older than file.delete.delay.ms stays."""
    cfg, d = _crashed(log_dir, 10)
    past = (T0 - 10 * cfg.file_delete_delay_ms) / 1000
    for name in os.listdir(d):
        os.utime(os.path.join(d, name), (past, past))
    log, res = _unclean_reopen(log_dir, cfg, 10)
    assert res.deleted_files == []
    assert read_all(log) == [(i, f"v{i:03d}".encode()) for i in range(10)]
    log.close(clean=False)


# ------------------------------------------------------------------ offset overflow (Kafka retryOnOffsetOverflow)

def _legacy_folder(log_dir, segments: dict[int, list[int]]) -> str:
    """Legacy (magic 1) segments as an old broker's compaction could leave them, with empty index files."""
    from .test_split import legacy_messages
    d = partition_dir(log_dir)
    os.makedirs(d, exist_ok=True)
    for base, offsets in segments.items():
        with open(segment_path(d, base), "wb") as f:
            f.write(legacy_messages(offsets, 1))
        for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
            open(segment_path(d, base, suffix), "wb").close()
    return d


def _load_folder(d, *, clean):
    from storage_engine.log.loader import load
    res = load(d, config(cleanup_policy="compact"), recovery_point_checkpoint=0, log_start_offset_checkpoint=0,
               had_clean_shutdown=clean, now_ms=T0)
    offsets = [b.last_offset for s in res.segments for b in s.batches(0)]
    bases = [s.base_offset for s in res.segments]
    for s in res.segments:
        s.close(trim=False)
    return res, bases, offsets


I31 = 2**31 - 1


@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_segment_whose_offsets_overflow_its_base_is_split_and_the_load_starts_over(log_dir, clean, where):
    """Kafka LogLoader.load retries on LogSegmentOffsetOverflowException: the segment (wherever it is, found by
    recovery, by the next base lying more than 2^31 - 1 above, or for the last one by its own end) is split into
    segments whose offsets fit, each starting at its first batch's offset, and the load runs again; the split
    is reported first."""
    first, second, third = [0, 1], [I31, I31 + 1], [2 * I31 + 10, 2 * I31 + 11]
    if where == "middle":
        segments = {0: first, I31: second + [3 * I31], 4 * I31: [4 * I31]}
        split_base, expected_bases = I31, [0, I31, 3 * I31, 4 * I31]
    else:
        segments = {0: first, 5: [5], I31: second + third}
        split_base, expected_bases = I31, [0, 5, I31, 2 * I31 + 10]
    d = _legacy_folder(log_dir, segments)
    if where == "middle":
        with open(segment_path(d, max(segments)), "ab") as f:
            f.write(b"\x00\x00")   # a torn tail in the active segment: reported after the split
    res, bases, offsets = _load_folder(d, clean=clean)
    assert bases == expected_bases
    assert offsets == sorted(o for offs in segments.values() for o in offs)
    new = [b for b in expected_bases if b >= split_base][:2]
    assert res.messages[0] == (f"split segment {layout.filename_prefix(split_base)}.log, whose offsets overflow "
                               f"its base, into 2 segments at base offsets {new}")
    if where == "middle":
        assert len(res.messages) == 2
        assert res.messages[1].startswith(f"{layout.filename_prefix(4 * I31)}.log: ")
        assert res.bytes_truncated == 2
    else:
        assert len(res.messages) == 1


def test_a_load_still_splitting_after_its_limit_stops_and_names_the_folder(log_dir, monkeypatch):
    """The load retries after each split (Kafka's retryOnOffsetOverflow); a folder still needing a split after the
    limit stops the load with an error naming it, and the split already made is kept: the records are all there."""
    from storage_engine.errors import StorageError
    from storage_engine.log import loader
    segments = {0: [0, 1], I31: [I31, I31 + 1, 2 * I31 + 10]}
    d = _legacy_folder(log_dir, segments)
    monkeypatch.setattr(loader, "MAX_SPLITS_PER_LOAD", 1)
    with pytest.raises(StorageError) as err:
        _load_folder(d, clean=True)
    assert str(err.value) == f"{d}: still splitting overflowed segments after 1 splits"
    monkeypatch.undo()
    _res, bases, offsets = _load_folder(d, clean=True)
    assert bases == [0, I31, 2 * I31 + 10] and offsets == [0, 1, I31, I31 + 1, 2 * I31 + 10]


@pytest.mark.parametrize("records", [3, 0])
def test_the_segments_a_load_opens_start_their_roll_clock_at_the_load_time(log_dir, records):
    """Kafka's LogSegment takes ``created = time.milliseconds`` when it is opened, and ``timeWaitedForRoll`` counts
    from it for a segment without timestamps: every segment a load opens, or creates in an empty folder, is
    created at the load's time."""
    from storage_engine.log.loader import load
    size = len(batch(0, "a", timestamp=T0))
    cfg = config(segment_bytes=2 * size)
    if records:
        log, _ = open_log(log_dir, cfg, now_ms=T0)
        for i in range(records):
            log.append_batches(batch(i, "a", timestamp=T0))
        log.close(clean=True)
    else:
        os.makedirs(partition_dir(log_dir))
    res = load(partition_dir(log_dir), cfg, recovery_point_checkpoint=records, log_start_offset_checkpoint=0,
               had_clean_shutdown=True, now_ms=T0 + 777)
    assert [(s.base_offset, s.created_ms) for s in res.segments] == [(b, T0 + 777) for b in ((0, 2) if records else (0,))]
    for seg in res.segments:
        seg.close(trim=False)


# ------------------------------------------------------------------ producer state and .txnindex in recovery
#
# Kafka's LogLoader.recoverSegment rebuilds a producer state as of the segment's base (rebuildProducerState:
# the newest snapshot at or below it, then a replay of the segments before it from the log start), recovers the
# segment with it (each ABORT marker completes its transaction into the .txnindex, from the transaction's first
# offset), then snapshots it.

def _txn_log(log_dir):
    """Producer 9 opens a transaction in segment 0 (offsets 0-1), other records roll the log to segment 3, and
    the transaction is aborted there. Returns (cfg, dir, aborted transactions as written, records)."""
    from storage_engine.record.records import SimpleRecord
    cfg = config(index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    log.append_records([SimpleRecord(None, b"t0"), SimpleRecord(None, b"t1")], producer_id=9, producer_epoch=0,
                       base_sequence=0, is_transactional=True)
    log.append_records(recs("p2", timestamp=T0))
    log.roll()
    log.append_records(recs("p3", timestamp=T0))
    log.append_end_txn(9, 0, commit=False)
    log.append_records(recs("p5", timestamp=T0))
    assert [s.base_offset for s in log.segments] == [0, 3]
    aborted = [t for s in log.segments for t in s.txn_index.all_aborted_txns()]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(9, 0, 4)]
    records = read_all(log)
    log.close(clean=True)
    d = partition_dir(log_dir)
    for name in os.listdir(d):
        if name.endswith(layout.SNAPSHOT_SUFFIX):
            os.remove(os.path.join(d, name))   # no snapshot: the state as of 3 comes from replaying segment 0
    return cfg, d, aborted, records


@pytest.mark.parametrize("how", ["unflushed", "torn-tail", "corrupt-index", "missing-index"])
def test_recovery_rebuilds_the_txn_index_from_the_producer_state_as_of_the_segment_base(log_dir, how):
    """Whatever gets segment 3 recovered (unflushed after a crash, a torn tail or a corrupt or missing index
    after a clean shutdown), its .txnindex names the aborted transaction from its first offset, 0, which only a
    replay of segment 0 into the producer state can know."""
    cfg, d, aborted, records = _txn_log(log_dir)
    active = segment_path(d, 3)
    clean = how != "unflushed"
    if how == "torn-tail":
        with open(active, "ab") as f:
            f.write(b"\x00\x00\x00")
    elif how == "corrupt-index":
        with open(segment_path(d, 3, layout.INDEX_SUFFIX), "r+b") as f:
            f.write(b"\xff" * 8)
    elif how == "missing-index":
        os.remove(segment_path(d, 3, layout.INDEX_SUFFIX))
    os.remove(segment_path(d, 3, layout.TXN_INDEX_SUFFIX))   # what recovery writes there is rebuilt from the log
    log, res = open_log(log_dir, cfg, now_ms=T0, create=False, had_clean_shutdown=clean,
                        recovery_point_checkpoint=3)
    assert res.recovered_segments == 1
    assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == aborted
    assert read_all(log) == records
    # the state as of the segment's end was snapshotted (Kafka: so later segments need not re-scan)
    assert os.path.exists(os.path.join(d, layout.filename_prefix(6) + layout.SNAPSHOT_SUFFIX))
    log.close(clean=True)


def test_recovery_replays_producer_state_from_the_log_start_offset(log_dir):
    """Kafka rebuildProducerState replays from max(segment base, map end, log start): batches below the log
    start offset are not replayed. The transaction that began at offset 0, below a log start of 2, has no first
    offset the recovered state knows, and Kafka's appendEndTxnMarker emits a completed transaction (a .txnindex
    entry) only for a transaction with a first offset: its abort is not indexed."""
    cfg, d, _, records = _txn_log(log_dir)
    os.remove(segment_path(d, 3, layout.TXN_INDEX_SUFFIX))
    log, res = open_log(log_dir, cfg, now_ms=T0, create=False, recovery_point_checkpoint=3,
                        log_start_offset_checkpoint=2)
    assert res.recovered_segments == 1 and log.log_start_offset == 2
    assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == []
    assert read_all(log) == records[2:]
    log.close(clean=True)


def test_a_corrupt_snapshot_at_the_recovered_segment_base_is_replaced(log_dir):
    """Kafka's loadFromSnapshot deletes a corrupt snapshot and falls back to an older one (or a replay from the
    log start); recovery then snapshots the state at the segment base again, so the file left there is valid."""
    from storage_engine.segment import producer_snapshot
    cfg = config(index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    log.append_records(recs("a", "b", timestamp=T0), producer_id=4, producer_epoch=0, base_sequence=0)
    log.roll()
    log.append_records(recs("c", timestamp=T0), producer_id=4, producer_epoch=0, base_sequence=2)
    log.close(clean=False)
    d = partition_dir(log_dir)
    snap = os.path.join(d, layout.filename_prefix(2) + layout.SNAPSHOT_SUFFIX)
    assert os.path.exists(snap)
    with open(snap, "r+b") as f:
        f.write(b"\xff\xff\xff\xff")
    log, res = open_log(log_dir, cfg, now_ms=T0, create=False, recovery_point_checkpoint=2)
    entries = producer_snapshot.read_snapshot(snap)
    assert [(e.producer_id, e.last_sequence) for e in entries] == [(4, 1)]
    # the producer's next batch continues its sequence
    assert log.append_records(recs("d", timestamp=T0), producer_id=4, producer_epoch=0,
                              base_sequence=3).first_offset == 3
    log.close(clean=True)


def test_producer_errors_of_a_loaded_log_name_its_partition(log_dir):
    """The producer state a load builds belongs to the partition: Kafka's OutOfOrderSequenceException names it."""
    from storage_engine.errors import OutOfOrderSequenceError
    log, _ = open_log(log_dir, now_ms=T0)
    log.append_records(recs("a", timestamp=T0), producer_id=5, producer_epoch=0, base_sequence=0)
    with pytest.raises(OutOfOrderSequenceError) as e:
        log.append_records(recs("b", timestamp=T0), producer_id=5, producer_epoch=0, base_sequence=7)
    assert str(e.value) == (f"Out of order sequence number for producer 5 at offset 1 in partition {TOPIC}-"
                            f"{PARTITION}: 7 (incoming seq. number), 0 (current end sequence number)")
    log.close(clean=True)


def _snapshots(d) -> list[int]:
    return sorted(layout.offset_from_filename(n) for n in os.listdir(d) if n.endswith(layout.SNAPSHOT_SUFFIX))


def test_load_snapshots_at_the_last_two_segment_bases_while_replaying(log_dir):
    """Kafka rebuildProducerState takes snapshots at its candidate offsets while replaying (the bases of the
    second-to-last and last segments, once the map end reaches them) and at the log end; removeStraySnapshots
    first drops snapshots not at a segment base but the largest. Legacy batches carry no producer state, so the
    replay from the snapshot at 0 reaches the last two bases only as segment bases: snapshots 15, 20, 25."""
    from storage_engine.segment import producer_snapshot
    d = _legacy_folder(log_dir, {b: list(range(b, b + 5)) for b in (0, 5, 10, 15, 20)})
    for o in (0, 7, 12):   # 7 and 12: strays, not at a segment base, not the largest
        producer_snapshot.write_snapshot(os.path.join(d, layout.filename_prefix(o) + layout.SNAPSHOT_SUFFIX), [])
    log, res = open_log(log_dir, config(), now_ms=T0, create=False, had_clean_shutdown=True,
                        recovery_point_checkpoint=25)
    assert res.messages == ["removed stray producer snapshots at [7, 12]"]
    assert _snapshots(d) == [0, 15, 20, 25]
    assert log.log_end_offset == 25
    log.close(clean=True)


def test_recovering_many_segments_lists_the_folder_a_fixed_number_of_times(log_dir, monkeypatch):
    """Kafka's recoverSegment rebuilds the producer state at each recovered segment's base and snapshots it after:
    a snapshot per segment, each found again by the next rebuild. Under the partition lock the load lists the
    folder once and keeps that list itself (it listed twice per segment, quadratic in the segments: 10,000 of them
    took minutes). The snapshots left are Kafka's: one at every recovered segment's end, the log end's last."""
    cfg = _segments_of_five(log_dir, n=100)
    d = partition_dir(log_dir)
    listed = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(os.fspath(path)) or real_listdir(path))  # type: ignore[func-returns-value]  # records the call, then delegates
    from storage_engine.segment import producer_snapshot
    reads, real_read = [], producer_snapshot.read_snapshot
    monkeypatch.setattr(producer_snapshot, "read_snapshot", lambda path: reads.append(path) or real_read(path))  # type: ignore[func-returns-value]  # records the call, then delegates
    log, res = open_log(log_dir, cfg, now_ms=T0, create=False, recovery_point_checkpoint=0)
    assert res.recovered_segments == 20
    assert listed.count(d) <= 4
    assert _snapshots(d) == list(range(5, 101, 5))
    # each snapshot the recovery wrote was read back from memory, not from its file
    assert reads == []
    # The load's list is let go: a snapshot another process writes afterwards is seen.
    from storage_engine.segment import producer_snapshot
    producer_snapshot.write_snapshot(os.path.join(d, layout.filename_prefix(103) + layout.SNAPSHOT_SUFFIX), [])
    assert log.producer_state.snapshot_offsets()[-2:] == [100, 103]
    log.close(clean=True)


def _idempotent_crashed(log_dir, n=20):
    """Two idempotent producers (7 and 8) taking turns, one record a batch, 5 batches a segment (bases 0, 5, 10,
    15), closed as a crash leaves it: the rolls left snapshots at 5, 10 and 15. Returns (cfg, dir)."""
    cfg = config(segment_bytes=5 * SIZE, index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(n):
        log.append_records(recs(f"v{i:03d}", timestamp=T0 + i), producer_id=7 + i % 2, producer_epoch=0,
                           base_sequence=i // 2)
    assert [s.base_offset for s in log.segments] == list(range(0, n, 5))
    log.close(clean=False)
    d = partition_dir(log_dir)
    assert _snapshots(d) == [5, 10, 15]
    return cfg, d


def _snapshot_bytes(d) -> dict[int, bytes]:
    return {o: open(_snap(d, o), "rb").read() for o in _snapshots(d)}


def _snap(d, offset: int) -> str:
    return os.path.join(d, layout.filename_prefix(offset) + layout.SNAPSHOT_SUFFIX)


def _recovered_without_snapshots(log_dir, tmp_path, cfg):
    """Kafka's result: a copy of the log dir without any snapshot, recovered from offset 0 (each recovered
    segment's snapshot written afresh). Returns (snapshot files, producer state, log end)."""
    ref = tmp_path / "reference"
    shutil.copytree(log_dir, ref)
    d = partition_dir(ref)
    for o in _snapshots(d):
        os.remove(_snap(d, o))
    log, _ = _unclean_reopen(ref, cfg, 0)
    found = (_snapshot_bytes(d), log.producer_state.state_key(), log.log_end_offset)
    log.close(clean=False)
    return found


def test_recovery_leaves_kafkas_snapshots_and_writes_only_those_that_changed(log_dir, tmp_path):
    """Kafka deletes every snapshot above a recovered segment's base and writes one at its end. The load keeps the
    snapshots at the bases still to recover, writes each one only if its bytes changed, and deletes the others
    (a stray inside the active segment): the files end as Kafka leaves them, and one that was right is not
    written again."""
    from storage_engine.segment import producer_snapshot
    cfg, d = _idempotent_crashed(log_dir)
    producer_snapshot.write_snapshot(_snap(d, 10), [])   # valid, but forgets both producers
    producer_snapshot.write_snapshot(_snap(d, 17), [])   # a stray above the last base, below the log end
    expected, state, end = _recovered_without_snapshots(log_dir, tmp_path, cfg)
    assert sorted(expected) == [5, 10, 15, 20] and end == 20
    old = T0 / 1000 - 86_400
    for o in _snapshots(d):
        os.utime(_snap(d, o), (old, old))
    log, res = _unclean_reopen(log_dir, cfg, 0)
    assert res.recovered_segments == 4
    assert _snapshot_bytes(d) == expected
    assert log.producer_state.state_key() == state
    assert [os.stat(_snap(d, o)).st_mtime == old for o in (5, 10, 15)] == [True, False, True]
    # the producers continue their sequences
    assert log.append_records(recs("w", timestamp=T0), producer_id=7, producer_epoch=0,
                              base_sequence=10).first_offset == 20
    log.close(clean=True)


def test_recovery_that_cuts_the_log_deletes_the_snapshots_it_kept_above_the_cut(log_dir, tmp_path):
    """The snapshots kept for the segments still to recover go when recovery truncates below them: a damaged
    second batch of segment 5 ends the log at 6, and only Kafka's snapshots (5, and 6 at the cut) remain."""
    cfg, d = _idempotent_crashed(log_dir)
    _flip(segment_path(d, 5), SIZE + 65)
    expected, state, end = _recovered_without_snapshots(log_dir, tmp_path, cfg)
    assert (sorted(expected), end) == ([5, 6], 6)
    log, res = _unclean_reopen(log_dir, cfg, 0)
    assert log.log_end_offset == 6 and res.bytes_truncated > 0
    assert _snapshot_bytes(d) == expected
    assert log.producer_state.state_key() == state
    log.close(clean=True)


def test_recovery_never_loads_a_snapshot_above_the_first_recovered_base(log_dir):
    """Kafka's first rebuild of a recovery deletes every snapshot above the first recovered base. One left in a
    gap between two segments (offsets 5-9, removed by compaction) would otherwise be loaded by the rebuild at
    the next base, with producers that no record of the log ever had."""
    from storage_engine.segment.producer_snapshot import SnapshotEntry, write_snapshot
    d = _legacy_folder(log_dir, {0: list(range(5)), 10: list(range(10, 15))})
    write_snapshot(_snap(d, 7), [SnapshotEntry(42, 0, 3, 6, 0, T0, -1, -1)])
    res, bases, offsets = _load_folder(d, clean=False)
    assert (bases, offsets) == ([0, 10], list(range(5)) + list(range(10, 15)))
    assert res.producer_state.producers == {}
    assert 7 not in _snapshots(d)


@pytest.mark.parametrize("read", ["read", "mapped"])
def test_recovery_replays_the_bytes_it_read_as_it_replays_the_file(log_dir, tmp_path, monkeypatch, read):
    """A small segment's bytes, read once for the index walk, are replayed from memory (only batches with a
    producer id are parsed); a mapped one batch by batch from the file. Both give the producer state, the
    .txnindex and the snapshots that the recovery of a copy of the folder gets the other way."""
    from storage_engine.segment import recovery
    cfg, d, aborted, records = _txn_log(log_dir)
    log, _ = open_log(log_dir, cfg, now_ms=T0, create=False)
    log.append_records(recs("plain", timestamp=T0))
    log.append_records(recs("i0", "i1", timestamp=T0), producer_id=3, producer_epoch=2, base_sequence=0)
    log.close(clean=False)
    other = tmp_path / "other"
    shutil.copytree(log_dir, other)

    def recovered(where, bytes_read_below):
        monkeypatch.setattr(recovery, "_READ_NOT_MAP_BYTES", bytes_read_below)
        log, res = _unclean_reopen(where, cfg, 0)
        found = (res.recovered_segments, log.producer_state.state_key(),
                 [t for s in log.segments for t in s.txn_index.all_aborted_txns()],
                 _snapshot_bytes(partition_dir(where)), read_all(log))
        log.close(clean=True)
        return found

    this, that = (1 << 20, 0) if read == "read" else (0, 1 << 20)
    got, want = recovered(log_dir, this), recovered(other, that)
    assert got == want
    assert got[0] == 2 and got[2] == aborted and len(got[1][2]) == 2   # producers 3 and 9


def test_a_held_listing_follows_the_managers_own_writes_and_deletes(log_dir):
    from storage_engine.log.producer_state_manager import ProducerStateManager
    d = str(log_dir)
    psm = ProducerStateManager(d, "t-0")
    psm.map_end_offset = 4
    psm.take_snapshot(sync=False)
    psm.hold_listing()
    for end in (9, 12):
        psm.map_end_offset = end
        psm.take_snapshot(sync=False)
    psm.delete_snapshot(4)
    psm.delete_snapshot(9, deleted_at_ms=T0)        # renamed .deleted: no longer a snapshot
    psm.delete_snapshot(77)                         # absent: nothing to forget
    assert psm.snapshot_offsets() == [12] == _snapshots(d)
    psm.release_listing()
    assert psm.snapshot_offsets() == [12]


# ------------------------------------------------------------------ the load's crash steps
#
# The torture harness and the crash tests kill a process at named steps (storage_engine.crashpoints). A forked
# copy of this process arms one and loads: it must die there (SIGKILL), and the next load must still succeed.

def _killed_at(step: str, load, nth: int = 1) -> bool:
    import signal
    from storage_engine import crashpoints
    pid = os.fork()
    if pid == 0:   # the child never returns into the test
        code = 0
        try:
            crashpoints.arm(step, nth)
            load()
        except BaseException:   # noqa: BLE001 - the child's exit code is the result
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.kills
@pytest.mark.parametrize("step", ["load.resolved", "load.recovered"])
def test_a_load_dies_at_its_crash_steps_and_the_next_load_recovers(log_dir, step):
    cfg, d = _crashed(log_dir, 10)
    generation = _state(log_dir).generation
    with open(segment_path(d, 5), "ab") as f:
        f.write(b"\x00\x00")
    assert _killed_at(step, lambda: _unclean_reopen(log_dir, cfg, 0))
    assert _state(log_dir).generation == generation   # killed before the shared state was written
    log, res = _unclean_reopen(log_dir, cfg, 0)
    assert res.bytes_truncated == 2 and log.log_end_offset == 10
    log.close(clean=True)


@pytest.mark.kills
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_a_recovery_killed_between_segments_leaves_the_next_load_kafkas_snapshots(log_dir, tmp_path, nth):
    """Killed after its ``nth`` recovered segment, a recovery leaves the snapshots at the bases it had not reached
    as they were, the wrong one at 10 included; the next load recovers the same segments again and ends with
    Kafka's files and producer state."""
    from storage_engine.segment import producer_snapshot
    cfg, d = _idempotent_crashed(log_dir)
    producer_snapshot.write_snapshot(_snap(d, 10), [])
    expected, state, _ = _recovered_without_snapshots(log_dir, tmp_path, cfg)
    assert _killed_at("load.recovered", lambda: _unclean_reopen(log_dir, cfg, 0), nth)
    assert (_snapshot_bytes(d)[10] == expected[10]) == (nth >= 2)   # segment 5's recovery rewrote it
    log, res = _unclean_reopen(log_dir, cfg, 0)
    assert res.recovered_segments == 4
    assert _snapshot_bytes(d) == expected
    assert log.producer_state.state_key() == state
    log.close(clean=True)


def test_a_recorded_swap_completed_at_load_stamps_the_deleted_files_with_the_load_time(log_dir):
    """A cleaner that died after its new segment became ``.swap`` (``swap.swap-ready``) left a pending-change record;
    the next load completes the swap as Kafka's LogLoader does with ``.swap`` files (the old segments are renamed
    ``.deleted``, the ``.swap`` gets its final name). Each ``.deleted`` file's mtime is the load's time: its
    file.delete.delay.ms counts from then, so it is not removed by this load."""
    from storage_engine.log import intent
    size = len(batch(0, "a", timestamp=T0))
    log, _ = open_log(log_dir, config(segment_bytes=2 * size), now_ms=T0)
    for i in range(5):
        log.append_batches(batch(i, "a", timestamp=T0))
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    log.close(clean=True)
    pdir = partition_dir(log_dir)
    ino = lambda base, suffix: os.stat(segment_path(pdir, base, suffix)).st_ino  # noqa: E731
    # the cleaned segment: the records of segments 0 and 2 in one .log at base 0, already named .swap
    merged = b"".join(open(segment_path(pdir, base), "rb").read() for base in (0, 2))
    swap_log = segment_path(pdir, 0, layout.LOG_SUFFIX, layout.SWAP_SUFFIX)
    with open(swap_log, "wb") as f:
        f.write(merged)
    old: list[list[Any]] = [[0, {s: ino(0, s) for s in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX)}],
           [2, {s: ino(2, s) for s in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX,
                                        layout.SNAPSHOT_SUFFIX)}]]
    intent.write(str(log_dir), os.path.basename(pdir), "swap",
                 {"new_base": 0, "new": {layout.LOG_SUFFIX: os.stat(swap_log).st_ino}, "old": old, "range_end": 4,
                  "new_last_offset": 3, "new_size": len(merged), "delete_after": False})
    now = T0 + 123_456
    log, res = open_log(log_dir, config(segment_bytes=2 * size), now_ms=now)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [o for o, _ in read_all(log)] == [0, 1, 2, 3, 4]
    assert any(m.startswith("completed the swap of segments [0, 2] into a cleaned segment at 0") for m in res.messages)
    deleted = sorted(n for n in os.listdir(pdir) if n.endswith(layout.DELETED_SUFFIX))
    assert deleted == sorted(os.path.basename(segment_path(pdir, b, s, layout.DELETED_SUFFIX)) for b, inodes in old
                             for s in inodes)
    for name in deleted:
        assert round(os.stat(os.path.join(pdir, name)).st_mtime * 1000) == now, name
    assert not intent.exists(str(log_dir), os.path.basename(pdir))
    log.close(clean=True)
