"""What retention and compaction would do as of a time, read-only (the Storage view's plan page).

Plans run the engine's own rules, :func:`storage_engine.maintenance.retention.plan` and
:func:`storage_engine.maintenance.cleaner_manager.log_to_clean`, on a read-only snapshot of each partition
(:class:`~storage_engine.inspection.snapshot.LogSnapshot` offers the attributes those functions read from a
``Log``), so the view and the maintenance jobs cannot disagree about what a run would do.
"""
from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import TYPE_CHECKING

from storage_engine.config import StorageConfig
from storage_engine.errors import StorageError
from storage_engine.inspection.listing import matching_partitions, missing_partitions
from storage_engine.inspection.snapshot import LogSnapshot, uncleanable_marks, read_checkpoints

if TYPE_CHECKING:
    from storage_engine.maintenance.retention import RemoteUpperFor


def plan(config: StorageConfig, now_ms: int, *, topics: Collection[str] | None = None, offset: int = 0,
         limit: int = 100, remote_upper_for: RemoteUpperFor | None = None) -> dict:
    """What retention and compaction would do as of ``now_ms``, read-only.

    ``retention``: for one page of partitions (name order, ``offset``/``limit``), the segments
    :func:`storage_engine.maintenance.retention.plan` would delete and why. ``compaction``: every compacted
    partition ranked by dirty ratio as the cleaner's selection would rank it with ``now_ms`` as the upper
    time bound (a DAG run's interval end), those above ``min.cleanable.dirty.ratio`` (or forced by
    ``max.compaction.lag.ms``) marked ``eligible``; uncleanable partitions are listed as skipped.
    ``remote_upper_for(topic, partition)``: for a tiered topic, the highest offset with a finished remote copy;
    default, as the retention jobs: the remote view's when the store has tiered storage on (read-only), else none
    (a tiered topic's segments then go by the log start offset only)."""
    from storage_engine.maintenance import cleaner_manager, retention
    matched = matching_partitions(config, topics)
    with contextlib.ExitStack() as stack:
        page = matched[offset:offset + limit]
        if remote_upper_for is None and config.remote_storage_system_enabled and any(
                retention.is_tiered(config.log_config(t)) for _d, _n, t, _p in page):
            # As the retention jobs: the remote view, read from __remote_log_metadata alone (read-only).
            from storage_engine.jobs.housekeeping import remote_upper_from_view
            from storage_engine.log.manager import LogManager
            mgr = stack.enter_context(LogManager.open(config, partitions=[], read_only=True))
            remote_upper_for = remote_upper_from_view(mgr)
        retention_rows, unreadable = _retention_rows(config, now_ms, page, remote_upper_for)
    if offset == 0:                     # partitions whose folder is missing: maintenance fails them too
        unreadable += [{"topic": m["topic"], "partition": m["partition"], "error": m["reason"]}
                       for m in missing_partitions(config, topics)]
    ranked, skipped = [], []
    cps_by_dir: dict[str, dict] = {}
    uncleanable_by_dir: dict[str, dict] = {}
    for d, name, topic, partition in matched:
        if not config.log_config(topic).compact:
            continue
        cps = cps_by_dir[d] if d in cps_by_dir else cps_by_dir.setdefault(d, read_checkpoints(d))
        if d not in uncleanable_by_dir:
            uncleanable_by_dir[d] = uncleanable_marks(d)
        bad = uncleanable_by_dir[d].get(name)
        if bad:
            skipped.append({"topic": topic, "partition": partition, "reason": f"uncleanable: {bad.get('reason')}"})
            continue
        try:
            with LogSnapshot(config, d, topic, partition, checkpoints=cps) as snap:
                ltc = cleaner_manager.log_to_clean(snap, snap.cleaner_checkpoint, now_ms, upper_time_bound_ms=now_ms)
                row = ltc.as_dict()
                row["eligible"] = cleaner_manager.is_eligible(ltc)
                row["size_bytes"] = snap.size_in_bytes()
                ranked.append(row)
        except (StorageError, OSError) as exc:
            skipped.append({"topic": topic, "partition": partition,
                            "reason": f"cannot be read: {type(exc).__name__}: {exc}"})
    ranked.sort(key=lambda r: (not r["eligible"], -r["dirty_ratio"], r["topic"], r["partition"]))
    return {"now_ms": now_ms, "retention": {"total": len(matched), "offset": offset, "limit": limit,
                                            "partitions": retention_rows, "unreadable": unreadable,
                                            "segments_deleted": sum(r["segments_deleted"] for r in retention_rows),
                                            "bytes_reclaimed": sum(r["bytes_reclaimed"] for r in retention_rows)},
            "compaction": {"partitions": ranked, "skipped": skipped,
                           "eligible": sum(1 for r in ranked if r["eligible"])}}


def _retention_rows(config: StorageConfig, now_ms: int, page: list,
                    remote_upper_for: RemoteUpperFor | None) -> tuple[list[dict], list[dict]]:
    """The retention plan of each partition of ``page`` (``(log dir, folder, topic, partition)``), and those that
    cannot be read."""
    from storage_engine.maintenance import retention
    retention_rows: list[dict] = []
    unreadable: list[dict] = []
    cps_by_dir: dict[str, dict] = {}
    for d, _name, topic, partition in page:
        cps = cps_by_dir[d] if d in cps_by_dir else cps_by_dir.setdefault(d, read_checkpoints(d))
        try:
            with LogSnapshot(config, d, topic, partition, checkpoints=cps) as snap:
                tiered = retention.is_tiered(snap.config)
                upper = remote_upper_for(topic, partition) if tiered and remote_upper_for is not None else None
                deletions, future = retention.plan(snap, now_ms, remote_upper=upper)
                start_after = snap.log_start_offset
                if deletions and not tiered:     # a tiered topic's local deletions keep the log start offset
                    last = deletions[-1].segment.base_offset
                    later = [seg.base_offset for seg in snap.segments if seg.base_offset > last]
                    start_after = max(start_after, min(later) if later else snap.log_end_offset)
                retention_rows.append({
                    "log_start_after": start_after,
                    "topic": topic, "partition": partition, "log_dir": d,
                    "segments": [x.as_dict() for x in deletions],
                    "segments_deleted": len(deletions), "bytes_reclaimed": sum(x.segment.size for x in deletions),
                    "log_start_offset": snap.log_start_offset, "future_segments": future})
        except (StorageError, OSError) as exc:
            unreadable.append({"topic": topic, "partition": partition, "error": f"{type(exc).__name__}: {exc}"})
    return retention_rows, unreadable
