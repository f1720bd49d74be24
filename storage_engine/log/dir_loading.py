"""Loading one log dir for a :class:`~storage_engine.log.manager.LogManager` (Kafka's ``LogManager.loadLogs``).

The first process to open a dir takes its lock exclusively: it consumes the clean-shutdown marker (without it, a
new crash epoch starts and every log is recovered from its recovery point), converts the engine files of older
releases, and removes ``-delete`` folders that are due; a process joining a dir others have open waits on the
shared lock while the first opener recovers. Partitions and ``-future`` copies are then loaded by
``num.recovery.threads.per.data.dir`` threads from the recovery-point and log-start-offset checkpoints. A dir
failing with an I/O error is marked offline and loads nothing.

A read-only open (:mod:`.read_only`) takes none of these steps: it takes no lock, consumes nothing, removes
nothing, and reads each partition as the next writable open would find it; how the dir was left (clean, in use,
or crashed with recovery pending) is read and reported.
"""
from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from storage_engine import layout
from storage_engine.clock import Clock
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionDeletedError, PartitionMovedError, PartitionNotFoundError, StorageError
from storage_engine.log import deletion, read_only
from storage_engine.log.failure import LogDirFailureChannel, is_dir_failure
from storage_engine.log.loader import LoadResult, open_log
from storage_engine.log.locks import LIVE, UNKNOWN, DirLock, convert_legacy_engine_files
from storage_engine.log.log import Log
from storage_engine.log.dir_checkpoints import CheckpointCache
from storage_engine.segment.clean_shutdown import consume_clean_shutdown

TopicPartition = tuple[str, int]
# What loading one dir gives: (logs, future logs, partitions found moved or deleted).
DirLoad = tuple[dict[TopicPartition, Log], dict[TopicPartition, Log], set[TopicPartition]]


@dataclass
class DirState:
    """What a manager knows of a log dir it opened: its lock, how it found it, its crash epoch, load messages."""
    path: str
    lock: DirLock
    exclusive_at_open: bool
    had_clean_shutdown: bool
    opens_at_open: int = 0
    epoch: int | None = None
    load_messages: list = field(default_factory=list)
    # A read-only open: how the dir was left (read_only.dir_condition), never consumed.
    condition: dict | None = None
    # The dir's folders as listed for the load, and when (time.monotonic()): what a caller that needs a recent
    # listing of the dir can use instead of listing it again (LogManager.listed_partitions).
    listing: layout.LogDirListing | None = None
    listed_at: float = 0.0


class LoadingManager(Protocol):
    """What loading takes from the :class:`~storage_engine.log.manager.LogManager` it loads into."""
    config: StorageConfig
    read_only: bool
    clock: Clock
    dirs: dict[str, DirState]
    failures: LogDirFailureChannel
    load_errors: list[str]
    logs: dict[TopicPartition, Log]
    future_logs: dict[TopicPartition, Log]
    checkpoint_files: CheckpointCache

    def wanted(self, items: list) -> list: ...

    def track(self, log: Log) -> None: ...

    def attach(self, log: Log) -> Log: ...

    def adopt(self, topic: str, partition: int, *, create_lock_held: bool = False) -> Log | None: ...

    def abandon(self, dir_futures: Iterable[concurrent.futures.Future[DirLoad]]) -> None: ...


def why_not_a_dir(path: str, exc: OSError) -> OSError:
    """The error that says why ``path`` cannot be used as a folder (``makedirs`` reports only "File exists" for
    a path that is there but unusable, such as a symbolic link loop or a file)."""
    if not isinstance(exc, FileExistsError):
        return exc
    try:
        os.stat(path)
    except OSError as real:
        return real
    return NotADirectoryError(20, "not a directory", path)


