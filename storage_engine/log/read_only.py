"""Opening partitions read-only: what ``describe``, ``consume``, ``status``, ``verify`` and every ``--dry-run``
see, without changing a byte of the log dirs.

A read-only open (``LogManager.open(config, read_only=True)``) creates no file, writes none, renames and deletes
none, and takes no lock: no lock file is created or written (the dir's ``.lock`` and the partitions' lock files
are only read, and only if they exist), the clean-shutdown marker is neither consumed nor written, no checkpoint
is written, no index is rebuilt or trimmed, no producer snapshot or ``leader-epoch-checkpoint`` is written, and no
recovery runs. Each partition is read as the next writable open would find it, in memory only:

* a swap a dead cleaner left half done, and ``.swap``/``.cleaned`` files without a record, are resolved as the
  loader would (:func:`storage_engine.log.swap.pending_plan`, :func:`storage_engine.log.swap.plan_orphans`), by
  applying the plan to the file names: each segment is read from the file that will bear its name (a ``.swap``,
  or a ``.deleted`` file a rollback gives its name back); ``.deleted`` files are otherwise ignored, never removed;
* an index file that is missing, fails Kafka's sanity checks, or points past the data is replaced, in memory, by
  an empty index (the index is sparse: a lookup then scans the segment from its start);
* the bytes at the end of the active segment that do not parse (a writer killed mid-append) are not read; the
  next writable open truncates them;
* the log start offset is the shared state's (else the checkpoint's), raised to the first segment's base except
  over offsets recorded lost (:func:`storage_engine.log.losses.kept_log_start`), as the loader does; the
  producer state is rebuilt from the snapshots and the batches after them without writing a snapshot.

A read-only log refreshes itself as a reader does (:mod:`storage_engine.log.view`): growth of the active segment
is validated without the lock; when another process changed the set of segments (its generation moved) the
partition is read again, from scratch, as above. So read-only opens are safe while other processes write:
nothing they rely on changes. Every operation that would change the partition raises :class:`ReadOnlyError`.

Whether a dir was shut down cleanly is read, never consumed (:func:`dir_condition`): without the marker and with
no process holding the dir's lock (``/proc/locks``), the dir crashed and the next writable open recovers it; a
read-only open says so (``recovery_pending``) and answers from the files as they are.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Any, NoReturn

from storage_engine import layout
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.errors import (CorruptIndexError, PartitionDeletedError, PartitionMovedError, PartitionNotFoundError,
                                   StorageError, StorageIOError)
from storage_engine.log import losses, swap, view
from storage_engine.log.locks import (DELETED, LIVE, MOVED, UNKNOWN, CleaningClaim, DirLock, PartitionLock, PartitionState, lock_path,
                                      peek_state)
from storage_engine.log.log import Log
from storage_engine.log.producer_state_manager import ProducerStateManager, rebuild
from storage_engine.log.segments import LogSegments
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.time_index import TimeIndex

# A partition whose generation moves while it is read is read again, at most this many times.
READ_ATTEMPTS = 5


class ReadOnlyError(StorageError):
    """An operation that would change a log was called on a log opened read-only."""


class NoSegmentError(StorageError):
    """A partition folder without a segment (the next writable open creates one): nothing to read."""


def refuse(what: str, name: str) -> NoReturn:
    raise ReadOnlyError(f"{what} of {name} is refused: the logs were opened read-only (nothing may be written)")


# -- the dir ---------------------------------------------------------------------------------------------------

def _flock_holders(path: str) -> bool | None:
    """Whether any process holds an ``flock`` on ``path`` (read from ``/proc/locks``, which takes no lock and
    changes nothing); None when that cannot be told (no ``/proc/locks``, or no such file)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    wanted = {f"{major:02x}:{minor:02x}:{st.st_ino}", f"{major:x}:{minor:x}:{st.st_ino}"}
    for line in lines:
        fields = line.split()
        if "FLOCK" in fields and any(f in wanted for f in fields):
            return True
    return False


