"""Log compaction: one cleaning round of one partition (Kafka's ``Cleaner.doClean``).

1. Key map over the dirty section [first dirty, first uncleanable): the latest offset of every key. Built here
   (:class:`~.offset_map.InProcessOffsetMap`, bounded like Kafka's, so a full map ends the round early at its
   last mapped offset) or handed in (a map built by Spark). The round's end offset = map.latest_offset + 1.
2. Group all segments below the end offset, oldest first, into groups whose summed ``.log`` sizes fit
   ``segment.bytes``, summed index sizes fit ``segment.index.bytes`` and whose offsets fit one segment.
3. Per group, copy what survives into ``<first base>.log.cleaned`` (+ indexes, rebuilt by the normal append
   path): a record survives if it is beyond the mapped range, or its offset is the latest for its key and it
   is not a tombstone past its delete horizon. Keyless records are dropped and counted. A batch whose records
   all survive (and that needs no new delete horizon) is copied byte for byte; otherwise it is rebuilt with
   the same magic, codec, timestamp type, producer fields, flags, leader epoch and last offset. A batch that
   first retains a tombstone gets ``delete horizon = now + delete.retention.ms`` stamped (KIP-534), so the
   tombstone goes in a later round once ``now`` passes it. The last batch of the round is kept as an empty
   batch when all its records go (KAFKA-17076). What happens to a whole batch is decided first (Kafka's
   ``checkBatchRetention``, :func:`.txn_cleaning.batch_retention`); the per-record work (steps 1 and 3) is
   :mod:`.record_filter`'s, in compiled code when the extension is built.
4. Swap, under the partition lock, crash-safely (``.cleaned`` -> ``.swap``, old files -> ``.deleted``,
   ``.swap`` -> final name, fsync dir). A loader completes an interrupted swap over [.swap base, .swap next
   offset) only, so the cleaned segment always reaches into the group's last segment holding data: if none
   of that segment's batches survives, its last batch is kept as an empty batch. A group whose records all
   go is swapped for that one-empty-batch segment, which is then deleted (``.log`` first), so no empty
   segment is left behind (unlike Kafka, KAFKA-9157) and a crash never leaves part of a group. If another
   process removed or replaced a segment of the group meanwhile (retention, truncation), that group is
   abandoned.
5. Only when every swap is durable, the cleaner-offset checkpoint moves to the end offset.

Every read is a checked read (:func:`_checked`, the engine's :meth:`LogSegment.checked_batches`): steps 1 and 3
verify each batch's framing, offset order and CRC (once per phase, over the bytes already read) before its records
are mapped, filtered or copied, the compiled kernels and the copy-whole-batch paths included. Damage fails the
round with a :class:`CorruptRecordError` naming the partition, the phase, the file, the byte position and the
batch's offsets: the group's ``.cleaned`` file is removed, nothing of the damaged group is swapped or deleted and
the checkpoint does not move (the jobs then mark the partition uncleanable with that reason).

Transactions (:mod:`storage_engine.maintenance.txn_cleaning`, Kafka's rules): the key map skips aborted data and
control batches; the copy removes aborted records at once, keeps a transaction's marker until no data of it
remains and then until its delete horizon, rewrites each cleaned segment's ``.txnindex`` with the aborted
transactions whose data it still holds, and keeps each active producer's last batch (empty if need be) so the
producer state survives cleaning. The round never passes the last stable offset.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from storage_engine.maintenance import cleaner_manager, record_filter
from storage_engine import layout
from storage_engine.maintenance.cleaner_manager import LogToClean
from storage_engine.config import CleanerConfig
from storage_engine.errors import CorruptRecordError, StorageError
from storage_engine.log.log import Log
from storage_engine.maintenance.cleaner_stats import MB, CleanerStats  # noqa: F401 - MB: part of this module's interface (tests import it from here)
from storage_engine.maintenance.offset_map import InProcessOffsetMap, OffsetMap
from storage_engine.maintenance.txn_cleaning import DELETE, RETAIN_EMPTY, CleanedTransactionMetadata, batch_retention
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch, build_batch, build_empty_batch
from storage_engine.segment.segment import LogSegment

logger = logging.getLogger(__name__)
INT32_MAX = 2**31 - 1


@dataclass
class CleanResult:
    end_offset: int
    stats: CleanerStats
    groups: int
    groups_abandoned: int
    checkpoint_written: bool


# -- key map ---------------------------------------------------------------------------------------------------

def _overlapping(segments: list[LogSegment], start: int, end: int) -> list[tuple[LogSegment, int]]:
    """(segment, next base) for segments overlapping [start, end)."""
    out = []
    for i, s in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else 2**63 - 1
        if s.base_offset < end and nxt > start:
            out.append((s, nxt))
    return out


def build_offset_map(log: Log, start: int, end: int, offset_map: InProcessOffsetMap, stats: CleanerStats) -> bool:
    """Fill ``offset_map`` with the latest offset per key in [start, end), skipping aborted transactions and
    control batches. Returns True if it filled up. Every batch read is checked first (:func:`_checked`); damage
    raises a :class:`CorruptRecordError` naming the partition, file, byte position and offsets."""
    offset_map.clear()
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions(log.aborted_transactions(start, end))
    for seg, nxt in _overlapping(log.segments, start, end):
        if _map_segment(log, seg, nxt, offset_map, start, end, stats, txn):
            return True
        offset_map.update_latest_offset(min(nxt, end) - 1)  # skip offset gaps (KAFKA-8764)
    return False


def _checked(log: Log, seg: LogSegment, start: int, upper_bound: int | None,
             phase: str) -> Iterator[RecordBatch | LegacyBatch]:
    """The batches of ``seg`` from the one holding offset ``start``, each checked before it is handed out: the
    engine's checked read (:meth:`LogSegment.checked_batches`: framing read strictly, so a segment that ends
    inside a batch is corrupt, not a torn tail; offsets rising within the segment and below ``upper_bound``, the
    next segment's base; the CRC of each batch over the bytes already read, CRC-32C for magic 2, CRC-32 for
    legacy). Damage raises the same error class, its message naming the partition, the phase, the segment and
    the damaged batch's declared offsets, with the file and byte position of the original."""
    try:
        yield from seg.checked_batches(start, upper_bound)
    except CorruptRecordError as exc:
        offsets = _declared_offsets(seg, exc.position)
        raise type(exc)(f"cannot clean {log.name} ({phase}): damaged batch in segment {seg.base_offset}"
                        f"{offsets}: {exc.reason}; nothing of the partition was changed past it",
                        exc.path, exc.position) from exc