def load_dir(mgr: LoadingManager, log_dir: str) -> DirLoad:
    """Load one dir: ``(logs, future logs, partitions found moved or deleted)``. A dir failing with an I/O
    error is marked offline and loads nothing."""
    state: DirState | None = None
    loaded: list[Log] = []
    try:
        if mgr.read_only:
            state = DirState(log_dir, read_only.ReadOnlyDirLock(log_dir), False, False,
                             condition=read_only.dir_condition(log_dir))
            mgr.dirs[log_dir] = state
            return _load_dir_read_only(mgr, state, loaded)
        lock = DirLock(log_dir)
        exclusive = lock.try_exclusive()
        if not exclusive:
            lock.shared()  # waits while the first opener recovers the dir
        state = DirState(log_dir, lock, exclusive, False, lock.count_open())
        mgr.dirs[log_dir] = state
        return _load_dir_locked(mgr, state, loaded)
    except (OSError, StorageError) as exc:
        if not is_dir_failure(exc):
            raise
        mgr.failures.mark_offline(log_dir, f"{type(exc).__name__}: {exc}")
        for log in loaded:
            log.close(clean=False)
        if state is not None:
            state.load_messages.append(f"log dir is offline: {type(exc).__name__}: {exc}")
        return {}, {}, set()

def _load_dir_read_only(mgr: LoadingManager, state: DirState, loaded: list[Log]) -> DirLoad:
    """A read-only open of one dir (:mod:`.read_only`): nothing consumed, removed, recovered or written; the
    partitions are read as the next writable open would find them, and how the dir was left is reported."""
    log_dir = state.path
    assert state.condition is not None
    said = read_only.condition_message(state.condition)
    if said:
        state.load_messages.append(said)
    state.had_clean_shutdown = state.condition["clean_shutdown"]
    epoch = state.lock.epoch()
    state.epoch = epoch if epoch != UNKNOWN else None
    state.listed_at = time.monotonic()
    state.listing = listing = layout.scan_log_dir(log_dir)
    mgr.load_errors.extend(f"{os.path.join(log_dir, name)}: {reason}" for name, reason in listing.foreign)
    rp_cp, lso_cp, errors = read_only.read_dir_checkpoints(log_dir)
    state.load_messages.extend(f"{err}; read as if absent" for err in errors)
    logs: dict[TopicPartition, Log] = {}
    future_logs: dict[TopicPartition, Log] = {}
    gone: set[TopicPartition] = set()
    items = [(item, False) for item in mgr.wanted(listing.partitions)]
    items += [(item, True) for item in mgr.wanted(listing.futures)]
    try:
        for (folder, tp), future in items:
            try:
                ro = read_only.open_read_only(log_dir, tp[0], tp[1], mgr.config.log_config(tp[0]), clock=mgr.clock,
                                               recovery_point_checkpoint=rp_cp.get(tp, 0),
                                               log_start_offset_checkpoint=lso_cp.get(tp, 0),
                                               folder=folder if future else None)
            except (PartitionDeletedError, PartitionMovedError, PartitionNotFoundError):
                if not future:
                    gone.add(tp)
                continue
            except read_only.NoSegmentError as exc:
                state.load_messages.append(f"{folder}: {exc}")
                continue
            state.load_messages.extend(f"{ro.folder}: {m}" for m in ro.load_messages)
            log: Log = ro
            mgr.track(log)
            mgr.attach(log)
            loaded.append(log)
            (future_logs if future else logs)[tp] = log
            loaded_epoch = log.lock.read_state().loaded_epoch
            if state.condition["in_use"] and state.epoch is not None and loaded_epoch not in (UNKNOWN, state.epoch):
                state.load_messages.append(f"{log.folder}: not loaded since the dir's last unclean shutdown: the next "
                                           "writable open of it recovers it")
    except BaseException:
        for log in loaded:
            log.close(clean=False)
        loaded.clear()
        raise
    return logs, future_logs, gone


