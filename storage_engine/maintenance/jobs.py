"""Maintenance operations as whole jobs: open the logs, act as of ``now_ms``, close, return a JSON-able summary.

These are what the CLI's maintenance commands and the Airflow operators call; each is safe to run while
other processes use the same log dirs (every change takes the partition lock) and each is idempotent for a
given ``now_ms``: running it twice changes nothing the second time and says so. ``now_ms`` is also the time
the logs are opened as of (so a backfilled run never purges ``.deleted`` files stamped after its interval).
"""
from __future__ import annotations

import os
import time

from storage_engine.maintenance import retention as retention_mod
from storage_engine.maintenance.summaries import (CheckpointResult, FlushedPartition, FlushResult, PurgeResult,
                                                  RetentionResult)
from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError, PartitionNotFoundError
from storage_engine.log.manager import LogManager


def _check_topics(mgr: LogManager, topics) -> None:
    if not topics:
        return
    known = {t for t, _ in mgr.logs}
    missing = sorted(set(topics) - known)
    if missing:
        raise PartitionNotFoundError(f"unknown topic(s) {missing}; existing topics: {sorted(known)}")


def list_partitions(config: StorageConfig, topics=None) -> list[dict]:
    """The partitions of the log dirs, read-only: folder names only, no log is opened, nothing changes
    (so listing as part of a backfilled run cannot purge or recover anything)."""
    from storage_engine import layout
    found = [(t, p, d) for d in config.log_dirs for _name, (t, p) in layout.partition_dirs(d)]
    if topics:
        known = {t for t, _p, _d in found}
        missing = sorted(set(topics) - known)
        if missing:
            raise PartitionNotFoundError(f"unknown topic(s) {missing}; existing topics: {sorted(known)}")
        found = [x for x in found if x[0] in topics]
    return [{"topic": t, "partition": p, "log_dir": d, "cleanup_policy": ",".join(config.log_config(t).cleanup_policy)}
            for t, p, d in sorted(found)]


def checkpoint(config: StorageConfig, now_ms: int | None = None, *, topics=None,
               flush: bool = True) -> CheckpointResult:
    """Kafka's checkpoint tasks: flush each log to its end, then write both checkpoint files of every dir."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        flushed = mgr.flush_all(topics) if flush else []
        written = mgr.checkpoint()
    return {"now_ms": now, "flushed": flushed, "checkpoints": written,
            "partitions_flushed": sum(1 for f in flushed if f["recovery_point"] > f["recovery_point_before"])}


def flush(config: StorageConfig, now_ms: int | None = None, *, topics=None, due_only: bool = True) -> FlushResult:
    """Time-based flush (``flush.ms``): fsync the logs whose last flush is at least flush.ms old."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        out: list[FlushedPartition] = []
        skipped = 0
        for tp in mgr.partitions(topics):
            log = mgr.logs[tp]
            log.refresh()
            if due_only and not log.flush_due(now):
                skipped += 1
                continue
            before = log.recovery_point
            after = log.flush()
            out.append({"topic": tp[0], "partition": tp[1], "recovery_point_before": before,
                        "recovery_point": after})
    return {"now_ms": now, "flushed": out, "not_due": skipped,
            "nothing_to_do": not any(f["recovery_point"] > f["recovery_point_before"] for f in out)}


def retention(config: StorageConfig, topic: str, partition: int, now_ms: int | None = None, *,
              dry_run: bool = False) -> RetentionResult:
    """Retention for one partition; advances and checkpoints the log start offset."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock, partitions=[(topic, partition)]) as mgr:
        log = mgr.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} does not exist in {list(config.log_dirs)}")
        result = retention_mod.run(log, now, dry_run=dry_run)
        if not dry_run and result["segments_deleted"]:
            mgr.checkpoint([log.log_dir])
    return result


def retention_all(config: StorageConfig, now_ms: int | None = None, *, topics=None,
                  dry_run: bool = False) -> list[RetentionResult]:
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        results = [retention_mod.run(mgr.logs[tp], now, dry_run=dry_run) for tp in mgr.partitions(topics)]
        if not dry_run and any(r["segments_deleted"] for r in results):
            mgr.checkpoint()
    return results


def purge(config: StorageConfig, now_ms: int | None = None, *, dry_run: bool = False) -> PurgeResult:
    """Remove ``.deleted`` files older than their topic's ``file.delete.delay.ms``."""
    now = clock_at(now_ms).milliseconds()
    result = retention_mod.purge_deleted(config.log_dirs, now,
                                         lambda topic: config.log_config(topic).file_delete_delay_ms,
                                         dry_run=dry_run)
    result["now_ms"] = now
    result["nothing_to_do"] = result["files_removed"] == 0
    return result