def _declared_offsets(seg: LogSegment, position: int | None) -> str:
    """", declaring offsets [first, last]" of the entry at ``position`` (its header only; "" if unreadable)."""
    if position is None:
        return ""
    try:
        batch = seg.log.batch_at(position)
        if batch is None:
            return ""
        first = batch.base_offset if batch.magic >= 2 else batch.last_offset
        return f", declaring offsets [{first}, {batch.last_offset}]"
    except (StorageError, ValueError):
        return ""


def _map_segment(log: Log, seg: LogSegment, nxt: int, offset_map: InProcessOffsetMap, start: int, end: int,
                 stats: CleanerStats, txn: CleanedTransactionMetadata) -> bool:
    upper = nxt if nxt < 2**63 - 1 else None
    for batch in _checked(log, seg, start, upper, "key-map phase"):
        if batch.base_offset >= end:
            break
        stats.map_bytes_read += batch.size_in_bytes
        if txn.is_aborted_data(batch):
            stats.map_messages_read += batch.records_count   # aborted: not mapped
        elif batch.is_control:
            stats.map_messages_read += 1
        else:
            read, full = record_filter.map_batch(batch, offset_map, start, end)
            stats.map_messages_read += read
            if full:
                return True
        if batch.last_offset >= start:
            offset_map.update_latest_offset(min(batch.last_offset, end - 1))
    return False


