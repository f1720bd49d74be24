"""Loading a partition folder into segments, in Kafka's order (``LogLoader.load``), stricter where Kafka trusts.

1. Pending changes and temp files: a change recorded by a process that died (a cleaner's swap) is completed or
   rolled back (:func:`storage_engine.log.swap.resolve`); then Kafka's rules for ``.cleaned``/``.swap`` files
   without a record, each ``.swap`` validated before it replaces anything; only then are ``*.deleted`` files
   past ``file.delete.delay.ms`` deleted (a rolled back swap may have needed them), and half-written
   ``*.snapshot.tmp`` files.
2. Load segments: delete index files without a ``.log``; open every ``.log``; a missing ``.index`` forces
   recovery of that segment, a missing ``.timeindex`` is created empty.
3. Recover (only after an unclean shutdown): every segment from the one holding the recovery point to the
   end is validated and its indexes rebuilt; at the first corrupt batch the segment is truncated and every
   later segment deleted. After a clean shutdown the active segment's tail is validated anyway (from its last
   index entry: cheap), since the marker vouches for nothing written after it: a torn or garbage tail, or an
   index pointing past the data, gets the segment recovered and is reported.
4. The log start offset is the checkpoint's, raised to the first segment's base (Kafka; for a topic with
   ``remote.storage.enable`` the checkpoint as is, Kafka's rule too: the offsets below the first local segment
   are in remote storage, see ``LocalLog.local_log_start_offset``), except over data found
   lost: a first segment gone, a sealed segment emptied, or a segment the partition's segment manifest names gone
   from the middle (:mod:`storage_engine.log.manifest`; the load then writes the manifest of what it holds) is
   recorded before anything repairs the evidence, and the
   log start offset stays where it was recorded (:mod:`storage_engine.log.losses`). A checkpoint past the
   log end is reported and ignored when the load lost no data (no operation can put the start there: the value
   is wrong, and acting on it would hide, then delete, every record); when recovery cut the log below it, the
   log is emptied and restarted there as Kafka does (the records in between were lost, the ones below were
   already deleted). A log without
   segments gets an empty one at the log start offset. The active segment's indexes are re-expanded.
6. Producer state (Kafka's ``loadProducerState``): stray snapshots are removed (of those not at a segment base
   only the largest survives, and only if not below the last base), then the state is rebuilt from the newest
   valid snapshot plus a replay of the batches after it, and a snapshot is written at the log end. Recovery in
   step 4 replays each recovered segment into the producer state as of its base, which rebuilds its
   ``.txnindex``, and snapshots the state at its end. Kafka deletes the snapshots above each recovered base
   first; here those at the bases still to recover stay until their segment is recovered, and one is written
   only if its bytes changed (the files end the same, and the unchanged ones are not created anew). As in
   Kafka, a log that had a clean shutdown but has no snapshot at all (written before producer state was kept) is
   not scanned: its state starts empty.

A legacy segment whose offsets overflow its base (met while recovering it, or seen from a segment whose last
offset lies more than 2^31 - 1 above its base) is split into segments whose offsets fit and the load starts over
(Kafka's ``retryOnOffsetOverflow``, see :mod:`storage_engine.log.split`).

Steps 1 and 3 rewrite files, so a full load runs only when no other process can have the partition open: for the
first opener of a log dir (exclusive), for a partition never loaded (generation 0), and for one not loaded since
the dir's last unclean shutdown (its ``loaded_epoch`` is not the dir's crash epoch, see
:mod:`storage_engine.log.locks`: whoever had it open would have loaded it in this epoch). Otherwise a process
joining a log dir in use opens its view (:mod:`storage_engine.log.view`). Both run under the partition lock.
:func:`open_log` is how a ``Log`` is opened.
"""
from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from storage_engine import crashpoints, layout
from storage_engine.clock import Clock
from storage_engine.config import LogConfig
from storage_engine.durable import fsync_dir
from storage_engine.log import producer_state_manager as producers
from storage_engine.log import losses, manifest, swap, view
from storage_engine.log.locks import DELETED, LIVE, UNKNOWN, PartitionLock, PartitionState, lock_path
from storage_engine.log.log import Log
from storage_engine.log.producer_state_manager import ProducerStateManager
from storage_engine.log.segments import LogSegments, open_segments
from storage_engine.log.split import needs_split, split_overflowed_segment
from storage_engine.errors import (CorruptIndexError, CorruptRecordError, InvalidOffsetError, PartitionDeletedError,
                                   PartitionMovedError, PartitionNotFoundError, SegmentOffsetOverflowError,
                                   StorageError, StorageIOError)
