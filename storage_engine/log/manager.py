"""The set of logs in one or more log dirs (Kafka's ``LogManager``): loading, creation, checkpoints, shutdown.

* Each entry of ``log.dirs`` holds partition folders ``<topic>-<partition>``; a partition lives in exactly
  one dir and a new one goes to the dir with the fewest partitions (decided under a creation lock, so two
  processes never create the same partition twice).
* Opening: per dir, the first process to open it (exclusive flock on ``<dir>/.lock``) consumes the
  clean-shutdown marker and, without it, starts a new crash epoch and recovers every log it loads from its
  recovery point; logs of a dir are loaded by ``num.recovery.threads.per.data.dir`` threads and dirs in
  parallel. A process joining a dir that others have open opens views, except of a partition not loaded since
  the last unclean shutdown, which it loads and recovers (see :mod:`storage_engine.log.locks`); one dir's load
  is :mod:`.dir_loading`.
* Checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``) are written
  atomically from the partitions' shared state, merged with entries of partitions other processes own
  (:mod:`.dir_checkpoints`).
* Closing: the last process to leave a dir flushes and trims every log, writes the checkpoints and the
  clean-shutdown marker.
* Lifecycle: :meth:`LogManager.delete_log` deletes a partition (:mod:`.deletion`), :meth:`LogManager.move_log`
  moves one to another dir while it serves (:mod:`.mover`); ``-future`` copies are loaded as
  :attr:`LogManager.future_logs` (maintenance keeps them too), ``-delete`` folders are never loaded and the
  first opener of a dir removes those that are due; ``-stray`` and foreign folders are reported, never loaded.
* Offline dirs (:mod:`.failure`): a dir that fails with an I/O error while opening is marked offline and
  skipped, as is one whose logs fail later; its partitions raise :class:`LogDirOfflineError`, the other
  dirs keep working.
* Open files: at most ``max_open_logs`` logs hold descriptors at once; the least recently used idle ones are
  parked (:mod:`.open_logs`), so one process can hold 100,000 partitions under a limit of 20,000 descriptors.
* Read-only (``open(..., read_only=True)``, :mod:`.read_only`): inspection commands and dry runs change no byte
  of the log dirs (no lock file, no marker, no recovery, no checkpoint); every change raises ``ReadOnlyError``.
"""
from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypedDict, TypeVar

from storage_engine import layout
from storage_engine.clock import SYSTEM_CLOCK, Clock
from storage_engine.config import StorageConfig
from storage_engine.durable import fsync_dir
from storage_engine.errors import (InvalidRequestError, LogDirOfflineError, PartitionDeletedError,
                                   PartitionMovedError, PartitionNotFoundError, StorageError, StorageIOError)
from storage_engine.log import deletion, dir_checkpoints, dir_loading, mover, read_only, topic_changes
from storage_engine.log.dir_loading import DirLoad, DirState
from storage_engine.log.failure import LogDirFailureChannel, is_dir_failure
from storage_engine.log.loader import open_log
from storage_engine.log.locks import DELETED, FileLock
from storage_engine.log.log import Log
from storage_engine.log.open_logs import OpenLogs
from storage_engine.segment.clean_shutdown import write_clean_shutdown

logger = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


class FlushedLog(TypedDict):
    """A log :meth:`LogManager.flush_all` flushed (the jobs' ``FlushedPartition`` has the same keys)."""
    topic: str
    partition: int
    recovery_point_before: int
    recovery_point: int


F = TypeVar("F", bound=Callable[..., Any])


def _synchronized(method: F) -> F:
    """Run a method under the manager's lock: its maps of logs change in one thread at a time."""
    @functools.wraps(method)
    def run(self: LogManager, *args: Any, **kwargs: Any) -> Any:
        with self.mutex:
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


