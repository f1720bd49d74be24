"""The files of a read-only open (:mod:`storage_engine.log.read_only`), read and never changed: how a log dir was
left, its lock files as a read-only open sees them (never created, locked or written), a dry run's probe of a
cleaning claim, and a partition's segments as the next writable open will name them, each read from the file
that will bear its name, with any unusable index replaced by an empty one in memory.
"""
from __future__ import annotations

import fcntl
import os
from typing import Any, NoReturn

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.errors import CorruptIndexError, StorageError, StorageIOError
from storage_engine.log import swap
from storage_engine.log.locks import (MOVED, UNKNOWN, CleaningClaim, DirLock, PartitionLock, PartitionState,
                                      peek_state)
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.time_index import TimeIndex


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

    def drop_indexes(self) -> None:
        """Replace the offset and time indexes by empty ones, in memory (the files stay as they are)."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close(trim=False)
        self._offset_index = self._time_index = None
        self.empty.update((layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX))

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


def effective_segments(log_dir: str, folder: str, config: LogConfig, messages: list[str],
                       names: list[str] | None = None) -> list[ReadOnlySegment]:
    """The partition's segments as the next writable open will name them, each opened (lazily, read-only) from
    the file that will bear its name; ``messages`` gets what that open will resolve, ``names`` (if given) the
    folder's names as that open will find them."""
    dir_path = os.path.join(log_dir, folder)
    files = _effective_files(log_dir, folder, dir_path, messages)
    if names is not None:
        names.extend(sorted(files))
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
