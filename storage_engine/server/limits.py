"""The broker's resource limits: what the listener may hold, whatever its clients send.

* ``queued.max.request.bytes``: a memory pool shared by every connection (Kafka's ``MemoryPool``). A request frame
  takes its size from the pool before its body is read and gives it back once its request is answered; a
  connection whose next frame does not fit stops reading its socket (TCP then holds the client back) until
  memory is released. Waiters are served in arrival order, so small frames cannot starve a big one. A single frame
  larger than the pool is admitted when the pool is empty (``socket.request.max.bytes`` bounds it), so the bytes of
  frames held at once never exceed ``max(pool, socket.request.max.bytes)``. Kafka's default is -1 (unbounded); here
  an unset key is :func:`default_queued_bytes`: 1/8 of the machine's memory, at least one largest frame. -1 is
  unbounded, as in Kafka.
* ``max.connections``: unset, :func:`default_max_connections`, from the open-file limit and memory (Kafka's
  default is unbounded).
* After a burst of large frames, once the pool is empty again, glibc is asked to give its freed memory back to
  the system (``malloc_trim``), so the resident size returns to its level before the burst.
"""
from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import logging
import os
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
TRIM_AFTER_BYTES = 16 * MIB          # released since the last trim before the next one is worth its cost
FDS_RESERVED = 1024                  # open files kept for segments, indexes, checkpoints and the status file
CONNECTION_MEMORY = 1 * MIB          # what one connection may cost at most besides its frames (buffers, TLS)


def machine_memory() -> int:
    """Physical memory in bytes (``MemTotal``), or the cgroup's limit when one is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(path).read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def default_queued_bytes(request_max_bytes: int, memory: int | None = None) -> int:
    """1/8 of the machine's memory, and never less than one frame of ``socket.request.max.bytes``: handling a
    request costs a few times its frame (the decoded body, the batch the engine validates), and the page cache
    that serves fetches needs the rest."""
    memory = machine_memory() if memory is None else memory
    return max(request_max_bytes, memory // 8)


def default_max_connections(memory: int | None = None, nofile: int | None = None) -> int:
    """Half of the soft open-file limit left after :data:`FDS_RESERVED` for the logs, and no more than 1/16 of the
    memory at :data:`CONNECTION_MEMORY` per connection; at least 16."""
    memory = machine_memory() if memory is None else memory
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    by_files = (nofile - FDS_RESERVED) // 2
    by_memory = memory // 16 // CONNECTION_MEMORY
    return max(16, min(by_files, by_memory))


@dataclass(frozen=True)
class Limits:
    """The listener's limits, resolved (defaults derived) from the ``server`` keys."""
    max_connections: int
    queued_bytes: int | None          # None: unbounded (-1)
    idle_s: float | None              # None: never closed for idleness (-1)
    receive_s: float | None           # None: no timeout on a slow frame (-1)

    @classmethod
    def from_server(cls, server: Mapping[str, Any]) -> "Limits":
        max_conn = server.get("max.connections")
        queued = server.get("queued.max.request.bytes")
        if queued is None:
            queued = default_queued_bytes(int(server["socket.request.max.bytes"]))
        idle = server.get("connections.max.idle.ms", 600_000)
        receive = server.get("socket.request.receive.timeout.ms", 60_000)
        return cls(max_connections=default_max_connections() if max_conn is None else int(max_conn),
                   queued_bytes=None if queued < 0 else int(queued),
                   idle_s=None if idle < 0 else idle / 1000,
                   receive_s=None if receive < 0 else receive / 1000)


class MemoryPool:
    """Bytes of request frames held at once, across connections (see the module docstring)."""

    def __init__(self, capacity: int | None):
        self.capacity = capacity
        self.used = 0
        self.peak = 0
        self.waits = 0                     # frames that had to wait for memory
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._released = 0                 # bytes released since the last trim
        self._logged = float("-inf")       # when a wait was last logged

    def fits_now(self, size: int) -> bool:
        """Whether :meth:`acquire` of ``size`` would return at once."""
        return not self._waiters and self._fits(size)

    def should_log_wait(self) -> bool:
        """True at most once a second: a wait is worth a log line, a flood of them is not."""
        now = time.monotonic()
        if now - self._logged < 1.0:
            return False
        self._logged = now
        return True

    def _fits(self, size: int) -> bool:
        return self.capacity is None or self.used == 0 or self.used + size <= self.capacity

    def _take(self, size: int) -> None:
        self.used += size
        self.peak = max(self.peak, self.used)

    async def acquire(self, size: int) -> None:
        """Take ``size`` bytes, waiting (behind earlier waiters) until they fit."""
        if not self._waiters and self._fits(size):
            self._take(size)
            return
        self.waits += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(size)          # granted just as the connection went away
            else:
                self._waiters.remove(entry)
                self._wake()                # a big waiter leaving may let smaller ones in
            raise

    def release(self, size: int) -> None:
        self.used -= size
        assert self.used >= 0, self.used
        self._released += size
        self._wake()
        if self.used == 0 and self._released >= TRIM_AFTER_BYTES:
            self._released = 0
            trim()

    def _wake(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, fut = self._waiters.popleft()
            if fut.done():
                continue
            self._take(size)
            fut.set_result(None)


_LIBC: Any = None


def trim() -> bool:
    """Ask glibc to return freed heap memory to the system (``malloc_trim(0)``); False where there is no glibc.
    Frames above glibc's mmap threshold go back to the system when freed anyway; what stays without this is the
    heap grown by the many medium objects a large request creates (decoded bodies, chunks, batch copies)."""
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else None
            _LIBC = lib if lib is not None and hasattr(lib, "malloc_trim") else False
        except OSError:
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True