def dir_condition(log_dir: str) -> dict[str, Any]:
    """How a dir was left, read without consuming anything: ``clean_shutdown`` (the marker is there),
    ``in_use`` (a process has it open: True, False, or None when that cannot be told), ``recovery_pending`` (no
    marker and nobody has it open: the last process using it died, and the next writable open recovers it)."""
    clean = os.path.exists(os.path.join(log_dir, layout.CLEAN_SHUTDOWN_FILE))
    lock_file = os.path.join(log_dir, layout.DIR_LOCK_FILE)
    in_use = _flock_holders(lock_file) if os.path.exists(lock_file) else False
    return {"clean_shutdown": clean, "in_use": in_use, "recovery_pending": not clean and in_use is False}


def condition_message(cond: dict[str, Any]) -> str | None:
    if cond["recovery_pending"]:
        return ("the log dir was not shut down cleanly (no clean-shutdown marker, and no process has it open): "
                "recovery is pending, and the next writable open will run it; read as the files are, without "
                "recovering anything")
    if not cond["clean_shutdown"] and cond["in_use"] is None:
        return ("the log dir has no clean-shutdown marker, and whether a process has it open cannot be told: "
                "read as the files are, without recovering anything")
    return None


def read_dir_checkpoints(log_dir: str) -> tuple[dict, dict, list[str]]:
    """(recovery points, log start offsets, errors) of a dir's checkpoint files (read only)."""
    rp, rp_err = OffsetCheckpointFile(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT)).read_or_empty()
    lso, lso_err = OffsetCheckpointFile(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT)).read_or_empty()
    return rp, lso, [e for e in (rp_err, lso_err) if e]


class ReadOnlyDirLock(DirLock):
    """The dir lock as a read-only open uses it: never created, never locked, never written (the crash epoch is
    read from the file if there is one)."""

    def __init__(self, log_dir: str):   # no super().__init__: it creates the file
        self.path = os.path.join(log_dir, layout.DIR_LOCK_FILE)
        self._fd = -1

    def try_exclusive(self) -> bool:
        return False

    def shared(self) -> None:
        pass

    def count_open(self) -> int:
        refuse("joining the log dir", self.path)

    def opens(self) -> int:
        return 0

    def epoch(self) -> int:
        try:
            with open(self.path, "rb") as f:
                data = f.read(16)[8:16]
        except OSError:
            return UNKNOWN
        return int.from_bytes(data, "big", signed=True) if len(data) == 8 else UNKNOWN

    def new_epoch(self) -> int:
        refuse("starting a crash epoch", self.path)

    def close(self) -> None:
        pass