from storage_engine.record.record_batch import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_ENTRY_SIZE_FIELD
from storage_engine.segment.segment import INT32_MAX
from storage_engine.segment.recovery import RecoveryResult, recover_segment
from storage_engine.segment.leader_epoch import NOT_READ, LeaderEpochCheckpointFile, LeaderEpochFileCache
from storage_engine.segment.segment import LogSegment

log = logging.getLogger(__name__)
# The start of an entry up to its magic: base offset, size, partition leader epoch (v2), magic.
_EPOCH_HEADER = struct.Struct(">qiib")


@dataclass
class LoadResult:
    segments: list
    log_start_offset: int
    recovery_point: int
    next_offset: int
    bytes_truncated: int = 0
    recovered_segments: int = 0
    deleted_files: list = field(default_factory=list)
    resolved_away: list = field(default_factory=list)    # names step 1's swap resolution removed or renamed
    messages: list = field(default_factory=list)
    producer_state: ProducerStateManager | None = None
    leader_epochs: LeaderEpochFileCache | None = None


class _SplitNeeded(Exception):
    """A segment's offsets overflow its base: split it and load again."""

    def __init__(self, base_offset: int):
        super().__init__(base_offset)
        self.base_offset = base_offset


MAX_SPLITS_PER_LOAD = 1000


def _recover(seg: LogSegment, psm: ProducerStateManager, segments: list[LogSegment], log_start: int, *,
             pruned: bool = False, epochs: LeaderEpochFileCache | None = None) -> RecoveryResult:
    """``recover_segment(seg)`` with the producer state as of its base (rebuilt from ``segments``), then a snapshot at
    its end; an offset that cannot be indexed (offsets going backwards: the base offset field is outside the CRC)
    empties the segment, as Kafka's ``recoverLog`` does. An offset overflow asks for a split. ``pruned``: the
    snapshots above the base were already dealt with (see the recovery loop in :func:`_load`). ``epochs``: the
    leader epoch cache, given the epochs of the recovered batches (Kafka's recovery does)."""
    producers.rebuild(psm, segments, log_start, seg.base_offset, exclusive=True, pruned=pruned)
    try:
        result = recover_segment(seg, psm, epochs)
        psm.take_snapshot(sync=False)
        return result
    except SegmentOffsetOverflowError:
        raise _SplitNeeded(seg.base_offset) from None
    except InvalidOffsetError as exc:
        removed = seg.truncate_to(seg.base_offset)
        return RecoveryResult(removed, 0, 0, f"invalid offset, segment emptied: {exc}")