# -- grouping --------------------------------------------------------------------------------------------------

def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Kafka's ``groupSegmentsBySize``."""
    groups = []
    segs = list(segments)
    while segs:
        group = [segs.pop(0)]
        log_size = group[0].size
        index_size = group[0].offset_index.size_in_bytes
        time_index_size = group[0].time_index.size_in_bytes
        while segs:
            cand = segs[0]
            last_for_cand = segs[1].base_offset - 1 if len(segs) > 1 else first_uncleanable_offset - 1
            if (log_size + cand.size <= max_size
                    and index_size + cand.offset_index.size_in_bytes <= max_index_size
                    and time_index_size + cand.time_index.size_in_bytes <= max_index_size
                    and (cand.size == 0 or last_for_cand - group[0].base_offset <= INT32_MAX)):
                group.append(segs.pop(0))
                log_size += cand.size
                index_size += cand.offset_index.size_in_bytes
                time_index_size += cand.time_index.size_in_bytes
            else:
                break
        groups.append(group)
    return groups


# -- cleaning --------------------------------------------------------------------------------------------------

class Cleaner:
    def __init__(self, config: CleanerConfig):
        self.config = config

    def new_offset_map(self) -> InProcessOffsetMap:
        memory = min(self.config.dedupe_buffer_size // max(1, self.config.threads), INT32_MAX)
        return InProcessOffsetMap(memory, self.config.io_buffer_load_factor)

    def clean(self, ltc: LogToClean[Log], now_ms: int, offset_map: OffsetMap | None = None, *,
              dry_run: bool = False) -> CleanResult:
        """One round. ``offset_map`` (already built, e.g. by Spark) replaces the in-process map. ``dry_run``
        computes the same statistics (what would be removed) without writing anything. The log stays pinned
        for the round: a segment another thread removes meanwhile stays readable (it is closed afterwards)."""
        with ltc.log.pinned():
            return self._clean_pinned(ltc, now_ms, offset_map, dry_run=dry_run)

    def _clean_pinned(self, ltc: LogToClean[Log], now_ms: int, offset_map: OffsetMap | None, *,
                      dry_run: bool) -> CleanResult:
        log = ltc.log
        stats = CleanerStats()
        # Resolve a swap a dead cleaner left (the view reloads under the lock) before writing any .cleaned file.
        log.refresh()
        segments = log.segments
        identities = {s.base_offset: _inode(s) for s in segments}
        below_dirty = [s for s in segments if s.base_offset < ltc.first_dirty_offset]
        legacy_horizon = (below_dirty[-1].mtime_ms() - log.config.delete_retention_ms) if below_dirty else 0
        if offset_map is None:
            offset_map = self.new_offset_map()
            build_offset_map(log, ltc.first_dirty_offset, ltc.first_uncleanable_offset, offset_map, stats)
        stats.buffer_utilization = getattr(offset_map, "utilization", 0.0)
        stats.map_complete_s = time.monotonic()
        end_offset = offset_map.latest_offset + 1
        if end_offset <= ltc.first_dirty_offset:
            stats.end_s = time.monotonic()
            return CleanResult(ltc.first_dirty_offset, stats, 0, 0, False)
        with log.locked():  # the producers' last batches, as of now (Kafka's lastRecordsOfActiveProducers)
            last_records = log.producer_state.last_records()
        txn = CleanedTransactionMetadata()  # carried across the groups of the round
        groups = group_segments_by_size([s for s in segments if s.base_offset < end_offset],
                                        log.config.segment_bytes, log.config.segment_index_bytes,
                                        ltc.first_uncleanable_offset)
        abandoned = 0
        for group in groups:
            policy = _TxnPolicy(log, txn, last_records)
            if dry_run:
                self._filter_group(group, offset_map, now_ms, legacy_horizon, log.config.delete_retention_ms,
                                   ltc.first_uncleanable_offset, stats, policy)
            elif not self._clean_group(log, group, identities, offset_map, now_ms, legacy_horizon,
                                       ltc.first_uncleanable_offset, stats, policy):
                abandoned += 1
        stats.end_s = time.monotonic()
        wrote = False
        if not abandoned and not dry_run:
            cleaner_manager.update_cleaner_checkpoint(log.log_dir, (log.topic, log.partition), end_offset)
            wrote = True
        return CleanResult(end_offset, stats, len(groups), abandoned, wrote)

    def _filter_group(self, group: list[LogSegment], offset_map: OffsetMap, now_ms: int, legacy_horizon: int,
                      delete_retention_ms: int, upper_bound: int, stats: CleanerStats, policy: _TxnPolicy) -> None:
        for seg in group:
            retain_legacy_deletes = seg.mtime_ms() > legacy_horizon
            policy.enter_segment(seg)
            for batch in _checked(policy.log, seg, seg.base_offset, policy.log.segment_list.base_after(seg),
                                  "clean phase"):
                out = self._filter_batch(batch, offset_map, now_ms, delete_retention_ms, retain_legacy_deletes,
                                         upper_bound, stats, policy)
                if out is not None:
                    stats.bytes_written += len(out[0])

    def _clean_group(self, log: Log, group: list[LogSegment], identities: dict, offset_map: OffsetMap, now_ms: int,
                     legacy_horizon: int, upper_bound: int, stats: CleanerStats, policy: "_TxnPolicy") -> bool:
        # The previous group's swap may have reloaded the view (another process rolled or deleted a segment
        # meanwhile), closing the segment objects this round started with: work on the current ones, and
        # abandon the group if one of its segments is gone or was replaced since the round started.
        current = {s.base_offset: s for s in log.segments}
        resolved = []
        for s in group:
            cur = current.get(s.base_offset)
            if cur is None or _inode(cur) != identities.get(s.base_offset):
                logger.warning("abandoning the group at %d of %s: segment %d changed since the round started",
                               group[0].base_offset, log.name, s.base_offset)
                return False
            resolved.append(cur)
        group = resolved
        identity = [(s.base_offset, identities[s.base_offset]) for s in group]
        cfg = log.config
        cleaned = LogSegment.open(log.dir, group[0].base_offset, cfg, now_ms=now_ms, suffix=layout.CLEANED_SUFFIX)
        policy.txn.cleaned_index = cleaned.txn_index
        # After a crash the loader completes a swap only over [.swap base, .swap next offset): the cleaned
        # segment must reach into the last replaced segment holding data, or that segment would survive next
        # to the cleaned one. If nothing of it is retained, its last batch is kept as an empty batch.
        tail = next((s for s in reversed(group) if s.size > 0), None)
        written, tail_written, tail_last = 0, False, None
        try:
            for seg in group:
                retain_legacy_deletes = seg.mtime_ms() > legacy_horizon
                policy.enter_segment(seg)
                # Checked before anything of it is copied: damage fails the round here, the .cleaned file is
                # removed below and nothing is swapped, deleted or checkpointed.
                for batch in _checked(log, seg, seg.base_offset, log.segment_list.base_after(seg), "clean phase"):
                    out = self._filter_batch(batch, offset_map, now_ms, cfg.delete_retention_ms,
                                             retain_legacy_deletes, upper_bound, stats, policy)
                    if seg is tail:
                        tail_last = batch
                    if out is not None:
                        data, max_ts = out
                        cleaned.append(batch.last_offset, max_ts, batch.last_offset, data)
                        stats.bytes_written += len(data)
                        written += 1
                        tail_written = tail_written or seg is tail
            out, data = None, b""  # data may be a view of a replaced segment's mapping: let the mapping close
            all_removed = written == 0
            if tail_last is not None and not tail_written:
                data = _empty_batch_like(tail_last)
                cleaned.append(tail_last.last_offset, tail_last.max_timestamp, tail_last.last_offset, data)
                if not all_removed:
                    stats.bytes_written += len(data)
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            cleaned.log.set_mtime_ms(group[-1].mtime_ms())
        except BaseException:
            cleaned.delete_files()
            raise
        if cleaned.size == 0:  # the group holds only empty segments: nothing to swap in
            cleaned.delete_files()
            return log.replace_segments(None, group, identity, now_ms)
        # A group whose records all go is swapped for its one-empty-batch cover (atomic for the loader), which
        # is then deleted: no empty segment is left behind (unlike Kafka, KAFKA-9157).
        return log.replace_segments(cleaned, group, identity, now_ms, delete_after=all_removed)

    def _filter_batch(self, batch: RecordBatch | LegacyBatch, offset_map: OffsetMap, now_ms: int,
                      delete_retention_ms: int, retain_legacy_deletes: bool, upper_bound: int, stats: CleanerStats,
                      policy: "_TxnPolicy") -> tuple[bytes | memoryview, int] | None:
        """What of ``batch`` survives: (bytes, max timestamp) or None. The batch-level decision comes first
        (transactions, the producers' last batches, the round's last batch); then its records are filtered."""
        stats.bytes_read += batch.size_in_bytes
        decision = batch_retention(batch, policy.txn, policy.last_records, upper_bound, now_ms)
        keep_empty = decision.retention == RETAIN_EMPTY
        if decision.retention == DELETE:
            stats.messages_read += batch.records_count
            return None
        if decision.discard_records:
            # not DELETE, so RETAIN_EMPTY: an aborted batch or an expired marker that must stay (a producer's last,
            # or the round's last) stays empty; only transactional and control batches (magic 2) get here
            stats.messages_read += batch.records_count
            return build_empty_batch(batch), batch.max_timestamp   # type: ignore[arg-type]  # magic 2
        if batch.is_control:
            recs = batch.records()
            if not recs:  # an empty control batch left by an earlier round
                return (batch.raw(), batch.max_timestamp) if keep_empty else None
            stats.messages_read += len(recs)
            stats.messages_written += len(recs)
            if decision.marker_for_empty_txn and not batch.has_delete_horizon:
                # a marker that may go gets its delete horizon first (KIP-534): removed in a later round
                return (record_filter.rebuild(batch, recs, record_filter.new_delete_horizon(now_ms, delete_retention_ms)),
                        batch.max_timestamp)
            return batch.raw(), batch.max_timestamp
        return record_filter.filter_batch(batch, offset_map, now_ms, delete_retention_ms, retain_legacy_deletes,
                                          keep_empty, stats)


class _TxnPolicy:
    """The transaction state of one cleaning round and what each segment adds to it: the aborted transactions
    of [segment base, next base) are fed in as the copy reaches the segment (Kafka's ``cleanSegments``)."""

    def __init__(self, log: Log, txn: CleanedTransactionMetadata, last_records: dict):
        self.log = log
        self.txn = txn
        self.last_records = last_records

    def enter_segment(self, seg: LogSegment) -> None:
        nxt = self.log.segment_list.base_after(seg)
        upper = nxt if nxt is not None else seg.read_next_offset()
        self.txn.add_aborted_transactions(self.log.aborted_transactions(seg.base_offset, upper))


def _empty_batch_like(batch: RecordBatch | LegacyBatch) -> bytes:
    """A batch without records spanning ``batch``'s offsets (a legacy message has no empty form: v2 header)."""
    if batch.magic >= 2:
        return build_empty_batch(batch)   # type: ignore[arg-type]  # magic 2: a RecordBatch
    return build_batch([], base_offset=batch.base_offset, last_offset=batch.last_offset)


def _inode(seg: LogSegment) -> int:
    try:
        return os.stat(seg.path).st_ino
    except FileNotFoundError:
        return -1


__all__ = ["Cleaner", "CleanerStats", "CleanResult", "build_offset_map", "group_segments_by_size",
           "StorageError"]
