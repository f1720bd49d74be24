"""Moving a partition to another log dir while it keeps serving (Kafka's alter-log-dirs, ``-future`` logs).

The partition stays in service in its log dir A while a copy, the *future log*, is made in the target dir B, in
the folder ``<topic>-<partition>.<32 hex>-future`` (its lock: ``.engine+partition+<that folder>``). The copy holds
the very batches of the current log, byte for byte and at their offsets (Kafka's ``appendAsFollower``); it is
a log of its own, which retention and compaction maintain like the current one. The mover:

1. **prepares** the future log (under the creation lock): resumes one already in B, after checking its last
   batch is still the current log's; deletes copies in other dirs (an earlier move elsewhere);
2. **catches up** without holding the partition lock, round after round, while writers keep appending to the
   current log (each round copies what the current log holds when it starts, from the future's end), carrying
   the log start offset over;
3. **commits** under the creation lock, the cleaning claims and the locks of the current log (writers now
   wait), the future log and the target's plain name, in this order:

   a. copies what the last rounds left, checks both logs end at the same offset with the same last batch, and
      fsyncs the future log;
   b. writes the target lock's state (the log start offset, the recovery point = the end), fsynced;
   c. retires the current log's lock and the future's as *moved* (fsynced): **the commit point**; from here on
      the move completes, whoever meets it;
   d. renames the future folder to ``<topic>-<partition>`` in B (fsync B);
   e. renames the old folder to ``<topic>-<partition>.<32 hex>-delete`` in A (fsync A), removed after
      ``file.delete.delay.ms`` like a deleted partition;
   f. unlinks the retired locks and A's cleaning claim;
   g. after the locks are released: the partition's checkpoint entries leave A and are written in B (the
      cleaner checkpoint keeps the larger of the two dirs' entries: both logs were clean below it).

A crash before (c) leaves the current log in service and the future folder for the next attempt to resume; a
crash after (c) leaves a retired lock in A that every process using the partition meets: it completes (d)-(g)
(:func:`complete_moves`) under the creation lock before going on. So exactly one folder is the partition's home
at every step, and no acknowledged record is lost or repeated. A process holding the old log follows the move
the next time it takes the partition lock (:meth:`storage_engine.log.log.Log.locked`).
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass

from storage_engine import layout
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.durable import durable_rename, fsync_dir
from storage_engine.errors import (InvalidRequestError, OffsetOutOfRangeError, PartitionMovedError, StorageError,
                                   StorageIOError)
from storage_engine.log import deletion, intent, losses, manifest
from storage_engine.log import producer_state_manager as producers
from storage_engine.log.failure import LogDirFailureChannel, is_dir_failure
from storage_engine.log.locks import (DELETED, LIVE, MOVED, UNKNOWN, CleaningClaim, FileLock, PartitionLock,
                                      PartitionState, lock_path, peek_state)
from storage_engine.log.log import Log
from storage_engine.log.loader import open_log
from storage_engine.log.producer_state_manager import ProducerStateManager
from storage_engine.segment.file_records import iter_batches

logger = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 1024 * 1024
FINAL_LAG_BYTES = 4 * 1024 * 1024   # a round that copied less than this is the last before the commit
MAX_ROUNDS = 50
CLAIM_TIMEOUT_S = 600.0


def create_lock_path(log_dirs: Sequence[str]) -> str:
    """The creation lock (first log dir): serialises partition creation, move commits and their completion."""
    return os.path.join(log_dirs[0], layout.CREATE_LOCK_FILE)


def _status(log_dir: str, folder: str) -> int:
    state = peek_state(lock_path(log_dir, folder))
    return LIVE if state is None else state.status


def future_folders(log_dirs: Iterable[str], topic: str, partition: int,
                   skip: Container[str] = ()) -> list[tuple[str, str]]:
    """``(log dir, folder)`` of every ``-future`` folder of the partition."""
    out = []
    for d in log_dirs:
        if d in skip:
            continue
        for folder, tp in layout.scan_log_dir(d).futures:
            if tp == (topic, partition):
                out.append((d, folder))
    return out


# -- where a partition lives ---------------------------------------------------------------------------------

def locate(log_dirs: Sequence[str], topic: str, partition: int, now_ms: int, *, create_lock_held: bool = False,
           skip: Container[str] = ()) -> str | None:
    """The log dir whose ``<topic>-<partition>`` folder is the partition's home (None: no dir has it). A move or
    a deletion some process left half done is completed first; ``skip``: dirs not to look in (offline)."""
    name = layout.partition_dir_name(topic, partition)
    homes = [d for d in log_dirs if d not in skip and os.path.isdir(os.path.join(d, name))]
    if len(homes) == 1 and _status(homes[0], name) == LIVE:
        return homes[0]
    if create_lock_held:
        return _locate_locked(log_dirs, topic, partition, now_ms, skip)
    lock = FileLock(create_lock_path(log_dirs))
    try:
        lock.__enter__()
    except StorageIOError as exc:
        if not is_dir_failure(exc):
            raise
        # The first dir (the creation lock's) is offline: nothing half done can be completed; a single live
        # home is still the partition's.
        live = [d for d in homes if _status(d, name) == LIVE]
        return live[0] if len(live) == 1 else None
    try:
        return _locate_locked(log_dirs, topic, partition, now_ms, skip)
    finally:
        lock.__exit__(None, None, None)


def _locate_locked(log_dirs: Sequence[str], topic: str, partition: int, now_ms: int,
                   skip: Container[str]) -> str | None:
    name = layout.partition_dir_name(topic, partition)
    complete_moves(log_dirs, topic, partition, now_ms, skip=skip)
    live = []
    for d in log_dirs:
        if d in skip or not os.path.isdir(os.path.join(d, name)):
            continue
        status = _status(d, name)
        if status == DELETED:
            deletion.finish_deletion(d, topic, partition, now_ms)
        elif status == LIVE:
            live.append(d)
    if len(live) > 1:
        raise StorageError(f"duplicate log directories for {name} are found in both {live[0]} and {live[1]}; a "
                           f"partition must live in exactly one log dir (remove the one known to be stale)")
    return live[0] if live else None


def complete_moves(log_dirs: Sequence[str], topic: str, partition: int, now_ms: int, *,
                   skip: Container[str] = ()) -> list[str]:
    """Complete every move of the partition past its commit point (a retired *moved* lock in the source dir);
    the caller holds the creation lock. Returns what was done."""
    name = layout.partition_dir_name(topic, partition)
    done = []
    for src in log_dirs:
        if src in skip:
            continue
        state = peek_state(lock_path(src, name))
        if state is not None and state.status == MOVED:
            done.extend(_complete_move(log_dirs, src, topic, partition, now_ms, skip))
    return done


def _complete_move(log_dirs: Sequence[str], src: str, topic: str, partition: int, now_ms: int,
                   skip: Container[str]) -> list[str]:
    name = layout.partition_dir_name(topic, partition)
    done: list[str] = []
    la = PartitionLock(lock_path(src, name))
    try:
        with la:
            if la.read_state().status != MOVED:
                return done
            targets = [d for d in log_dirs if d != src and d not in skip
                       and os.path.isdir(os.path.join(d, name)) and _status(d, name) == LIVE]
            if not targets:
                futures = [(d, f) for d, f in future_folders(log_dirs, topic, partition, skip) if d != src]
                retired = [(d, f) for d, f in futures if _status(d, f) == MOVED]
                chosen = retired or futures
                if len(chosen) != 1:
                    raise StorageError(f"partition {name} was moved out of {src} but its copy cannot be told "
                                       f"apart: future folders {futures}")
                target, folder = chosen[0]
                lf = PartitionLock(lock_path(target, folder))
                try:
                    with lf:
                        if lf.read_state().status == LIVE:
                            lf.retire(MOVED)
                        durable_rename(os.path.join(target, folder), os.path.join(target, name))
                        manifest.rename(target, folder, name)   # the copy's segment manifest follows it
                        lf.unlink()
                finally:
                    lf.close()
                done.append(f"renamed {folder} to {name} in {target}")
            else:
                target = targets[0]
            if os.path.isdir(os.path.join(src, name)):
                renamed = _retire_folder(src, topic, partition, now_ms)
                done.append(f"renamed {name} to {renamed} in {src}")
            for d, f in future_folders(log_dirs, topic, partition, skip):
                if _status(d, f) == MOVED:
                    PartitionLock.unlink_path(lock_path(d, f))
            la.unlink()
            CleaningClaim(src, name).unlink()
    finally:
        la.close()
    logger.warning("completed the move of %s from %s to %s, left half done: %s", name, src, target, done)
    _move_checkpoints(src, target, (topic, partition))
    return done


def _retire_folder(log_dir: str, topic: str, partition: int, now_ms: int) -> str:
    """Rename a partition folder that is no longer the partition's home to ``-delete`` (fsync the dir)."""
    name = layout.partition_dir_name(topic, partition)
    renamed = layout.delete_dir_name(topic, partition)
    path = os.path.join(log_dir, renamed)
    durable_rename(os.path.join(log_dir, name), path, sync=False)
    try:
        os.utime(path, (now_ms / 1000.0, now_ms / 1000.0))
    except OSError as exc:
        raise StorageIOError("cannot set the deletion time of", path, exc) from exc
    fsync_dir(log_dir)
    return renamed