class ClaimProbe(CleaningClaim):
    """A cleaning claim as a dry run takes it: whether a cleaner holds the claim, probed without creating its file
    (without one, no cleaner ever claimed the partition) and without holding anything afterwards."""

    def try_acquire(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        except OSError as exc:
            raise StorageIOError("cannot open cleaning claim", self.path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)     # releases the probe's shared lock at once
        return True

    def release(self) -> None:
        pass

    def unlink(self) -> None:
        refuse("removing the cleaning claim", self.path)


# -- the partition lock, read only -----------------------------------------------------------------------------

class ReadOnlyPartitionLock(PartitionLock):
    """The partition lock as a read-only log uses it: the state is read from the file at the path (never created,
    never locked, never written); taking the lock is refused. Once the file at the path is no longer the one
    found at open (a move or deletion retired it), the state reads *moved*."""

    def __init__(self, path: str):   # no super().__init__: it creates the file
        self.path = path
        self._fd = -1
        self._depth = 0
        self._owner = None
        self._closed = False
        self._parked = False
        self._identity = self._stat_identity() or (0, 0)

    def _stat_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageIOError("cannot read partition lock file", self.path, exc) from exc
        return st.st_dev, st.st_ino

    @property
    def is_open(self) -> bool:
        return not self._closed

    def park(self) -> bool:
        return True     # holds no descriptor

    def acquire(self, blocking: bool = True, timeout_s: float | None = None) -> None:
        refuse("taking the partition lock", self.path)

    def release(self) -> None:
        pass

    def read_state(self) -> PartitionState:
        if self._identity != (0, 0) and self._stat_identity() != self._identity:
            return PartitionState(status=MOVED)
        return peek_state(self.path) or PartitionState()

    def write_state(self, state: PartitionState) -> None:
        refuse("writing the shared state", self.path)

    def sync_state(self) -> None:
        refuse("writing the shared state", self.path)

    def retire(self, status: int) -> None:
        refuse("retiring the partition lock", self.path)

    def unlink(self) -> None:
        refuse("removing the partition lock", self.path)

    def close(self) -> None:
        self._closed = True


# -- segments read from the files that will bear their names --------------------------------------------------

class _EmptyIndexMixin:
    """An index with no entry, held in memory only (for a missing or damaged index file): a lookup finds the
    segment's start."""
    path: str

    def _open(self) -> None:
        self._fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._set_length(0)  # type: ignore[attr-defined]


class EmptyOffsetIndex(_EmptyIndexMixin, OffsetIndex):
    pass


class EmptyTimeIndex(_EmptyIndexMixin, TimeIndex):
    pass


class ReadOnlySegment(LogSegment):
    """A segment opened read-only whose files may still bear their pending names (``paths``: suffix -> path), and
    whose indexes found unusable (``empty``: suffixes) are replaced by empty ones in memory."""

    def __init__(self, dir_path: str, base_offset: int, config: LogConfig, paths: dict[str, str]):
        super().__init__(dir_path, base_offset, None, None, None, index_interval_bytes=config.index_interval_bytes,
                         max_index_size=config.segment_index_bytes, writable=False)
        self._paths.update(paths)
        self.empty: set[str] = set()
        try:
            self._stat_size = os.stat(self._paths[layout.LOG_SUFFIX]).st_size
        except OSError as exc:
            raise StorageIOError("cannot stat log file", self._paths[layout.LOG_SUFFIX], exc) from exc

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = self._open_index(layout.INDEX_SUFFIX, OffsetIndex, EmptyOffsetIndex)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = self._open_index(layout.TIME_INDEX_SUFFIX, TimeIndex, EmptyTimeIndex)
        return self._time_index

    def _open_index(self, suffix: str, kind: Any, empty: Any) -> Any:
        path = self._paths[suffix]
        if suffix not in self.empty:
            try:
                index = kind(path, self.base_offset, self.max_index_size, writable=False)
            except StorageIOError:
                self.empty.add(suffix)     # missing (or unreadable): the loader would rebuild it
            else:
                try:
                    index.sanity_check()
                    return index
                except CorruptIndexError:
                    index.close(trim=False)
                    self.empty.add(suffix)
        return empty(path, self.base_offset, self.max_index_size, writable=False)

    def release(self) -> None:
        self.close(trim=False)
        self._log = self._offset_index = self._time_index = None
        self._stat_size = os.stat(self._paths[layout.LOG_SUFFIX]).st_size

    def index_past_data(self) -> bool:
        """Whether the offset index names a position past the end of the ``.log`` (it outran the data)."""
        index = self.offset_index
        return index.entries > 0 and index.lookup(index.last_offset)[1] >= max(self.size, 1)


def _effective_files(log_dir: str, folder: str, dir_path: str, messages: list[str]) -> dict[str, str]:
    """{name after the pending changes: name now}, as the loader would resolve them (files unchanged)."""
    names = sorted(os.listdir(dir_path))
    plan, plan_messages, _ = swap.pending_plan(log_dir, folder, dir_path)
    messages.extend(f"pending: {m} (by the next writable open)" for m in plan_messages)
    files = plan.effective_names(names) if plan is not None else {n: n for n in names}
    orphans = swap.plan_orphans(dir_path, sorted(files))
    messages.extend(f"pending: {m} (at the next writable open)" for m in orphans.messages)
    if orphans.actions:
        files = {k: files[v] for k, v in orphans.effective_names(sorted(files)).items()}
    return files


def effective_segments(log_dir: str, folder: str, config: LogConfig, messages: list[str]) -> list[ReadOnlySegment]:
    """The partition's segments as the next writable open will name them, each opened (lazily, read-only) from
    the file that will bear its name; ``messages`` gets what that open will resolve."""
    dir_path = os.path.join(log_dir, folder)
    files = _effective_files(log_dir, folder, dir_path, messages)
    bases = sorted(layout.offset_from_filename(f) for f in files
                   if f.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(f))
    segments = []
    for base in bases:
        paths = {}
        for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX):
            current = files.get(os.path.basename(layout.segment_file(dir_path, base, suffix)))
            if current is not None:
                paths[suffix] = os.path.join(dir_path, current)
        segments.append(ReadOnlySegment(dir_path, base, config, paths))
    return segments


