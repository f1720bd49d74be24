"""One partition's log: ordered segments, appends, rolls, reads, flushes, truncation (Kafka's ``UnifiedLog``).

Offsets: the log start offset (first readable offset, raised by delete-records and retention), the recovery
point (everything below it is fsynced), the log end offset (LEO, the next offset to assign). This engine is a
single node with no replicas, so the **high watermark is the log end offset**: every appended record is
"committed" as soon as it is written, and retention may delete up to the active segment.

Across processes every mutating operation runs under the partition lock (:mod:`.partition_lock`) and starts by
bringing this object's view up to date: a changed generation reloads the segment list, an unchanged one only
re-validates bytes another process appended to the active segment (and truncates a torn tail left by a
writer that died mid-append). Readers reload when the generation moved and retry when a segment they wanted
was renamed away (``.deleted``) under them.
"""
from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

from storage_engine.record import codecs
from storage_engine import layout
from storage_engine.log import loader
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.durable import fsync_dir
from storage_engine.errors import (CorruptRecordError, InvalidRecordError, InvalidRecordForTopicError, OffsetOutOfRangeError,
                     RecordTooLargeError, StorageError, StorageIOError)
from storage_engine.segment.file_records import iter_batches
from storage_engine.log.locks import UNKNOWN, PartitionLock, PartitionState
from storage_engine.record.records import (BATCH_HEADER, CRC_OFFSET, HEADER_SIZE_UP_TO_MAGIC, LOG_APPEND_TIME, MAGIC_V2,
                      TIMESTAMP_TYPE_MASK, Record, RecordBatch, SimpleRecord, build_batch, set_base_offset)
from storage_engine.segment.segment import LogSegment

logger = logging.getLogger(__name__)


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    bytes: int
    rolled: bool = False


def check_records(topic: str, config: LogConfig, records: Sequence[SimpleRecord], *, codec: int = codecs.NONE,
                  now_ms: int) -> None:
    """Raise what :meth:`Log.append_records` would raise for ``records`` (a keyless record on a compacted
    topic, a batch over max.message.bytes or segment.bytes) without touching the log, so a caller can check a
    whole input before appending any of it (or creating its partition)."""
    if not records:
        raise InvalidRecordError("cannot append an empty list of records")
    recs = _normalize_records(records, now_ms)
    _check_keys(topic, config, recs)
    ts_type = LOG_APPEND_TIME if config.message_timestamp_type == "LogAppendTime" else 0
    data = build_batch(recs, base_offset=0, codec=_effective_codec(config, codec), timestamp_type=ts_type,
                       log_append_time_ms=now_ms if ts_type else None)
    _check_size(topic, config, len(data))


_BYTES_LIKE = (bytes, bytearray, memoryview)


def _normalize_records(records, now_ms: int) -> list[SimpleRecord]:
    """``SimpleRecord``s with a timestamp (``now_ms`` where it is -1); a field of the wrong type is an
    InvalidRecordError naming the record and the field, never a TypeError from deep in the encoder."""
    recs = []
    for i, r in enumerate(records):
        if not isinstance(r, SimpleRecord):
            try:
                r = SimpleRecord(*r)
            except TypeError:
                raise InvalidRecordError(f"record {i} must be (key, value[, timestamp[, headers]]), got {r!r}") \
                    from None
        if r.key is not None and not isinstance(r.key, _BYTES_LIKE):
            raise InvalidRecordError(f"record {i}: key must be bytes or None, got {type(r.key).__name__}")
        if r.value is not None and not isinstance(r.value, _BYTES_LIKE):
            raise InvalidRecordError(f"record {i}: value must be bytes or None, got {type(r.value).__name__}")
        if isinstance(r.timestamp, bool) or not isinstance(r.timestamp, int) or r.timestamp < -1:
            raise InvalidRecordError(f"record {i}: timestamp must be an integer >= 0 (or -1 for now), "
                                     f"got {r.timestamp!r}")
        if r.headers:
            for h in r.headers:
                if (not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                        or not (h[1] is None or isinstance(h[1], _BYTES_LIKE))):
                    raise InvalidRecordError(f"record {i}: headers must be (str key, bytes or None value) pairs, "
                                             f"got {h!r}")
                try:
                    h[0].encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidRecordError(f"record {i}: header key {h[0]!r} is not valid Unicode text") from None
        if r.timestamp == -1:
            r = r._replace(timestamp=now_ms)
        recs.append(r)
    return recs


