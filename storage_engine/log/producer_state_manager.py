"""The producer state of one partition folder (Kafka's ``ProducerStateManager``): the entry of every producer
(:class:`~storage_engine.log.producer_state.ProducerStateEntry`), the open transactions by first offset, the map
end offset, and the ``<offset>.snapshot`` files (:mod:`storage_engine.segment.producer_snapshot`).

An append's changes come in as a checked :class:`~storage_engine.log.producer_state.ProducerAppendInfo`
(:meth:`ProducerStateManager.prepare_update`, then :meth:`ProducerStateManager.update` once it is written); a
batch read from the log is replayed without checks (:meth:`ProducerStateManager.replay_batch`). A snapshot keeps
each producer's last batch only (Kafka's format), and its writer then keeps only that too, so every process that
rebuilds from it has the same state. Loading takes the newest valid snapshot at or below an offset; the replay of
the log after it is :func:`rebuild`; an append is checked by :func:`analyze` and recorded by :func:`apply`.
"""
from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from storage_engine import layout
from storage_engine.errors import CorruptSnapshotError, StorageError, StorageIOError
from storage_engine.log.producer_state import (CLIENT, REPLICATION, BatchMetadata, CompletedTxn, EntryKey, LastRecord,
                                               ProducerAppendInfo, ProducerStateEntry)
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import RecordBatch
from storage_engine.segment import producer_snapshot
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.txn_index import TransactionIndex

logger = logging.getLogger(__name__)


