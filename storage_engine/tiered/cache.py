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
"""
from __future__ import annotations

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


@dataclass
class CacheStats:
    """Counters of one process's use of the cache (for tests and the broker's status)."""
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    damaged: int = 0          # entries whose trailer did not match: deleted and fetched again


class ChunkCache:
    """A size-bounded, least-recently-used cache of byte strings in ``folder`` (see the module docstring)."""

    def __init__(self, folder: str, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"the cache bound must be >= 0 bytes, got {max_bytes}")
        self.folder = os.path.abspath(folder)
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._loading: dict[str, threading.Lock] = {}
        self._loading_mutex = threading.Lock()
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise StorageIOError("cannot create the remote storage cache folder", self.folder, exc) from exc
        self._remove_dead_temp_files()

    # -- the one entry point --------------------------------------------------------------------------------------
    def get(self, name: str, load: Callable[[], bytes]) -> bytes:
        """The bytes cached under ``name``, else ``load()``'s, kept for next time. Concurrent calls for one name in
        this process load once. An error of ``load`` propagates and nothing is cached."""
        path = self.path_of(name)
        data = self._read(path)
        if data is not None:
            self.stats.hits += 1
            return data
        with self._name_lock(name):
            data = self._read(path)            # another thread loaded it meanwhile
            if data is not None:
                self.stats.hits += 1
                return data
            self.stats.misses += 1
            data = load()
            self._put(path, data)
            return data

    def path_of(self, name: str) -> str:
        return os.path.join(self.folder, hashlib.sha256(name.encode()).hexdigest() + SUFFIX)

    def size_bytes(self) -> int:
        """Bytes the cache's entries take in the folder now (trailers included)."""
        return sum(size for _, size, _ in self._entries())

    # -- reading --------------------------------------------------------------------------------------------------
    def _read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("remote storage cache: cannot read %s (%s); fetching again", path, exc)
            self._remove(path)
            return None
        data = _unwrap(raw)
        if data is None:
            self.stats.damaged += 1
            logger.warning("remote storage cache: entry %s fails its length/CRC check (a crash or damage); "
                           "deleted and fetched again", path)
            self._remove(path)
            return None
        _touch(path)
        return data

    # -- writing --------------------------------------------------------------------------------------------------
    def _put(self, path: str, data: bytes) -> None:
        size = len(data) + TRAILER.size
        if size > self.max_bytes:
            return                          # larger than the whole bound: used once, not kept
        tmp = os.path.join(self.folder, f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.write(TRAILER.pack(MAGIC, len(data), crc32c(data)))
            with self._folder_lock():
                self._evict_for(size)
                _touch(tmp)
                os.replace(tmp, path)
        except OSError as exc:
            # A cache that cannot write (full disk, read-only folder) slows reads down but fails none.
            logger.warning("remote storage cache: cannot keep an entry in %s: %s", self.folder, exc)
            self._remove(tmp)

    def _evict_for(self, size: int) -> None:
        """Delete the least recently used entries until ``size`` more bytes fit (the folder lock held)."""
        entries = sorted(self._entries(), key=lambda e: e[2])
        total = sum(s for _, s, _ in entries)
        for path, s, _ in entries:
            if total + size <= self.max_bytes:
                break
            if self._remove(path):
                self.stats.evictions += 1
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


def _touch(path: str) -> None:
    """Mark ``path`` most recently used. The time is set explicitly from the nanosecond clock: the kernel stamps a
    file's mtime from a coarse clock (milliseconds), which would tie entries written in one burst."""
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(path, ns=(now, now))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True