class Snapshot:
    """What a read-only read of a partition found: segments, offsets, producer state, messages."""

    def __init__(self, segments: list[LogSegment], log_start_offset: int, log_end_offset: int, recovery_point: int,
                 generation: int, producer_state: ProducerStateManager, messages: list[str], last_flush_ms: int):
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.generation = generation
        self.producer_state = producer_state
        self.messages = messages
        self.last_flush_ms = last_flush_ms


def read_partition(log_dir: str, folder: str, name: str, config: LogConfig, lock: ReadOnlyPartitionLock, *,
                   recovery_point_checkpoint: int, log_start_offset_checkpoint: int, now_ms: int) -> Snapshot:
    """Read a partition as the next writable open would find it, changing nothing (module docstring). Read again
    while its generation moves under the read."""
    for _ in range(READ_ATTEMPTS):
        before = lock.read_state()
        _check_live(name, os.path.join(log_dir, folder), before)
        try:
            snap = _read_once(log_dir, folder, name, config, before, recovery_point_checkpoint,
                              log_start_offset_checkpoint, now_ms)
        except (FileNotFoundError, StorageIOError, CorruptIndexError):
            if lock.read_state().generation == before.generation:
                raise
            continue
        if lock.read_state().generation == before.generation:
            return snap
        for seg in snap.segments:
            seg.close(trim=False)
    raise StorageError(f"partition {name} kept changing while it was read ({READ_ATTEMPTS} attempts)")


def _check_live(name: str, dir_path: str, state: PartitionState) -> None:
    if state.status == LIVE:
        return
    if state.status == DELETED:
        raise PartitionDeletedError(f"partition {name} was deleted (it was in {dir_path})")
    raise PartitionMovedError(f"partition {name} moved away from {dir_path}")