def _move_checkpoints(src: str, target: str, tp: tuple[str, int], *, log_start_offset: int | None = None,
                      recovery_point: int | None = None) -> None:
    """Step (g): the partition's checkpoint entries leave ``src`` and are written in ``target`` (values from the
    target lock's state when not given); so does the record of offsets it lost (:mod:`.losses`)."""
    moved: dict[str, int] = {}
    name = layout.partition_dir_name(*tp)
    lost, _err = losses.read(src, name)
    if lost:
        losses.record(target, name, lost)
    losses.clear(src, name)
    manifest.clear(src, name)     # the copy's own manifest, renamed with its folder, describes the new home

    def take(entries: dict) -> None:
        if tp in entries:
            moved["cleaner"] = entries.pop(tp)
    deletion.edit_checkpoint(src, layout.CLEANER_OFFSET_CHECKPOINT, take)
    for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT):
        deletion.edit_checkpoint(src, name, lambda entries: entries.pop(tp, None))
    if log_start_offset is None or recovery_point is None:
        state = peek_state(lock_path(target, layout.partition_dir_name(*tp)))
        if state is None or state.status != LIVE:
            return
        log_start_offset = state.log_start_offset if log_start_offset is None else log_start_offset
        recovery_point = state.recovery_point if recovery_point is None else recovery_point
    if recovery_point is not None and recovery_point >= 0:
        deletion.edit_checkpoint(target, layout.RECOVERY_POINT_CHECKPOINT,
                                 lambda entries: entries.__setitem__(tp, recovery_point))
    if log_start_offset is not None and log_start_offset > 0:
        deletion.edit_checkpoint(target, layout.LOG_START_OFFSET_CHECKPOINT,
                                 lambda entries: entries.__setitem__(tp, log_start_offset))
    if "cleaner" in moved:
        deletion.edit_checkpoint(target, layout.CLEANER_OFFSET_CHECKPOINT,
                                 lambda entries: entries.__setitem__(tp, max(moved["cleaner"], entries.get(tp, 0))))


