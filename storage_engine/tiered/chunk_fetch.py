"""Fetching the chunks of remote ``.log`` objects into the cache: one ranged GET per run of missing chunks, read
chunk by chunk as the reads need them.

A consumer reading a cold segment reads it from its start in small fetches. One GET per chunk, each waited for
in turn, pays a request's latency per chunk and leaves the connection idle while the bytes fetched are checked;
a plain GET of the whole object streams at the store's speed. So a read that needs chunk ``n`` (not in the cache,
not in a GET already open) opens ONE ranged GET for the run of chunks from ``n`` that the cache does not hold, up
to ``window - 1`` after it, within the object (a *stream*), reads chunk ``n`` from its body, keeps it in the cache
and returns it. The body stays open: the kernel keeps receiving the next chunks into the socket's buffer while the
reader checks the batches it got, and the next read takes its chunk from the same body. No thread is involved (a
background reader would fight the checking thread for the interpreter lock, and lose the socket's speed).

Each chunk is fetched once: a chunk belongs to at most one open stream (registered before its GET starts, and
until it is in the cache), and a read of it reads that stream (in order: the chunks before it go to the cache on
the way), under the stream's lock. Every chunk read is kept by the cache before it leaves the registry: its file
renamed into the folder, then held in memory (the cache's rule: memory holds nothing the folder does not), so a
read finds a chunk in the cache or in a stream, never in neither while it is being kept.

Failures: a stream that fails (the object missing, damaged, shorter than its metadata, the store unreachable, an
idle connection the store closed) is closed and its chunks leave the registry; nothing of it is cached. The read
that opened it gets the error; a read of a later chunk, whose stream was opened by an earlier read, opens its own
GET from its chunk and gets that one's answer (so an old stream's failure is never taken for the object's state).
At most :data:`OPEN_STREAMS` streams stay open (each holds a connection); the least recently read is closed when
another opens, and so is any left idle for :data:`IDLE_S`. Bytes are not checked here: the reader checks every
batch it hands out (framing, offsets, CRC), whatever its chunk came from.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from storage_engine.tiered.cache import ChunkCache

logger = logging.getLogger(__name__)

OPEN_STREAMS = 4             # ranged GETs left open for the reads to come (each holds one connection)
IDLE_S = 30.0                # an open GET no read took a chunk from for this long is closed


class PieceReader(Protocol):
    """What the fetcher uses of :class:`~storage_engine.tiered.object_store.ObjectStore`."""

    def get_range_pieces(self, key: str, start: int, end_exclusive: int, piece_bytes: int,
                         offsets: tuple[int, int] | None = None) -> Iterator[bytes]: ...


def chunk_name(key: str, chunk_bytes: int, n: int) -> str:
    """The cache name of chunk ``n`` of ``key``. The chunk size is part of it: entries cut at another size are never
    taken for these."""
    return f"{key}#{chunk_bytes}#{n}"


class _Stream:
    """One ranged GET over chunks [first, last] of ``key``, its body read one chunk at a time (under ``lock``)."""

    def __init__(self, key: str, first: int, last: int, size: int, chunk_bytes: int, offsets: tuple[int, int]):
        self.key, self.first, self.last, self.size = key, first, last, size
        self.chunk_bytes, self.offsets = chunk_bytes, offsets
        self.next = first                         # the next chunk its body yields
        self.pieces: Iterator[bytes] | None = None  # opened by the first read
        self.failure: Exception | None = None
        self.closed = False
        self.used = time.monotonic()
        self.lock = threading.Lock()

    def names(self, start: int) -> list[str]:
        return [chunk_name(self.key, self.chunk_bytes, m) for m in range(start, self.last + 1)]


class ChunkFetcher:
    """The open streams of this process and the chunks they will deliver (thread-safe)."""

    def __init__(self, store: PieceReader, cache: ChunkCache):
        self.store = store
        self.cache = cache
        self._flights: dict[str, _Stream] = {}
        self._open: collections.OrderedDict[int, _Stream] = collections.OrderedDict()   # least recently read first
        self._mutex = threading.Lock()

    def chunk(self, key: str, n: int, size: int, chunk_bytes: int, window: int,
              offsets: tuple[int, int]) -> bytes:
        """Chunk ``n`` of the ``size``-byte object ``key`` cut in ``chunk_bytes``: from the cache, else from the open
        GET that holds it, else from a new one over it and the chunks after it the cache lacks (``window`` in all)."""
        name = chunk_name(key, chunk_bytes, n)
        end = min((size - 1) // chunk_bytes, n + window - 1)
        for _ in range(4):
            data = self.cache.peek(name)
            if data is not None:
                return data
            with self._mutex:
                stream = self._flights.get(name)
                if stream is None:
                    if self.cache.contains(name):
                        continue            # kept a moment ago by another read: take it from the cache
                    stream = self._start(key, n, end, size, chunk_bytes, offsets)
            data = self._read(stream, n)
            if data is not None:
                return data
            if stream.failure is not None and stream.first == n:
                raise stream.failure        # this read's own GET: the object's answer
        # Other reads' streams kept failing or the folder kept dropping the chunk: one GET of this chunk alone.
        with self._mutex:
            stream = self._start(key, n, n, size, chunk_bytes, offsets, replace=True)
        data = self._read(stream, n)
        if data is None:
            raise stream.failure or RuntimeError(f"chunk {n} of {key} could not be read")
        return data

    def close(self) -> None:
        """Close every open GET (their chunks leave the registry)."""
        with self._mutex:
            streams = list(self._open.values())
        for stream in streams:
            with stream.lock:
                self._close(stream)

    # -- streams --------------------------------------------------------------------------------------------------
    def _start(self, key: str, first: int, end: int, size: int, chunk_bytes: int, offsets: tuple[int, int], *,
               replace: bool = False) -> _Stream:
        """Register a stream over chunk ``first`` and the run after it up to ``end`` the cache and the other
        streams lack (the mutex held). ``replace``: ``first`` moves to it from the stream holding it."""
        last = first
        while last < end and not self._held(chunk_name(key, chunk_bytes, last + 1)):
            last += 1
        stream = _Stream(key, first, last, size, chunk_bytes, offsets)
        for name in stream.names(first):
            if replace or name not in self._flights:
                self._flights[name] = stream
        self._open[id(stream)] = stream
        self._close_idle(stream)
        return stream

    def _held(self, name: str) -> bool:
        return name in self._flights or self.cache.contains(name)

    def _close_idle(self, keep: _Stream) -> None:
        """Close the streams left idle too long, and the least recently read beyond :data:`OPEN_STREAMS` (the mutex
        held; a stream being read is left to its reader)."""
        now = time.monotonic()
        for stream in list(self._open.values()):
            excess = len(self._open) > OPEN_STREAMS
            if stream is keep or not (excess or now - stream.used > IDLE_S):
                continue
            if stream.lock.acquire(blocking=False):
                try:
                    self._close(stream, mutex_held=True)
                finally:
                    stream.lock.release()

    def _read(self, stream: _Stream, n: int) -> bytes | None:
        """Chunk ``n`` read from ``stream`` (the chunks before it kept on the way), or None when the stream has
        passed it (kept by another read), was closed, or failed (``stream.failure``)."""
        with stream.lock:
            if stream.closed or stream.next > n:
                return None
            data = b""
            while stream.next <= n:
                m = stream.next
                try:
                    if stream.pieces is None:
                        stream.pieces = self.store.get_range_pieces(
                            stream.key, stream.first * stream.chunk_bytes,
                            min(stream.size, (stream.last + 1) * stream.chunk_bytes), stream.chunk_bytes,
                            stream.offsets)
                    data = next(stream.pieces)
                except Exception as exc:   # noqa: BLE001 - the stream's failure, raised by the read that owns it
                    stream.failure = exc if not isinstance(exc, StopIteration) else RuntimeError(
                        f"the ranged GET of {stream.key} ended before chunk {m}")
                    logger.debug("ranged GET of %s from chunk %d failed at chunk %d: %s", stream.key, stream.first,
                                 m, exc)
                    self._close(stream)
                    return None
                stream.next += 1
                stream.used = time.monotonic()
                name = chunk_name(stream.key, stream.chunk_bytes, m)
                self.cache.put(name, data)       # in the folder (then memory) before it leaves the registry
                with self._mutex:
                    if self._flights.get(name) is stream:
                        del self._flights[name]
                    if id(stream) in self._open:
                        self._open.move_to_end(id(stream))
            if stream.next > stream.last:
                self._close(stream)
            return data

    def _close(self, stream: _Stream, *, mutex_held: bool = False) -> None:
        """Close ``stream``'s body and drop its chunks not read from the registry (its lock held)."""
        if stream.closed:
            return
        stream.closed = True
        if stream.pieces is not None and hasattr(stream.pieces, "close"):
            try:
                stream.pieces.close()           # the generator's ``finally`` closes the response body
            except Exception as exc:   # noqa: BLE001 - closing a dead connection may fail; it is dropped anyway
                logger.debug("closing the ranged GET of %s: %s", stream.key, exc)
        if mutex_held:
            self._unregister(stream)
        else:
            with self._mutex:
                self._unregister(stream)

    def _unregister(self, stream: _Stream) -> None:
        for name in stream.names(stream.next):
            if self._flights.get(name) is stream:
                del self._flights[name]
        self._open.pop(id(stream), None)