class ProducerStateManager:
    """The producer state of one partition folder, and its ``.snapshot`` files."""

    def __init__(self, dir_path: str, name: str):
        self.dir = dir_path
        self.name = name
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}     # first offset -> producer id
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self._held: list[int] | None = None       # the snapshot offsets while the listing is held
        # While the listing is held: (offset, entries) of the last snapshot this manager wrote or found equal on
        # disk, so that loading it again (a recovery loads each segment's snapshot right after writing it) reads
        # no file. Nobody else changes the snapshots meanwhile.
        self._last_written: tuple[int, list] | None = None

    # -- queries ----------------------------------------------------------------------------------------------
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done: the first offset of the earliest open transaction of another
        producer, else the marker offset + 1."""
        for first in sorted(self.ongoing_txns):
            if self.ongoing_txns[first] != completed.producer_id:
                return first
        return completed.last_offset + 1

    def last_records(self) -> dict[int, LastRecord]:
        """Per active producer, its last data offset and epoch (what the cleaner must keep)."""
        return {pid: LastRecord(e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
                for pid, e in self.producers.items()}

    def state_key(self, *, as_snapshot: bool = False) -> tuple[int, list[tuple[int, int]], list[tuple[int, EntryKey]]]:
        """A comparable value of the whole state (tests compare processes and reloads with it); ``as_snapshot``:
        as a snapshot keeps it (each producer's last batch only)."""
        def key(e: ProducerStateEntry) -> EntryKey:
            k = e._key()
            return k[:-1] + (k[-1][-1:],) if as_snapshot else k
        return (self.map_end_offset, sorted(self.ongoing_txns.items()),
                sorted((pid, key(e)) for pid, e in self.producers.items()))

    # -- changes ----------------------------------------------------------------------------------------------
    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self.name, producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        entry = self.producers.get(info.producer_id)
        if entry is not None:
            entry.update_from(info.updated)
        else:
            self.producers[info.producer_id] = info.updated
        for first in info.started_txn_offsets:
            self.ongoing_txns[first] = info.producer_id

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self.ongoing_txns.pop(completed.first_offset, None) is None:
            raise StorageError(f"attempted to complete transaction {completed} on partition {self.name} which was "
                               "not started")

    def replay_batch(self, batch: RecordBatch | LegacyBatch,
                     txn_index: TransactionIndex | None = None) -> CompletedTxn | None:
        """Apply a batch read from the log (no checks). With ``txn_index`` (the batch's segment), an aborted
        transaction it completes is appended there unless the index already ends at or after it."""
        completed = None
        if batch.has_producer_id:
            info = self.prepare_update(batch.producer_id, REPLICATION)
            completed = info.append(batch)
            self.update(info)
            if completed is not None:
                if completed.is_aborted and txn_index is not None:
                    lso = self.last_stable_offset(completed)
                    last = txn_index.last_offset_or_none()
                    if last is None or last < completed.last_offset:
                        from storage_engine.segment.txn_index import AbortedTxn
                        txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                    completed.last_offset, lso))
                self.complete_txn(completed)
        self.map_end_offset = batch.last_offset + 1
        return completed

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers without an open transaction whose last write is ``expiration_ms`` old."""
        gone = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def clear(self, map_end_offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = map_end_offset

    # -- snapshots --------------------------------------------------------------------------------------------
    def snapshot_path(self, offset: int) -> str:
        return layout.segment_file(self.dir, offset, layout.SNAPSHOT_SUFFIX)

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the ``.snapshot`` files in the folder, ascending (listed, or kept while the listing is held)."""
        return list(self._held) if self._held is not None else self._list()

    def _offsets(self) -> list[int]:
        """:meth:`snapshot_offsets` without a copy of the held list (which this manager's deletes change)."""
        return self._held if self._held is not None else self._list()

    def _list(self, names: list[str] | None = None) -> list[int]:
        if names is None:
            try:
                names = os.listdir(self.dir)
            except OSError as exc:
                raise StorageIOError("cannot list partition folder", self.dir, exc) from exc
        return sorted({o for n in names
                       if n.endswith(layout.SNAPSHOT_SUFFIX) and (o := layout.named_offset(n)) is not None})

    def hold_listing(self, names: list[str] | None = None) -> None:
        """List the snapshots once (or take them from ``names``, the folder's listing) and from then on keep the
        list up to date with this manager's own writes and deletes, until :meth:`release_listing`. Only for a
        caller holding the partition lock, under which no other process changes the snapshots: a load recovering
        thousands of segments lists them twice per segment, and a listing of a folder of thousands of files per
        segment made recovery quadratic in the segments."""
        self._held = self._list(names)

    def release_listing(self) -> None:
        self._held = None
        self._last_written = None

    def take_snapshot(self, *, sync: bool = True, force: bool = False) -> str | None:
        """Write ``<map end offset>.snapshot`` if the map end moved since the last one (or ``force``).

        A snapshot keeps only each producer's last batch (Kafka's format), so a process that rebuilds from it
        remembers fewer batches for duplicate detection than the process that wrote it. To keep every process's
        state equal, the writer then keeps only what it wrote too (as Kafka's broker does after a restart).

        While the listing is held (a load, under the partition lock), an unsynced snapshot whose file already
        holds exactly these bytes is not written again: a recovery rewrites one snapshot per segment, and most
        are unchanged since the crash. The files end as Kafka's delete-then-write leaves them."""
        if self.map_end_offset <= self.last_snap_offset and not force:
            return None
        offset = self.map_end_offset
        path = self.snapshot_path(offset)
        entries = [e.to_snapshot_entry() for e in self.producers.values()]
        held = self._held
        if held is not None:
            i = bisect.bisect_left(held, offset)
            exists = i < len(held) and held[i] == offset
            producer_snapshot.write_snapshot(path, entries, sync=sync, unless_equal=exists and not sync)
            if not exists:
                held.insert(i, offset)
            self._last_written = (offset, sorted(entries, key=lambda e: e.producer_id))   # the file's order
        else:
            producer_snapshot.write_snapshot(path, entries, sync=sync)
        for e in self.producers.values():
            del e.batches[:-1]
        self.last_snap_offset = offset
        return path

    def delete_snapshot(self, offset: int, *, deleted_at_ms: int | None = None) -> None:
        """Delete a snapshot, or with ``deleted_at_ms`` rename it ``.deleted`` stamped with that time (purged after
        ``file.delete.delay.ms``, like the segment files deleted with it)."""
        path = self.snapshot_path(offset)
        if self._last_written is not None and self._last_written[0] == offset:
            self._last_written = None
        if self._held is not None:
            i = bisect.bisect_left(self._held, offset)
            if i < len(self._held) and self._held[i] == offset:
                del self._held[i]
        try:
            if deleted_at_ms is not None:
                os.replace(path, path + layout.DELETED_SUFFIX)
                os.utime(path + layout.DELETED_SUFFIX, (deleted_at_ms / 1000.0, deleted_at_ms / 1000.0))
            else:
                os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageIOError("cannot delete producer snapshot", path, exc) from exc

    def load_from_snapshot(self, log_start_offset: int, upper_offset: int, *, delete_corrupt: bool) -> int | None:
        """Reset the state to the newest valid snapshot at or below ``upper_offset`` (corrupt ones are skipped,
        and deleted with ``delete_corrupt``). Returns its offset, or None (state empty at the log start)."""
        self.producers.clear()
        self.ongoing_txns.clear()
        offsets = self._offsets()
        # Newest first, by index: deleting a corrupt one (from the held list too) only moves the ones above it.
        for i in range(bisect.bisect_right(offsets, upper_offset) - 1, -1, -1):
            offset = offsets[i]
            try:
                if self._last_written is not None and self._last_written[0] == offset:
                    entries = self._last_written[1]   # the file holds these (held listing: nobody else writes)
                else:
                    entries = producer_snapshot.read_snapshot(self.snapshot_path(offset))
            except CorruptSnapshotError as exc:
                logger.warning("failed to load producer snapshot of %s: %s", self.name, exc)
                if delete_corrupt:
                    self.delete_snapshot(offset)
                continue
            except StorageIOError:
                continue  # deleted meanwhile by the process holding the lock before us: try an older one
            for e in entries:
                entry = ProducerStateEntry.from_snapshot_entry(e)
                self.producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
            self.map_end_offset = self.last_snap_offset = offset
            return offset
        self.map_end_offset = self.last_snap_offset = log_start_offset
        return None

    def remove_stray_snapshots(self, segment_bases: list[int]) -> list[int]:
        """Kafka's ``removeStraySnapshots``: of the snapshots not at a segment base keep only the largest, and
        that one only if it is not below the largest base. Returns the offsets removed."""
        bases = set(segment_bases)
        removed = []
        stray = [o for o in self.snapshot_offsets() if o not in bases]
        for o in stray[:-1]:
            self.delete_snapshot(o)
            removed.append(o)
        if stray and segment_bases and stray[-1] < max(segment_bases):
            self.delete_snapshot(stray[-1])
            removed.append(stray[-1])
        return removed

    def delete_snapshots_outside(self, log_start_offset: int, log_end_offset: int, *,
                                 keep: frozenset[int] = frozenset()) -> list[int]:
        """Kafka's ``truncateAndReload`` clean-up: snapshots above the log end or below the log start go, but for
        those at offsets in ``keep`` above the log end (a recovery that rewrites them, or finds them unchanged,
        before anything can load them).

        Kafka also deletes a snapshot exactly at the log start (and so forgets, at its next restart, the producers
        whose records retention deleted). This engine keeps it: opening a log never changes its files a second
        time after retention, and every process keeps the same producers until they expire."""
        offsets = self._offsets()
        below = bisect.bisect_left(offsets, log_start_offset)
        above = bisect.bisect_right(offsets, log_end_offset)
        gone = offsets[:below] + [o for o in offsets[above:] if o not in keep]
        for o in gone:
            self.delete_snapshot(o)
        return gone

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for o in self.snapshot_offsets():
            self.delete_snapshot(o)
        self.clear(offset)
        self.last_snap_offset = 0