# -- the move ------------------------------------------------------------------------------------------------

@dataclass
class MoveProgress:
    """What a move did, for its report."""
    topic: str
    partition: int
    source_dir: str
    target_dir: str
    future_folder: str = ""
    resumed: bool = False
    rounds: int = 0
    bytes_copied: int = 0
    final_bytes: int = 0          # copied while writers waited (the commit's catch-up)
    log_end_offset: int = 0
    size_bytes: int = 0
    committed: bool = False
    deleted_folder: str = ""
    duration_s: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def move(current: Log, target_dir: str, log_dirs: Sequence[str], config: LogConfig, clock: Clock, *,
         final_lag_bytes: int = FINAL_LAG_BYTES, max_rounds: int = MAX_ROUNDS,
         claim_timeout_s: float = CLAIM_TIMEOUT_S, failures: LogDirFailureChannel | None = None,
         epoch_of: Callable[[str], int | None] = lambda log_dir: None) -> MoveProgress:
    """Move ``current``'s partition to ``target_dir`` (steps 1-3 of the module docstring) and return what was
    done. ``current`` keeps working for its caller: it follows the partition into the target dir. ``epoch_of``
    gives a log dir's crash epoch as the caller's manager knows it (see :mod:`storage_engine.log.locks`): the
    copy is loaded in it, and the partition's new home is recorded as loaded in it."""
    t0 = time.monotonic()
    source = current.log_dir
    if target_dir not in log_dirs:
        raise InvalidRequestError(f"target {target_dir!r} is not one of the log dirs {list(log_dirs)}")
    if current.is_future:
        raise InvalidRequestError(f"{current.dir} is a copy being made for a move, not a partition to move")
    if target_dir == source:
        raise InvalidRequestError(f"partition {current.name} is already in {target_dir}")
    progress = MoveProgress(current.topic, current.partition, source, target_dir)
    with FileLock(create_lock_path(log_dirs)):
        future = _prepare_future(current, target_dir, log_dirs, config, clock, progress, epoch_of(target_dir))
    future.failures = failures
    try:
        while progress.rounds < max_rounds:
            progress.rounds += 1
            copied = _copy_round(current, future)
            progress.bytes_copied += copied
            if copied < final_lag_bytes:
                break
        _commit(current, future, target_dir, log_dirs, clock, claim_timeout_s, progress, epoch_of(target_dir))
    finally:
        future.close(clean=False)
    progress.duration_s = round(time.monotonic() - t0, 3)
    return progress


