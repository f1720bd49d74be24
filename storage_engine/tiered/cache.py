"""The bounded local cache of remote bytes: index objects whole and ``.log`` objects in chunks, as files in one
folder (``settings.cache_dir``, by default ``<first log dir>/remote-log-index-cache``, a folder Kafka and the
engine's loader skip).

Format: one file per entry, named by the SHA-256 of the entry's name (the object key, plus the chunk number for a
chunk), ``<64 hex>.entry``. Its content is the cached bytes followed by a 16-byte trailer: the magic ``RLC1``,
the length of the bytes (int64) and their CRC-32C (uint32), big-endian. Object keys name the segment id (a new
one per copy), so an entry never goes stale: the bytes under a key do not change while the key is in use.

Crash-safe without fsync: an entry is written to a temp file (``.tmp-<pid>-<random>``) and renamed into place, so
a reader never opens a half-written one; and an entry is used only if its trailer's length and CRC match its bytes,
so one that a power cut left short or zeroed (a rename made durable before its data) is deleted and fetched again,
never handed out. Temp files of dead processes are removed when the cache opens.

Bounded, least recently used first: the files' mtimes are the LRU clock (a hit touches its file), so every
process sharing the folder (the broker, the CLI, an Airflow task) sees one order. Before a new entry is renamed
into place, under the folder's flock (``.lock``), the folder is listed and the oldest entries are deleted until the
new one fits under ``max_bytes``. An entry larger than the whole bound is used once and not kept. A reader that
has an entry open when another process evicts it still reads it whole (POSIX unlink).

Checked once per process, and never more than the folder holds: the entries a process has checked (read back, or
written itself) are also kept in memory, the most recently used first, up to ``memory_bytes`` (32 MiB, never more
than ``max_bytes``), so a consumer reading a 4 MiB chunk in 1 MiB fetches reads and CRC-checks its file once, not
once per fetch. An entry is served from memory only while the folder still holds the very file it was written or
checked in, untouched since: every memory hit opens the entry's file, compares its device, inode, size and
modification time with those this process last saw (it sets the time itself on each use: the folder's LRU clock),
and touches it again. An entry the folder no longer has (evicted by another process, deleted by an operator),
has as another file, or has with anything written to it (or used by another process meanwhile), is dropped from
memory at once, and the read goes to the file (checked again) or the object store as if memory had never held it:
a remote object deleted or damaged behind the store's back is found there, never served from memory.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from storage_engine.errors import StorageIOError

logger = logging.getLogger(__name__)

MAGIC = b"RLC1"
TRAILER = struct.Struct(">4sqI")
SUFFIX = ".entry"
TMP_PREFIX = ".tmp-"
LOCK_NAME = ".lock"
MEMORY_BYTES = 32 << 20       # checked entries kept in memory per process (8 chunks of 4 MiB)
Ident = tuple[int, int, int, int]   # an entry file's device, inode, size, modification time (ns)


@dataclass
class CacheStats:
    """Counters of one process's use of the cache (for tests and the broker's status)."""
    hits: int = 0
    memory_hits: int = 0      # of ``hits``: served from memory (the folder's file checked by its trailer only)
    misses: int = 0           # entries loaded from the object store
    evictions: int = 0
    damaged: int = 0          # entries whose trailer did not match: deleted and fetched again


class ChunkCache:
    """A size-bounded, least-recently-used cache of byte strings in ``folder`` (see the module docstring)."""

    def __init__(self, folder: str, max_bytes: int, *, memory_bytes: int = MEMORY_BYTES):
        if max_bytes < 0:
            raise ValueError(f"the cache bound must be >= 0 bytes, got {max_bytes}")
        if memory_bytes < 0:
            raise ValueError(f"the cache's memory bound must be >= 0 bytes, got {memory_bytes}")
        self.folder = os.path.abspath(folder)
        self.max_bytes = max_bytes
        self.memory_bytes = min(memory_bytes, max_bytes)
        self.stats = CacheStats()
        # name -> (checked bytes, the identity of the file they were checked in); most recently used last
        self._memory: collections.OrderedDict[str, tuple[bytes, Ident]] = collections.OrderedDict()
        self._memory_size = 0
        self._memory_mutex = threading.Lock()
        self._stats_mutex = threading.Lock()     # several threads count: no lost increments
        self._loading: dict[str, threading.Lock] = {}
        self._loading_mutex = threading.Lock()
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise StorageIOError("cannot create the remote storage cache folder", self.folder, exc) from exc
        self._remove_dead_temp_files()

    # -- the entry points -----------------------------------------------------------------------------------------
    def get(self, name: str, load: Callable[[], bytes]) -> bytes:
        """The bytes cached under ``name``, else ``load()``'s, kept for next time. Concurrent calls for one name in
        this process load once. An error of ``load`` propagates and nothing is cached."""
        data = self.peek(name)
        if data is not None:
            return data
        with self._name_lock(name):
            data = self.peek(name)             # another thread loaded it meanwhile
            if data is not None:
                return data
            data = load()
            self.put(name, data)
            return data

    def peek(self, name: str) -> bytes | None:
        """The checked bytes cached under ``name`` (from memory while the folder's file still vouches for them,
        else read from the file and checked), or None."""
        path = self.path_of(name)
        with self._memory_mutex:
            held = self._memory.get(name)
            if held is not None:
                self._memory.move_to_end(name)
        if held is not None:
            ident = _touch_if_same(path, held[1])
            if ident is not None:
                self._count("hits", "memory_hits")
                with self._memory_mutex:
                    if self._memory.get(name) is held:
                        self._memory[name] = (held[0], ident)
                return held[0]
            self._forget(name)              # gone, replaced or written to: memory follows the folder
        read = self._read(path)
        if read is None:
            return None
        self._count("hits")
        self._remember(name, *read)
        return read[0]

    def put(self, name: str, data: bytes) -> None:
        """Keep ``data``, just loaded from the object store, under ``name`` (counted as a miss): its file is
        renamed into the folder first, then (if kept there) it is held in memory."""
        self._count("misses")
        ident = self._put(self.path_of(name), data)
        if ident is not None:
            self._remember(name, data, ident)

    def contains(self, name: str) -> bool:
        """Whether ``name`` is held in memory or has a file in the folder now (not checked: :meth:`peek` checks)."""
        with self._memory_mutex:
            if name in self._memory:
                return True
        return os.path.exists(self.path_of(name))

    def in_memory(self, name: str) -> bool:
        with self._memory_mutex:
            return name in self._memory

    def forget_memory(self) -> None:
        """Drop every entry held in memory (the folder's files stay; the next read checks them again)."""
        with self._memory_mutex:
            self._memory.clear()
            self._memory_size = 0

    def path_of(self, name: str) -> str:
        return os.path.join(self.folder, hashlib.sha256(name.encode()).hexdigest() + SUFFIX)

    def size_bytes(self) -> int:
        """Bytes the cache's entries take in the folder now (trailers included)."""
        return sum(size for _, size, _ in self._entries())

    # -- memory ---------------------------------------------------------------------------------------------------
    def _count(self, *fields: str) -> None:
        with self._stats_mutex:
            for f in fields:
                setattr(self.stats, f, getattr(self.stats, f) + 1)

    def _remember(self, name: str, data: bytes, ident: Ident) -> None:
        if len(data) > self.memory_bytes:
            return
        with self._memory_mutex:
            old = self._memory.pop(name, None)
            if old is not None:
                self._memory_size -= len(old[0])
            self._memory[name] = (data, ident)
            self._memory_size += len(data)
            while self._memory_size > self.memory_bytes:
                _, (dropped, _) = self._memory.popitem(last=False)
                self._memory_size -= len(dropped)

    def _forget(self, name: str) -> None:
        with self._memory_mutex:
            old = self._memory.pop(name, None)
            if old is not None:
                self._memory_size -= len(old[0])

    # -- reading --------------------------------------------------------------------------------------------------
    def _read(self, path: str) -> tuple[bytes, Ident] | None:
        """The checked bytes of the entry file ``path`` and the identity of the file checked (touched), or None (a
        damaged one is deleted)."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
                ident = _touch_fd(f.fileno())
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("remote storage cache: cannot read %s (%s); fetching again", path, exc)
            self._remove(path)
            return None
        data = _unwrap(raw)
        if data is None:
            self._count("damaged")
            logger.warning("remote storage cache: entry %s fails its length/CRC check (a crash or damage); "
                           "deleted and fetched again", path)
            self._remove(path)
            return None
        return data, ident

    # -- writing --------------------------------------------------------------------------------------------------
    def _put(self, path: str, data: bytes) -> Ident | None:
        """Keep ``data`` as the entry at ``path``; the identity of its file, or None when it is not kept (larger
        than the whole bound, or the folder fails)."""
        size = len(data) + TRAILER.size
        if size > self.max_bytes:
            return None                     # larger than the whole bound: used once, not kept
        tmp = os.path.join(self.folder, f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.write(TRAILER.pack(MAGIC, len(data), crc32c(data)))
                f.flush()                   # every byte written before the identity is taken
                with self._folder_lock():
                    self._evict_for(size)
                    ident = _touch_fd(f.fileno())
                    os.replace(tmp, path)
            return ident
        except OSError as exc:
            # A cache that cannot write (full disk, read-only folder) slows reads down but fails none.
            logger.warning("remote storage cache: cannot keep an entry in %s: %s", self.folder, exc)
            self._remove(tmp)
            return None

    def _evict_for(self, size: int) -> None:
        """Delete the least recently used entries until ``size`` more bytes fit (the folder lock held)."""
        entries = sorted(self._entries(), key=lambda e: e[2])
        total = sum(s for _, s, _ in entries)
        for path, s, _ in entries:
            if total + size <= self.max_bytes:
                break
            if self._remove(path):
                self._count("evictions")
            total -= s

    def _entries(self) -> Iterator[tuple[str, int, int]]:
        """(path, size, mtime ns) of every entry in the folder."""
        try:
            it = os.scandir(self.folder)
        except OSError as exc:
            raise StorageIOError("cannot list the remote storage cache folder", self.folder, exc) from exc
        with it:
            for e in it:
                if not e.name.endswith(SUFFIX):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue                # evicted by another process meanwhile
                yield e.path, st.st_size, st.st_mtime_ns

    # -- housekeeping ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _folder_lock(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.folder, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _name_lock(self, name: str) -> Iterator[None]:
        with self._loading_mutex:
            lock = self._loading.setdefault(name, threading.Lock())
        with lock:
            yield
        with self._loading_mutex:
            if not lock.locked():
                self._loading.pop(name, None)

    def _remove_dead_temp_files(self) -> None:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for n in names:
            if not n.startswith(TMP_PREFIX):
                continue
            try:
                pid = int(n[len(TMP_PREFIX):].split("-", 1)[0])
            except ValueError:
                continue
            if not _alive(pid):
                self._remove(os.path.join(self.folder, n))

    @staticmethod
    def _remove(path: str) -> bool:
        try:
            os.remove(path)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            logger.warning("remote storage cache: cannot remove %s: %s", path, exc)
            return False


class NoCache:
    """No cache at all: every ``get`` loads (a process that must write nothing, such as a Spark executor)."""

    def __init__(self) -> None:
        self.stats = CacheStats()

    def get(self, name: str, load: Callable[[], bytes]) -> bytes:
        self.stats.misses += 1
        return load()

    def forget_memory(self) -> None:
        pass

    def size_bytes(self) -> int:
        return 0


def _unwrap(raw: bytes) -> bytes | None:
    """The bytes of an entry file, or None when its trailer does not vouch for them."""
    if len(raw) < TRAILER.size:
        return None
    magic, length, crc = TRAILER.unpack_from(raw, len(raw) - TRAILER.size)
    data = raw[:-TRAILER.size]
    if magic != MAGIC or length != len(data) or crc32c(data) != crc:
        return None
    return data


def _touch_fd(fd: int) -> Ident:
    """Mark the open entry file ``fd`` most recently used; its identity after that. The time is set explicitly from
    the nanosecond clock: the kernel stamps a file's mtime from a coarse clock (milliseconds), which would tie
    entries written in one burst."""
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(fd, ns=(now, now))
    return _ident(os.fstat(fd))


def _touch_if_same(path: str, ident: Ident) -> Ident | None:
    """When the entry file ``path`` is still the file of identity ``ident``, untouched since (same device, inode,
    size and modification time: a rewrite, a replacement, a removal or another process's touch changes one), it is
    touched and its new identity returned; else None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if _ident(os.fstat(fd)) != ident:
            return None
        return _touch_fd(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _ident(st: os.stat_result) -> Ident:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True
