"""Retention of a tiered partition: local copies past ``local.retention.*``, remote segments past ``retention.*``
or below the log start offset (Kafka's ``RLMExpirationTask``), and the remote data of a topic whose remote storage
was turned off with ``remote.log.delete.on.disable``.

Local retention (:func:`local_retention`) is the engine's retention (:mod:`storage_engine.maintenance.retention`)
given the highest offset with a finished remote copy: a local segment goes only if its remote copy is finished.

Remote retention (:func:`remote_plan`, :func:`remote_retention`), over the finished remote segments oldest first,
as Kafka's ``RemoteLogManager`` decides:

* ``retention.bytes`` (>= 0): the partition's size is the remote bytes plus the local bytes not yet tiered
  (Kafka's ``onlyLocalLogSegmentsSize``); while that exceeds the limit by at least a segment's size, the oldest
  remote segment goes;
* ``retention.ms`` (>= 0): a segment goes when its largest timestamp is at or before ``now - retention.ms``;
* the log start offset: a segment whose last offset is below it goes (delete-records, or retention earlier).

Size and time stop at the first segment that must stay (only a prefix is deleted). Order of the steps, so a
reader is never sent to an object that is gone and a crash leaves nothing it cannot finish: the log start offset
is first raised past the doomed segments (durably: Kafka's ``updateLogStartOffsetFromRemoteTier``), then for
each segment ``DELETE_SEGMENT_STARTED``, its objects deleted, ``DELETE_SEGMENT_FINISHED``. A run killed between
two of them leaves a ``DELETE_SEGMENT_STARTED`` the next run finishes (:mod:`storage_engine.tiered.orphans`).
"""
from __future__ import annotations

import uuid

from storage_engine import crashpoints
from storage_engine.log.log import Log
from storage_engine.maintenance import retention as retention_mod
from storage_engine.tiered import metadata as md
from storage_engine.tiered.context import TierContext


def remote_plan(log: Log, segments: list[md.RemoteSegment], now_ms: int) -> list[tuple[md.RemoteSegment, str]]:
    """Which finished remote segments retention deletes, and why (module docstring): Kafka's walk, oldest first,
    each segment deleted when it is below the log start offset, else past ``retention.ms``, else past
    ``retention.bytes``; the walk stops at the first segment that stays."""
    cfg = log.config
    segments = sorted(segments, key=lambda s: s.start_offset)
    highest = max((s.end_offset for s in segments), default=-1)
    start = log.log_start_offset
    breach = 0
    if cfg.delete and cfg.retention_bytes >= 0:
        local_only = sum(s.size for s in log.segments if s.base_offset > highest)   # not tiered yet
        breach = max(0, sum(s.size_bytes for s in segments) + local_only - cfg.retention_bytes)
    cutoff = now_ms - cfg.retention_ms if cfg.delete and cfg.retention_ms >= 0 else -1
    out: list[tuple[md.RemoteSegment, str]] = []
    for seg in segments:
        # every deletion frees its bytes from the size breach (a segment below the log start counts in the size)
        if seg.end_offset < start:
            breach = max(0, breach - seg.size_bytes)
            out.append((seg, "log-start-offset"))
        elif cutoff >= 0 and seg.max_timestamp_ms <= cutoff:
            breach = max(0, breach - seg.size_bytes)
            out.append((seg, "retention-ms"))
        elif breach and breach - seg.size_bytes >= 0:
            breach -= seg.size_bytes
            out.append((seg, "retention-bytes"))
        else:
            break
    return out


def raise_log_start(ctx: TierContext, log: Log, offset: int) -> bool:
    """Raise the log start offset to ``offset`` (never lowers it); True if it moved. Durable when it returns (the
    partition state is fsynced, and a load takes the larger of it and the checkpoint file); the dir's checkpoint
    files are written once at the end of the batch."""
    if offset <= log.log_start_offset:
        return False
    log.set_log_start_offset_from_remote(min(offset, log.high_watermark))
    ctx.dirty_dirs.add(log.log_dir)
    crashpoints.reached("tier.log-start-raised")
    return True


def remote_retention(ctx: TierContext, log: Log, tid: uuid.UUID | None) -> dict:
    """Remote retention of one partition (module docstring); its figures."""
    doomed = remote_plan(log, ctx.segments(log, tid), ctx.now_ms)
    before = log.log_start_offset
    summary = [{"start_offset": s.start_offset, "end_offset": s.end_offset, "size_bytes": s.size_bytes,
                "segment_id": ctx.segment_id_text(s), "reason": why} for s, why in doomed]
    if not ctx.dry_run and doomed:
        raise_log_start(ctx, log, max(s.end_offset for s, _ in doomed) + 1)
        for seg, _why in doomed:
            ctx.delete_objects(seg)
    new_start = max(before, max((s.end_offset + 1 for s, _ in doomed), default=before))
    return {"remote_segments_deleted": len(doomed), "remote_bytes_deleted": sum(s.size_bytes for s, _ in doomed),
            "remote_deleted": summary, "log_start_offset_before": before,
            "log_start_offset": log.log_start_offset if not ctx.dry_run else new_start}


def local_retention(ctx: TierContext, log: Log, remote_upper: int) -> dict:
    """The engine's retention with the tiered rules: only segments with a finished remote copy go locally."""
    result = retention_mod.run(log, ctx.now_ms, dry_run=ctx.dry_run, remote_upper=remote_upper)
    if result["segments_deleted"] and not ctx.dry_run:
        ctx.dirty_dirs.add(log.log_dir)     # checkpointed once at the end of the batch
    out = {"local_segments_deleted": result["segments_deleted"], "local_bytes_deleted": result["bytes_reclaimed"],
           "local_deleted": result["segments"]}
    if result.get("rolled_active"):     # the active segment breached local retention: rolled, copied next run
        out["rolled_active"] = True
    return out


def delete_on_disable(ctx: TierContext, log: Log, tid: uuid.UUID | None) -> dict:
    """``remote.storage.enable`` turned off with ``remote.log.delete.on.disable``: every remote segment of the
    partition is deleted under Kafka's partition delete states (MARKED, STARTED, each segment's deletion,
    FINISHED), resumed from the state a run killed midway left. The log start offset first moves up to the first
    local offset: the remote offsets are no longer readable."""
    if tid is None:
        return {"remote_segments_deleted": 0, "remote_bytes_deleted": 0, "partition_deleted": False}
    state = ctx.view.partition_delete_state(log.topic, log.partition, topic_id=tid)
    if state == md.DELETE_PARTITION_FINISHED:
        state = None        # deleted before: segments copied since (re-enabled meanwhile) start a new deletion
    live = ctx.segments(log, tid, states=(md.COPY_SEGMENT_STARTED, md.COPY_SEGMENT_FINISHED,
                                          md.DELETE_SEGMENT_STARTED))
    if not live and state is None:
        return {"remote_segments_deleted": 0, "remote_bytes_deleted": 0, "partition_deleted": False}
    if not ctx.dry_run:
        if state is None:
            ctx.partition_state(log, tid, md.DELETE_PARTITION_MARKED)
        raise_log_start(ctx, log, log.local_log_start_offset)
        if state in (None, md.DELETE_PARTITION_MARKED):
            ctx.partition_state(log, tid, md.DELETE_PARTITION_STARTED)
        for seg in live:
            ctx.delete_objects(seg, started=seg.state == md.DELETE_SEGMENT_STARTED)
        ctx.partition_state(log, tid, md.DELETE_PARTITION_FINISHED)
    return {"remote_segments_deleted": len(live), "remote_bytes_deleted": sum(s.size_bytes for s in live),
            "partition_deleted": True}