def compact(config: StorageConfig, now_ms: int | None = None, *, topics=None, partition: int | None = None,
            dry_run: bool = False, upper_time_bound_ms: int | None = None, max_partitions: int | None = None,
            offset_maps=None) -> dict:
    """Select the dirtiest compacted logs and clean them (one round each).

    ``upper_time_bound_ms`` (a DAG run's data interval end) stops cleaning at the first segment holding a
    record at or after it. ``offset_maps`` maps (topic, partition) -> a prebuilt key map (Spark)."""
    from storage_engine.maintenance import cleaner_manager
    from storage_engine.maintenance.cleaner import Cleaner
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        logs = [mgr.logs[tp] for tp in mgr.partitions(topics) if partition is None or tp[1] == partition]
        if partition is not None and not logs:
            raise PartitionNotFoundError(f"partition {topics}-{partition} does not exist")
        selection = cleaner_manager.select(logs, now, upper_time_bound_ms=upper_time_bound_ms,
                                           write_resets=not dry_run)
        eligible = selection["eligible"][:max_partitions] if max_partitions else selection["eligible"]
        cleaner = Cleaner(config.cleaner)
        results = []
        for ltc in eligible:
            log = ltc.log
            entry = {"selection": ltc.as_dict(), "topic": log.topic, "partition": log.partition}
            claim = cleaner_manager.cleaning_claim(log)
            if not claim.try_acquire():
                entry["skipped"] = "another run is cleaning this partition"
                results.append(entry)
                continue
            try:
                size_before = log.size_in_bytes()
                given = (offset_maps or {}).get((log.topic, log.partition))
                res = cleaner.clean(ltc, now, given, dry_run=dry_run)
                entry.update(stats=res.stats.as_dict(), end_offset=res.end_offset, groups=res.groups,
                             groups_abandoned=res.groups_abandoned, checkpoint_written=res.checkpoint_written,
                             size_bytes_before=size_before,
                             size_bytes_after=size_before if dry_run else log.size_in_bytes(),
                             log_lines=res.stats.log_lines(log.name, ltc.first_dirty_offset, res.end_offset))
            except Exception as exc:  # Kafka marks a partition uncleanable on any unexpected error
                if not dry_run:
                    cleaner_manager.mark_uncleanable(log.log_dir, log.name, f"{type(exc).__name__}: {exc}", now)
                entry["error"] = f"{type(exc).__name__}: {exc}"
                entry["marked_uncleanable"] = not dry_run
            finally:
                claim.release()
            results.append(entry)
    return {"now_ms": now, "dry_run": dry_run, "upper_time_bound_ms": upper_time_bound_ms,
            "selected": [r["selection"] for r in results], "results": results,
            "skipped": selection["skipped"], "not_dirty": [l.as_dict() for l in selection["not_dirty"]],
            "nothing_to_do": not eligible,
            "failed": [f"{r['topic']}-{r['partition']}" for r in results if "error" in r]}


def clear_uncleanable(config: StorageConfig, topic: str | None = None, partition: int | None = None) -> dict:
    from storage_engine.maintenance import cleaner_manager
    from storage_engine import layout
    if (topic is None) != (partition is None):
        raise InvalidRequestError("clear_uncleanable needs both a topic and a partition, or neither")
    name = layout.partition_dir_name(topic, partition) if topic is not None and partition is not None else None
    cleared = {}
    for d in config.log_dirs:
        if os.path.isdir(d):
            cleared[d] = cleaner_manager.clear_uncleanable(d, name)
    return {"cleared": cleared}


# -- compaction as separate steps (the Airflow DAG: select -> Spark key map -> clean per partition) ----------

MAP_STRATEGIES = ("spark", "local", "auto")