class LogManager:
    """The logs of a set of log dirs (Kafka's ``LogManager``). Any number of threads may share one manager and its
    logs: the maps of logs change under the manager's :attr:`mutex` (never held while a log's lock is awaited by
    a thread that holds it), and each log takes its own lock (:mod:`storage_engine.log.local_log`)."""

    def __init__(self, config: StorageConfig, clock: Clock = SYSTEM_CLOCK,
                 partitions: Iterable[TopicPartition] | None = None,
                 max_open_logs: int | OpenLogs | None = None, read_only: bool = False):
        self.config = config
        self.read_only = read_only    # see storage_engine.log.read_only: nothing in the log dirs is changed
        self.open_logs = max_open_logs if isinstance(max_open_logs, OpenLogs) else OpenLogs(max_open_logs)
        self._dir_counts: dict[str, int] | None = None   # partitions per log dir, for placing new ones
        # None: every partition of the log dirs; else only these (topic, partition) pairs are loaded at open.
        self.only = None if partitions is None else frozenset(partitions)
        self.clock = clock
        self.logs: dict[TopicPartition, Log] = {}
        # The -future copies of partitions being moved into a dir (Kafka's future logs), by partition.
        self.future_logs: dict[TopicPartition, Log] = {}
        self.dirs: dict[str, DirState] = {}
        self.load_errors: list[str] = []
        self.failures = LogDirFailureChannel()
        self._closed = False
        self.mutex = threading.RLock()
        self.resolved_topic_changes: list[dict[str, Any]] = []   # completed at open (log.topic_changes)
        # The dirs' offset checkpoint files as this manager read them: parsed again only when their bytes change.
        self.checkpoint_files = dir_checkpoints.CheckpointCache()

    # -- opening ----------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, config: StorageConfig, *, clock: Clock = SYSTEM_CLOCK,
             partitions: Iterable[TopicPartition] | None = None,
             max_open_logs: int | OpenLogs | None = None, read_only: bool = False) -> "LogManager":
        """Open the log dirs and load their partitions, or with ``partitions`` (``[(topic, partition)]``) only
        those: a batch of maintenance work opens what it touches, and a damaged partition elsewhere cannot
        stop it. Partitions named but absent are simply not loaded (``get_log`` returns None for them).

        A manager that loaded a subset writes the clean-shutdown marker when it is the last to close only if it
        found the dir clean and had it to itself (see :meth:`_may_vouch_for`); otherwise the next first opener
        recovers each log from its recovery point.

        ``max_open_logs`` bounds the logs holding open files (default: from ``RLIMIT_NOFILE``, see
        :mod:`.open_logs`); an :class:`~.open_logs.OpenLogs` passed instead is a bound shared with the other
        managers given it (a job holding several managers at once).

        ``read_only`` opens the logs without changing a byte of the log dirs (:mod:`.read_only`): no recovery, no
        lock file, no marker consumed or written, no checkpoint; each partition is read as the next writable open
        would find it, and every change raises :class:`~.read_only.ReadOnlyError`."""
        mgr = cls(config, clock, partitions, max_open_logs, read_only)
        online = []
        for d in config.log_dirs:
            try:
                if read_only:
                    os.listdir(d)    # a dir that is missing or unreadable is offline; never created
                else:
                    os.makedirs(d, exist_ok=True)
                online.append(d)
            except OSError as exc:
                cause = dir_loading.why_not_a_dir(d, exc)
                if read_only and isinstance(exc, FileNotFoundError):
                    mgr.failures.mark_offline(d, f"{type(cause).__name__}: {cause}")
                    continue
                if not is_dir_failure(cause):
                    raise StorageIOError("cannot create log dir", d, exc) from exc
                mgr.failures.mark_offline(d, f"{type(cause).__name__}: {cause}")
        dir_loading.load_dirs(mgr, online)
        if read_only:   # a topic change left half done stays for the next writable open to complete
            return mgr
        try:   # topic changes a dead process left half done are completed (log.topic_changes)
            mgr.resolved_topic_changes = topic_changes.resolve(mgr)
        except (OSError, StorageError) as exc:   # the record stays: readers hide its topic, the next change retries
            logger.error("cannot complete the topic changes left half done: %s", exc)
        return mgr

    def wanted(self, items: list) -> list:
        """The ``(dir, (topic, partition), ...)`` listing items this manager loads (all, or a subset open's)."""
        return items if self.only is None else [item for item in items if item[1] in self.only]

    def attach(self, log: Log) -> Log:
        """Give a log this manager's way of following its partition and its failure channel."""
        topic, partition = log.topic, log.partition
        log.relocate = lambda: self._relocate(topic, partition)
        log.failures = self.failures
        return log

    def _relocate(self, topic: str, partition: int) -> tuple[str, str]:
        """Where a partition that moved lives now (its log dir and folder)."""
        found = mover.locate(self.config.log_dirs, topic, partition, self.clock.milliseconds(),
                             skip=set(self.failures.offline_dirs()))
        if found is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} left the folder this process had open and "
                                         f"cannot be found in the online log dirs {self.online_dirs()} (it was "
                                         "deleted, or moved to a dir this process does not have)")
        return found, layout.partition_dir_name(topic, partition)

    def online_dirs(self) -> list[str]:
        offline = self.failures.offline_dirs()
        return [d for d in self.config.log_dirs if d not in offline]

    def offline_dirs(self) -> dict[str, str]:
        """Log dirs offline in this manager, with the error that took each offline."""
        return self.failures.offline_dirs()

    def abandon(self, dir_futures: Iterable[concurrent.futures.Future[DirLoad]]) -> None:
        """Undo a failed open: close the logs loaded so far (without flushing) and release every dir lock, so
        a failure leaves no lock behind in this process."""
        self._closed = True
        closed: set[int] = set()
        for f in dir_futures:
            if f.done() and f.exception() is None:
                logs, future_logs, _gone = f.result()
                for log in list(logs.values()) + list(future_logs.values()):
                    closed.add(id(log))
                    log.close(clean=False)
        for log in list(self.logs.values()) + list(self.future_logs.values()):
            if id(log) not in closed and log.lock.is_open:
                log.close(clean=False)
        for state in self.dirs.values():
            state.lock.close()

    # -- partitions -------------------------------------------------------------------------------------------
    @_synchronized
    def get_log(self, topic: str, partition: int) -> Log | None:
        """The partition's log (adopting one another process created or moved since this manager opened), or
        None. Raises :class:`LogDirOfflineError` when its log dir is offline (or, for a partition not found,
        when an offline dir may hold it)."""
        name = layout.partition_dir_name(topic, partition)
        tp = (topic, partition)
        log = self.logs.get(tp)
        if log is not None and log.lock.is_open and log.lock.read_state().status == DELETED:
            # Deleted by another process; a partition of the same name may have been created since.
            del self.logs[tp]
            log.close(clean=False)
            log = None
        if log is not None:
            self.failures.check(log.log_dir, f"partition {name}")
            return log
        log = self.adopt(topic, partition)
        if log is None:
            self._check_not_offline(name)
        return log

    def _check_not_offline(self, name: str) -> None:
        """Raise :class:`LogDirOfflineError` if an offline log dir may hold the partition folder ``name``."""
        for d, reason in self.failures.offline_dirs().items():
            try:
                os.stat(os.path.join(d, name))
            except (FileNotFoundError, NotADirectoryError):   # absent, or the dir is a file: it holds nothing
                continue
            except OSError:
                pass
            raise LogDirOfflineError(f"partition {name} is unavailable: log dir {d} is offline ({reason}) and "
                                     f"may hold it", d)

    def _epoch(self, log_dir: str) -> int | None:
        state = self.dirs.get(log_dir)
        return state.epoch if state is not None else None

    @_synchronized
    def adopt(self, topic: str, partition: int, *, create_lock_held: bool = False) -> Log | None:
        """A partition created or moved by another process after this manager opened (or not loaded by a subset
        open)."""
        tp = (topic, partition)
        if self.read_only:
            return self._adopt_read_only(topic, partition)
        for _ in range(3):
            d = mover.locate(self.config.log_dirs, topic, partition, self.clock.milliseconds(),
                             create_lock_held=create_lock_held, skip=set(self.failures.offline_dirs()))
            if d is None:
                return None
            # The whole dir's files: parsed once per manager while they do not change (a batch adopts dozens).
            rp_cp, _ = self.checkpoint_files.read(os.path.join(d, layout.RECOVERY_POINT_CHECKPOINT))
            lso_cp, _ = self.checkpoint_files.read(os.path.join(d, layout.LOG_START_OFFSET_CHECKPOINT))
            try:
                log, _ = open_log(d, topic, partition, self.config.log_config(topic), clock=self.clock,
                                  exclusive=False, dir_epoch=self._epoch(d),
                                  recovery_point_checkpoint=rp_cp.get(tp, 0),
                                  log_start_offset_checkpoint=lso_cp.get(tp, 0))
            except (PartitionDeletedError, PartitionMovedError, PartitionNotFoundError):
                continue    # deleted or moved between finding and opening it: look again
            old = self.logs.get(tp)
            if old is not None and old is not log and old.lock.is_open:
                old.close(clean=False)
            self.track(log)
            self.logs[tp] = self.attach(log)
            return log
        raise StorageError(f"partition {topic}-{partition} kept changing while this process opened it")

    def _adopt_read_only(self, topic: str, partition: int) -> Log | None:
        """A partition not loaded at a read-only open, found by its folder and read read-only."""
        log = read_only.find_and_open(self.online_dirs(), topic, partition, self.config.log_config(topic), self.clock)
        if log is None:
            return None
        self.track(log)
        self.logs[(topic, partition)] = self.attach(log)
        return log

    def _create_lock(self) -> FileLock:
        path = mover.create_lock_path(self.config.log_dirs)
        reason = self.failures.is_offline(self.config.log_dirs[0])
        if reason is not None:
            raise LogDirOfflineError(f"cannot create or move partitions: log dir {self.config.log_dirs[0]}, which "
                                     f"holds the creation lock, is offline ({reason})", self.config.log_dirs[0])
        return FileLock(path)

    @_synchronized
    def get_or_create_log(self, topic: str, partition: int) -> Log:
        log = self.get_log(topic, partition)
        if log is not None:
            return log
        name = layout.partition_dir_name(topic, partition)
        if self.read_only:
            read_only.refuse("creating a partition", name)
        with self._create_lock():
            log = self.adopt(topic, partition, create_lock_held=True)
            if log is not None:
                return log
            self._check_not_offline(name)
            target = self._least_loaded_dir(name)
            log, _ = open_log(target, topic, partition, self.config.log_config(topic), clock=self.clock,
                              exclusive=True, create=True, dir_epoch=self._epoch(target))
            fsync_dir(target)
            if self._dir_counts is not None and target in self._dir_counts:
                self._dir_counts[target] += 1
        self.track(log)
        self.logs[(topic, partition)] = self.attach(log)
        return log

    def _least_loaded_dir(self, name: str) -> str:
        """Kafka's placement: the online log dir with the fewest partitions (the first on a tie), counting the
        copies being moved in (partitions of that dir to be). The dirs are counted once per manager and then kept
        up to date with its own creations (listing a dir of 100,000 partitions for every creation would make
        creating them quadratic); partitions other processes create or move meanwhile only make the placement
        less even, never wrong."""
        dirs = [d for d in self.config.log_dirs if not self.failures.is_offline(d)]
        if self._dir_counts is None:
            self._dir_counts = {}
        for d in dirs:
            if d in self._dir_counts or len(self.config.log_dirs) == 1:
                continue
            try:
                listing = layout.scan_log_dir(d)
            except OSError as exc:
                self._dir_failed(d, exc)
                continue
            self._dir_counts[d] = len(listing.partitions) + len(listing.futures)
        dirs = [d for d in dirs if not self.failures.is_offline(d)]
        if not dirs:
            raise LogDirOfflineError(f"cannot create partition {name}: every log dir is offline "
                                     f"{self.failures.offline_dirs()}")
        if len(self.config.log_dirs) == 1:
            return dirs[0]
        order = self.config.log_dirs.index
        return min(dirs, key=lambda d: (self._dir_counts[d], order(d)))   # type: ignore[index]

    def track(self, log: Log) -> None:
        """Count ``log`` against the bound on logs with open files (:mod:`storage_engine.log.open_logs`)."""
        log.files = self.open_logs
        self.open_logs.used(log)

    def _dir_failed(self, log_dir: str, exc: BaseException) -> None:
        """An error touching ``log_dir`` outside a log: take the dir offline if it is a dir failure, else raise."""
        if not is_dir_failure(exc):
            raise exc
        self.failures.mark_offline(log_dir, f"{type(exc).__name__}: {exc}")

    def partitions(self, topic_filter: Collection[str] | None = None) -> list[TopicPartition]:
        """The partitions this manager has, sorted, without those of offline log dirs."""
        offline = self.failures.offline_dirs()
        with self.mutex:
            tps = sorted(tp for tp, log in self.logs.items() if log.log_dir not in offline)
        if topic_filter:
            tps = [tp for tp in tps if tp[0] in topic_filter]
        return tps

    def listed_partitions(self, topic: str, max_age_s: float) -> tuple[list[int], float] | None:
        """``(partitions of topic, when listed)`` from the listings of the online log dirs this manager took as it
        opened them (``-delete`` and ``-future`` folders left out, as :func:`layout.partition_dirs` does), plus
        the logs it has; None when a dir has no such listing or one older than ``max_age_s`` seconds."""
        found: set[int] = set()
        oldest = time.monotonic()
        for d in self.online_dirs():
            state = self.dirs.get(d)
            if state is None or state.listing is None or time.monotonic() - state.listed_at > max_age_s:
                return None
            found.update(p for _, (t, p) in state.listing.partitions if t == topic)
            oldest = min(oldest, state.listed_at)
        found.update(p for t, p in self.partitions([topic]))
        return sorted(found), oldest

    def dir_of(self, tp: TopicPartition) -> str:
        return self.logs[tp].log_dir

    # -- lifecycle --------------------------------------------------------------------------------------------
    @_synchronized
    def delete_log(self, topic: str, partition: int) -> dict:
        """Delete a partition (Kafka's ``asyncDelete``, see :mod:`.deletion`): its folder becomes ``-delete`` at
        once, so a partition of the same name can be created right away; a copy being made for a move goes too.
        Raises :class:`PartitionNotFoundError` when no online log dir has it."""
        name = layout.partition_dir_name(topic, partition)
        if self.read_only:
            read_only.refuse("deleting a partition", name)
        tp = (topic, partition)
        now = self.clock.milliseconds()
        renamed = None
        for _ in range(3):
            d = mover.locate(self.config.log_dirs, topic, partition, now, skip=set(self.failures.offline_dirs()))
            if d is None:
                self._check_not_offline(name)
                gone = deletion.forget_vanished(self.online_dirs(), topic, partition, now)   # its folder vanished
                if gone is not None:
                    return {"topic": topic, "partition": partition, "log_dir": gone, "deleted_folder": None,
                            "discarded_copies": [], "now_ms": now, "folder_was_missing": True}
                raise PartitionNotFoundError(f"partition {name} does not exist in {self.online_dirs()}")
            self.failures.check(d, f"partition {name}")
            try:
                renamed = deletion.delete_partition(d, topic, partition, now)
            except PartitionMovedError:
                continue
            break
        else:
            raise StorageError(f"partition {name} kept moving while this process deleted it")
        log = self.logs.pop(tp, None)
        if log is not None:
            log.deleted = True
            log.close(clean=False)
        discarded = self.cancel_move(topic, partition)["discarded"]
        return {"topic": topic, "partition": partition, "log_dir": d, "deleted_folder": renamed,
                "discarded_copies": discarded, "now_ms": now}

    @_synchronized
    def move_log(self, topic: str, partition: int, target_dir: str, **options: Any) -> dict:
        """Move a partition to ``target_dir`` while it keeps serving (Kafka's alter-log-dirs, see :mod:`.mover`).
        ``options``: ``final_lag_bytes``, ``max_rounds``, ``claim_timeout_s``. Returns the move's report."""
        name = layout.partition_dir_name(topic, partition)
        if self.read_only:
            read_only.refuse("moving a partition", name)
        target = self._log_dir_named(target_dir)
        self.failures.check(target, f"moving partition {name} into {target}")
        log = self.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {name} does not exist in {self.online_dirs()}")
        if self.failures.is_offline(mover.create_lock_path(self.config.log_dirs)):
            self._create_lock()   # raises the clear error
        progress = mover.move(log, target, self.config.log_dirs, self.config.log_config(topic), self.clock,
                              failures=self.failures, epoch_of=self._epoch, **options)
        with log.locked():   # follow the partition into its new home now
            pass
        stale = self.future_logs.pop((topic, partition), None)
        if stale is not None:
            stale.close(clean=False)
        return progress.as_dict()

    def _log_dir_named(self, path: str) -> str:
        for d in self.config.log_dirs:
            if d == path or os.path.abspath(d) == os.path.abspath(path):
                return d
        raise InvalidRequestError(f"{path!r} is not one of the log dirs {list(self.config.log_dirs)}")

    @_synchronized
    def cancel_move(self, topic: str, partition: int) -> dict:
        """Give up the copies being made of a partition for a move (their folders become ``-delete``)."""
        if self.read_only:
            read_only.refuse("cancelling a move", layout.partition_dir_name(topic, partition))
        now = self.clock.milliseconds()
        discarded = []
        with self._create_lock():
            for d, folder in mover.future_folders(self.config.log_dirs, topic, partition,
                                                  skip=set(self.failures.offline_dirs())):
                discarded.append(os.path.join(d, mover.discard_future(d, folder, topic, partition, now)))
        stale = self.future_logs.pop((topic, partition), None)
        if stale is not None:
            stale.close(clean=False)
        return {"topic": topic, "partition": partition, "discarded": discarded}

    # -- checkpoints ------------------------------------------------------------------------------------------
    def checkpoint(self, log_dirs: Iterable[str] | None = None) -> dict:
        """Write recovery-point and log-start-offset checkpoints of every online log dir; returns what was
        written, per dir (a dir offline, or failing now, is left out)."""
        if self.read_only:
            read_only.refuse("writing checkpoints", ", ".join(self.config.log_dirs))
        written = {}
        for d in (log_dirs or self.config.log_dirs):
            if self.failures.is_offline(d):
                continue
            try:
                with self.mutex:
                    candidates = [(tp, log) for tp, log in self.future_logs.items() if log.log_dir == d]
                    candidates += [(tp, log) for tp, log in self.logs.items() if log.log_dir == d]
                written[d] = dir_checkpoints.checkpoint_dir(d, candidates, self.checkpoint_files)
            except (OSError, StorageIOError) as exc:
                self._dir_failed(d, exc)
        return written

    # -- flushing ---------------------------------------------------------------------------------------------
    def flush_all(self, topic_filter: Collection[str] | None = None) -> list[FlushedLog]:
        """Flush every log of the online dirs to its end (a dir failing now is taken offline and skipped)."""
        out: list[FlushedLog] = []
        for tp in self.partitions(topic_filter):
            with self.mutex:
                log = self.logs.get(tp)
            if log is None or self.failures.is_offline(log.log_dir):
                continue
            before = log.recovery_point
            try:
                after = log.flush()
            except StorageError as exc:
                if self.failures.is_offline(log.log_dir) is None:
                    raise
                logger.warning("not flushing %s: %s", log.name, exc)
                continue
            out.append({"topic": tp[0], "partition": tp[1], "recovery_point_before": before,
                        "recovery_point": after})
        return out

    # -- closing ----------------------------------------------------------------------------------------------
    @_synchronized
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        all_logs = list(self.logs.values()) + list(self.future_logs.values())
        if self.read_only:   # nothing to flush, trim, checkpoint or vouch for: only files to close
            for log in all_logs:
                log.close(clean=False)
                self.open_logs.forget(log)
            return
        for d, state in self.dirs.items():
            logs = [log for log in all_logs if log.log_dir == d and log.lock.is_open]
            try:
                if self.failures.is_offline(d):
                    for log in logs:
                        log.close(clean=False)
                    continue
                last = state.lock.try_exclusive()
                for log in logs:
                    log.close(clean=last)
                    self.open_logs.forget(log)
                if last and not self.failures.is_offline(d):
                    dir_checkpoints.write_checkpoints_after_close(d, logs, self.checkpoint_files)
                    if self._may_vouch_for(state, logs):
                        write_clean_shutdown(d)
            except (OSError, StorageError) as exc:
                if not is_dir_failure(exc):
                    raise
                self.failures.mark_offline(d, f"{type(exc).__name__}: {exc}")
                for log in logs:
                    if log.lock.is_open:
                        log.close(clean=False)
            finally:
                state.lock.close()
        for log in all_logs:      # logs that followed their partition into a dir this manager did not open
            if log.lock.is_open:
                log.close(clean=False)

    def _may_vouch_for(self, state: DirState, logs: list[Log]) -> bool:
        """Whether this manager, closing last, may write the clean-shutdown marker: it flushed every log it had,
        so it may if it had every log of the dir (not one created or moved in by another process after it
        opened), or if it found the dir clean, opened it first and no other manager joined since (then the logs
        it never loaded are as the consumed marker described them)."""
        if self.only is None:
            listing = layout.scan_log_dir(state.path)
            present = {tp for _, tp in listing.partitions} | {(tp, f) for f, tp in listing.futures}
            mine = {(log.topic, log.partition) if not log.is_future else ((log.topic, log.partition), log.folder)
                    for log in logs}
            return present <= mine
        return state.exclusive_at_open and state.had_clean_shutdown and state.lock.opens() == state.opens_at_open

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_synchronized
    def describe(self) -> dict:
        """Per log dir: its partitions, the moves into it in progress, deleted folders waiting for removal,
        stray and foreign folders, whether it is offline; plus the load messages."""
        out: dict = {"log_dirs": []}
        if self.read_only:
            out["read_only"] = True
        offline = self.failures.offline_dirs()
        by_tp = {tp: log for tp, log in self.logs.items()}
        for d in self.config.log_dirs:
            msgs = self.dirs[d].load_messages if d in self.dirs else []
            entry: dict = {"path": d, "status": "offline" if d in offline else "online",
                           "partitions": [], "load_messages": msgs}
            condition = self.dirs[d].condition if d in self.dirs else None
            if condition is not None:
                entry.update(condition)     # a read-only open: how the dir was left
            if d in offline:
                entry["offline_reason"] = offline[d]
                out["log_dirs"].append(entry)
                continue
            entry["partitions"] = [self.logs[tp].describe() for tp in sorted(self.logs)
                                   if self.logs[tp].log_dir == d]
            try:
                listing = layout.scan_log_dir(d)
            except OSError as exc:
                entry["scan_error"] = f"{type(exc).__name__}: {exc}"
                out["log_dirs"].append(entry)
                continue
            moves = []
            for folder, tp in listing.futures:
                future = self.future_logs.get(tp)
                item: dict = {"topic": tp[0], "partition": tp[1], "folder": folder}
                if future is not None and future.folder == folder and future.log_dir == d:
                    item.update(log_end_offset=future.log_end_offset, log_start_offset=future.log_start_offset,
                                size_bytes=future.size_in_bytes())
                current = by_tp.get(tp)
                if current is not None and current.log_dir != d:
                    item.update(source_dir=current.log_dir, source_log_end_offset=current.log_end_offset,
                                source_size_bytes=current.size_in_bytes())
                moves.append(item)
            entry["moves_in_progress"] = moves
            entry["deleting"] = [self._describe_deleting(d, name) for name in listing.deleting]
            entry["strays"] = list(listing.strays)
            entry["foreign"] = [{"name": name, "reason": reason} for name, reason in listing.foreign]
            entry["foreign_files"] = list(listing.foreign_files)
            out["log_dirs"].append(entry)
        if offline:
            out["offline_dirs"] = offline
        if self.load_errors:
            out["load_errors"] = list(self.load_errors)
        return out

    def _describe_deleting(self, log_dir: str, name: str) -> dict:
        path = os.path.join(log_dir, name)
        try:
            deleted_ms = deletion.delete_dir_scheduled_ms(path)
        except OSError:
            deleted_ms = None
        try:
            topic = layout.parse_partition_dir(name)[0]
        except ValueError:
            topic = ""
        delay = self.config.log_config(topic).file_delete_delay_ms
        return {"folder": name, "deleted_ms": deleted_ms,
                "due_ms": None if deleted_ms is None else deleted_ms + delay}
