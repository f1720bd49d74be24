"""Shrinking a log from either end: truncation (Kafka's ``truncateTo``, ``truncateFullyAndStartAt``), deleting a
prefix of segments (``deleteSegments``, retention's step) and raising the log start offset (``DeleteRecords``). A
segment leaves a log one way only: :meth:`~storage_engine.log.local_log.LocalLog.delete_segment_files` (renamed
``.deleted``, purged after ``file.delete.delay.ms``).

Each runs under the partition lock and bumps the generation before its first rename, so a process that meets
the change half done (this one died) reloads instead of trusting a segment list or a log start offset derived
from it. A log start offset only moves forward here through retention, ``delete-records`` or remote retention
(:func:`set_log_start_offset_from_remote`); truncation may only lower it to the new log end. A tiered log's local
retention (``move_log_start=False``) leaves it where it is: only the local log start offset moves. The partition's leader epoch cache (``leader-epoch-checkpoint``) follows, after
the log as in Kafka: its end is truncated with the log end, its start with the log start offset, and a full
truncation clears it.

The log dir's offset checkpoints follow a truncation at once, as Kafka's ``LogManager.truncateTo`` and
``truncateFullyAndStartAt`` write the recovery-point checkpoint right after truncating; here the partition's own
entries are written (the others are left as they are), in two steps so that a process killed at any point leaves
no recovery-point entry past the log end: before the first rename, that entry is lowered to the recovery point just
published (at or below every end a crash can leave; lowering it only makes a load recover more), and after the
truncation both entries are written as the dir's checkpoint writes them (:mod:`storage_engine.log.dir_checkpoints`:
the recovery point; the log start offset only when above the first segment's base, or the topic is tiered). A
``-future`` copy's entries are left to the move and the dir's checkpoint. The log start offset entry is only written
after: lowered sooner, it would let a load that finds the truncation rolled back expose records below the old start.
So a full truncation below a log start offset raised by ``delete-records``, killed before that write, leaves the old
entry past the end until the next checkpoint: ``verify`` reports it, and a load ignores it for the partition's
recorded log start offset.

A truncation never cuts a segment file in place: the segment it cuts into is rewritten (its kept prefix to a new
file, swapped in crash-safely: :mod:`storage_engine.log.rewrite`), so a fetch still sending from the old file
sends the old bytes.

:class:`storage_engine.log.log.Log` exposes these as its methods; the functions take its
:class:`~storage_engine.log.local_log.LocalLog` and use only its public steps.
"""
from __future__ import annotations


from storage_engine import crashpoints, layout
from storage_engine.durable import fsync_dir
from storage_engine.errors import OffsetOutOfRangeError
from storage_engine.log import producer_state_manager as producers
from storage_engine.log import deletion, manifest, rewrite, view
from storage_engine.log.local_log import LocalLog
from storage_engine.segment.segment import LogSegment


def truncate_to(log: LocalLog, offset: int) -> bool:
    """Remove everything at or after ``offset`` (batch granular). Returns False if nothing changed."""
    if offset < 0:
        raise OffsetOutOfRangeError(f"cannot truncate {log.name} to negative offset {offset}")
    now = log.clock.milliseconds()
    with log.locked():
        if offset >= log.log_end_offset:
            # Kafka truncates the epoch cache's end even so: an epoch assigned at the log end whose batch was
            # never written (its writer died) goes.
            log.leader_epochs.sync(log.view.generation).truncate_from_end(log.log_end_offset)
            return False
        if log.segment_list[0].base_offset > offset:
            truncate_fully_locked(log, offset, now)
            return True
        # The recovery point goes down to the base of the segment cut into before the first rename: a crash
        # anywhere in between leaves a log ending at or above that base (the cut rolled back or completed), never
        # one below a recovery point that claims flushed records past its end. Raised again to the new end below.
        recovery_point, cut_into = log.recovery_point, log.segment_list.floor(offset)
        assert cut_into is not None, "the first segment's base is at or below the offset"
        log.recovery_point = min(recovery_point, cut_into.base_offset)
        log.publish(bump=True)  # visible before the first rename (every other process reloads)
        _lower_recovery_point_entry(log)
        # Snapshots above the new end describe data that goes: delete them first, so that a crash before the
        # log is cut cannot leave one that a later, longer log would be rebuilt from.
        log.producer_state.delete_snapshots_outside(-1, offset)
        doomed = [s for s in log.segment_list if s.base_offset > offset]
        if doomed:
            manifest.keep(log, doomed)      # before the first rename (storage_engine.log.manifest)
        for seg in doomed:
            log.delete_segment_files(seg, now)
        _ensure_active_writable(log, now)
        rewrite.truncate_segment(log, log.active_segment, offset, now)    # a new file: the old one never changes
        log.log_end_offset = log.active_segment.read_next_offset()
        log.view.known_active_size = log.active_segment.size
        log.log_start_offset = min(log.log_start_offset, log.log_end_offset)
        log.recovery_point = min(recovery_point, log.log_end_offset)    # the kept bytes are fsynced (rewrite)
        # After the log (Kafka's order): a crash in between leaves entries past the end, which a load drops.
        log.leader_epochs.sync(log.view.generation).truncate_from_end(log.log_end_offset)
        producers.rebuild(log.producer_state, log.segments, log.log_start_offset, log.log_end_offset,
                       exclusive=True)
        log.publish(bump=True)
        crashpoints.reached("truncation.published")
        _checkpoint_entries(log)
        return True