def _read_once(log_dir: str, folder: str, name: str, config: LogConfig, state: PartitionState,
               rp_cp: int, lso_cp: int, now_ms: int) -> Snapshot:
    dir_path = os.path.join(log_dir, folder)
    if not os.path.isdir(dir_path):
        raise PartitionNotFoundError(f"partition {folder} does not exist in {log_dir}")
    messages: list[str] = []
    segments: list[LogSegment] = list(effective_segments(log_dir, folder, config, messages))
    known = state.generation != 0
    if known and state.log_start_offset != UNKNOWN:
        lso_cp = max(lso_cp, state.log_start_offset)
    if known and state.recovery_point != UNKNOWN:
        rp_cp = min(rp_cp, state.recovery_point)
    if not segments:
        return Snapshot([], lso_cp, lso_cp, lso_cp, state.generation, ProducerStateManager(dir_path, name),
                        messages + ["no segment: the next writable open creates one"], now_ms)
    active = segments[-1]
    assert isinstance(active, ReadOnlySegment)
    if active.index_past_data():
        active.offset_index.close(trim=False)
        active.time_index.close(trim=False)
        active._offset_index = active._time_index = None
        active.empty.update((layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX))
    for seg in segments:
        assert isinstance(seg, ReadOnlySegment)
        if seg is not active and seg.is_open:
            seg.release()
    log_start = losses.kept_log_start(max(lso_cp, segments[0].base_offset), lso_cp, losses.recorded(dir_path))
    psm = ProducerStateManager(dir_path, name)
    # The end: the last whole batch of the active segment (a torn tail is not read).
    holder = _TailReader(name, dir_path, config, segments, psm)
    view.validate_active_tail(holder, 0, replay=False)   # type: ignore[arg-type]
    end = holder.log_end_offset
    if holder.torn_bytes:
        messages.append(f"{os.path.basename(active.path)}: {holder.torn_bytes} bytes at the end do not parse (a "
                        "write cut short): not read; the next writable open truncates them")
    for seg in segments:
        if seg.empty & {layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX}:    # type: ignore[attr-defined]
            messages.append(f"{os.path.basename(seg.path)}: index missing or damaged: read without it (the next "
                            "writable open rebuilds it)")
    log_start = min(log_start, end)
    rebuild(psm, segments, log_start, end, exclusive=False)
    last_flush = state.last_flush_ms if known and state.last_flush_ms != UNKNOWN else now_ms
    return Snapshot(segments, log_start, end, min(rp_cp, end), state.generation, psm, messages, last_flush)


class _TailReader:
    """The attributes :func:`storage_engine.log.view.validate_active_tail` reads and sets, for a reader that
    holds no lock (it never truncates: it stops short of bytes that do not parse)."""

    def __init__(self, name: str, dir_path: str, config: LogConfig, segments: list[LogSegment],
                 psm: ProducerStateManager):
        self.name, self.dir, self.config = name, dir_path, config
        self.segment_list = LogSegments(segments)
        self.producer_state = psm
        self.lock = _NoLock()
        self.view = view.PartitionView(0, 0)
        self.log_end_offset = segments[-1].base_offset
        self.recovery_point = 0
        active = segments[-1]
        self.file_size = os.stat(active.path).st_size

    @property
    def torn_bytes(self) -> int:
        active = self.segment_list.active
        return 0 if view.at_zero_tail(active, active.size) else max(0, self.file_size - active.size)


class _NoLock:
    held = False


# -- the log ---------------------------------------------------------------------------------------------------