def _prepare_future(current: Log, target_dir: str, log_dirs: Sequence[str], config: LogConfig, clock: Clock,
                    progress: MoveProgress, dir_epoch: int | None = None) -> Log:
    topic, partition, name = current.topic, current.partition, current.name
    now = clock.milliseconds()
    if os.path.isdir(os.path.join(target_dir, name)):
        raise StorageError(f"{target_dir} already has a folder {name}: cannot move {name} there")
    future = None
    for d, folder in future_folders(log_dirs, topic, partition):
        if d == target_dir and future is None and _status(d, folder) == LIVE:
            future, _ = open_log(d, topic, partition, config, clock=clock, exclusive=False, folder=folder,
                                 dir_epoch=dir_epoch)
            progress.resumed = True
        else:
            discard_future(d, folder, topic, partition, now)
    if future is None:
        folder = layout.future_dir_name(topic, partition)
        future, _ = open_log(target_dir, topic, partition, config, clock=clock, exclusive=True, create=True,
                             folder=folder, dir_epoch=dir_epoch)
    progress.future_folder = future.folder
    current.refresh()
    _reconcile(current, future)
    return future


def discard_future(log_dir: str, folder: str, topic: str, partition: int, now_ms: int) -> str:
    """Give up a copy: retire its lock as deleted and rename it ``-delete``."""
    lock = PartitionLock(lock_path(log_dir, folder))
    try:
        with lock:
            if lock.read_state().status == LIVE:
                lock.retire(DELETED)
            renamed = layout.delete_dir_name(topic, partition)
            if os.path.isdir(os.path.join(log_dir, folder)):
                durable_rename(os.path.join(log_dir, folder), os.path.join(log_dir, renamed), sync=False)
                os.utime(os.path.join(log_dir, renamed), (now_ms / 1000.0, now_ms / 1000.0))
                fsync_dir(log_dir)
            intent.clear(log_dir, folder)   # a dead cleaner's swap record of the copy goes with it
            manifest.clear(log_dir, folder)
            lock.unlink()
    finally:
        lock.close()
    logger.info("discarded the copy %s of %s-%d in %s", folder, topic, partition, log_dir)
    return renamed