def rebuild(psm: ProducerStateManager, segments: Sequence[LogSegment], log_start_offset: int, last_offset: int, *,
            exclusive: bool, snapshot_offsets: Iterable[int] = (), pruned: bool = False) -> None:
    """Rebuild ``psm`` for the log end ``last_offset`` (Kafka's ``rebuildProducerState``).

    Loads the newest valid snapshot at or below ``last_offset`` and replays the batches from there. With
    ``exclusive`` (a load, or a truncation under the lock) snapshots outside [log start, last offset] and corrupt
    ones are deleted first, snapshots are taken at ``snapshot_offsets`` passed while replaying, and one is taken at
    ``last_offset``; without it (a process refreshing its view) nothing on disk changes. ``pruned``: the caller
    already deleted what is outside (a recovery, once for all its segments)."""
    if exclusive and not pruned:
        psm.delete_snapshots_outside(log_start_offset, last_offset)
    psm.load_from_snapshot(log_start_offset, last_offset, delete_corrupt=exclusive)
    start = max(psm.map_end_offset, log_start_offset)
    wanted = set(snapshot_offsets)
    if start < last_offset:
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is not None and nxt <= start:
                continue
            if seg.base_offset >= last_offset:
                break
            if exclusive and seg.base_offset in wanted and seg.base_offset > psm.map_end_offset:
                psm.map_end_offset = seg.base_offset
                psm.take_snapshot(sync=False)
            was_open = seg.is_open
            _replay_segment(psm, seg, start, last_offset)
            if not was_open and i + 1 < len(segments):
                seg.release()   # a sealed segment goes back to unopened (file descriptors: many segments)
    psm.map_end_offset = last_offset
    if exclusive:
        psm.take_snapshot(sync=False)


def _replay_segment(psm: ProducerStateManager, seg: LogSegment, start: int, last_offset: int) -> None:
    for batch in seg.batches_from(start):
        if batch.base_offset >= last_offset:
            break
        if batch.magic >= 2:
            psm.replay_batch(batch)


class AppendAnalysis(NamedTuple):
    """What an append would do to the producer state (Kafka's ``analyzeAndValidateProducerState``)."""
    updated: dict            # producer id -> ProducerAppendInfo
    completed: list          # CompletedTxn, in marker order
    duplicate: BatchMetadata | None


def analyze(psm: ProducerStateManager, batches: Iterable[RecordBatch | LegacyBatch], origin: str) -> AppendAnalysis:
    """Check ``batches`` (offsets assigned) against the state; raises a ProducerStateError naming Kafka's error.
    A client batch equal to one of its producer's last 5 (epoch and sequence range) is a duplicate: the caller
    returns its original offsets and writes nothing."""
    updated: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for batch in batches:
        if batch.producer_id <= -1:
            continue
        pid = batch.producer_id
        if origin == CLIENT:
            entry = psm.producers.get(pid)
            if entry is not None:
                dup = entry.find_duplicate_batch(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
                if dup is not None:
                    return AppendAnalysis(updated, completed, dup)
        info = updated.get(pid)
        if info is None:
            info = updated[pid] = psm.prepare_update(pid, origin)
        done = info.append(batch)
        if done is not None:
            completed.append(done)
    return AppendAnalysis(updated, completed, None)


def apply(psm: ProducerStateManager, analysis: AppendAnalysis, segment: LogSegment, last_offset: int) -> None:
    """After the append is written to ``segment``: update the state, index the aborted transactions it
    completed (with the LSO of that moment), and move the map end past it."""
    for info in analysis.updated.values():
        psm.update(info)
    for done in analysis.completed:
        segment.update_txn_index(done, psm.last_stable_offset(done))
        psm.complete_txn(done)
    psm.map_end_offset = last_offset + 1
