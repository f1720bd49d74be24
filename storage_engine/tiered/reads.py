"""Reading offsets that live only in the object store (Kafka's ``RemoteLogManager.read``,
``findOffsetByTimestamp`` and ``collectAbortedTransactions`` over ``RemoteStorageManager.fetchLogSegment`` and
``fetchIndex``).

A remote segment is the copy of a sealed local segment (:mod:`storage_engine.tiered.keys` names its objects:
``.log``, ``.index``, ``.timeindex``, ``.txnindex`` when it has one). :class:`RemoteReader` reads it as the engine
reads a local one, with the same code: the ``.log`` object is a :class:`~storage_engine.segment.file_records.
FileRecords` whose bytes come from ranged GETs (:class:`RemoteFileRecords`), and the batches go through the
checked read of :mod:`storage_engine.segment.checked_read` (framing, offset order inside the segment's offsets,
each returned batch's CRC). So a fetch returns whole batches from the one holding the offset, at least one, and a
damaged byte is never handed out as data.

Damage and loss are named with the segment's offsets: a ``.log`` object that is shorter than its metadata says, a
batch that fails its checks, an index whose entries break their order, raise :class:`RemoteObjectDamagedError`;
an object the store no longer has raises :class:`RemoteObjectMissingError` (the store's error, completed with the
offsets the object held). An offset no finished remote segment holds is :class:`OffsetOutOfRangeError`, as
Kafka's "offset ... does not exist in remote tier".

Every byte comes through the bounded local cache (:mod:`storage_engine.tiered.cache`): index objects whole (their
parsed form also kept in memory for the last :data:`PARSED_INDEXES` segments), ``.log`` objects in
:data:`CHUNK_BYTES` chunks. A read that needs a chunk the cache does not hold opens one ranged GET over it and the
chunks after it the cache lacks (:data:`READ_AHEAD_CHUNKS` in all) and takes its chunk from the body; the next
reads take theirs from the same body, which the kernel kept receiving meanwhile
(:mod:`storage_engine.tiered.chunk_fetch`): a consumer reading a cold segment from its start costs about one GET of
it, each chunk fetched once. A fetch at the offset right after the previous fetch of a segment (a consumer's next
fetch) starts at the byte where that one ended, found without the index (the last :data:`FETCH_ENDS` segments'
ends are remembered); a read from a segment's start has its first chunk on the way while the index is fetched.

Which segments exist comes from the remote view (:class:`~storage_engine.tiered.remote_log.RemoteLogView`,
rebuilt from ``__remote_log_metadata``): only segments in state ``COPY_SEGMENT_FINISHED`` are read.
:mod:`storage_engine.tiered.whole_log` joins the remote part and the local log for the CLI, the broker and the
message browser.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from storage_engine.errors import (CorruptIndexError, CorruptRecordError, DataLossError, OffsetOutOfRangeError,
                                   RemoteObjectDamagedError, RemoteObjectMissingError)
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import BatchBuffer, RecordBatch
from storage_engine.segment.checked_read import FetchData, checked_from, read_from
from storage_engine.segment.file_records import FileRecords
from storage_engine.segment.txn_index import AbortedTxn, TxnIndexSearchResult, decode_entries
from storage_engine.tiered import parts
from storage_engine.tiered.cache import TRAILER, ChunkCache, NoCache
from storage_engine.tiered.chunk_fetch import ChunkFetcher, chunk_name
from storage_engine.tiered.keys import segment_keys
from storage_engine.tiered.remote_index import SegmentIndex

if TYPE_CHECKING:
    from storage_engine.tiered.settings import RemoteStorageSettings

logger = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20        # Aiven's default fetch chunk: a cold fetch costs one GET of this much
PARSED_INDEXES = 64          # segments whose parsed offset/time index stays in memory
PARALLEL_CHUNKS = 4          # ranged GETs in flight when a whole segment is read without a cache (the Spark source)
READ_AHEAD_CHUNKS = 4        # a cold read's ranged GET covers its chunk and up to 3 after it
PARSED_TXN_INDEXES = 4096    # segments whose aborted transactions (usually none) stay in memory
FETCH_ENDS = 4096            # segments whose last fetch's end is remembered (where the next one starts)
MAX_INDEX_OBJECT_BYTES = 64 << 20   # segment.index.bytes is at most 2 GiB in Kafka, 10 MiB by default
BatchT = RecordBatch | LegacyBatch


class RemoteSegment(Protocol):
    """What the reader uses of a finished remote segment (:class:`~storage_engine.tiered.metadata.RemoteSegment`:
    offsets inclusive, as Kafka's metadata has them)."""

    @property
    def topic(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partition(self) -> int: ...

    @property
    def segment_id(self) -> uuid.UUID: ...

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def max_timestamp_ms(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...


class ObjectReader(Protocol):
    """What the reader uses of :class:`~storage_engine.tiered.object_store.ObjectStore`."""

    def get(self, key: str, offsets: tuple[int, int] | None = None) -> bytes: ...

    def get_range(self, key: str, start: int, end_exclusive: int,
                  offsets: tuple[int, int] | None = None) -> bytes: ...

    def get_range_pieces(self, key: str, start: int, end_exclusive: int, piece_bytes: int,
                         offsets: tuple[int, int] | None = None) -> Iterator[bytes]: ...


class SegmentSource(Protocol):
    """What the reader uses of :class:`~storage_engine.tiered.remote_log.RemoteLogView`."""

    def segments(self, topic: str, partition: int, *,
                 topic_id: uuid.UUID | None = None) -> Sequence[RemoteSegment]: ...


class RemoteReader:
    """Reads finished remote segments of any partition; thread-safe (one per process is enough)."""

    def __init__(self, settings: RemoteStorageSettings, store: ObjectReader, view: SegmentSource, *,
                 cache: ChunkCache | NoCache | None = None):
        self.settings = settings
        self.store = store
        self.view = view
        self.cache: ChunkCache | NoCache = (cache if cache is not None
                                            else ChunkCache(settings.cache_dir, settings.cache_bytes))
        self._parsed: collections.OrderedDict[str, SegmentIndex] = collections.OrderedDict()
        self._txns: collections.OrderedDict[str, list[AbortedTxn]] = collections.OrderedDict()
        # .log key -> (the offset after the last fetch of it, the byte where that fetch ended)
        self._ends: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self._parsed_mutex = threading.Lock()
        self._fetcher = ChunkFetcher(store, self.cache) if isinstance(self.cache, ChunkCache) else None

    def clear_cache(self) -> None:
        """Forget what this process holds in memory (parsed indexes, checked chunks); the cache folder stays."""
        with self._parsed_mutex:
            self._parsed.clear()
            self._txns.clear()
            self._ends.clear()
        self.cache.forget_memory()

    # -- which segment --------------------------------------------------------------------------------------------
    def segments_from(self, topic: str, partition: int, offset: int, *,
                      topic_id: uuid.UUID | None = None) -> list[RemoteSegment]:
        """The finished remote segments whose end offset is at or above ``offset``, by start offset; of the topic
        with id ``topic_id`` (None: the latest topic of that name the view knows)."""
        return [s for s in self.view.segments(topic, partition, topic_id=topic_id) if s.end_offset >= offset]

    def _holding(self, topic: str, partition: int, offset: int, topic_id: uuid.UUID | None) -> list[RemoteSegment]:
        segs = self.segments_from(topic, partition, offset, topic_id=topic_id)
        if not segs or segs[0].start_offset > offset:
            remote = self.view.segments(topic, partition, topic_id=topic_id)
            held = f"[{remote[0].start_offset}, {remote[-1].end_offset}]" if remote else "none"
            raise OffsetOutOfRangeError(f"offset {offset} of {topic}-{partition} does not exist in remote storage "
                                        f"(finished remote segments hold {held})")
        return segs

    # -- Fetch ---------------------------------------------------------------------------------------------------
    def read(self, topic: str, partition: int, offset: int, max_bytes: int, *, min_one_message: bool = True,
             topic_id: uuid.UUID | None = None) -> FetchData | None:
        """Whole checked batches from the one holding ``offset``, from one remote segment (Kafka reads one per
        fetch), at most ``max_bytes`` unless the first batch alone is larger and ``min_one_message``."""
        for seg in self._holding(topic, partition, offset, topic_id):
            rseg = self._segment(seg)
            pos = self._resume_position(rseg.key, offset)
            if pos is None:
                if offset <= seg.start_offset and self._fetcher is not None:
                    # From the segment's start (a walk entering it): its first chunk is on its way while the
                    # offset index is fetched and checked.
                    self._fetcher.prefetch(rseg.key, 0, seg.size_bytes, CHUNK_BYTES, self._window(), _offsets(seg))
                pos = self._position(seg, offset)
            data = self._scan(seg, rseg, pos, offset, lambda p: read_from(rseg, p, offset, max_bytes, None,
                                                                           min_one_message, seg.end_offset + 1))
            if data is not None:        # (empty when the first batch does not fit and not min_one_message)
                if data.data:
                    self._remember_end(rseg.key, data)
                return data
        return None

    def _resume_position(self, key: str, offset: int) -> int | None:
        """The byte where an earlier fetch of ``key`` ended, when ``offset`` is the offset after it (a consumer's
        next fetch): no index lookup needed. None otherwise."""
        with self._parsed_mutex:
            found = self._ends.get(key)
        return found[1] if found is not None and found[0] == offset else None

    def _remember_end(self, key: str, data: FetchData) -> None:
        with self._parsed_mutex:
            self._ends[key] = (_next_offset(data.data), data.position + len(data.data))
            self._ends.move_to_end(key)
            while len(self._ends) > FETCH_ENDS:
                self._ends.popitem(last=False)

    def _scan(self, seg: RemoteSegment, rseg: RemoteSegmentFile, pos: int, offset: int,
              scan: Callable[[int], FetchData | None]) -> FetchData | None:
        """``scan`` from the index's position ``pos``; repeated from the segment's start when that fails or
        starts past ``offset`` (a wrong index entry: derived data, as a local read treats it), damage otherwise."""
        try:
            if pos > 0:
                try:
                    data = scan(pos)
                    if data is None or not data.data or _first_base(data.data) <= offset:
                        return data
                    detail = f"its entry for offset {offset} points past the batch holding it"
                except CorruptRecordError as exc:
                    detail = str(exc)
                logger.warning("%s: scanning from offset index position %d failed (%s); scanning from the start",
                               self._where(self._keys(seg)["index"]), pos, detail)
            return scan(0)
        except (CorruptRecordError, CorruptIndexError) as exc:
            raise self._damaged(seg, rseg.key, exc) from exc

    def batches(self, topic: str, partition: int, offset: int, *,
                topic_id: uuid.UUID | None = None) -> Iterator[BatchT]:
        """Every checked batch from the one holding ``offset`` to the end of the last finished remote segment."""
        previous: RemoteSegment | None = None
        for i, seg in enumerate(self._holding(topic, partition, offset, topic_id)):
            if previous is not None and seg.start_offset > previous.end_offset + 1:
                raise DataLossError(f"offsets [{previous.end_offset + 1}, {seg.start_offset - 1}] of {topic}-"
                                    f"{partition} are in no finished remote segment")
            previous = seg
            rseg = self._segment(seg)
            start = offset if i == 0 else seg.start_offset
            pos = self._position(seg, start) if i == 0 else 0
            try:
                yield from checked_from(rseg, pos, start, seg.end_offset + 1, None)
            except (CorruptRecordError, CorruptIndexError) as exc:
                if pos == 0:
                    raise self._damaged(seg, rseg.key, exc) from exc
                # A wrong index entry (derived data): from the segment's start, as a local read does. A batch
                # already yielded is not yielded again: checked_from starts at the first one holding ``wanted``.
                logger.warning("%s: scanning from offset index position %d failed (%s); scanning from the start",
                               self._where(self._keys(seg)["index"]), pos, exc)
                try:
                    yield from checked_from(rseg, 0, start, seg.end_offset + 1, None)
                except (CorruptRecordError, CorruptIndexError) as again:
                    raise self._damaged(seg, rseg.key, again) from again

    # -- transactions ---------------------------------------------------------------------------------------------
    def aborted_transactions(self, topic: str, partition: int, start: int, upper: int, *,
                             topic_id: uuid.UUID | None = None) -> TxnIndexSearchResult:
        """Aborted transactions overlapping [start, upper) from the remote ``.txnindex`` objects of the segment
        holding ``start`` on; ``complete`` when one entry proves no later segment (remote or local) holds another
        (Kafka's ``collectAbortedTransactions``, remote part). The search does not stop at the segment holding
        ``upper``: a transaction aborted below it is indexed where its marker went, which may be a later segment."""
        out: list[AbortedTxn] = []
        for seg in self.segments_from(topic, partition, start, topic_id=topic_id):
            for txn in self._aborted_of(seg):
                if txn.last_offset >= start and txn.first_offset < upper:
                    out.append(txn)
                if txn.last_stable_offset >= upper:
                    return TxnIndexSearchResult(out, True)
        return TxnIndexSearchResult(out, False)

    # -- timestamps -----------------------------------------------------------------------------------------------
    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int, start_offset: int, *,
                             topic_id: uuid.UUID | None = None) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or above ``start_offset`` whose timestamp is >=
        ``timestamp``, in the remote segments (Kafka's ``RemoteLogManager.findOffsetByTimestamp``), or None."""
        for seg in self.segments_from(topic, partition, start_offset, topic_id=topic_id):
            if seg.max_timestamp_ms < timestamp:
                continue
            first = max(seg.start_offset, start_offset)
            from_offset = max(self._time_index(seg).offset_for_time(timestamp), first)
            rseg = self._segment(seg)
            try:
                for batch in checked_from(rseg, self._position(seg, from_offset), from_offset, seg.end_offset + 1,
                                          None):
                    if batch.max_timestamp < timestamp:
                        continue
                    for rec in batch.records():
                        if rec.timestamp >= timestamp and rec.offset >= first:
                            return rec.timestamp, rec.offset
            except (CorruptRecordError, CorruptIndexError) as exc:
                raise self._damaged(seg, rseg.key, exc) from exc
        return None

    # -- objects --------------------------------------------------------------------------------------------------
    def _keys(self, seg: RemoteSegment) -> dict[str, str]:
        return segment_keys(self.settings.key_prefix, seg.topic, seg.topic_id, seg.partition, seg.start_offset,
                            seg.segment_id)

    def _where(self, key: str) -> str:
        return f"s3://{self.settings.bucket}/{key}"

    def _segment(self, seg: RemoteSegment) -> RemoteSegmentFile:
        key = self._keys(seg)["log"]
        return RemoteSegmentFile(seg.start_offset, RemoteFileRecords(self, seg, key), key)

    def _aborted_of(self, seg: RemoteSegment) -> list[AbortedTxn]:
        """The entries of ``seg``'s ``.txnindex`` object (none when it has none), kept in memory."""
        key = self._keys(seg)["txnindex"]
        with self._parsed_mutex:
            found = self._txns.get(key)
            if found is not None:
                self._txns.move_to_end(key)
                return found
        try:
            # A segment with a parts manifest: its .txnindex exists only if listed, and then must (a missing one
            # is loss, never "no aborted transactions"). Without one (copied before manifests): absent means none.
            listed = parts.of_segment(seg)
        except parts.ManifestError as exc:
            raise self._damaged(seg, key, exc) from exc
        raw = b"" if listed is not None and not listed.has("txnindex") else self._object(seg, key,
                                                                                          optional=listed is None)
        if listed is not None and listed.has("txnindex") and len(raw or b"") != listed.parts["txnindex"].size:
            raise RemoteObjectDamagedError(key, _offsets(seg), f"{len(raw or b'')} bytes where the copy uploaded "
                                                                f"{listed.parts['txnindex'].size}")
        try:
            entries = decode_entries(raw or b"", self._where(key))
        except CorruptIndexError as exc:
            raise self._damaged(seg, key, exc) from exc
        with self._parsed_mutex:
            self._txns[key] = entries
            while len(self._txns) > PARSED_TXN_INDEXES:
                self._txns.popitem(last=False)
        return entries

    def _object(self, seg: RemoteSegment, key: str, *, optional: bool = False) -> bytes | None:
        """A whole (index) object through the cache. ``optional``: a missing object is no error and is cached as
        empty (a ``.txnindex`` exists only for segments with aborted transactions; object keys name the segment's
        id, so the answer never changes)."""
        def load() -> bytes:
            try:
                return self.store.get(key, _offsets(seg))
            except RemoteObjectMissingError:
                if optional:
                    return b""
                raise
        try:
            data = self.cache.get(key, load)
        except RemoteObjectMissingError as exc:
            raise RemoteObjectMissingError(key, _offsets(seg)) from exc
        if len(data) > MAX_INDEX_OBJECT_BYTES:
            raise RemoteObjectDamagedError(key, _offsets(seg), f"index object of {len(data)} bytes, more than "
                                                                f"{MAX_INDEX_OBJECT_BYTES}")
        return data

    def chunk(self, seg: RemoteSegment, key: str, n: int) -> bytes:
        """Chunk ``n`` of the ``.log`` object ``key`` (short only at the object's end, as the metadata sizes it)."""
        start = n * CHUNK_BYTES
        end = min(start + CHUNK_BYTES, seg.size_bytes)
        try:
            if self._fetcher is not None:
                data = self._fetcher.chunk(key, n, seg.size_bytes, CHUNK_BYTES, self._window(), _offsets(seg))
            else:
                data = self.cache.get(chunk_name(key, CHUNK_BYTES, n),
                                      lambda: self.store.get_range(key, start, end, _offsets(seg)))
        except RemoteObjectMissingError as exc:
            raise RemoteObjectMissingError(key, _offsets(seg)) from exc
        if len(data) != end - start:
            raise RemoteObjectDamagedError(key, _offsets(seg), f"bytes [{start}, {end}) of the segment read "
                                                                f"{len(data)} bytes: the object is shorter than the "
                                                                f"{seg.size_bytes} bytes its metadata records")
        return data

    def _window(self) -> int:
        """Chunks one cold read fetches (its own and those after it): :data:`READ_AHEAD_CHUNKS`, fewer when they
        would take more than a quarter of the cache's bound (read-ahead must not evict what is being read)."""
        fits = self.cache.max_bytes // (4 * (CHUNK_BYTES + TRAILER.size)) if isinstance(self.cache, ChunkCache) else 1
        return max(1, min(READ_AHEAD_CHUNKS, fits))

    def segment_bytes(self, seg: RemoteSegment) -> tuple[bytes, str]:
        """The whole ``.log`` object of ``seg`` (every chunk, sized as its metadata says) and where it is; the
        caller checks its batches (the Spark source reads it as a local segment file)."""
        key = self._keys(seg)["log"]
        chunks = (seg.size_bytes + CHUNK_BYTES - 1) // CHUNK_BYTES
        if chunks <= 1:
            return b"".join(self.chunk(seg, key, n) for n in range(chunks)), self._where(key)
        # Several ranged GETs at once (the store's client is thread-safe): a whole segment costs about one GET.
        with concurrent.futures.ThreadPoolExecutor(min(chunks, PARALLEL_CHUNKS)) as pool:
            parts = list(pool.map(lambda n: self.chunk(seg, key, n), range(chunks)))
        return b"".join(parts), self._where(key)

    def _parsed_index(self, seg: RemoteSegment, part: str) -> SegmentIndex:
        """The ``part`` (``index`` or ``timeindex``) object of ``seg``, parsed and checked, kept in memory."""
        key = self._keys(seg)[part]
        with self._parsed_mutex:
            found = self._parsed.get(key)
            if found is not None:
                self._parsed.move_to_end(key)
                return found
        raw = self._object(seg, key)
        assert raw is not None
        try:
            index = (SegmentIndex.offsets_of(seg, raw, self._where(key)) if part == "index"
                     else SegmentIndex.times_of(seg, raw, self._where(key)))
        except CorruptIndexError as exc:
            raise self._damaged(seg, key, exc) from exc
        with self._parsed_mutex:
            self._parsed[key] = index
            while len(self._parsed) > PARSED_INDEXES:
                self._parsed.popitem(last=False)
        return index

    def _position(self, seg: RemoteSegment, offset: int) -> int:
        return self._parsed_index(seg, "index").position(offset)

    def _time_index(self, seg: RemoteSegment) -> SegmentIndex:
        return self._parsed_index(seg, "timeindex")

    def _damaged(self, seg: RemoteSegment, key: str, exc: Exception) -> RemoteObjectDamagedError:
        detail = str(exc)
        logger.error("remote segment [%d, %d] of %s-%d is damaged: %s (%s)", seg.start_offset, seg.end_offset,
                     seg.topic, seg.partition, self._where(key), detail)
        return RemoteObjectDamagedError(key, _offsets(seg), detail)


def _first_base(data: bytes) -> int:
    """The base offset of the first entry of ``data`` (its first 8 bytes, any magic)."""
    return int.from_bytes(data[:8], "big", signed=True)


def _next_offset(data: bytes) -> int:
    """The offset after the last batch of ``data`` (whole batches of any magic): its last offset + 1."""
    pos = last = 0
    while pos + 12 <= len(data):
        last = pos
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    base = int.from_bytes(data[last:last + 8], "big", signed=True)
    if data[last + 16] >= 2:       # a v2 batch: base offset + last offset delta (bytes 23-26)
        return base + int.from_bytes(data[last + 23:last + 27], "big", signed=True) + 1
    return base + 1                # a legacy entry's offset is its last (a compressed wrapper's: the inner last)


def _offsets(seg: RemoteSegment) -> tuple[int, int]:
    return seg.start_offset, seg.end_offset


class RemoteFileRecords(FileRecords):
    """A remote ``.log`` object as the engine's :class:`FileRecords` reads: :meth:`read` serves byte ranges from
    cached chunks, so ``read_batches`` and every scan built on it run unchanged. Read-only; no file descriptor."""

    def __init__(self, reader: RemoteReader, seg: RemoteSegment, key: str):
        # FileRecords.__init__ is not called: there is no file to open.
        self.path = reader._where(key)
        self.writable = False
        self.size = seg.size_bytes
        self._fd = -1
        self._map = None
        self._map_len = 0
        self._reader, self._seg, self._key = reader, seg, key
        self._held: tuple[int, bytes] | None = None    # the chunk read last, for the scan's next small reads

    def read(self, position: int, size: int) -> bytes:
        size = max(0, min(size, self.size - position))
        if size == 0:
            return b""
        first, last = position // CHUNK_BYTES, (position + size - 1) // CHUNK_BYTES
        skip = position - first * CHUNK_BYTES
        if first == last:
            return self._chunk(first)[skip:skip + size]
        parts, left = [], size             # across chunks: each chunk's slice copied once, into the result
        for n in range(first, last + 1):
            view = memoryview(self._chunk(n))[skip:skip + left]
            parts.append(view)
            left -= len(view)
            skip = 0
        return b"".join(parts)

    def read_view(self, position: int, size: int) -> BatchBuffer:
        """As :meth:`read`, without copying when the range lies in one chunk (the scan parses the view; what it
        returns is copied out of it once)."""
        size = max(0, min(size, self.size - position))
        first = position // CHUNK_BYTES
        if size == 0 or (position + size - 1) // CHUNK_BYTES != first:
            return self.read(position, size)
        skip = position - first * CHUNK_BYTES
        return memoryview(self._chunk(first))[skip:skip + size]

    def _chunk(self, n: int) -> bytes:
        """Chunk ``n``: a scan reads each batch's header, then its bytes, so the chunk read last is held for the
        life of this object (one fetch) and the reader is asked once per chunk, not once per read."""
        if self._held is not None and self._held[0] == n:
            return self._held[1]
        data = self._reader.chunk(self._seg, self._key, n)
        self._held = (n, data)
        return data

    def physical_size(self) -> int:
        return self.size

    def refresh_size(self) -> int:
        return self.size

    def close(self) -> None:
        pass


class RemoteSegmentFile:
    """A remote segment as :mod:`~storage_engine.segment.checked_read` scans it (its ``ScannedSegment``)."""

    index_interval_bytes = 4096

    def __init__(self, base_offset: int, log: RemoteFileRecords, key: str):
        self.base_offset = base_offset
        self.log = log
        self.key = key

    @property
    def path(self) -> str:
        return self.log.path