def _effective_codec(config: LogConfig, requested: int) -> int:
    ctype = config.compression_type
    if ctype in ("producer",):
        return requested
    if ctype == "uncompressed":
        return codecs.NONE
    return codecs.CODEC_IDS[ctype]


def _check_keys(topic: str, config: LogConfig, recs) -> None:
    if config.compact:
        for i, r in enumerate(recs):
            if r.key is None:
                raise InvalidRecordForTopicError(
                    f"compacted topic {topic} cannot accept a record without a key (record {i} of the batch)")


def _check_size(topic: str, config: LogConfig, size: int) -> None:
    if size > config.max_message_bytes:
        raise RecordTooLargeError(f"the record batch is {size} bytes, larger than max.message.bytes "
                                  f"({config.max_message_bytes}) of topic {topic}")
    if size > config.segment_bytes:
        raise RecordTooLargeError(f"the record batch is {size} bytes, larger than segment.bytes "
                                  f"({config.segment_bytes}) of topic {topic}")


def _at_zero_tail(seg: LogSegment, position: int) -> bool:
    """Whether ``position`` starts the zero-filled tail of a preallocated ``.log`` (``preallocate=true``).
    No entry starts with a zero header, so nothing was appended there: it is neither growth nor a torn write."""
    head = seg.log.read(position, HEADER_SIZE_UP_TO_MAGIC)
    return len(head) == HEADER_SIZE_UP_TO_MAGIC and not any(head)


def _drop_torn_time_index_entry(seg: LogSegment) -> None:
    """Repair what a writer killed inside a time-index append leaves (caller holds the lock).

    An entry is stored timestamp first (see :mod:`._index_file`), so a kill between the two stores leaves
    (timestamp, base offset) as the last entry, which names no batch unless the first batch ends at the base
    offset. Entries never go back in offset, so every entry is then at the base offset: drop them all (the
    index is sparse; lookups scan from the start of the segment instead)."""
    index = seg.time_index
    if index.entries == 0 or index.last_entry[1] != seg.base_offset:
        return
    first = seg.log.batch_at(0) if seg.size else None
    if first is not None and first.last_offset == seg.base_offset:
        return
    logger.warning("dropping %d time index entries at the base offset of %s: left by a writer that died "
                   "while appending one", index.entries, index.path)
    index.truncate_to(seg.base_offset)


def _stamp_log_append_time(buf: bytearray, pos: int, now_ms: int) -> None:
    """Kafka's ``setMaxTimestamp(LOG_APPEND_TIME, now)`` on the client batch at ``pos`` of a LogAppendTime
    topic: the timestamp-type bit and the max timestamp change, both under the CRC, so the CRC is redone."""
    fields = list(BATCH_HEADER.unpack_from(buf, pos))
    fields[5] |= TIMESTAMP_TYPE_MASK  # attributes
    fields[8] = now_ms                # max_timestamp
    BATCH_HEADER.pack_into(buf, pos, *fields)
    struct.pack_into(">I", buf, pos + CRC_OFFSET, RecordBatch(buf, pos).compute_crc())


