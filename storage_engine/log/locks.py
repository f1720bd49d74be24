"""Every flock the engine takes, and the small shared state that travels with a partition's lock.

Kafka has one broker process per log dir; this engine has several (an application appending, Airflow tasks
flushing, retaining, compacting). They agree through files in the log dir root, all named in
:mod:`storage_engine.layout` (never inside a partition folder, which stays pure Kafka layout):

* :class:`DirLock` on ``.lock``: held shared by every open ``LogManager``; exclusive for the first opener and
  the last closer (consuming and writing the clean-shutdown marker);
* :class:`PartitionLock` on ``.engine+partition+<topic>-<partition>``: serialises every change to the partition
  (appends, rolls, flushes that move the recovery point, truncation, segment deletion, the swap after cleaning)
  and holds the partition's shared state;
* :class:`CleaningClaim` on ``.engine+cleaning+<topic>-<partition>``: taken without waiting by whoever cleans
  the partition (or runs retention on a compacted one); a second run skips it;
* :class:`FileLock`: a short, blocking lock on one of the dir's lock files (partition creation, checkpoint
  writes, the cleaner checkpoint and uncleanable state).

A partition lock file's 48 bytes hold the state every holder must see current, big-endian int64s::

    0  generation        bumped whenever the set of segments, the log start offset or a segment's length
                         changes (a roll, a swap, retention, truncation, a torn tail cut away)
    8  log_start_offset  -1 = unknown (fall back to the log-start-offset checkpoint)
   16  recovery_point    -1 = unknown (fall back to the recovery-point checkpoint)
   24  last_flush_ms     -1 = unknown; when the log was last flushed (``flush.ms`` is measured from it)
   32  loaded_epoch      the dir's crash epoch when the partition was last fully loaded (-1 = unknown)
   40  status            0 live; 1 deleted; 2 moved (the folder this lock guards is no longer the partition's
                         home: find it again in the log dirs). Files of 40 bytes or less are live.

The dir lock file holds, after the count of managers that joined (bytes 0-8), the dir's *crash epoch*
(bytes 8-16): a random number drawn by every first opener that finds no clean-shutdown marker. A partition
whose ``loaded_epoch`` differs has not been loaded since the last unclean shutdown, so no process has it open
(whoever opened it would have loaded it in this epoch): its first opener, even one joining a dir in use, loads
and recovers it fully instead of trusting a view (:func:`storage_engine.log.loader.open_log`).

A deleted or moved partition's lock is *retired* (:meth:`PartitionLock.retire`): its status is written and
fsynced under the lock, before the first rename of the change, and its file is unlinked once the change is done,
so a process still holding the old file learns what happened the next time it takes the lock, and a partition
created later under the same name gets a fresh file. A *parked* lock (its descriptor closed to bound the open
files, :mod:`storage_engine.log.open_logs`) remembers its file's identity: when the name no longer leads to that
file, the partition was retired while the lock was parked, and the lock reads as *moved* (the owner looks the
partition up again: it finds where it moved, or that it is gone) and cannot be taken.

A process caches its view of the partition together with the generation it saw (:mod:`storage_engine.log.view`).
The state is not fsynced: it is shared through the page cache while processes run; after a machine crash the
durable Kafka checkpoint files are the source of truth, and they are written from this state.

flock locks die with their process, so a writer killed mid-append releases the lock; the next holder finds
the torn tail when it re-validates and truncates it. Files named by earlier versions of the engine are
converted once, by the first process to open the dir (:func:`convert_legacy_engine_files`).
"""
from __future__ import annotations

import fcntl
import os
import struct
import threading
import time

from storage_engine import layout
from storage_engine.durable import durable_rename
from storage_engine.errors import LogLockedError, PartitionMovedError, StorageIOError

_STATE = struct.Struct(">qqqqqq")
_STATE_V3 = struct.Struct(">qqqqq")  # files written before status existed
_STATE_V2 = struct.Struct(">qqqq")   # files written before loaded_epoch existed
_STATE_V1 = struct.Struct(">qqq")   # files written before last_flush_ms existed
_EPOCH = struct.Struct(">q")
_EPOCH_POSITION = 8
UNKNOWN = -1
LIVE, DELETED, MOVED = 0, 1, 2
STATUS_NAMES = {LIVE: "live", DELETED: "deleted", MOVED: "moved"}