def _copy_start(log: Log) -> int:
    """The first offset a copy holds: the log start offset, or a tiered log's local log start offset (only the local
    segments are copied: the offsets below them are in remote storage)."""
    return log.local_log_start_offset if log.remote_log_enabled else log.log_start_offset


def _first_batch_base(log: Log) -> int:
    """The base offset of the batch holding the copy's first offset (:func:`_copy_start`; that offset if the log is
    empty)."""
    start = _copy_start(log)
    data = log.read(start, 1)
    if data is None or not data.data:
        return start
    for batch in iter_batches(data.data, 0, len(data.data), log.name):
        return min(batch.base_offset, start)
    return start


def _last_batch_bytes(log: Log) -> tuple[int, bytes] | None:
    """(last offset, bytes) of the log's last batch, or None if it has none."""
    for seg in reversed(log.segments):
        last = None
        for batch in seg.batches(seg.last_index_position()):
            last = batch
        if last is not None:
            return last.last_offset, last.raw()
    return None


def _same_tail(current: Log, future: Log) -> bool:
    """Whether the copy's last batch is still the current log's batch at those offsets: the same bytes, or for a
    compacted topic the same offsets (the cleaner rewrites sealed batches, keeping their offsets; the copy holding
    the older version is as valid a log). A batch truncated away and written again differs."""
    tail = _last_batch_bytes(future)
    if tail is None:
        return True
    last_offset, raw = tail
    if last_offset >= current.log_end_offset or last_offset < _copy_start(current):
        return False
    data = current.read(last_offset, 1)
    if data is None:
        return False
    for batch in iter_batches(data.data, 0, len(data.data), current.name):
        if batch.last_offset != last_offset:
            return False
        return batch.raw() == raw or current.config.compact
    return False


def _reconcile(current: Log, future: Log) -> None:
    """Make the future log a prefix of the current one: start it over when the current log was truncated
    under it, or its start moved past the future's end (retention), or it was never written."""
    restart = (future.log_end_offset > current.log_end_offset
               or future.log_end_offset < _copy_start(current)
               or (future.log_end_offset == future.log_start_offset and future.size_in_bytes() == 0)
               or not _same_tail(current, future))
    if restart:
        start = _first_batch_base(current)
        if future.size_in_bytes() or future.log_end_offset != start:
            logger.info("starting the copy of %s over at offset %d", current.name, start)
        # A tiered log's copy keeps its log start offset below the local segments (Kafka's logStartOffsetOpt).
        future.truncate_fully_and_start_at(start, min(current.log_start_offset, start)
                                           if current.remote_log_enabled else None)
        _seed_producer_state(current, future, start)
    _carry_log_start(current, future)


def _seed_producer_state(current: Log, future: Log, start: int) -> None:
    """Give the copy, empty at ``start``, the current log's producer state as of ``start`` (from its snapshot at
    or below ``start`` plus a replay up to it), written as the copy's snapshot at ``start``. Producers whose
    batches retention already removed are kept so; the batches copied afterwards update it as a replica's."""
    with current.locked(), future.locked():
        segments = current.segments
        seed = ProducerStateManager(current.dir, current.name)
        first = segments[0].base_offset if segments else start
        producers.rebuild(seed, segments, min(first, start), start, exclusive=False)
        psm = future.producer_state
        psm.producers = seed.producers
        psm.ongoing_txns = seed.ongoing_txns
        psm.map_end_offset = start
        psm.take_snapshot(force=True)


def _carry_log_start(current: Log, future: Log) -> None:
    target = min(current.log_start_offset, future.log_end_offset)
    if target > future.log_start_offset:
        future.delete_records(target)