def _ensure_active_writable(log: LocalLog, now: int) -> None:
    """A view (a process that joined the log dir) opens sealed segments read-only; one that truncation turns back
    into the active segment must take writes, so reopen it writable."""
    active = log.active_segment
    if active.log.writable and active.offset_index.writable and active.time_index.writable:
        return
    active.close(trim=False)
    seg = LogSegment.open(log.dir, active.base_offset, log.config, now_ms=now, file_already_exists=True)
    log.segment_list.add(seg)


def truncate_fully_locked(log: LocalLog, offset: int, now: int, log_start_offset: int | None = None) -> None:
    """Delete every segment and start the log empty at ``offset`` (the lock is held). ``log_start_offset``: the
    log start offset to keep, at or below ``offset`` (Kafka's ``logStartOffsetOpt``: a tiered log's copy starts at
    its first local offset while its log start offset stays below, in remote storage); default ``offset``."""
    if log_start_offset is not None and log_start_offset > offset:
        raise OffsetOutOfRangeError(f"cannot start {log.name} at offset {offset} with a log start offset "
                                    f"{log_start_offset} above it")
    # The new log start offset and a recovery point at or below ``offset`` are published before the first rename:
    # a crash anywhere in between leaves the kept segment (its truncation rolled back or completed) or the new one
    # at ``offset``, and segments below the log start offset that the next retention pass deletes; never a log start
    # offset below the segments left, nor a recovery point above their end.
    log.log_start_offset = offset if log_start_offset is None else log_start_offset
    log.recovery_point = min(log.recovery_point, offset)
    log.publish(bump=True)  # visible before the first rename (every other process reloads)
    _lower_recovery_point_entry(log)
    log.producer_state.truncate_fully_and_start_at(offset)
    old = log.segment_list.as_list()
    # Before the first rename, the manifest names only the segment kept (if one is at ``offset``); after the new
    # segment exists, it names that (storage_engine.log.manifest).
    manifest.keep(log, [s for s in old if s.base_offset != offset])
    seg = (LogSegment.open(log.dir, offset, log.config, now_ms=now)
           if all(s.base_offset != offset for s in old) else None)
    for s in old:
        if seg is None and s.base_offset == offset:
            continue
        log.delete_segment_files(s, now)
    if seg is None:
        _ensure_active_writable(log, now)
        rewrite.truncate_segment(log, log.segment_list[0], offset, now)   # emptied by rewrite (a new, empty file)
    else:
        log.segment_list.add(seg)
    log.log_start_offset = offset if log_start_offset is None else log_start_offset
    log.log_end_offset = offset
    log.recovery_point = offset
    log.leader_epochs.clear()   # Kafka's clearAndFlush: 0\n0\n
    log.view.known_active_size = log.active_segment.size
    if seg is not None:
        fsync_dir(log.dir)
        manifest.grown(log)
    log.publish(bump=True)
    crashpoints.reached("truncation.published")
    _checkpoint_entries(log)


def _lower_recovery_point_entry(log: LocalLog) -> None:
    """Before a truncation's first rename (the lock is held, the lowered recovery point just published): lower the
    partition's entry in the dir's recovery-point checkpoint to it, if above. The published recovery point is at or
    below every log end a crash can leave (the cut rolled back or completed), so no entry claims flushed records
    past the end whatever step the truncation dies at; the file is written only when the entry changes."""
    if log.is_future:
        return
    tp, recovery_point = (log.topic, log.partition), log.recovery_point

    def lower(entries: dict) -> None:
        if entries.get(tp, -1) > recovery_point:
            entries[tp] = recovery_point
    deletion.edit_checkpoint(log.log_dir, layout.RECOVERY_POINT_CHECKPOINT, lower)
    crashpoints.reached("truncation.checkpoint-lowered")


def _checkpoint_entries(log: LocalLog) -> None:
    """After a truncation (the lock is held, the change published): the partition's entries in the dir's
    recovery-point and log-start-offset checkpoints as the dir's checkpoint writes them (the recovery point; the log
    start offset when above the first segment's base or the topic is tiered, else no entry). Kafka's
    ``LogManager.truncateTo``; each file is written only when its entries change."""
    if log.is_future:
        return
    tp, recovery_point, start = (log.topic, log.partition), log.recovery_point, log.log_start_offset
    keep_start = start > log.segment_list[0].base_offset or log.remote_log_enabled
    deletion.edit_checkpoint(log.log_dir, layout.RECOVERY_POINT_CHECKPOINT,
                             lambda entries: entries.__setitem__(tp, recovery_point))
    crashpoints.reached("truncation.recovery-point-checkpointed")

    def set_start(entries: dict) -> None:
        if keep_start:
            entries[tp] = start
        else:
            entries.pop(tp, None)
    deletion.edit_checkpoint(log.log_dir, layout.LOG_START_OFFSET_CHECKPOINT, set_start)