def lock_path(log_dir: str, partition_dir_name: str) -> str:
    """The partition's lock and state file (see :func:`storage_engine.layout.partition_state_file`)."""
    return layout.partition_state_file(log_dir, partition_dir_name)


def _open_lock_file(path: str, what: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StorageIOError(f"cannot open {what}", path, exc) from exc


class PartitionState:
    __slots__ = ("generation", "log_start_offset", "recovery_point", "last_flush_ms", "loaded_epoch", "status")

    def __init__(self, generation: int = 0, log_start_offset: int = UNKNOWN, recovery_point: int = UNKNOWN,
                 last_flush_ms: int = UNKNOWN, loaded_epoch: int = UNKNOWN, status: int = LIVE):
        self.generation = generation
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.last_flush_ms = last_flush_ms
        self.loaded_epoch = loaded_epoch
        self.status = status

    def __repr__(self) -> str:
        return (f"PartitionState(generation={self.generation}, log_start_offset={self.log_start_offset}, "
                f"recovery_point={self.recovery_point}, last_flush_ms={self.last_flush_ms}, "
                f"loaded_epoch={self.loaded_epoch}, status={STATUS_NAMES.get(self.status, self.status)})")


class PartitionLock:
    """An exclusive lock over one partition, plus its shared state: between processes an ``flock`` on the lock
    file, between the threads of one process a re-entrant thread lock taken first. Re-entrant for the thread that
    holds it (``depth`` counts its nested acquisitions); :attr:`held` is true only in that thread."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int = _open_lock_file(path, "partition lock file")
        self._depth = 0
        self._owner: int | None = None    # the thread holding the lock (threading.get_ident), None when free
        self._mutex = threading.RLock()
        # Held while the descriptor is closed or replaced, and by read_state (which takes no _mutex) while it
        # reads through it: a reader never uses a descriptor closed meanwhile, or its number reused by a file
        # another thread opened.
        self._fd_guard = threading.Lock()
        self._parked = False
        self._identity = (0, 0)

    @property
    def held(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @property
    def busy(self) -> bool:
        """Whether any thread of this process holds the lock."""
        return self._depth > 0

    @property
    def depth(self) -> int:
        """How many times the holding thread has taken the lock without releasing it (0: not held)."""
        return self._depth

    @property
    def is_open(self) -> bool:
        return self._fd >= 0 or self._parked

    @property
    def parked(self) -> bool:
        return self._parked

    def park(self) -> bool:
        """Close the descriptor of an idle lock (held by no thread); the next use opens the file again. False if
        held, or if another thread is taking it right now."""
        if not self._mutex.acquire(blocking=False):
            return False
        try:
            if self._depth or self._fd < 0:
                return False
            self._identity = _identity(self._fd)
            with self._fd_guard:
                os.close(self._fd)
                self._fd = -1
                self._parked = True
            return True
        finally:
            self._mutex.release()

    def _unpark(self) -> None:
        if not self._parked:
            return
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        except OSError as exc:
            raise StorageIOError("cannot open partition lock file", self.path, exc) from exc
        if fd < 0 or _identity(fd) != self._identity:
            if fd >= 0:
                os.close(fd)
            # Retired and removed while parked: the partition moved or was deleted; the lock stays parked.
            raise PartitionMovedError(f"the partition of {self.path} was moved or deleted")
        with self._fd_guard:
            self._fd = fd
            self._parked = False

    def acquire(self, blocking: bool = True, timeout_s: float | None = None) -> None:
        """Take the lock: first from the other threads of this process, then (unless this thread holds it
        already) from other processes. ``blocking=False`` or ``timeout_s`` raise :class:`LogLockedError` when it
        cannot be had (now, or in time)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not (self._mutex.acquire() if blocking and deadline is None
                else self._mutex.acquire(blocking=blocking, timeout=-1 if not blocking else max(0.0, timeout_s or 0))):
            raise LogLockedError(f"partition is locked by another thread of this process: {self.path}")
        try:
            if self._depth:          # this thread holds it (the thread lock is ours)
                self._depth += 1
                return
            self._unpark()
            if blocking and deadline is None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            else:
                while True:
                    try:
                        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if not blocking or (deadline is not None and time.monotonic() >= deadline):
                            raise LogLockedError(f"partition is locked by another process: {self.path}") from None
                        time.sleep(0.005)
            self._depth = 1
            self._owner = threading.get_ident()
        except BaseException:
            self._mutex.release()
            raise

    def release(self) -> None:
        if not self.held:
            raise RuntimeError("release of a partition lock that this thread does not hold")
        self._depth -= 1
        try:
            if self._depth == 0:
                self._owner = None
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._mutex.release()

    def __enter__(self) -> "PartitionLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def read_state(self) -> PartitionState:
        """The shared state; readable without the lock (a torn read only makes a reader reload). A parked lock
        opens its file for the read only, and stays parked; if the file it had was retired and removed meanwhile,
        the state says *moved*. Never reads through a descriptor another thread is closing (parking or closing the
        lock), nor through its number reused meanwhile by another file."""
        with self._fd_guard:
            if not self._parked:
                return _unpack_state(os.pread(self._fd, _STATE.size, 0))
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return PartitionState(status=MOVED)
        except OSError as exc:
            raise StorageIOError("cannot open partition lock file", self.path, exc) from exc
        try:
            if _identity(fd) != self._identity:
                return PartitionState(status=MOVED)
            return _unpack_state(os.pread(fd, _STATE.size, 0))
        finally:
            os.close(fd)

    def read_state_open(self) -> PartitionState | None:
        """:meth:`read_state` if the lock file is open, else None (parked or closed: reading would open the file),
        for a caller that must not touch a file (the broker's event loop)."""
        with self._fd_guard:
            if self._parked or self._fd < 0:
                return None
            return _unpack_state(os.pread(self._fd, _STATE.size, 0))

    def write_state(self, state: PartitionState) -> None:
        if not self.held:
            raise RuntimeError("partition state written without holding the lock")
        os.pwrite(self._fd, _STATE.pack(state.generation, state.log_start_offset, state.recovery_point,
                                        state.last_flush_ms, state.loaded_epoch, state.status), 0)

    def sync_state(self) -> None:
        """fsync the state written to the lock file (caller holds the lock): a move's commit point must survive a
        crash of the machine."""
        if not self.held:
            raise RuntimeError("partition state synced without holding the lock")
        os.fsync(self._fd)

    def retire(self, status: int) -> None:
        """Mark the partition this lock guards as deleted or moved, durably (caller holds the lock): every
        process that takes this lock from now on sees it, even after a crash of the machine."""
        if status not in (DELETED, MOVED):
            raise ValueError(f"a lock is retired as deleted or moved, not {status!r}")
        state = self.read_state()
        state.status = status
        self.write_state(state)
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageIOError("cannot fsync partition lock file", self.path, exc) from exc

    @staticmethod
    def unlink_path(path: str) -> None:
        """Remove a lock file by name (a missing one is fine): one nobody can be using any more."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageIOError("cannot remove partition lock file", path, exc) from exc

    def unlink(self) -> None:
        """Remove the lock file's name if it still names this lock's file (a retired lock, once its change is
        done): a partition created later under the same name starts from a fresh file."""
        if self._fd < 0:
            return
        try:
            if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageIOError("cannot remove partition lock file", self.path, exc) from exc

    def close(self) -> None:
        """Close the lock file; waits for another thread holding the lock. A hold of the calling thread ends."""
        with self._mutex:
            self._parked = False
            if self._fd >= 0:
                held = self._depth if self._owner == threading.get_ident() else 0
                if self._depth:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    self._depth = 0
                    self._owner = None
                with self._fd_guard:
                    os.close(self._fd)
                    self._fd = -1
                for _ in range(held):    # the acquisitions this thread never released
                    self._mutex.release()


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _unpack_state(data: bytes) -> PartitionState:
    if len(data) == _STATE.size:
        return PartitionState(*_STATE.unpack(data))
    if len(data) >= _STATE_V3.size:
        return PartitionState(*_STATE_V3.unpack(data[:_STATE_V3.size]))
    if len(data) >= _STATE_V2.size:
        return PartitionState(*_STATE_V2.unpack(data[:_STATE_V2.size]))
    if len(data) >= _STATE_V1.size:
        return PartitionState(*_STATE_V1.unpack(data[:_STATE_V1.size]))
    return PartitionState()


def peek_state(path: str) -> PartitionState | None:
    """The state in a partition lock file without creating or locking it (None when there is no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageIOError("cannot open partition lock file", path, exc) from exc
    try:
        return _unpack_state(os.pread(fd, _STATE.size, 0))
    finally:
        os.close(fd)


class DirLock:
    """Shared/exclusive flock on ``<log dir>/.lock``: every open LogManager holds it shared; the first opener
    and the last closer get it exclusively, which is when the clean-shutdown marker is consumed or written.

    The file's first 8 bytes count the managers that ever joined the dir (big-endian int64, updated under a
    POSIX record lock on those bytes): a manager that opened the dir first and finds the count unchanged when it
    closes last knows no other process had the dir open in between."""

    _count_lock = threading.Lock()  # POSIX record locks do not exclude threads of one process

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, layout.DIR_LOCK_FILE)
        self._fd: int = _open_lock_file(self.path, "log dir lock file")

    def try_exclusive(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def shared(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def count_open(self) -> int:
        """Count this opener in; returns the count including it."""
        with self._count_lock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX, 8, 0)
            try:
                data = os.pread(self._fd, 8, 0)
                count = (struct.unpack(">q", data)[0] if len(data) == 8 else 0) + 1
                os.pwrite(self._fd, struct.pack(">q", count), 0)
                return count
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 8, 0)

    def opens(self) -> int:
        data = os.pread(self._fd, 8, 0)
        return struct.unpack(">q", data)[0] if len(data) == 8 else 0

    def epoch(self) -> int:
        """The dir's crash epoch (see the module docstring); UNKNOWN before any first opener set one."""
        data = os.pread(self._fd, _EPOCH.size, _EPOCH_POSITION)
        return _EPOCH.unpack(data)[0] if len(data) == _EPOCH.size else UNKNOWN

    def new_epoch(self) -> int:
        """Start a crash epoch (the first opener, holding the lock exclusively, found no clean-shutdown marker).
        A random number, not a counter: the file is not fsynced, and after a machine crash an older value may
        come back, which a counter could then repeat."""
        epoch = int.from_bytes(os.urandom(8), "big") >> 1
        os.pwrite(self._fd, _EPOCH.pack(epoch), _EPOCH_POSITION)
        return epoch

    def close(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


class FileLock:
    """A short-lived exclusive flock on one of a log dir's lock files (partition creation, checkpoint writes, the
    cleaner checkpoint and uncleanable state); waits for it. ``with FileLock(path): ...``"""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> "FileLock":
        self._fd = _open_lock_file(self.path, "lock file")
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class CleaningClaim:
    """Exclusive, non-blocking claim on cleaning one partition; released on :meth:`release` or process death."""

    def __init__(self, log_dir: str, partition_dir_name: str):
        self.path = layout.cleaning_claim_file(log_dir, partition_dir_name)
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        fd = _open_lock_file(self.path, "cleaning claim")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def acquire_or_raise(self) -> None:
        if not self.try_acquire():
            raise LogLockedError(f"another process is cleaning this partition (claim {self.path})")

    def acquire(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the claim (a cleaning in progress finishes its round first)."""
        deadline = time.monotonic() + timeout_s
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise LogLockedError(f"a cleaning of this partition did not finish within {timeout_s} s "
                                     f"(claim {self.path})")
            time.sleep(0.01)

    def unlink(self) -> None:
        """Remove the claim's file (while holding it: the partition is gone from this folder)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageIOError("cannot remove cleaning claim", self.path, exc) from exc

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "CleaningClaim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def convert_legacy_engine_files(log_dir: str) -> list[str]:
    """Rename the engine files earlier versions kept in ``log_dir`` to today's names (partition state, the
    uncleanable list) and delete their transient lock and claim files; a *folder* with such a name is a real
    partition (of a topic named like ``.lock.t``) and is left alone. Call it with the dir lock held exclusively
    (no other process has the dir open). Returns what was done, for the load messages."""
    done = []
    try:
        names = os.listdir(log_dir)
    except OSError as exc:
        raise StorageIOError("cannot list log dir", log_dir, exc) from exc
    for name in sorted(names):
        if not layout.is_legacy_engine_file(name):
            continue
        path = os.path.join(log_dir, name)
        if not os.path.isfile(path):
            continue
        new = layout.legacy_engine_file(name)
        try:
            if new is None:
                os.remove(path)
                done.append(f"removed {name} (a lock file of an earlier version)")
            elif os.path.exists(os.path.join(log_dir, new)):
                os.remove(path)
                done.append(f"removed {name}: {new} exists")
            else:
                durable_rename(path, os.path.join(log_dir, new), sync=False)
                done.append(f"renamed {name} to {new}")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageIOError(f"cannot convert engine file {name}", path, exc) from exc
    return done