def _inode_of(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1


class Log:
    def __init__(self, log_dir: str, topic: str, partition: int, config: LogConfig, lock: PartitionLock,
                 segments: list[LogSegment], *, log_start_offset: int, recovery_point: int, next_offset: int,
                 generation: int, clock: Clock, last_flush_ms: int):
        self.log_dir = log_dir
        self.topic = topic
        self.partition = partition
        self.name = layout.partition_dir_name(topic, partition)
        self.dir = os.path.join(log_dir, self.name)
        self.config = config
        self.lock = lock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.log_end_offset = next_offset
        self.generation = generation
        self.last_flush_ms = last_flush_ms
        self.clock = clock
        self._known_active_size = segments[-1].size if segments else 0

    # -- construction -----------------------------------------------------------------------------------------
    @classmethod
    def open(cls, log_dir: str, topic: str, partition: int, config: LogConfig, *, clock: Clock,
             exclusive: bool, had_clean_shutdown: bool = False, recovery_point_checkpoint: int = 0,
             log_start_offset_checkpoint: int = 0, create: bool = False) -> tuple["Log", loader.LoadResult | None]:
        """Open (and when ``exclusive``, load and recover) a partition. ``create`` makes a missing folder."""
        now_ms = clock.milliseconds()
        name = layout.partition_dir_name(topic, partition)
        dir_path = os.path.join(log_dir, name)
        from storage_engine.log.locks import lock_path
        lock = PartitionLock(lock_path(log_dir, name))
        with lock:
            if not os.path.isdir(dir_path):
                if not create:
                    lock.close()
                    raise StorageError(f"partition {name} does not exist in {log_dir}")
                try:
                    os.makedirs(dir_path)
                    fsync_dir(log_dir)
                except OSError as exc:
                    raise StorageIOError("cannot create partition folder", dir_path, exc) from exc
            state = lock.read_state()
            if exclusive or state.generation == 0:
                lso_cp = log_start_offset_checkpoint
                rp_cp = recovery_point_checkpoint
                if state.generation != 0:
                    # Values kept by processes that ran since the last checkpoint are at least as fresh.
                    if state.log_start_offset != UNKNOWN:
                        lso_cp = max(lso_cp, state.log_start_offset)
                    if state.recovery_point != UNKNOWN:
                        # Lowered by truncation or raised by a flush since the checkpoint: trust the lower.
                        rp_cp = min(rp_cp, state.recovery_point)
                res = loader.load(dir_path, config, recovery_point_checkpoint=rp_cp,
                                  log_start_offset_checkpoint=lso_cp, had_clean_shutdown=had_clean_shutdown,
                                  now_ms=now_ms)
                # flush.ms counts from the last flush by any process; Kafka (one process) starts at load time.
                last_flush = state.last_flush_ms if state.last_flush_ms != UNKNOWN else now_ms
                new_state = PartitionState(state.generation + 1, res.log_start_offset, res.recovery_point,
                                           last_flush)
                lock.write_state(new_state)
                log = cls(log_dir, topic, partition, config, lock, res.segments,
                          log_start_offset=res.log_start_offset, recovery_point=res.recovery_point,
                          next_offset=res.next_offset, generation=new_state.generation, clock=clock,
                          last_flush_ms=last_flush)
                # Kafka restarts the bytes-since-last-index-entry count at 0 on load (it lives in memory only);
                # count from the last entry instead, or a log appended by one short-lived process per batch
                # (the CLI) would never get an index entry.
                log.active_segment.reload_tail_state()
                return log, res
            log = cls(log_dir, topic, partition, config, lock, [], log_start_offset=0, recovery_point=0,
                      next_offset=0, generation=-1, clock=clock, last_flush_ms=now_ms)
            log._sync_view(now_ms)
            return log, None

    # -- view maintenance -------------------------------------------------------------------------------------
    def _reload_view(self, state: PartitionState, now_ms: int) -> None:
        for seg in self._segments:
            seg.close(trim=False)
        segments = loader.open_view(self.dir, self.config, now_ms)
        if not segments:
            raise StorageError(f"partition {self.name} has no segments in {self.dir}")
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.generation = state.generation
        self.log_start_offset = max(state.log_start_offset, segments[0].base_offset)
        self.recovery_point = state.recovery_point if state.recovery_point != UNKNOWN else 0
        if state.last_flush_ms != UNKNOWN:
            self.last_flush_ms = state.last_flush_ms
        self._known_active_size = 0
        self._validate_active_tail(0)

    def _validate_active_tail(self, from_position: int) -> None:
        """Validate bytes of the active segment from ``from_position`` (another process appended them).

        Under the lock a torn or corrupt tail is truncated: its writer died, since it no longer holds the
        lock. A reader (no lock) only stops short of it."""
        active = self.active_segment
        # Indexes before the size: a writer indexes a batch only after writing all of it, so every entry read
        # here points at a batch inside the size read next. The other order lets a reader without the lock
        # stop in front of a batch that an entry names, and read_next_offset would find nothing after it.
        active.offset_index.refresh()
        active.time_index.refresh()
        active.log.refresh_size()
        if from_position <= 0 or from_position > active.size:
            from_position = active.last_index_position()
        pos, nxt, error = from_position, None, None
        try:
            for batch in active.log.batches(from_position, strict=True):
                batch.ensure_valid()
                nxt = batch.next_offset
                pos += batch.size_in_bytes
        except CorruptRecordError as exc:
            error = exc
        if error is not None and _at_zero_tail(active, pos):
            active.log.size = pos  # the preallocated tail: keep the file as long as it is
            error = None
        if error is not None:
            if self.lock.held:
                logger.warning("truncating %d bytes at the end of %s: %s", active.size - pos, active.path, error)
                active.log.truncate_to(pos)
            else:
                active.log.size = pos
        if nxt is None or error is not None:
            nxt = active.read_next_offset()
        if error is not None and self.lock.held:
            active.offset_index.truncate_to(nxt)
            active.time_index.truncate_to(nxt)
        if self.lock.held:
            _drop_torn_time_index_entry(active)
        active.reload_tail_state()
        self.log_end_offset = nxt
        self._known_active_size = active.size

    def _sync_view(self, now_ms: int) -> None:
        state = self.lock.read_state()
        if state.generation != self.generation:
            self._reload_view(state, now_ms)
            self._ensure_active_index_room()
            return
        if state.log_start_offset != UNKNOWN:
            self.log_start_offset = max(self.log_start_offset, state.log_start_offset)
        if state.recovery_point != UNKNOWN:
            self.recovery_point = state.recovery_point
        if state.last_flush_ms != UNKNOWN:
            self.last_flush_ms = state.last_flush_ms
        active = self._segments[-1]
        if self._active_grew(active):
            self._validate_active_tail(self._known_active_size)
        self._ensure_active_index_room()

    def _ensure_active_index_room(self) -> None:
        """Grow the active segment's indexes back to segment.index.bytes (caller holds the lock). A view opens
        a segment whose index file is missing (a writer died while creating it in a roll) or trimmed (one
        died after sealing it) with no free slot; as the active segment it must take entries, and a roll must
        be able to add the final time-index entry."""
        active = self._segments[-1]
        for index in (active.offset_index, active.time_index):
            if index.writable and index.length < self.config.segment_index_bytes:
                index.resize(self.config.segment_index_bytes)

    def _active_grew(self, active: LogSegment) -> bool:
        """Whether the active segment holds bytes this view has not validated (another process appended).
        A preallocated file is longer than its data from the start: its zero tail is not growth."""
        if active.log.refresh_size() == self._known_active_size:
            return False
        if _at_zero_tail(active, self._known_active_size):
            active.log.size = self._known_active_size
            return False
        return True

    @contextlib.contextmanager
    def locked(self):
        """Hold the partition lock with an up-to-date view."""
        self.lock.acquire()
        try:
            if self.lock._depth == 1:
                self._sync_view(self.clock.milliseconds())
            yield self
        finally:
            self.lock.release()

    def _publish(self, *, bump: bool) -> None:
        """Write this process's view of the shared state (caller holds the lock)."""
        if bump:
            self.generation += 1
        self.lock.write_state(PartitionState(self.generation, self.log_start_offset, self.recovery_point,
                                             self.last_flush_ms))

    def refresh(self) -> None:
        """Bring a reader's view up to date; without the lock while only the active segment grew."""
        state = self.lock.read_state()
        if state.generation != self.generation:
            # The segment set changed: reload under the lock, so a roll is never seen half done (the generation
            # moves before its files exist) and a view never creates a missing index file under its writer.
            if self.lock.held:
                self._sync_view(self.clock.milliseconds())
            else:
                with self.locked():
                    pass
        else:
            active = self._segments[-1]
            if self._active_grew(active):
                self._validate_active_tail(self._known_active_size)
            if state.log_start_offset != UNKNOWN:
                self.log_start_offset = max(self.log_start_offset, state.log_start_offset)
            if state.recovery_point != UNKNOWN:
                self.recovery_point = state.recovery_point
            if state.last_flush_ms != UNKNOWN:
                self.last_flush_ms = state.last_flush_ms

    # -- segment access ---------------------------------------------------------------------------------------
    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    def floor_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        if i < len(self._bases) and self._bases[i] == seg.base_offset:
            self._segments[i] = seg
        else:
            self._bases.insert(i, seg.base_offset)
            self._segments.insert(i, seg)

    def _remove_segment(self, seg: LogSegment) -> None:
        i = self._segments.index(seg)
        del self._segments[i]
        del self._bases[i]

    # -- appending --------------------------------------------------------------------------------------------
    def append_records(self, records: Sequence[SimpleRecord], *, codec: int = codecs.NONE, producer_id: int = -1, producer_epoch: int = -1,
                       base_sequence: int = -1) -> AppendInfo:
        """Build one batch from ``records`` at the log end offset and append it (the producer path)."""
        if not records:
            raise InvalidRecordError("cannot append an empty list of records")
        now = self.clock.milliseconds()
        recs = _normalize_records(records, now)
        with self.locked():
            self._check_keys(recs)
            ts_type = LOG_APPEND_TIME if self.config.message_timestamp_type == "LogAppendTime" else 0
            data = build_batch(recs, base_offset=self.log_end_offset, codec=self._codec_for(codec),
                               timestamp_type=ts_type, log_append_time_ms=now if ts_type else None,
                               producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=base_sequence)
            max_ts = now if ts_type else max(r.timestamp for r in recs)
            self._check_size(len(data))
            first = self.log_end_offset
            last = first + len(recs) - 1
            # The time index names the batch holding the max timestamp by its last offset ("shallow").
            return self._append_validated(data, first, last, max_ts, last, len(recs), now)

    def _codec_for(self, requested: int) -> int:
        return _effective_codec(self.config, requested)

    def _check_keys(self, recs) -> None:
        _check_keys(self.topic, self.config, recs)

    def _check_size(self, size: int) -> None:
        _check_size(self.topic, self.config, size)

    def append_batches(self, data: bytes) -> AppendInfo:
        """Append client-encoded magic-2 batches (Kafka's leader append): validate every batch and record,
        assign offsets from the log end offset, then write them as one append."""
        now = self.clock.milliseconds()
        buf = bytearray(data)
        batches = []
        try:
            for batch in iter_batches(buf, 0, len(buf), "<append>", strict=True):
                batches.append(batch)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"invalid batch in append to {self.name}: {exc.reason}", None,
                                     exc.position) from None
        if not batches:
            raise InvalidRecordError(f"append to {self.name} holds no record batch")
        if len(buf) > self.config.segment_bytes:
            # Kafka checks the whole append: it goes into one segment, which must not exceed segment.bytes.
            raise RecordTooLargeError(f"the append of {len(buf)} bytes to {self.name} is larger than "
                                      f"segment.bytes ({self.config.segment_bytes}) of topic {self.topic}")
        with self.locked():
            offset = self.log_end_offset
            first = offset
            max_ts, max_ts_offset, count = -1, offset, 0
            for batch in batches:
                if batch.magic != MAGIC_V2:
                    raise InvalidRecordError(f"append to {self.name}: only magic 2 batches are accepted, got "
                                             f"magic {batch.magic}")
                batch.ensure_valid()
                self._check_size(batch.size_in_bytes)
                recs = batch.records()
                for i, r in enumerate(recs):
                    if r.offset - batch.base_offset != i:
                        raise InvalidRecordError(f"append to {self.name}: inner record offsets must be "
                                                 f"sequential, record {i} has offset delta "
                                                 f"{r.offset - batch.base_offset}")
                if len(recs) != batch.records_count or batch.last_offset_delta != len(recs) - 1:
                    raise InvalidRecordError(f"append to {self.name}: batch declares {batch.records_count} "
                                             f"records and last offset delta {batch.last_offset_delta} but "
                                             f"holds {len(recs)}")
                self._check_keys(recs)
                set_base_offset(buf, batch.pos, offset)
                if self.config.message_timestamp_type == "LogAppendTime":
                    _stamp_log_append_time(buf, batch.pos, now)
                    bmax = now
                else:
                    bmax = batch.max_timestamp
                if bmax > max_ts:
                    max_ts, max_ts_offset = bmax, offset + batch.last_offset_delta
                offset += batch.last_offset_delta + 1
                count += len(recs)
            return self._append_validated(bytes(buf), first, offset - 1, max_ts, max_ts_offset, count, now)

    def _append_validated(self, data: bytes, first: int, last: int, max_ts: int, max_ts_offset: int,
                          count: int, now: int) -> AppendInfo:
        rolled = self._maybe_roll(len(data), max_ts, last, now)
        self.active_segment.append(last, max_ts, max_ts_offset, data)
        self.log_end_offset = last + 1
        self._known_active_size = self.active_segment.size
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self._flush_locked(self.log_end_offset, now)
        return AppendInfo(first, last, count, max_ts, len(data), rolled)

    # -- rolling ----------------------------------------------------------------------------------------------
    def _max_segment_ms(self) -> int:
        cfg = self.config
        if cfg.compact and cfg.max_compaction_lag_ms > 0:
            return min(cfg.max_compaction_lag_ms, cfg.segment_ms)
        return cfg.segment_ms

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> bool:
        reason = self.active_segment.should_roll(segment_bytes=self.config.segment_bytes,
                                                 max_segment_ms=self._max_segment_ms(), messages_size=size,
                                                 max_timestamp=max_ts, max_offset=last_offset, now_ms=now)
        if reason is None:
            return False
        logger.info("rolling %s at offset %d (%s)", self.name, self.log_end_offset, reason)
        self._roll_locked(now)
        return True

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset."""
        now = self.clock.milliseconds()
        with self.locked():
            return self._roll_locked(now)

    def _roll_locked(self, now: int) -> LogSegment:
        new_base = self.log_end_offset
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # KAFKA-6388: rolling an empty active segment keeps it
            raise StorageError(f"cannot roll {self.name}: a segment with base offset {new_base} already exists")
        if new_base < active.base_offset:
            raise StorageError(f"cannot roll {self.name} to offset {new_base}, below the active segment base "
                               f"{active.base_offset}")
        # Bump the generation before the old segment is trimmed and the new one's files exist: every later lock
        # holder then reloads from disk, even if this process dies mid-roll. Otherwise a holder with the old
        # view would go on appending to the old segment (through index maps longer than the trimmed files)
        # behind an empty newer one, and a later view would hand out those offsets again.
        self._publish(bump=True)
        active.on_become_inactive_segment()
        seg = LogSegment.open(self.dir, new_base, self.config, now_ms=now)
        self._add_segment(seg)
        self._known_active_size = 0
        # Kafka flushes everything below the new segment right after a roll (async); do it now.
        self._flush_locked(new_base, now, bump=True)
        # The sealed segment's files are opened again only when it is read: a long-running appender holds
        # descriptors for the active segment only, however many segments it rolls.
        active.release()
        return seg

    # -- flushing ---------------------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> int:
        """fsync every segment holding offsets below ``offset`` (default: the log end) and advance the
        recovery point. Returns the new recovery point."""
        now = self.clock.milliseconds()
        with self.locked():
            self._flush_locked(self.log_end_offset if offset is None else min(offset, self.log_end_offset), now)
            return self.recovery_point

    def _flush_locked(self, offset: int, now: int, bump: bool = False) -> None:
        if offset > self.recovery_point:
            new_segment = False
            # Segments overlapping [recovery point, offset): start at the one holding the recovery point.
            start = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
            for seg in self._segments[start:]:
                if seg.base_offset >= offset:
                    break
                seg.flush()
                new_segment = new_segment or seg.base_offset >= self.recovery_point
            if new_segment:
                fsync_dir(self.dir)
            self.recovery_point = offset
        self.last_flush_ms = now
        self._publish(bump=bump)

    def _next_base(self, seg: LogSegment) -> int | None:
        i = bisect.bisect_right(self._bases, seg.base_offset)
        return self._bases[i] if i < len(self._bases) else None

    def flush_due(self, now_ms: int) -> bool:
        """flush.ms: whether a time-based flush is due (and there is something unflushed)."""
        return (now_ms - self.last_flush_ms >= self.config.flush_ms
                and self.recovery_point < self.log_end_offset)

    # -- reading ----------------------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int = 1048576, *, min_one_message: bool = True):
        """Whole batches from the one holding ``start_offset``; None at the log end. OffsetOutOfRangeError
        outside [log start, log end]."""
        for attempt in range(3):
            try:
                return self._read_once(start_offset, max_bytes, min_one_message)
            except (FileNotFoundError, StorageIOError):
                if attempt == 2:
                    raise
                self.refresh()
        return None

    def _read_once(self, start_offset: int, max_bytes: int, min_one_message: bool):
        if start_offset < self.log_start_offset or start_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.name}: log start offset "
                f"{self.log_start_offset}, log end offset {self.log_end_offset}")
        if start_offset == self.log_end_offset:
            return None
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        while i < len(self._segments):
            seg = self._segments[i]
            data = seg.read(start_offset, max_bytes, min_one_message=min_one_message)
            if data is not None and data.data:
                return data
            i += 1
        return None

    def read_records(self, start_offset: int | None = None, max_records: int | None = None) -> Iterator[Record]:
        """Records from ``start_offset`` (default: log start) in offset order."""
        offset = self.log_start_offset if start_offset is None else start_offset
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: log start offset "
                f"{self.log_start_offset}, log end offset {self.log_end_offset}")
        produced = 0
        while offset < self.log_end_offset:
            data = self.read(offset, 1048576)
            if data is None:
                return
            advanced = False
            for batch in iter_batches(data.data, 0, len(data.data), self.name):
                for rec in batch.records():
                    if rec.offset < offset:
                        continue
                    yield rec
                    produced += 1
                    if max_records is not None and produced >= max_records:
                        return
                if batch.next_offset > offset:
                    offset = batch.next_offset
                    advanced = True
            if not advanced:
                return

    def offset_for_timestamp(self, timestamp: int):
        """(timestamp, offset) of the first record with timestamp >= ``timestamp``, or None."""
        for seg in self._segments:
            if seg.largest_timestamp() < timestamp and seg is not self.active_segment:
                continue
            found = seg.find_offset_by_timestamp(timestamp, max(seg.base_offset, self.log_start_offset))
            if found is not None:
                return found
        return None

    # -- truncation and log start ------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (batch granular). Returns False if nothing changed."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate {self.name} to negative offset {offset}")
        now = self.clock.milliseconds()
        with self.locked():
            if offset >= self.log_end_offset:
                return False
            if self._segments[0].base_offset > offset:
                self._truncate_fully_locked(offset, now)
                return True
            for seg in [s for s in self._segments if s.base_offset > offset]:
                self._delete_segment_files(seg, now)
            self._ensure_active_writable(now)
            self.active_segment.truncate_to(offset, now)
            self.log_end_offset = self.active_segment.read_next_offset()
            self._known_active_size = self.active_segment.size
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self._publish(bump=True)
            return True

    def _ensure_active_writable(self, now: int) -> None:
        """A view (a process that joined the log dir) opens sealed segments read-only; one that truncation
        turns back into the active segment must take writes, so reopen it writable."""
        active = self.active_segment
        if active.log.writable and active.offset_index.writable and active.time_index.writable:
            return
        active.close(trim=False)
        seg = LogSegment.open(self.dir, active.base_offset, self.config, now_ms=now, file_already_exists=True)
        self._segments[-1] = seg

    def truncate_fully_and_start_at(self, offset: int) -> None:
        now = self.clock.milliseconds()
        with self.locked():
            self._truncate_fully_locked(offset, now)

    def _truncate_fully_locked(self, offset: int, now: int) -> None:
        old = list(self._segments)
        seg = (LogSegment.open(self.dir, offset, self.config, now_ms=now)
               if all(s.base_offset != offset for s in old) else None)
        for s in old:
            if seg is None and s.base_offset == offset:
                continue
            self._delete_segment_files(s, now)
        if seg is None:
            self._ensure_active_writable(now)
            keep = self._segments[0]
            keep.truncate_to(offset, now)
        else:
            self._add_segment(seg)
        self.log_start_offset = offset
        self.log_end_offset = offset
        self.recovery_point = offset
        self._known_active_size = self.active_segment.size
        self._publish(bump=True)

    def _delete_segment_files(self, seg: LogSegment, now: int, sync: bool = True) -> None:
        """Remove a segment from the log: rename its files to ``.deleted`` (purged after file.delete.delay.ms)."""
        self._remove_segment(seg)
        seg.change_file_suffixes("", layout.DELETED_SUFFIX)
        seg.close(trim=False)
        # The rename's mtime is the "scheduled at" time for the purge.
        for p in seg.file_paths:
            try:
                os.utime(p, (now / 1000.0, now / 1000.0))
            except FileNotFoundError:
                pass
        if sync:
            fsync_dir(self.dir)

    def delete_segments_locked(self, segments: list[LogSegment], now: int) -> list[LogSegment]:
        """Delete a prefix of segments (retention; caller holds the lock with a fresh view).

        Kafka's ``deleteSegments``: if every segment would go, roll first so an empty active segment remains;
        the log start offset moves to the base of the segment after the last one deleted; files are renamed
        to ``.deleted`` and purged after ``file.delete.delay.ms``. Returns the segments actually deleted."""
        if not segments:
            return []
        if len(segments) == len(self._segments):
            if self.active_segment.size > 0 or self.log_end_offset != self.active_segment.base_offset:
                self._roll_locked(now)
            else:
                segments = segments[:-1]
            segments = [s for s in segments if s is not self.active_segment]
        for seg in segments:
            self._delete_segment_files(seg, now)
        if self._segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self._segments[0].base_offset
        self._publish(bump=True)
        return segments

    def replace_segments(self, new_segment: LogSegment | None, old_segments: list[LogSegment],
                         identity: list[tuple[int, int]], now_ms: int, *, delete_after: bool = False) -> bool:
        """Swap a cleaned segment (still named ``.cleaned``) in for ``old_segments``, crash-safely.

        Protocol (Kafka's ``replaceSegments``): ``.cleaned`` -> ``.swap``; old files -> ``.deleted``;
        ``.swap`` -> final name (indexes first, the ``.log`` last); fsync the dir. A crash before every
        ``.swap`` exists leaves a ``.cleaned`` whose presence makes the loader discard the swap; after, the
        loader completes it over [new base, new segment's next offset), so the new segment must reach into
        the last old segment that holds data. ``delete_after`` (a group whose records all went, swapped for a
        segment holding one empty batch) then deletes the new segment, its ``.log`` first: no empty segment
        is left behind, and a crash in between leaves the same records. ``new_segment`` None (old segments
        without any data) only deletes the old segments.
        ``identity`` ((base offset, inode of the .log) of each old segment when cleaning started) must still
        match the current view, else another process changed them and the swap is abandoned (False)."""
        with self.locked():
            current = {s.base_offset: s for s in self._segments}
            still_there = []
            for base, inode in identity:
                seg = current.get(base)
                if seg is None or _inode_of(seg.path) != inode or seg is self.active_segment:
                    if new_segment is not None:
                        new_segment.delete_files()
                    logger.warning("abandoning cleaned segment for %s at %d: segment %d changed meanwhile",
                                   self.name, identity[0][0], base)
                    return False
                still_there.append(seg)
            if new_segment is not None:
                new_segment.change_file_suffixes(layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)
                fsync_dir(self.dir)
            for seg in still_there:
                self._delete_segment_files(seg, now_ms, sync=False)
            if new_segment is not None:
                # The index files first, the .log last: while the .log is still .swap a loader redoes the
                # whole swap (deleting index files already renamed, then rebuilding them), so no index .swap
                # is ever left behind. change_file_suffixes then renames the .log and records the new names
                # (it tolerates the index files being in place already).
                base = new_segment.base_offset
                for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
                    src = layout.segment_file(self.dir, base, suffix, layout.SWAP_SUFFIX)
                    try:
                        os.replace(src, layout.segment_file(self.dir, base, suffix))
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        raise StorageIOError("cannot rename cleaned index", src, exc) from exc
                new_segment.change_file_suffixes(layout.SWAP_SUFFIX, "")
                self._add_segment(new_segment)
            fsync_dir(self.dir)
            if new_segment is not None and delete_after:
                self._delete_segment_files(new_segment, now_ms)
            if self._segments[0].base_offset > self.log_start_offset:
                self.log_start_offset = self._segments[0].base_offset
            self._publish(bump=True)
            return True

    def delete_records(self, offset: int) -> int:
        """Raise the log start offset (DeleteRecords). ``-1`` means the high watermark. Segments below it go
        at the next retention pass. Returns the new log start offset."""
        with self.locked():
            target = self.high_watermark if offset == -1 else offset
            if target < 0 or target > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset of {self.name} to {offset}: it must be in "
                    f"[0, high watermark {self.high_watermark}]")
            if target > self.log_start_offset:
                self.log_start_offset = target
                self._publish(bump=True)
            return self.log_start_offset

    # -- closing ----------------------------------------------------------------------------------------------
    def close(self, *, clean: bool) -> None:
        """Release files. ``clean`` (the last user of the log dir) flushes and trims like Kafka's close."""
        if clean:
            with self.locked():
                self._flush_locked(self.log_end_offset, self.clock.milliseconds())
                for seg in self._segments:
                    seg.close(trim=True)
        else:
            for seg in self._segments:
                seg.close(trim=False)
        self.lock.close()

    def describe(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "dir": self.dir,
            "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark, "recovery_point": self.recovery_point,
            "size_bytes": self.size_in_bytes(),
            "segments": [{"base_offset": s.base_offset, "size_bytes": s.size,
                          "largest_timestamp": s.max_timestamp_so_far,
                          "index_entries": s.offset_index.entries,
                          "time_index_entries": s.time_index.entries} for s in self._segments],
        }