def delete_segments_locked(log: LocalLog, segments: list[LogSegment], now: int, *,
                           move_log_start: bool = True) -> list[LogSegment]:
    """Delete a prefix of segments (retention; the caller holds the lock with a fresh view).

    Kafka's ``deleteSegments``: if every segment would go, roll first so an empty active segment remains; the
    log start offset moves to the base of the segment after the last one deleted; files are renamed to
    ``.deleted`` and purged after ``file.delete.delay.ms``. Returns the segments actually deleted.
    ``move_log_start`` False (local retention of a tiered topic, whose deleted segments have a remote copy): only
    the local log start offset moves (it is the first segment's base), the log start offset stays."""
    if not segments:
        return []
    if len(segments) == len(log.segment_list):
        if log.active_segment.size > 0 or log.log_end_offset != log.active_segment.base_offset:
            log.roll_locked(now)
        else:
            segments = segments[:-1]
        segments = [s for s in segments if s is not log.active_segment]
    if not segments:
        return []
    # The new log start offset is published before the first rename: a process that meets the deletion half
    # done (this one died) sees segments below the log start offset, which the next pass deletes.
    before = log.log_start_offset
    following = log.segment_list.base_after(segments[-1])
    if move_log_start and following is not None and following > log.log_start_offset:
        log.log_start_offset = following
    log.publish(bump=True)
    crashpoints.reached("retention.published")
    manifest.keep(log, segments)    # before the first rename (storage_engine.log.manifest)
    crashpoints.reached("retention.manifest")
    done = 0
    try:
        for seg in segments:
            log.delete_segment_files(seg, now, sync=False)
            done += 1
            # Kafka deletes the producer snapshot named by a deleted segment's base with it.
            log.producer_state.delete_snapshot(seg.base_offset, deleted_at_ms=now)
            if done == 1:
                crashpoints.reached("retention.partial")
    except BaseException:
        # A rename failed (the process lives on): the start moves only past what really went, and the segment
        # list is reloaded from the folder (the failed segment already left it).
        kept_from = segments[done].base_offset if done < len(segments) else log.log_start_offset
        log.log_start_offset = max(before, min(log.log_start_offset, kept_from))
        log.publish(bump=True)
        log.view.generation -= 1
        view.sync(log, now)
        manifest.grown(log)     # the segments that did not go are named again
        raise
    crashpoints.reached("retention.renamed")
    fsync_dir(log.dir)
    if log.log_start_offset > before:   # Kafka's maybeIncrementLogStartOffset: the epoch cache follows the start
        log.leader_epochs.sync(log.view.generation).truncate_from_start(log.log_start_offset)
    log.publish(bump=True)
    return segments


def set_log_start_offset_from_remote(log: LocalLog, offset: int) -> int:
    """Raise a tiered log's start offset to ``offset`` after remote retention deleted the remote segments below it
    (Kafka's ``updateLogStartOffsetFromRemoteTier``): never lowered, at most to the high watermark. Durable when it
    returns: the new start is published in the partition's state with the lock file fsynced (the load takes the
    larger of it and the dir's checkpoint, which the next checkpoint writes), so no crash, of the process or the
    machine, brings back offsets whose remote copy is gone. Local segments wholly below it go at the next retention
    pass. Also for a topic whose remote storage was turned off (``remote.log.delete.on.disable``), once its remote
    segments are deleted. Returns the log start offset."""
    with log.locked():
        if offset < 0 or offset > log.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot raise the log start offset of {log.name} to {offset} from remote storage: it must be in "
                f"[0, high watermark {log.high_watermark}]")
        if offset > log.log_start_offset:
            log.log_start_offset = offset
            log.publish(bump=True)
            crashpoints.reached("remote-start.published")
            log.lock.sync_state()
            crashpoints.reached("remote-start.synced")
            log.leader_epochs.sync(log.view.generation).truncate_from_start(offset)
        return log.log_start_offset


def delete_records(log: LocalLog, offset: int) -> int:
    """Raise the log start offset (DeleteRecords); ``-1`` means the high watermark. Returns the new one."""
    with log.locked():
        target = log.high_watermark if offset == -1 else offset
        if target < 0 or target > log.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset of {log.name} to {offset}: it must be in "
                f"[0, high watermark {log.high_watermark}]")
        if target > log.log_start_offset:
            log.log_start_offset = target
            log.publish(bump=True)
            log.leader_epochs.sync(log.view.generation).truncate_from_start(target)
        return log.log_start_offset