def _remove(path: str, result: LoadResult) -> None:
    try:
        os.remove(path)
        result.deleted_files.append(os.path.basename(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageIOError("cannot delete file during log load", path, exc) from exc


def remove_temp_files_and_complete_swaps(dir_path: str, cfg: LogConfig, now_ms: int, result: LoadResult) -> list[str]:
    """Step 1 (caller holds the partition lock and no other process has the partition open). Returns the folder's
    sorted names afterwards (listed once: a folder of 10,000 segments holds 40,000 names)."""
    log_dir, name = os.path.split(os.path.abspath(dir_path))
    listing = swap.list_folder(dir_path)
    before = set(listing)
    result.messages.extend(swap.resolve(log_dir, name, dir_path, now_ms, orphans=True, listing=listing))
    # Segments a completed swap replaced went by that swap, not by loss (the segment manifest may still name them).
    result.resolved_away = sorted(before - set(listing))
    gone = set()
    for name in listing:
        if name.endswith(layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX):
            _remove(os.path.join(dir_path, name), result)  # a snapshot whose writer died before renaming it
            gone.add(name)
            continue
        if not name.endswith(layout.DELETED_SUFFIX):
            continue   # most names: no stat needed
        path = os.path.join(dir_path, name)
        if not os.path.isfile(path):
            continue
        # Kafka deletes every .deleted file at broker start. Here processes open and close log dirs all the time,
        # so only files whose file.delete.delay.ms has passed go (the rename stamped the mtime); the others wait
        # for the purge, as a reader of another process may still be using them.
        try:
            scheduled_ms = int(os.stat(path).st_mtime * 1000)
        except FileNotFoundError:
            continue
        if now_ms - scheduled_ms >= cfg.file_delete_delay_ms:
            _remove(path, result)
            gone.add(name)
    return [n for n in listing if n not in gone] if gone else listing


def _read_leader_epochs(dir_path: str, segments: list[LogSegment], result: LoadResult) -> LeaderEpochFileCache:
    """The partition's leader epoch cache from its ``leader-epoch-checkpoint``. A file that is missing (a log
    written before the engine kept it) or damaged is rebuilt from the batch headers of every segment, as Kafka
    would hold it had it written the log: each v2 batch's epoch at its base offset if newer than the latest (the
    load then truncates it to the log, and writes it)."""
    epochs = LeaderEpochFileCache(os.path.join(dir_path, layout.LEADER_EPOCH_CHECKPOINT))
    epochs.reload(NOT_READ)
    if not epochs.dirty and os.path.exists(epochs.path):
        return epochs
    reason = "damaged" if epochs.dirty else "missing"
    for seg in segments:
        log_file, pos = seg.log, 0
        while True:
            head = log_file.read(pos, HEADER_SIZE_UP_TO_MAGIC)
            if len(head) < HEADER_SIZE_UP_TO_MAGIC:
                break
            base, size, epoch, magic = _EPOCH_HEADER.unpack(head)
            if size < MIN_ENTRY_SIZE_FIELD:
                break
            if magic >= 2:
                epochs.maybe_assign(epoch, base, write=False)
            pos += LOG_OVERHEAD + size
        if seg is not segments[-1]:
            seg.release()
    note = (f"{layout.LEADER_EPOCH_CHECKPOINT} was {reason}: rebuilt from the segments' batches "
            f"({len(epochs.entries)} epochs)")
    if reason == "damaged":
        result.messages.append(note)
    else:   # a log the engine wrote before it kept the file: nothing is wrong
        log.info("%s: %s", dir_path, note)
    return epochs


def _check_active_tail(seg: LogSegment, result: LoadResult, recover: Callable[[LogSegment], RecoveryResult]) -> bool:
    """After a clean shutdown: validate the active segment from its last index entry (the marker vouches for
    nothing written since). A torn or garbage tail, or an index past the data, gets the segment recovered
    (``recover(seg)``: with the producer state, so its ``.txnindex`` is rebuilt too, and an append never lands
    behind bytes that do not parse); a damaged batch followed by valid ones to the end is reported and kept
    (flushed data: reads of it fail, truncating would destroy the records after it). Returns whether the segment
    was recovered."""
    problem = None
    index = seg.offset_index
    if index.entries and (index.entry(index.entries - 1)[1] >= max(seg.size, 1)):
        problem = (f"its offset index names position {index.entry(index.entries - 1)[1]}, past the "
                   f"{seg.size} bytes of the .log")
    else:
        expected = index.last_offset + 1 if index.entries else seg.base_offset
        pos, damaged = seg.last_index_position(), None
        while problem is None:
            try:
                for batch in seg.log.read_batches(pos, strict=True):
                    batch.ensure_valid()
                    expected = batch.next_offset
                break
            except CorruptRecordError as exc:
                head = seg.log.read(exc.position or 0, LOG_OVERHEAD)
                size = struct.unpack_from(">i", head, 8)[0] if len(head) == LOG_OVERHEAD else -1
                after = (exc.position or 0) + LOG_OVERHEAD + size
                if damaged is not None or size < MIN_ENTRY_SIZE_FIELD or after >= seg.size:
                    problem = str(exc)
                else:
                    damaged, pos = str(exc), after  # is it only this batch? the rest must parse to the end
        if problem is None and damaged is not None:
            result.messages.append(f"{os.path.basename(seg.path)}: kept a damaged batch followed by valid ones "
                                   f"(reads of it fail, verify reports it): {damaged}")
        if problem is None and seg.time_index.entries and seg.time_index.last_entry[1] >= expected:
            problem = f"its time index names offset {seg.time_index.last_entry[1]}, past the log end {expected}"
    if problem is None:
        return False
    rec = recover(seg)
    result.bytes_truncated += rec.bytes_truncated
    result.recovered_segments += 1
    result.messages.append(f"{os.path.basename(seg.path)}: recovered despite the clean-shutdown marker: {problem}; "
                           f"{rec.bytes_truncated} bytes truncated")
    return True


def load(dir_path: str, cfg: LogConfig, *, recovery_point_checkpoint: int, log_start_offset_checkpoint: int,
         had_clean_shutdown: bool, now_ms: int, log_start_offset_fallback: int = 0,
         recorded_log_start: int | None = None) -> LoadResult:
    """Full Kafka load of one partition folder (steps 1-4). Caller holds the partition lock.
    ``log_start_offset_fallback``: the next best log start offset, if the checkpoint's is ignored;
    ``recorded_log_start``: the log start offset the partition's shared state recorded (None: nothing is known),
    which data found missing below the first segment keeps (:mod:`storage_engine.log.losses`)."""
    messages: list[str] = []
    for _ in range(MAX_SPLITS_PER_LOAD):
        opened: list[LogSegment] = []
        try:
            result = _load(dir_path, cfg, opened, recovery_point_checkpoint=recovery_point_checkpoint,
                           log_start_offset_checkpoint=log_start_offset_checkpoint,
                           had_clean_shutdown=had_clean_shutdown, now_ms=now_ms,
                           log_start_offset_fallback=log_start_offset_fallback, recorded_log_start=recorded_log_start)
        except _SplitNeeded as split:
            for seg in opened:
                seg.close(trim=False)
            bases = split_overflowed_segment(dir_path, split.base_offset, cfg, now_ms)
            messages.append(f"split segment {layout.filename_prefix(split.base_offset)}.log, whose offsets "
                            f"overflow its base, into {len(bases)} segments at base offsets {bases}")
            continue
        result.messages[:0] = messages
        return result
    raise StorageError(f"{dir_path}: still splitting overflowed segments after {MAX_SPLITS_PER_LOAD} splits")


def _load(dir_path: str, cfg: LogConfig, opened: list, *, recovery_point_checkpoint: int,
          log_start_offset_checkpoint: int, had_clean_shutdown: bool, now_ms: int,
          log_start_offset_fallback: int, recorded_log_start: int | None = None) -> LoadResult:
    result = LoadResult([], 0, 0, 0)
    listing = remove_temp_files_and_complete_swaps(dir_path, cfg, now_ms, result)
    crashpoints.reached("load.resolved")
    # Data found gone is recorded before anything that would erase the evidence (orphan indexes, recovery).
    losses.note(dir_path, losses.orphan_index_losses(dir_path, listing, result.deleted_files, recorded_log_start,
                                                     now_ms, tiered=losses.remote_below(cfg)), result.messages)
    segments, needs_recovery = open_segments(dir_path, cfg, now_ms, repair=True,
                                             remove=lambda path: _remove(path, result), listing=listing)
    log_dir, folder = os.path.split(os.path.abspath(dir_path))
    named, _why = manifest.read(log_dir, folder)    # None: no manifest to judge by (a Kafka or older dir)
    if segments:
        clip = recorded_log_start if recorded_log_start is not None else log_start_offset_checkpoint
        losses.note(dir_path, losses.emptied_segment_losses(dir_path, [(s.base_offset, s.size) for s in segments],
                                                            cfg, now_ms)
                    + losses.start_losses(dir_path, cfg, listing + result.deleted_files, segments[0].base_offset,
                                          recorded_log_start, now_ms, result.resolved_away)
                    + losses.manifest_losses(dir_path, [s.base_offset for s in segments], clip, now_ms, listing,
                                             result.deleted_files + result.resolved_away, named),
                    result.messages)
    psm = ProducerStateManager(dir_path, os.path.basename(dir_path))
    # The caller holds the partition lock: only this load changes the snapshots until it returns.
    psm.hold_listing(listing)
    start_guess = max(log_start_offset_checkpoint, segments[0].base_offset) if segments else 0
    had_snapshots = bool(psm.snapshot_offsets())
    opened.extend(segments)
    epochs = _read_leader_epochs(dir_path, segments, result)
    for seg in needs_recovery:
        rec = _recover(seg, psm, segments, start_guess, epochs=epochs)
        result.bytes_truncated += rec.bytes_truncated
        result.recovered_segments += 1
        result.messages.append(f"rebuilt missing index of {os.path.basename(seg.path)}")
        if seg is not segments[-1]:
            seg.release()
    recovery_point = recovery_point_checkpoint
    lost = False
    if not had_clean_shutdown and segments:
        bases = [s.base_offset for s in segments]
        start_idx = 0
        for i, b in enumerate(bases):
            if b <= recovery_point:
                start_idx = i
        unflushed = segments[start_idx:]
        # Kafka deletes every snapshot above each recovered segment's base, then writes one at its end: the files
        # end the same if those at the bases still to be recovered stay until their segment is recovered, which
        # writes them only if they changed (a crash meanwhile leaves them to the next load, which recovers the same
        # segments again). Not when a segment was recovered above, from snapshots not yet checked.
        recovered = {id(s) for s in needs_recovery}
        kept: frozenset[int] = frozenset() if any(id(s) in recovered for s in unflushed) else \
            frozenset(s.base_offset for s in unflushed[1:])
        psm.delete_snapshots_outside(start_guess, unflushed[0].base_offset, keep=kept)
        for i, seg in enumerate(unflushed):
            if id(seg) in recovered:
                rec_truncated = 0
            else:
                rec = _recover(seg, psm, segments, start_guess, pruned=True, epochs=epochs)
                crashpoints.reached("load.recovered")
                rec_truncated = rec.bytes_truncated
                result.recovered_segments += 1
                if rec.error:
                    result.messages.append(f"{os.path.basename(seg.path)}: truncated {rec.bytes_truncated} "
                                           f"bytes at position {rec.valid_bytes}: {rec.error}")
            result.bytes_truncated += rec_truncated
            if seg is not unflushed[-1]:
                seg.release()
            if rec_truncated > 0:
                lost = True
                for later in unflushed[i + 1:]:
                    result.messages.append(f"deleted {os.path.basename(later.path)} after the corruption")
                    later.delete_files()
                    segments.remove(later)
                break
    else:
        for i, seg in enumerate(segments):
            # A legacy segment can hold offsets beyond base + 2^31 - 1 only if the next segment starts that far
            # above it: only then is its last batch read to find out.
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if next_base is not None and next_base - 1 - seg.base_offset > INT32_MAX and seg.has_overflow():
                raise _SplitNeeded(seg.base_offset)
            # Kafka checks only the txn index here; a broken offset/time index of a segment below the
            # recovery point would go unnoticed, so rebuild any that fail the sanity check. Sealed segments
            # are released again afterwards (their files are opened on use).
            try:
                seg.offset_index.sanity_check()
                seg.time_index.sanity_check()
                seg.txn_index.sanity_check()
            except CorruptIndexError as exc:
                result.messages.append(f"rebuilt corrupt index: {exc}")
                _recover(seg, psm, segments, start_guess, epochs=epochs)
                result.recovered_segments += 1
            if seg is not segments[-1]:
                seg.release()
        if segments and _check_active_tail(segments[-1], result,
                                           lambda seg: _recover(seg, psm, segments, start_guess, epochs=epochs)):
            recovery_point = segments[-1].base_offset  # recovered: the marker's claim is void for it
            had_clean_shutdown = False
    next_offset = segments[-1].read_next_offset() if segments else log_start_offset_checkpoint
    if segments and needs_split(segments[-1].base_offset, next_offset):
        raise _SplitNeeded(segments[-1].base_offset)
    if segments and next_offset < log_start_offset_checkpoint:
        if lost:
            psm.truncate_fully_and_start_at(log_start_offset_checkpoint)
            manifest.write(log_dir, folder, [])     # before the segments go (see storage_engine.log.manifest)
            for seg in segments:
                seg.delete_files()
            result.messages.append(f"log end {next_offset} is below the log start offset "
                                   f"{log_start_offset_checkpoint} after recovery cut the log: restarted the log "
                                   "there")
            segments = []
            epochs.clear(write=False)
        else:
            # No operation puts the start past the end (delete-records stops at the high watermark), and nothing
            # was lost here: the value is wrong. Acting on it would hide, then delete, every record.
            fallback = log_start_offset_fallback if log_start_offset_fallback <= next_offset else 0
            result.messages.append(f"the log start offset checkpoint {log_start_offset_checkpoint} is past the log "
                                   f"end {next_offset}, which no operation can do, and recovery lost nothing: "
                                   f"ignored (the log starts at {max(fallback, segments[0].base_offset)})")
            log_start_offset_checkpoint = fallback
    if not segments:
        seg = LogSegment.open(dir_path, log_start_offset_checkpoint, cfg, now_ms=now_ms)
        segments = [seg]
        next_offset = log_start_offset_checkpoint
    active = segments[-1]
    active.offset_index.resize(cfg.segment_index_bytes)
    active.time_index.resize(cfg.segment_index_bytes)
    if cfg.remote_storage_enable:
        # Kafka's rule for a tiered topic: the checkpoint as is. The offsets below the first local segment are in
        # remote storage (local retention moved only the local log start offset).
        log_start = log_start_offset_checkpoint
    else:
        # Kafka's rule (the checkpoint raised to the first segment), unless data found lost lies in between.
        log_start = losses.kept_log_start(max(log_start_offset_checkpoint, segments[0].base_offset),
                                          log_start_offset_checkpoint, losses.recorded(dir_path))
    # Kafka's load: the epoch cache loses the entries past the log end and below the log start.
    epochs.truncate_from_end(next_offset, write=False)
    epochs.truncate_from_start(log_start, write=False)
    if not epochs.flush() and not os.path.exists(epochs.path):
        epochs.checkpoint.create_empty()   # found missing and nothing to write: as Kafka, an empty file
    if had_clean_shutdown:
        recovery_point = next_offset
    else:
        recovery_point = min(recovery_point, next_offset)
    bases = [s.base_offset for s in segments]
    # What the partition holds now; the loss record keeps what the load found gone.
    if named != bases:
        manifest.write(log_dir, folder, bases)
    crashpoints.reached("load.manifest")
    removed = psm.remove_stray_snapshots(bases)
    if removed:
        result.messages.append(f"removed stray producer snapshots at {removed}")
    if had_clean_shutdown and not had_snapshots:
        psm.clear(next_offset)
        psm.take_snapshot(sync=False)
    else:
        producers.rebuild(psm, segments, log_start, next_offset, exclusive=True, snapshot_offsets=bases[-2:])
    psm.release_listing()   # the log's other processes change the snapshots from now on
    result.producer_state = psm
    result.leader_epochs = epochs
    result.segments = segments
    result.log_start_offset = log_start
    result.recovery_point = recovery_point
    result.next_offset = next_offset
    return result


def open_log(log_dir: str, topic: str, partition: int, config: LogConfig, *, clock: Clock, exclusive: bool,
             had_clean_shutdown: bool = False, recovery_point_checkpoint: int = 0, log_start_offset_checkpoint: int = 0,
             create: bool = False, folder: str | None = None,
             dir_epoch: int | None = None) -> tuple[Log, LoadResult | None]:
    """Open a partition's :class:`Log`: with ``exclusive`` (the first process in the log dir), when no process
    has loaded it yet, or when it was not loaded since the dir's last unclean shutdown (``dir_epoch``, the dir's
    crash epoch, differs from the one recorded at its last load), load and recover it (:func:`load`); otherwise
    open a view of it as other processes left it. ``create`` makes a missing folder. ``folder`` is the folder's
    name when it is not ``<topic>-<partition>`` (the ``-future`` copy of a partition being moved). Returns the log
    and, for a load, what the load did.

    Raises :class:`PartitionDeletedError` or :class:`PartitionMovedError` when the partition's lock says it was
    deleted or moved away, even if its folder is still there (a change a crashed process left half done, which
    the caller completes); a lock left behind by a partition of this name that is gone is replaced on create."""
    name = layout.partition_dir_name(topic, partition)
    folder = folder or name
    for _ in range(3):
        lock = PartitionLock(lock_path(log_dir, folder))
        try:
            with lock:
                opened = _open_locked(lock, log_dir, folder, topic, partition, config, clock=clock,
                                      exclusive=exclusive, had_clean_shutdown=had_clean_shutdown,
                                      recovery_point_checkpoint=recovery_point_checkpoint,
                                      log_start_offset_checkpoint=log_start_offset_checkpoint, create=create,
                                      dir_epoch=dir_epoch)
                if opened is not None:
                    return opened
                lock.unlink()
            lock.close()
        except BaseException:
            lock.close()
            raise
    raise StorageError(f"cannot open {folder} in {log_dir}: its lock file keeps being replaced")


def _open_locked(lock: PartitionLock, log_dir: str, folder: str, topic: str, partition: int, config: LogConfig, *,
                 clock: Clock, exclusive: bool, had_clean_shutdown: bool, recovery_point_checkpoint: int,
                 log_start_offset_checkpoint: int, create: bool,
                 dir_epoch: int | None) -> tuple[Log, LoadResult | None] | None:
    """:func:`open_log` under the lock; None when the lock file is a stale one to replace."""
    now_ms = clock.milliseconds()
    dir_path = os.path.join(log_dir, folder)
    state = lock.read_state()
    exists = os.path.isdir(dir_path)
    if state.status != LIVE:
        if create and not exists:
            return None
        if state.status == DELETED:
            raise PartitionDeletedError(f"partition {folder} in {log_dir} was deleted")
        raise PartitionMovedError(f"partition {folder} moved away from {log_dir}")
    if not exists:
        if not create:
            raise PartitionNotFoundError(f"partition {folder} does not exist in {log_dir}")
        try:
            os.makedirs(dir_path)
            LeaderEpochCheckpointFile(os.path.join(dir_path, layout.LEADER_EPOCH_CHECKPOINT)).create_empty()  # Kafka
            fsync_dir(log_dir)
        except OSError as exc:
            raise StorageIOError("cannot create partition folder", dir_path, exc) from exc
        # Whatever the lock file says belongs to a folder of this name that is gone (removed by hand, or a
        # move that never completed): the new partition starts from nothing, at a generation nobody has seen.
        state = PartitionState(generation=state.generation)
        manifest.clear(log_dir, folder)     # so does a segment manifest left by it
    current = dir_epoch is None or state.loaded_epoch == dir_epoch
    if exists and not exclusive and state.generation != 0 and current:
        log = Log(log_dir, topic, partition, config, lock, LogSegments(), log_start_offset=0,
                  recovery_point=0, next_offset=0, generation=-1, clock=clock, last_flush_ms=now_ms, folder=folder)
        view.sync(log, now_ms)
        return log, None
    lso_cp, rp_cp, lso_fallback = log_start_offset_checkpoint, recovery_point_checkpoint, 0
    if state.generation != 0:
        # Values kept by processes that ran since the last checkpoint are at least as fresh.
        if state.log_start_offset != UNKNOWN:
            lso_cp, lso_fallback = max(lso_cp, state.log_start_offset), min(lso_cp, state.log_start_offset)
        if state.recovery_point != UNKNOWN:
            # Lowered by truncation or raised by a flush since the checkpoint: trust the lower.
            rp_cp = min(rp_cp, state.recovery_point)
    # Only the engine's own record (a Kafka broker's checkpoint may lag behind the retention it did before a crash).
    known = state.generation != 0 and state.log_start_offset != UNKNOWN
    res = load(dir_path, config, recovery_point_checkpoint=rp_cp, log_start_offset_checkpoint=lso_cp,
               had_clean_shutdown=had_clean_shutdown, now_ms=now_ms, log_start_offset_fallback=lso_fallback,
               recorded_log_start=lso_cp if known else None)
    # flush.ms counts from the last flush by any process; Kafka (one process) starts at load time.
    last_flush = state.last_flush_ms if state.last_flush_ms != UNKNOWN else now_ms
    new_state = PartitionState(state.generation + 1, res.log_start_offset, res.recovery_point, last_flush,
                               state.loaded_epoch if dir_epoch is None else dir_epoch, status=LIVE)
    lock.write_state(new_state)
    log = Log(log_dir, topic, partition, config, lock, LogSegments(res.segments),
              log_start_offset=res.log_start_offset, recovery_point=res.recovery_point,
              next_offset=res.next_offset, generation=new_state.generation, clock=clock,
              last_flush_ms=last_flush, folder=folder, producer_state=res.producer_state)
    if res.leader_epochs is not None:
        res.leader_epochs.generation = new_state.generation   # as the file is at this generation
        log.leader_epochs = res.leader_epochs
    # Kafka restarts the bytes-since-last-index-entry count at 0 on load (it lives in memory only); count
    # from the last entry instead, or a log appended by one short-lived process per batch (the CLI) would
    # never get an index entry.
    log.active_segment.reload_tail_state()
    return log, res
