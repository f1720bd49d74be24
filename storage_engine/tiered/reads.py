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
:data:`CHUNK_BYTES` chunks, so a consumer reading a cold segment from its start issues one GET per chunk.

Which segments exist comes from the remote view (:class:`~storage_engine.tiered.remote_log.RemoteLogView`,
rebuilt from ``__remote_log_metadata``): only segments in state ``COPY_SEGMENT_FINISHED`` are read.
:mod:`storage_engine.tiered.whole_log` joins the remote part and the local log for the CLI, the broker and the
message browser.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import struct
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from storage_engine.errors import (CorruptIndexError, CorruptRecordError, DataLossError, OffsetOutOfRangeError,
                                   RemoteObjectDamagedError, RemoteObjectMissingError)
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch
from storage_engine.segment.checked_read import FetchData, checked_from, read_from
from storage_engine.segment.file_records import FileRecords
from storage_engine.segment.txn_index import AbortedTxn, TxnIndexSearchResult, decode_entries
from storage_engine.tiered import parts
from storage_engine.tiered.cache import ChunkCache, NoCache
from storage_engine.tiered.keys import segment_keys

if TYPE_CHECKING:
    from storage_engine.tiered.settings import RemoteStorageSettings

logger = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20        # Aiven's default fetch chunk: a cold fetch costs one GET of this much
PARSED_INDEXES = 64          # segments whose parsed offset/time index stays in memory
PARALLEL_CHUNKS = 4          # ranged GETs in flight when a whole segment is read (the Spark source)
PARSED_TXN_INDEXES = 4096    # segments whose aborted transactions (usually none) stay in memory
MAX_INDEX_OBJECT_BYTES = 64 << 20   # segment.index.bytes is at most 2 GiB in Kafka, 10 MiB by default
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
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
        self._parsed: collections.OrderedDict[str, _Index] = collections.OrderedDict()
        self._txns: collections.OrderedDict[str, list[AbortedTxn]] = collections.OrderedDict()
        self._parsed_mutex = threading.Lock()

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
            pos = self._position(seg, offset)
            data = self._scan(seg, rseg, pos, offset, lambda p: read_from(rseg, p, offset, max_bytes, None,
                                                                           min_one_message, seg.end_offset + 1))
            if data is not None:        # (empty when the first batch does not fit and not min_one_message)
                return data
        return None

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
            # The chunk size is part of the name: entries cut at another size are never taken for these.
            data = self.cache.get(f"{key}#{CHUNK_BYTES}#{n}",
                                  lambda: self.store.get_range(key, start, end, _offsets(seg)))
        except RemoteObjectMissingError as exc:
            raise RemoteObjectMissingError(key, _offsets(seg)) from exc
        if len(data) != end - start:
            raise RemoteObjectDamagedError(key, _offsets(seg), f"bytes [{start}, {end}) of the segment read "
                                                                f"{len(data)} bytes: the object is shorter than the "
                                                                f"{seg.size_bytes} bytes its metadata records")
        return data

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

    def _parsed_index(self, seg: RemoteSegment, part: str) -> _Index:
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
            index = (_Index.offsets_of(seg, raw, self._where(key)) if part == "index"
                     else _Index.times_of(seg, raw, self._where(key)))
        except CorruptIndexError as exc:
            raise self._damaged(seg, key, exc) from exc
        with self._parsed_mutex:
            self._parsed[key] = index
            while len(self._parsed) > PARSED_INDEXES:
                self._parsed.popitem(last=False)
        return index

    def _position(self, seg: RemoteSegment, offset: int) -> int:
        return self._parsed_index(seg, "index").position(offset)

    def _time_index(self, seg: RemoteSegment) -> _Index:
        return self._parsed_index(seg, "timeindex")

    def _damaged(self, seg: RemoteSegment, key: str, exc: Exception) -> RemoteObjectDamagedError:
        detail = str(exc)
        logger.error("remote segment [%d, %d] of %s-%d is damaged: %s (%s)", seg.start_offset, seg.end_offset,
                     seg.topic, seg.partition, self._where(key), detail)
        return RemoteObjectDamagedError(key, _offsets(seg), detail)


def _first_base(data: bytes) -> int:
    """The base offset of the first entry of ``data`` (its first 8 bytes, any magic)."""
    return int.from_bytes(data[:8], "big", signed=True)


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

    def read(self, position: int, size: int) -> bytes:
        size = max(0, min(size, self.size - position))
        if size == 0:
            return b""
        first, last = position // CHUNK_BYTES, (position + size - 1) // CHUNK_BYTES
        parts = [self._reader.chunk(self._seg, self._key, n) for n in range(first, last + 1)]
        buf = parts[0] if len(parts) == 1 else b"".join(parts)
        skip = position - first * CHUNK_BYTES
        return buf[skip:skip + size]

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


class _Index:
    """A remote segment's offset index (``keys``: offsets, ``values``: positions) or time index (``keys``:
    timestamps, ``values``: offsets), parsed and checked once: entries in order, inside the segment's offsets and
    bytes. Trailing zero slots (a preallocated index copied untrimmed) end it, as Kafka's index loading ends it."""

    def __init__(self, base: int, keys: list[int], values: list[int]):
        self.base, self.keys, self.values = base, keys, values

    @classmethod
    def offsets_of(cls, seg: RemoteSegment, raw: bytes, where: str) -> _Index:
        base, offsets, positions = seg.start_offset, [], []
        prev_rel, prev_pos = -1, 0
        for slot, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 8])):
            if rel == 0 and pos == 0 and slot > 0:
                break
            if rel <= prev_rel or pos < prev_pos or pos >= seg.size_bytes or base + rel > seg.end_offset:
                raise CorruptIndexError(f"offset index entry {slot} (offset {base + rel}, position {pos}) is out of "
                                        f"order or outside the segment [{base}, {seg.end_offset}] of "
                                        f"{seg.size_bytes} bytes", where, slot * _OFFSET_ENTRY.size)
            offsets.append(base + rel)
            positions.append(pos)
            prev_rel, prev_pos = rel, pos
        return cls(base, offsets, positions)

    @classmethod
    def times_of(cls, seg: RemoteSegment, raw: bytes, where: str) -> _Index:
        base, times, offsets = seg.start_offset, [], []
        prev_ts, prev_off = -1, base
        for slot, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 12])):
            if ts == 0 and rel == 0 and slot > 0:
                break
            if ts < prev_ts or base + rel < prev_off or base + rel > seg.end_offset:
                raise CorruptIndexError(f"time index entry {slot} ({ts}, offset {base + rel}) is out of order or "
                                        f"outside the segment [{base}, {seg.end_offset}]", where,
                                        slot * _TIME_ENTRY.size)
            times.append(ts)
            offsets.append(base + rel)
            prev_ts, prev_off = ts, base + rel
        return cls(base, times, offsets)

    def position(self, offset: int) -> int:
        """(offset index) The position of the largest entry with offset <= ``offset``, 0 if none: where a scan
        for ``offset`` starts."""
        i = _floor(self.keys, offset)
        return self.values[i] if i >= 0 else 0

    def offset_for_time(self, timestamp: int) -> int:
        """(time index) The offset of the entry with the largest timestamp <= ``timestamp``, the base if none."""
        i = _floor(self.keys, timestamp)
        return self.values[i] if i >= 0 else self.base


def _floor(values: Sequence[int], target: int) -> int:
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1