def compaction_plan(config: StorageConfig, now_ms: int | None = None, *, topics=None,
                    max_partitions: int | None = None, strategy: str = "auto",
                    upper_time_bound_ms: int | None = None) -> dict:
    """Select the dirtiest compacted logs and decide, per partition, where its key map is built.

    ``auto`` picks Spark when the dirty section holds more offsets than the in-process map can take
    (so the in-process map could fill and force several rounds), else the in-process map."""
    from storage_engine.maintenance import cleaner_manager
    from storage_engine.maintenance.cleaner import Cleaner
    if strategy not in MAP_STRATEGIES:
        raise ValueError(f"map strategy must be one of {MAP_STRATEGIES}, got {strategy!r}")
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        logs = [mgr.logs[tp] for tp in mgr.partitions(topics)]
        selection = cleaner_manager.select(logs, now, upper_time_bound_ms=upper_time_bound_ms)
        capacity = Cleaner(config.cleaner).new_offset_map().max_entries
        eligible = selection["eligible"][:max_partitions] if max_partitions else selection["eligible"]
        selected = []
        for ltc in eligible:
            d = ltc.as_dict()
            span = ltc.first_uncleanable_offset - ltc.first_dirty_offset
            d["map_strategy"] = strategy if strategy != "auto" else ("spark" if span > capacity else "local")
            d["in_process_map_capacity"] = capacity
            d["size_bytes"] = ltc.log.size_in_bytes()
            selected.append(d)
    return {"now_ms": now, "upper_time_bound_ms": upper_time_bound_ms, "selected": selected,
            "skipped": selection["skipped"], "not_dirty": [l.as_dict() for l in selection["not_dirty"]],
            "nothing_to_do": not selected}


def compact_partition(config: StorageConfig, topic: str, partition: int, first_dirty_offset: int,
                      first_uncleanable_offset: int, now_ms: int | None = None, *, keymap_path: str | None = None,
                      dry_run: bool = False) -> dict:
    """Clean one partition over the range a plan selected, with a prebuilt (Spark) map or in process.

    If the partition's cleaner checkpoint no longer equals ``first_dirty_offset`` (another run cleaned it,
    or this interval was already done) nothing is changed and the report says so."""
    from storage_engine.maintenance import cleaner_manager
    from storage_engine.maintenance.cleaner import Cleaner
    from storage_engine.maintenance.cleaner_manager import LogToClean, log_to_clean, read_cleaner_checkpoints
    from storage_engine.maintenance.offset_map import SortedHashOffsetMap
    t0 = time.monotonic()
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock, partitions=[(topic, partition)]) as mgr:
        log = mgr.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} does not exist in {list(config.log_dirs)}")
        base = {"topic": topic, "partition": partition, "first_dirty_offset": first_dirty_offset,
                "first_uncleanable_offset": first_uncleanable_offset, "dry_run": dry_run,
                "map": "spark" if keymap_path else "local", "now_ms": now}
        claim = cleaner_manager.cleaning_claim(log)
        if not claim.try_acquire():
            return dict(base, nothing_to_do=True, skipped="another run is cleaning this partition")
        try:
            log.refresh()
            current = read_cleaner_checkpoints(log.log_dir).get((topic, partition))
            fresh = log_to_clean(log, current, now)
            if fresh.first_dirty_offset != first_dirty_offset or first_uncleanable_offset <= first_dirty_offset:
                return dict(base, nothing_to_do=True,
                            skipped=f"the cleaner checkpoint is at {fresh.first_dirty_offset}, not "
                                    f"{first_dirty_offset}: already cleaned")
            if first_uncleanable_offset > fresh.first_uncleanable_offset:
                raise ValueError(f"cannot clean {topic}-{partition} up to {first_uncleanable_offset}: only offsets "
                                 f"below {fresh.first_uncleanable_offset} are cleanable now (active segment, "
                                 "min.compaction.lag.ms)")
            ltc = LogToClean(log, first_dirty_offset, first_uncleanable_offset, fresh.clean_bytes,
                             fresh.cleanable_bytes, fresh.need_compaction_now)
            offset_map = None
            if keymap_path:
                offset_map = SortedHashOffsetMap.load(keymap_path, expect_start=first_dirty_offset,
                                                      expect_end=first_uncleanable_offset,
                                                      expect_partition=(topic, partition))
            size_before = log.size_in_bytes()
            try:
                res = Cleaner(config.cleaner).clean(ltc, now, offset_map, dry_run=dry_run)
            except Exception as exc:
                if not dry_run:
                    cleaner_manager.mark_uncleanable(log.log_dir, log.name, f"{type(exc).__name__}: {exc}", now)
                raise
            stats = res.stats.as_dict()
            return dict(base, nothing_to_do=False, end_offset=res.end_offset, groups=res.groups,
                        groups_abandoned=res.groups_abandoned, checkpoint_written=res.checkpoint_written,
                        size_bytes_before=size_before,
                        size_bytes_after=size_before if dry_run else log.size_in_bytes(),
                        records_removed=stats["records_removed"], tombstones_purged=stats["tombstones_removed"],
                        keyless_dropped=stats["invalid_messages_read"], stats=stats,
                        map_keys=getattr(offset_map, "size", None) if offset_map is not None else None,
                        duration_s=round(time.monotonic() - t0, 3),
                        log_lines=res.stats.log_lines(log.name, first_dirty_offset, res.end_offset))
        finally:
            claim.release()