def _copy_round(current: Log, future: Log) -> int:
    """Copy what the current log holds now, from the future's end; returns the bytes copied."""
    current.refresh()
    if future.log_end_offset < _copy_start(current) or future.log_end_offset > current.log_end_offset:
        _reconcile(current, future)
    copied = 0
    end = current.log_end_offset
    offset = future.log_end_offset
    while offset < end:
        try:
            data = current.read(offset, COPY_CHUNK_BYTES)
        except OffsetOutOfRangeError:
            _reconcile(current, future)   # retention went past the copy: start over from the new start
            offset = future.log_end_offset
            continue
        if data is None or not data.data:
            break
        future.append_as_follower(data.data)
        copied += len(data.data)
        if future.log_end_offset <= offset:
            raise StorageError(f"copying {current.name} made no progress at offset {offset}")
        offset = future.log_end_offset
    _carry_log_start(current, future)
    return copied


def _commit(current: Log, future: Log, target_dir: str, log_dirs: Sequence[str], clock: Clock, claim_timeout_s: float,
            progress: MoveProgress, dir_epoch: int | None = None) -> None:
    name, source = current.name, current.log_dir
    tp = (current.topic, current.partition)
    claims = [CleaningClaim(source, name), CleaningClaim(target_dir, name)]
    with FileLock(create_lock_path(log_dirs)):
        try:
            for claim in claims:
                claim.acquire(claim_timeout_s)
            with current.locked():
                if current.log_dir != source:
                    raise PartitionMovedError(f"partition {name} was moved by another process meanwhile")
                with future.locked():
                    before = progress.bytes_copied
                    if not _same_tail(current, future):
                        _reconcile(current, future)
                    progress.final_bytes = _copy_round(current, future)
                    progress.bytes_copied = before + progress.final_bytes
                    if future.log_end_offset != current.log_end_offset or not _same_tail(current, future):
                        raise StorageError(f"the copy of {name} does not match the partition after catching up "
                                           f"(end offsets {future.log_end_offset} and {current.log_end_offset})")
                    # The copy's producer state at its end: the next load of the new home replays nothing.
                    future.producer_state.map_end_offset = future.log_end_offset
                    future.producer_state.take_snapshot()
                    future.flush()
                    for seg in future.segments:   # the copy's every file is durable before it can serve
                        seg.flush()
                    fsync_dir(future.dir)
                    now = clock.milliseconds()
                    lso, end = current.log_start_offset, current.log_end_offset
                    lb = _fresh_target_lock(target_dir, name)
                    try:
                        lb.write_state(PartitionState(1, lso, end, now,
                                                      UNKNOWN if dir_epoch is None else dir_epoch, status=LIVE))
                        lb.sync_state()
                        current.lock.retire(MOVED)          # (c) the commit point
                        future.lock.retire(MOVED)
                        durable_rename(future.dir, os.path.join(target_dir, name))                    # (d)
                        manifest.rename(target_dir, future.folder, name)   # the copy's segment manifest follows
                        progress.deleted_folder = _retire_folder(source, *tp, now)                     # (e)
                        current.lock.unlink()                                                          # (f)
                        future.lock.unlink()
                        claims[0].unlink()
                    finally:
                        lb.close()
                    progress.committed = True
                    progress.log_end_offset = end
                    progress.size_bytes = future.size_in_bytes()
        finally:
            for claim in claims:
                claim.release()
    _move_checkpoints(source, target_dir, tp, log_start_offset=lso, recovery_point=end)                # (g)
    logger.info("moved %s from %s to %s (%d bytes copied, %d while writers waited)", name, source, target_dir,
                progress.bytes_copied, progress.final_bytes)


def _fresh_target_lock(target_dir: str, name: str) -> PartitionLock:
    """The target's lock for the partition's plain name, from a new file (acquired). A file already there is
    left from a partition of this name that is gone from this dir (its folder is not there)."""
    path = lock_path(target_dir, name)
    if os.path.isdir(os.path.join(target_dir, name)):
        raise StorageError(f"{target_dir} already has a folder {name}")
    PartitionLock.unlink_path(path)
    lock = PartitionLock(path)
    lock.acquire()
    return lock