class ReadOnlyLog(Log):
    """A :class:`Log` opened read-only (module docstring): reads, describes and plans work; every change raises
    :class:`ReadOnlyError`."""

    read_only = True

    def __init__(self, log_dir: str, topic: str, partition: int, config: LogConfig, lock: ReadOnlyPartitionLock,
                 snap: Snapshot, *, clock: Clock, folder: str | None = None, rp_cp: int = 0, lso_cp: int = 0):
        super().__init__(log_dir, topic, partition, config, lock, LogSegments(snap.segments),
                         log_start_offset=snap.log_start_offset, recovery_point=snap.recovery_point,
                         next_offset=snap.log_end_offset, generation=snap.generation, clock=clock,
                         last_flush_ms=snap.last_flush_ms, folder=folder, producer_state=snap.producer_state)
        self.load_messages = list(snap.messages)
        self._checkpoints = (rp_cp, lso_cp)
        self._adopt(snap)

    def _adopt(self, snap: Snapshot) -> None:
        self.segment_list = LogSegments(snap.segments)
        self.log_start_offset = snap.log_start_offset
        self.recovery_point = snap.recovery_point
        self.log_end_offset = snap.log_end_offset
        self.producer_state = snap.producer_state
        self.last_flush_ms = snap.last_flush_ms
        self.view = view.PartitionView(snap.generation, snap.segments[-1].size if snap.segments else 0)

    def _reread(self) -> None:
        assert isinstance(self.lock, ReadOnlyPartitionLock)
        old = self.segment_list.as_list()
        snap = read_partition(self.log_dir, self.folder, self.name, self.config, self.lock,
                              recovery_point_checkpoint=self._checkpoints[0],
                              log_start_offset_checkpoint=self._checkpoints[1], now_ms=self.clock.milliseconds())
        self.retire_segments(old)
        self._adopt(snap)
        self._parked = False

    def _refresh_read_only(self) -> None:
        self._check_open()
        self._used()
        if not self.segment_list.as_list():
            view.check_live(self, self.lock.read_state())
            return
        if not self._parked and view.refresh_unlocked(self):
            return
        view.check_live(self, self.lock.read_state())
        self._reread()

    def refresh(self) -> None:
        with self.mutex:
            self._refresh_read_only()

    @contextlib.contextmanager
    def locked(self) -> Iterator[Log]:
        """No lock is taken: the view is brought up to date (without the lock, as a reader's) and held still by
        the log's mutex while the block reads it. Any change inside raises :class:`ReadOnlyError`."""
        with self.mutex:
            self._refresh_read_only()
            yield self

    def close(self, *, clean: bool = False) -> None:
        with self.mutex:
            files, self.files = self.files, None
            if files is not None:
                files.forget(self)
            for seg in self.segment_list:
                seg.close(trim=False)
            self.lock.close()

    def expire_producers(self, now_ms: int, expiration_ms: int, *, dry_run: bool = False) -> list[int]:
        if not dry_run:
            refuse("expiring producers", self.name)
        return super().expire_producers(now_ms, expiration_ms, dry_run=True)

    def _refused(self, what: str) -> NoReturn:
        refuse(what, self.name)

    def append_records(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("appending")

    def append_batches(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("appending")

    def append_end_txn(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("writing a transaction marker")

    def append_as_follower(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("appending")

    def roll(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("rolling")

    def flush(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("flushing")

    def truncate_to(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("truncating")

    def truncate_fully_and_start_at(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("truncating")

    def delete_segments_locked(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("deleting segments")

    def replace_segments(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("replacing segments")

    def delete_records(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("deleting records")

    def publish(self, *, bump: bool) -> None:
        self._refused("publishing the shared state")

    def roll_locked(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("rolling")

    def flush_locked(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("flushing")

    def delete_segment_files(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("deleting segment files")

    def maybe_roll(self, *args: Any, **kwargs: Any) -> Any:
        self._refused("rolling")


def open_read_only(log_dir: str, topic: str, partition: int, config: LogConfig, *, clock: Clock,
                   recovery_point_checkpoint: int = 0, log_start_offset_checkpoint: int = 0,
                   folder: str | None = None) -> ReadOnlyLog:
    """Open a partition's log read-only (module docstring). Raises :class:`PartitionNotFoundError` when its
    folder is not there, :class:`PartitionDeletedError`/:class:`PartitionMovedError` when its lock says so."""
    folder = folder or layout.partition_dir_name(topic, partition)
    lock = ReadOnlyPartitionLock(lock_path(log_dir, folder))
    name = layout.partition_dir_name(topic, partition)
    snap = read_partition(log_dir, folder, name, config, lock, recovery_point_checkpoint=recovery_point_checkpoint,
                          log_start_offset_checkpoint=log_start_offset_checkpoint, now_ms=clock.milliseconds())
    if not snap.segments:
        raise NoSegmentError("no segment, nothing to read (the next writable open creates one)")
    return ReadOnlyLog(log_dir, topic, partition, config, lock, snap, clock=clock,
                       folder=None if folder == name else folder, rp_cp=recovery_point_checkpoint,
                       lso_cp=log_start_offset_checkpoint)


__all__ = ["LIVE", "NoSegmentError", "ReadOnlyError", "ReadOnlyLog", "ReadOnlyPartitionLock", "dir_condition", "open_read_only",
           "read_dir_checkpoints"]