def _load_dir_locked(mgr: LoadingManager, state: DirState, loaded: list[Log]) -> DirLoad:
    log_dir, lock, exclusive = state.path, state.lock, state.exclusive_at_open
    now_ms = mgr.clock.milliseconds()
    state.had_clean_shutdown = clean = consume_clean_shutdown(log_dir) if exclusive else False
    if exclusive:
        state.load_messages.extend(convert_legacy_engine_files(log_dir))
        epoch = lock.epoch()
        state.epoch = epoch if clean and epoch != UNKNOWN else lock.new_epoch()
    else:
        epoch = lock.epoch()
        state.epoch = epoch if epoch != UNKNOWN else None
    state.listed_at = time.monotonic()
    state.listing = listing = layout.scan_log_dir(log_dir)
    mgr.load_errors.extend(f"{os.path.join(log_dir, name)}: {reason}" for name, reason in listing.foreign)
    if exclusive and listing.deleting:
        # Kafka deletes -delete folders after file.delete.delay.ms: the first opener removes those due.
        purged = deletion.purge_delete_dirs([log_dir], now_ms,
                                            lambda t: mgr.config.log_config(t).file_delete_delay_ms)
        state.load_messages.extend(f"removed {os.path.basename(p)} (deleted partition)"
                                   for p in purged["removed"])
    rp_cp, rp_err = mgr.checkpoint_files.read(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT))
    lso_cp, lso_err = mgr.checkpoint_files.read(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT))
    for err in (rp_err, lso_err):
        if err:
            state.load_messages.append(f"{err}; recovering affected logs from offset 0")
    threads = mgr.config.num_recovery_threads_per_data_dir

    def load_one(item: tuple[str, TopicPartition],
                 future: bool) -> tuple[TopicPartition, Log | None, LoadResult | None]:
        folder, (topic, partition) = item
        try:
            log, res = open_log(log_dir, topic, partition, mgr.config.log_config(topic), clock=mgr.clock,
                                exclusive=exclusive, had_clean_shutdown=clean,
                                recovery_point_checkpoint=rp_cp.get((topic, partition), 0),
                                log_start_offset_checkpoint=lso_cp.get((topic, partition), 0),
                                folder=folder if future else None, dir_epoch=state.epoch)
        except PartitionDeletedError:
            if not future:
                deletion.finish_deletion(log_dir, topic, partition, now_ms)
            return (topic, partition), None, None
        except (PartitionMovedError, PartitionNotFoundError):
            return (topic, partition), None, None    # moved (or renamed) since the listing
        mgr.track(log)   # here, not after the load: the bound holds while 100,000 partitions load
        return (topic, partition), log, res

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        jobs = [(pool.submit(load_one, item, False), False) for item in mgr.wanted(listing.partitions)]
        jobs += [(pool.submit(load_one, item, True), True) for item in mgr.wanted(listing.futures)]
    logs: dict[TopicPartition, Log] = {}
    future_logs: dict[TopicPartition, Log] = {}
    gone: set[TopicPartition] = set()
    failure = None
    for f, future in jobs:
        if f.exception() is not None:
            failure = failure or f.exception()
            continue
        tp, log, res = f.result()
        if log is None:
            if not future:
                gone.add(tp)
            continue
        mgr.attach(log)
        loaded.append(log)
        (future_logs if future else logs)[tp] = log
        if res is not None:
            for m in res.messages:
                state.load_messages.append(f"{log.folder}: {m}")
    if failure is not None:
        for log in loaded:
            log.close(clean=False)
        loaded.clear()
        raise failure
    if exclusive:
        lock.shared()
    return logs, future_logs, gone


def load_dirs(mgr: LoadingManager, online: list[str]) -> None:
    """Load the online dirs in parallel into ``mgr``: a partition found in two dirs is legitimate only while a move
    commits (the retired copy is closed), and one moved or deleted meanwhile is looked up again. A failure closes
    what was loaded and releases every dir lock."""
    futures: list = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(online))) as pool:
            futures = [pool.submit(load_dir, mgr, d) for d in online]
        results = [f.result() for f in futures]
        seen: dict[TopicPartition, Log] = {}
        moved: set[TopicPartition] = set()
        for logs, future_logs, gone in results:
            moved.update(gone)
            mgr.future_logs.update(future_logs)
            for tp, log in logs.items():
                other = seen.get(tp)
                if other is not None:
                    # Loaded in two dirs: legitimate only while a move commits (one of them is retired).
                    stale = _retired_of(other, log)
                    if stale is None:
                        raise StorageError(
                            f"duplicate log directories for {tp[0]}-{tp[1]} are found in both "
                            f"{other.log_dir} and {log.log_dir}; a partition must live in exactly one log dir")
                    stale.close(clean=False)
                    log = other if stale is log else log
                    moved.add(tp)
                seen[tp] = log
        for tp, log in seen.items():
            mgr.logs[tp] = log
        for tp in sorted(moved):   # moved or half-moved while this manager loaded: find where it is now
            if tp not in mgr.logs:
                mgr.adopt(*tp)
    except BaseException:
        mgr.abandon(futures)
        raise


def _retired_of(a: Log, b: Log) -> Log | None:
    """Of two logs of one partition loaded from two dirs, the one whose lock is no longer live, if any."""
    for log in (a, b):
        if log.lock.read_state().status != LIVE:
            return log
    return None
