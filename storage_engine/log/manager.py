"""The set of logs in one or more log dirs (Kafka's ``LogManager``): loading, creation, checkpoints, shutdown.

* Each entry of ``log.dirs`` holds partition folders ``<topic>-<partition>``; a partition lives in exactly
  one dir and a new one goes to the dir with the fewest partitions (decided under a creation lock, so two
  processes never create the same partition twice).
* Opening: per dir, the first process to open it (exclusive flock on ``<dir>/.lock``) consumes the
  clean-shutdown marker and, without it, starts a new crash epoch and recovers every log it loads from its
  recovery point; logs of a dir are loaded by ``num.recovery.threads.per.data.dir`` threads and dirs in
  parallel. A process joining a dir that others have open opens views, except of a partition not loaded since
  the last unclean shutdown, which it loads and recovers (see :mod:`storage_engine.log.locks`).
* Checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``) are written
  atomically from the partitions' shared state, merged with entries of partitions other processes own.
* Closing: the last process to leave a dir flushes and trims every log, writes the checkpoints and the
  clean-shutdown marker.
* Open files: at most ``max_open_logs`` logs hold descriptors at once; the least recently used idle ones are
  parked (:mod:`.open_logs`), so one process can hold 100,000 partitions under a limit of 20,000 descriptors.
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
from dataclasses import dataclass, field

from storage_engine import layout
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.clean_shutdown import consume_clean_shutdown, write_clean_shutdown
from storage_engine.clock import SYSTEM_CLOCK, Clock
from storage_engine.config import StorageConfig
from storage_engine.durable import fsync_dir
from storage_engine.errors import InvalidTopicError, StorageError, StorageIOError
from storage_engine.log.loader import open_log
from storage_engine.log.log import Log
from storage_engine.log.locks import UNKNOWN, DirLock, FileLock, convert_legacy_engine_files
from storage_engine import crashpoints
from storage_engine.log.open_logs import OpenLogs

logger = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


@dataclass
class DirState:
    path: str
    lock: DirLock
    exclusive_at_open: bool
    had_clean_shutdown: bool
    opens_at_open: int = 0
    epoch: int | None = None
    load_messages: list = field(default_factory=list)


class LogManager:
    def __init__(self, config: StorageConfig, clock: Clock = SYSTEM_CLOCK, partitions=None,
                 max_open_logs: int | OpenLogs | None = None):
        self.config = config
        self.open_logs = max_open_logs if isinstance(max_open_logs, OpenLogs) else OpenLogs(max_open_logs)
        self._dir_counts: dict[str, int] | None = None   # partitions per log dir, for placing new ones
        # None: every partition of the log dirs; else only these (topic, partition) pairs are loaded at open.
        self.only = None if partitions is None else frozenset(partitions)
        self.clock = clock
        self.logs: dict[TopicPartition, Log] = {}
        self.dirs: dict[str, DirState] = {}
        self.load_errors: list[str] = []
        self._closed = False

    # -- opening ----------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, config: StorageConfig, *, clock: Clock = SYSTEM_CLOCK, partitions=None,
             max_open_logs: int | OpenLogs | None = None) -> "LogManager":
        """Open the log dirs and load their partitions, or with ``partitions`` (``[(topic, partition)]``) only
        those: a batch of maintenance work opens what it touches, and a damaged partition elsewhere cannot
        stop it. Partitions named but absent are simply not loaded (``get_log`` returns None for them).

        A manager that loaded a subset writes the clean-shutdown marker when it is the last to close only if it
        found the dir clean and had it to itself (see :meth:`_may_vouch_for`); otherwise the next first opener
        recovers each log from its recovery point.

        ``max_open_logs`` bounds the logs holding open files (default: from ``RLIMIT_NOFILE``, see
        :mod:`.open_logs`); an :class:`~.open_logs.OpenLogs` passed instead is a bound shared with the other
        managers given it (a job holding several managers at once)."""
        mgr = cls(config, clock, partitions, max_open_logs)
        for d in config.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:
                raise StorageIOError("cannot create log dir", d, exc) from exc
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(config.log_dirs))) as pool:
                futures = [pool.submit(mgr._load_dir, d) for d in config.log_dirs]
            results = [f.result() for f in futures]
            seen: dict[TopicPartition, str] = {}
            for d, logs in zip(config.log_dirs, results):
                for tp, log in logs.items():
                    mgr.logs[tp] = log
            for d, logs in zip(config.log_dirs, results):
                for tp in logs:
                    if tp in seen:
                        raise StorageError(f"duplicate log directories for {tp[0]}-{tp[1]} are found in both "
                                           f"{seen[tp]} and {d}; a partition must live in exactly one log dir")
                    seen[tp] = d
        except BaseException:
            mgr._abandon(futures if "futures" in locals() else [])
            raise
        return mgr

    def _partition_dirs(self, log_dir: str) -> list[tuple[str, TopicPartition]]:
        return layout.partition_dirs(log_dir, self.load_errors)

    def _partitions_to_load(self, log_dir: str) -> list[tuple[str, TopicPartition]]:
        found = self._partition_dirs(log_dir)
        return found if self.only is None else [item for item in found if item[1] in self.only]

    def _load_dir(self, log_dir: str) -> dict[TopicPartition, Log]:
        lock = DirLock(log_dir)
        exclusive = lock.try_exclusive()
        if not exclusive:
            lock.shared()  # waits while the first opener recovers the dir
        state = DirState(log_dir, lock, exclusive, False, lock.count_open())
        self.dirs[log_dir] = state
        state.had_clean_shutdown = clean = consume_clean_shutdown(log_dir) if exclusive else False
        if exclusive:
            state.load_messages.extend(convert_legacy_engine_files(log_dir))
            epoch = lock.epoch()
            state.epoch = epoch if clean and epoch != UNKNOWN else lock.new_epoch()
        else:
            epoch = lock.epoch()
            state.epoch = epoch if epoch != UNKNOWN else None
        rp_cp, rp_err = OffsetCheckpointFile(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT)).read_or_empty()
        lso_cp, lso_err = OffsetCheckpointFile(
            os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT)).read_or_empty()
        for err in (rp_err, lso_err):
            if err:
                state.load_messages.append(f"{err}; recovering affected logs from offset 0")
        logs: dict[TopicPartition, Log] = {}
        threads = self.config.num_recovery_threads_per_data_dir

        def load_one(item):
            name, (topic, partition) = item
            log, res = open_log(log_dir, topic, partition, self.config.log_config(topic), clock=self.clock,
                                exclusive=exclusive, had_clean_shutdown=clean,
                                recovery_point_checkpoint=rp_cp.get((topic, partition), 0),
                                log_start_offset_checkpoint=lso_cp.get((topic, partition), 0),
                                dir_epoch=state.epoch)
            self._track(log)
            return (topic, partition), log, res

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            futures = [pool.submit(load_one, item) for item in self._partitions_to_load(log_dir)]
        failure = None
        for f in futures:
            if f.exception() is not None:
                failure = failure or f.exception()
                continue
            tp, log, res = f.result()
            logs[tp] = log
            if res is not None:
                for m in res.messages:
                    state.load_messages.append(f"{log.name}: {m}")
        if failure is not None:
            for log in logs.values():
                log.close(clean=False)
            raise failure
        if exclusive:
            lock.shared()
        return logs

    def _abandon(self, dir_futures) -> None:
        """Undo a failed open: close the logs loaded so far (without flushing) and release every dir lock, so
        a failure leaves no lock behind in this process."""
        self._closed = True
        for f in dir_futures:
            if f.done() and f.exception() is None:
                for log in f.result().values():
                    log.close(clean=False)
        for state in self.dirs.values():
            state.lock.close()

    # -- partitions -------------------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> Log | None:
        layout.partition_dir_name(topic, partition)
        log = self.logs.get((topic, partition))
        if log is None:
            log = self._adopt(topic, partition)
        return log

    def _epoch(self, log_dir: str) -> int | None:
        state = self.dirs.get(log_dir)
        return state.epoch if state is not None else None

    def _adopt(self, topic: str, partition: int) -> Log | None:
        """A partition created by another process after this manager opened (or not loaded by a subset open)."""
        name = layout.partition_dir_name(topic, partition)
        for d in self.config.log_dirs:
            if os.path.isdir(os.path.join(d, name)):
                rp_cp, _ = OffsetCheckpointFile(os.path.join(d, layout.RECOVERY_POINT_CHECKPOINT)).read_or_empty()
                lso_cp, _ = OffsetCheckpointFile(os.path.join(d, layout.LOG_START_OFFSET_CHECKPOINT)).read_or_empty()
                log, _ = open_log(d, topic, partition, self.config.log_config(topic), clock=self.clock,
                                  exclusive=False, dir_epoch=self._epoch(d),
                                  recovery_point_checkpoint=rp_cp.get((topic, partition), 0),
                                  log_start_offset_checkpoint=lso_cp.get((topic, partition), 0))
                self._track(log)
                self.logs[(topic, partition)] = log
                return log
        return None

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        log = self.get_log(topic, partition)
        if log is not None:
            return log
        name = layout.partition_dir_name(topic, partition)
        with FileLock(os.path.join(self.config.log_dirs[0], layout.CREATE_LOCK_FILE)):
            log = self._adopt(topic, partition)
            if log is not None:
                return log
            target = self._least_loaded_dir()
            log, _ = open_log(target, topic, partition, self.config.log_config(topic), clock=self.clock,
                              exclusive=True, create=True, dir_epoch=self._epoch(target))
            fsync_dir(target)
            if self._dir_counts is not None:
                self._dir_counts[target] += 1
        self._track(log)
        self.logs[(topic, partition)] = log
        return log

    def _least_loaded_dir(self) -> str:
        """Kafka's placement: the log dir with the fewest partitions (the first on a tie). The dirs are counted
        once per manager and then kept up to date with its own creations (listing a dir of 100,000 partitions
        for every creation would make creating them quadratic); partitions other processes create meanwhile
        only make the placement less even, never wrong."""
        dirs = self.config.log_dirs
        if len(dirs) == 1:
            return dirs[0]
        if self._dir_counts is None:
            self._dir_counts = {d: len(self._partition_dirs(d)) for d in dirs}
        return min(dirs, key=lambda d: (self._dir_counts[d], dirs.index(d)))   # type: ignore[index]

    def _track(self, log: Log) -> None:
        log.files = self.open_logs
        self.open_logs.used(log)

    def partitions(self, topic_filter=None) -> list[TopicPartition]:
        tps = sorted(self.logs)
        if topic_filter:
            tps = [tp for tp in tps if tp[0] in topic_filter]
        return tps

    def dir_of(self, tp: TopicPartition) -> str:
        return self.logs[tp].log_dir

    # -- checkpoints ------------------------------------------------------------------------------------------
    def checkpoint(self, log_dirs=None) -> dict:
        """Write recovery-point and log-start-offset checkpoints of every log dir; returns what was written."""
        written = {}
        for d in (log_dirs or self.config.log_dirs):
            written[d] = self._checkpoint_dir(d)
        return written

    def _checkpoint_dir(self, log_dir: str) -> dict:
        mine = {tp: log for tp, log in self.logs.items() if log.log_dir == log_dir}
        present = {tp for _, tp in self._partition_dirs(log_dir)}
        rp_file = OffsetCheckpointFile(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT))
        lso_file = OffsetCheckpointFile(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT))
        with FileLock(os.path.join(log_dir, layout.CHECKPOINT_LOCK_FILE)):
            rp, _ = rp_file.read_or_empty()
            lso, _ = lso_file.read_or_empty()
            rp = {tp: v for tp, v in rp.items() if tp in present and tp not in mine}
            lso = {tp: v for tp, v in lso.items() if tp in present and tp not in mine}
            for tp, log in mine.items():
                state = log.lock.read_state()
                rp[tp] = state.recovery_point if state.recovery_point != UNKNOWN else log.recovery_point
                start = state.log_start_offset if state.log_start_offset != UNKNOWN else log.log_start_offset
                log.refresh()
                if start > log.segments[0].base_offset:
                    lso[tp] = start
            rp_file.write(rp)
            crashpoints.reached("checkpoint.between-files")
            lso_file.write(lso)
        return {"recovery_points": {f"{t}-{p}": v for (t, p), v in sorted(rp.items())},
                "log_start_offsets": {f"{t}-{p}": v for (t, p), v in sorted(lso.items())}}

    # -- flushing ---------------------------------------------------------------------------------------------
    def flush_all(self, topic_filter=None) -> list[dict]:
        out = []
        for tp in self.partitions(topic_filter):
            log = self.logs[tp]
            before = log.recovery_point
            after = log.flush()
            out.append({"topic": tp[0], "partition": tp[1], "recovery_point_before": before,
                        "recovery_point": after})
        return out

    # -- closing ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for d, state in self.dirs.items():
            last = state.lock.try_exclusive()
            logs = [log for log in self.logs.values() if log.log_dir == d]
            try:
                for log in logs:
                    log.close(clean=last)
                    self.open_logs.forget(log)
                if last:
                    self._write_checkpoints_after_close(d, logs)
                    if self._may_vouch_for(state):
                        write_clean_shutdown(d)
            finally:
                state.lock.close()

    def _may_vouch_for(self, state: DirState) -> bool:
        """Whether this manager, closing last, may write the clean-shutdown marker: it flushed every log it had,
        so it may if it had every log, or if it found the dir clean, opened it first and no other manager
        joined since (then the logs it never loaded are as the consumed marker described them)."""
        if self.only is None:
            return True
        return state.exclusive_at_open and state.had_clean_shutdown and state.lock.opens() == state.opens_at_open

    def _write_checkpoints_after_close(self, log_dir: str, logs: list[Log]) -> None:
        present = {tp for _, tp in self._partition_dirs(log_dir)}
        rp_file = OffsetCheckpointFile(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT))
        lso_file = OffsetCheckpointFile(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT))
        rp, _ = rp_file.read_or_empty()
        lso, _ = lso_file.read_or_empty()
        rp = {tp: v for tp, v in rp.items() if tp in present}
        lso = {tp: v for tp, v in lso.items() if tp in present}
        for log in logs:
            tp = (log.topic, log.partition)
            rp[tp] = log.recovery_point
            lso.pop(tp, None)
            if log.log_start_offset > log.segments[0].base_offset:
                lso[tp] = log.log_start_offset
        rp_file.write(rp)
        lso_file.write(lso)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def describe(self) -> dict:
        out: dict = {"log_dirs": []}
        for d in self.config.log_dirs:
            parts = [self.logs[tp].describe() for tp in sorted(self.logs) if self.logs[tp].log_dir == d]
            msgs = self.dirs[d].load_messages if d in self.dirs else []
            out["log_dirs"].append({"path": d, "partitions": parts, "load_messages": msgs})
        if self.load_errors:
            out["load_errors"] = list(self.load_errors)
        return out
