"""Fetching the chunks of remote ``.log`` objects into the cache: one ranged GET per run of missing chunks, read
in the background as it arrives, each chunk taken by the read that needs it.

A consumer reading a cold segment reads it from its start in small fetches. One GET per chunk, each waited for
in turn, pays a request's latency per chunk and leaves the connection idle while the bytes fetched are checked;
a plain GET of the whole object streams at the store's speed. So a read that needs chunk ``n`` (not in the cache,
not in a GET already open) opens ONE ranged GET for the run of chunks from ``n`` that the cache does not hold, up
to ``window - 1`` after it, within the object (a *stream*). A thread reads its body as fast as it comes, chunk by
chunk, into the stream's queue (the store sends no faster than its body is read); the reads take the chunks from
the queue in order, keep each in the cache, and go on with the batches while the next chunks arrive.

Each chunk is fetched once: a chunk belongs to at most one open stream (registered before its GET starts, and
until it is in the cache), and a read of it takes the stream's chunks up to it (the ones before it go to the cache
on the way), under the stream's lock. Every chunk taken is kept by the cache before it leaves the registry: its
file renamed into the folder, then held in memory (the cache's rule: memory holds nothing the folder does not), so
a read finds a chunk in the cache or in a stream, never in neither while it is being kept. A stream is read by
the reads that follow it closely: one no read took a chunk from for :data:`STALE_S` is closed, and its chunks are
fetched again by the next read that needs them, so bytes received before an object was deleted or damaged
behind the store's back are not handed out later than that.

Failures: a stream that fails (the object missing, damaged, shorter than its metadata, the store unreachable) is
closed and its chunks leave the registry; nothing of it is cached. The read that opened it gets the error; a read
of a later chunk, whose stream was opened by an earlier read, opens its own GET from its chunk and gets that one's
answer. At most :data:`OPEN_STREAMS` streams stay open (each holds a connection); the least recently read is
closed when another opens. Bytes are not checked here: the reader checks every batch it hands out (framing,
offsets, CRC), whatever its chunk came from.
"""
from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from storage_engine.tiered.cache import ChunkCache

logger = logging.getLogger(__name__)

OPEN_STREAMS = 4             # ranged GETs left open for the reads to come (each holds one connection)
STALE_S = 1.0                # an open GET no read took a chunk from for this long is closed, not read on


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
        self.queue: queue.SimpleQueue[bytes | Exception] = queue.SimpleQueue()
        self.stop = False

    def pump(self) -> None:
        """Read the body's pieces into ``queue`` as fast as they come (the stream's thread; the reads take them from
        the queue). Ends at the body's end, at its failure (queued for the read that takes it), or once closed."""
        assert self.pieces is not None
        try:
            for piece in self.pieces:
                self.queue.put(piece)
                if self.stop:
                    return
            self.queue.put(RuntimeError(f"the ranged GET of {self.key} has no chunk after {self.last}"))
        except BaseException as exc:   # noqa: BLE001 - handed to the read that takes the next piece: none hangs
            self.queue.put(exc if isinstance(exc, Exception) else RuntimeError(f"the ranged GET of {self.key} "
                                                                               f"was interrupted: {exc!r}"))
        finally:
            self.pieces.close()   # type: ignore[attr-defined]

    def take(self) -> bytes:
        """The body's next piece, waiting for it; its failure raised."""
        got = self.queue.get()
        if isinstance(got, Exception):
            raise got
        return got

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

    def prefetch(self, key: str, n: int, size: int, chunk_bytes: int, window: int,
                 offsets: tuple[int, int]) -> None:
        """Start the GET of chunk ``n`` (and the run after it, as :meth:`chunk`) unless the cache or an open stream
        holds it; do not wait for it. Its failure is left to the read that takes the chunk."""
        name = chunk_name(key, chunk_bytes, n)
        with self._mutex:
            if self._held(name):
                return
            stream = self._start(key, n, min((size - 1) // chunk_bytes, n + window - 1), size, chunk_bytes, offsets)
        with stream.lock:
            if not stream.closed:
                self._open_body(stream)

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
            if stream is keep or not (excess or now - stream.used > STALE_S):
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
            if not stream.closed and stream.pieces is not None and time.monotonic() - stream.used > STALE_S:
                self._close(stream)         # left unread too long: the next read asks the store again
            if stream.closed or stream.next > n:
                return None
            data = b""
            while stream.next <= n:
                m = stream.next
                try:
                    self._open_body(stream)
                    data = stream.take()
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

    def _open_body(self, stream: _Stream) -> None:
        """Start ``stream``'s GET and the thread reading its body, unless started (its lock held)."""
        if stream.pieces is None:
            stream.used = time.monotonic()
            stream.pieces = self.store.get_range_pieces(
                stream.key, stream.first * stream.chunk_bytes,
                min(stream.size, (stream.last + 1) * stream.chunk_bytes), stream.chunk_bytes, stream.offsets)
            threading.Thread(target=stream.pump, name=f"remote-get-{stream.first}", daemon=True).start()

    def _close(self, stream: _Stream, *, mutex_held: bool = False) -> None:
        """Close ``stream`` (its thread stops after the piece it is reading, and closes the body) and drop its
        chunks not taken from the registry (its lock held)."""
        if stream.closed:
            return
        stream.closed = True
        stream.stop = True
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
