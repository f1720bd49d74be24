"""Maintenance operations as whole jobs: open the logs, act as of ``now_ms``, close, return a JSON-able summary.

These are what the CLI's maintenance commands and the Airflow operators call; each is safe to run while
other processes use the same log dirs (every change takes the partition lock) and each is idempotent for a
given ``now_ms``: running it twice changes nothing the second time and says so. ``now_ms`` is also the time
the logs are opened as of (so a backfilled run never purges ``.deleted`` files stamped after its interval).
"""
from __future__ import annotations

import errno
import os
import time
from typing import TypedDict

from storage_engine import layout
from storage_engine.maintenance import retention as retention_mod
from storage_engine.maintenance.summaries import (CheckpointResult, ExpireProducersResult, FlushedPartition,
                                                  FlushResult, ProducerExpiry, PurgeResult, RetentionResult)
from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import (InvalidRequestError, LogDirOfflineError, LogLockedError, PartitionNotFoundError,
                                   StorageError, StorageIOError)
from storage_engine.log.manager import LogManager
from storage_engine.log.open_logs import OpenLogs


def _check_topics(mgr: LogManager, topics) -> None:
    if not topics:
        return
    known = {t for t, _ in mgr.logs}
    missing = sorted(set(topics) - known)
    if missing:
        raise PartitionNotFoundError(f"unknown topic(s) {missing}; existing topics: {sorted(known)}")


class LogDirHealth(TypedDict):
    online: list[str]
    offline: dict[str, str]     # log dir -> the error that makes it unusable


def log_dir_health(config: StorageConfig) -> LogDirHealth:
    """Which log dirs can be used, read-only: a dir is offline when it cannot be listed or is no folder (what a
    process opening it would take offline); a dir that does not exist yet is online (it is created on open)."""
    from storage_engine import layout
    from storage_engine.log.failure import is_dir_failure
    online, offline = [], {}
    for d in config.log_dirs:
        try:
            if os.path.lexists(d):
                if not os.path.isdir(os.path.realpath(d)) and os.path.exists(d):
                    raise NotADirectoryError(20, "not a directory", d)
                os.stat(d)
            layout.scan_log_dir(d)
        except OSError as exc:
            if not is_dir_failure(exc) and not isinstance(exc, FileNotFoundError):
                raise
            offline[d] = f"{type(exc).__name__}: {exc}"
            continue
        online.append(d)
    return {"online": online, "offline": offline}


def list_partitions(config: StorageConfig, topics=None, *, health: LogDirHealth | None = None) -> list[dict]:
    """The partitions of the log dirs, read-only: folder names only, no log is opened, nothing changes
    (so listing as part of a backfilled run cannot purge or recover anything). Offline dirs are skipped
    (:func:`log_dir_health`)."""
    from storage_engine import layout
    health = health or log_dir_health(config)
    found = [(t, p, d) for d in health["online"] for _name, (t, p) in layout.partition_dirs(d)]
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
        offline = mgr.offline_dirs()
    return {"now_ms": now, "flushed": flushed, "checkpoints": written,
            "partitions_flushed": sum(1 for f in flushed if f["recovery_point"] > f["recovery_point_before"]),
            "offline_dirs": offline}


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
        offline = mgr.offline_dirs()
    return {"now_ms": now, "flushed": out, "not_due": skipped,
            "nothing_to_do": not any(f["recovery_point"] > f["recovery_point_before"] for f in out),
            "offline_dirs": offline}


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
    """Retention for every partition, and for the copies being made of partitions moving between log dirs
    (Kafka applies retention to future logs too; their results say ``"future": true``)."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        results = [retention_mod.run(mgr.logs[tp], now, dry_run=dry_run) for tp in mgr.partitions(topics)]
        results += [_future_result(retention_mod.run(mgr.future_logs[tp], now, dry_run=dry_run), mgr.future_logs[tp])
                    for tp in _future_partitions(mgr, topics)]
        if not dry_run and any(r["segments_deleted"] for r in results):
            mgr.checkpoint()
    return results


def expire_producers(config: StorageConfig, now_ms: int | None = None, *, topics=None,
                     dry_run: bool = False) -> ExpireProducersResult:
    """Kafka's producer-id expiration check (every ``producer.id.expiration.check.interval.ms``): forget, in every
    partition, the producers with no open transaction whose last write is ``producer.id.expiration.ms`` old as of
    ``now_ms``. Cheap per partition, so one job covers all of them."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    expiration_ms = config.producer_id_expiration_ms
    with LogManager.open(config, clock=clock) as mgr:
        _check_topics(mgr, topics)
        out: list[ProducerExpiry] = []
        for tp in mgr.partitions(topics):
            log = mgr.logs[tp]
            expired = log.expire_producers(now, expiration_ms, dry_run=dry_run)
            out.append({"topic": tp[0], "partition": tp[1], "expired_producer_ids": expired,
                        "producers": len(log.producer_state.producers),
                        "open_transactions": len(log.producer_state.ongoing_txns)})
        # A copy being made for a move forgets the same producers, or they would come back when it takes over.
        for tp in _future_partitions(mgr, topics):
            log = mgr.future_logs[tp]
            expired = log.expire_producers(now, expiration_ms, dry_run=dry_run)
            out.append(_future_result({"topic": tp[0], "partition": tp[1], "expired_producer_ids": expired,
                                       "producers": len(log.producer_state.producers),
                                       "open_transactions": len(log.producer_state.ongoing_txns)}, log))
        offline = mgr.offline_dirs()
    total = sum(len(p["expired_producer_ids"]) for p in out if not p.get("future"))
    return {"now_ms": now, "dry_run": dry_run, "producer_id_expiration_ms": expiration_ms, "partitions": out,
            "producers_expired": total, "nothing_to_do": total == 0, "offline_dirs": offline}


def _future_partitions(mgr: LogManager, topics) -> list:
    offline = mgr.offline_dirs()
    return sorted(tp for tp, log in mgr.future_logs.items()
                  if log.log_dir not in offline and (not topics or tp[0] in topics) and log.lock.is_open)


def _future_result(result, log):
    result["future"] = True
    result["folder"] = log.folder
    return result


def purge(config: StorageConfig, now_ms: int | None = None, *, dry_run: bool = False) -> PurgeResult:
    """Remove ``.deleted`` files and ``-delete`` folders older than their topic's ``file.delete.delay.ms``."""
    from storage_engine.maintenance.lifecycle import purge_delete_dirs
    now = clock_at(now_ms).milliseconds()
    folders = purge_delete_dirs(config, now, dry_run=dry_run)
    online = [d for d in config.log_dirs if d not in folders["offline_dirs"]]
    result = retention_mod.purge_deleted(online, now, lambda topic: config.log_config(topic).file_delete_delay_ms,
                                         dry_run=dry_run)
    result["now_ms"] = now
    result["folders_removed"] = folders["removed"]
    result["folders_waiting"] = len(folders["waiting"])
    result["bytes_freed"] += folders["bytes_freed"]
    result["offline_dirs"] = folders["offline_dirs"]
    result["nothing_to_do"] = result["files_removed"] == 0 and not folders["removed"]
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
        # Copies being made for moves are compacted like their partitions (Kafka cleans future logs too).
        logs += [mgr.future_logs[tp] for tp in _future_partitions(mgr, topics)
                 if partition is None or tp[1] == partition]
        selection = cleaner_manager.select(logs, now, upper_time_bound_ms=upper_time_bound_ms,
                                           write_resets=not dry_run)
        eligible = selection["eligible"][:max_partitions] if max_partitions else selection["eligible"]
        cleaner = Cleaner(config.cleaner)
        results = []
        for ltc in eligible:
            log = ltc.log
            entry = {"selection": ltc.as_dict(), "topic": log.topic, "partition": log.partition}
            if log.is_future:
                entry.update(future=True, folder=log.folder)
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
        offline = mgr.offline_dirs()
    return {"now_ms": now, "dry_run": dry_run, "upper_time_bound_ms": upper_time_bound_ms, "offline_dirs": offline,
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
PLAN_BATCH_SIZE = 500   # compacted partitions open at once while ranking (the batches of the maintenance DAGs)


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
    # Only the compacted partitions are opened, a batch at a time (so a store of any size is ranked within the
    # process's descriptors), each batch isolated: a partition that cannot be loaded is skipped and reported,
    # the others are still considered. Each batch is ranked while open and closed before the next one opens.
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    health = log_dir_health(config)
    tps = [(p["topic"], p["partition"]) for p in list_partitions(config, topics=topics, health=health)
           if config.log_config(p["topic"]).compact]
    unreadable: list[PartitionFailure] = []
    capacity = Cleaner(config.cleaner).new_offset_map().max_entries
    ranked: list[tuple[float, int, dict]] = []
    skipped: list[dict] = []
    not_dirty: list[dict] = []
    for start in range(0, len(tps), PLAN_BATCH_SIZE):
        groups = _open_isolating(config, clock, tps[start:start + PLAN_BATCH_SIZE], unreadable)
        try:
            logs = [mgr.logs[tp] for mgr, group in groups for tp in group if tp in mgr.logs]
            selection = cleaner_manager.select(logs, now, upper_time_bound_ms=upper_time_bound_ms)
            for ltc in selection["eligible"]:
                d = ltc.as_dict()
                span = ltc.first_uncleanable_offset - ltc.first_dirty_offset
                d["map_strategy"] = strategy if strategy != "auto" else ("spark" if span > capacity else "local")
                d["in_process_map_capacity"] = capacity
                d["size_bytes"] = ltc.log.size_in_bytes()
                ranked.append((ltc.cleanable_ratio, len(ranked), d))
            skipped.extend(selection["skipped"])
            not_dirty.extend(ltc.as_dict() for ltc in selection["not_dirty"])
        finally:
            for mgr, _group in groups:
                health["offline"].update(mgr.offline_dirs())
                mgr.close()
    health["online"] = [d for d in health["online"] if d not in health["offline"]]
    ranked.sort(key=lambda r: (-r[0], r[1]))      # dirtiest first; ties in listing order (a stable sort)
    selected = [d for _ratio, _n, d in ranked]
    if max_partitions:
        selected = selected[:max_partitions]
    skipped += [{"topic": f["topic"], "partition": f["partition"],
                 "reason": f"cannot be read: {f['error_type']}: {f['error']}"} for f in unreadable]
    return {"now_ms": now, "upper_time_bound_ms": upper_time_bound_ms, "selected": selected,
            "skipped": skipped, "unreadable": unreadable, "offline_dirs": health["offline"],
            "online_dirs": health["online"], "not_dirty": not_dirty, "nothing_to_do": not selected}


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


# -- batches of partitions (the Airflow DAGs: one task per batch, each partition isolated) ------------------
#
# A batch opens only its own partitions (``LogManager.open(..., partitions=...)``). If one of them cannot be
# loaded, the batch is split in halves until the damaged partitions stand alone: they are reported as
# failures, the others are still maintained. Errors while acting on one partition are recorded the same way.
# Nothing here raises for a partition's failure: the caller decides (the Airflow task fails at the end,
# naming every failed partition).

TopicPartition = tuple[str, int]


class PartitionFailure(TypedDict):
    topic: str
    partition: int
    error_type: str
    error: str
    permanent: bool     # no retry can fix it (see :func:`is_permanent`)


class SkippedPartition(TypedDict):
    topic: str
    partition: int
    reason: str


class BatchResult(TypedDict):
    now_ms: int
    dry_run: bool
    partitions: int             # how many the batch was given
    results: list[dict]         # one per partition acted on, in the batch's order
    failures: list[PartitionFailure]
    errors: list[str]           # failures not tied to one partition (a log dir's checkpoint files)
    duration_s: float
    skipped: list[SkippedPartition]     # partitions of an offline log dir: not maintained, not failed
    offline_dirs: dict[str, str]        # log dirs offline for this batch, with the error that did it


class Batch(TypedDict):
    log_dir: str
    index: int                  # 0-based, over all batches of the plan
    partitions: list[list]      # [[topic, partition], ...], sorted
    label: str                  # short name for the UI (Airflow's map index is at most 250 characters)


# errno values of a StorageIOError that a retry cannot change (the path is wrong, not busy or full).
_PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY,
                               errno.EEXIST, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOENT})


def is_permanent(exc: BaseException) -> bool:
    """True when retrying the same operation cannot succeed: a missing partition, invalid config or name,
    corrupt bytes, a path in the way. Lock contention and I/O that may pass (full disk, too many open files,
    EIO) are not permanent, nor is anything that is not a :class:`StorageError`."""
    if isinstance(exc, LogLockedError):
        return False
    if isinstance(exc, StorageIOError):
        cause = exc.__cause__
        return isinstance(cause, OSError) and cause.errno in _PERMANENT_ERRNOS
    return isinstance(exc, StorageError)


def partition_failure(tp: TopicPartition, exc: BaseException) -> PartitionFailure:
    return {"topic": tp[0], "partition": tp[1], "error_type": type(exc).__name__, "error": str(exc),
            "permanent": is_permanent(exc)}


def as_topic_partitions(partitions) -> list[TopicPartition]:
    """``[(topic, partition)]`` from pairs or ``{"topic", "partition"}`` dicts; InvalidTopicError for a bad name
    or number (a name that could escape a log dir never reaches the filesystem)."""
    out = []
    for item in partitions:
        if isinstance(item, dict):
            topic, partition = item.get("topic"), item.get("partition")
        else:
            topic, partition = item
        out.append((layout.validate_topic(topic), layout.validate_partition(partition)))
    return out


def _open_isolating(config: StorageConfig, clock, tps: list[TopicPartition], failures: list[PartitionFailure],
                    files: OpenLogs | None = None) -> list[tuple[LogManager, list[TopicPartition]]]:
    """Managers covering ``tps``; partitions whose load fails are isolated by halving and reported. The managers
    share one bound on open files (``files``), so the halves opened so far cannot exhaust the descriptors and
    make healthy partitions fail to load."""
    files = files if files is not None else OpenLogs()
    try:
        return [(LogManager.open(config, clock=clock, partitions=tps, max_open_logs=files), tps)]
    except Exception as exc:
        if len(tps) == 1:
            failures.append(partition_failure(tps[0], exc))
            return []
    mid = len(tps) // 2
    return (_open_isolating(config, clock, tps[:mid], failures, files)
            + _open_isolating(config, clock, tps[mid:], failures, files))


def _run_batch(config: StorageConfig, partitions, now_ms: int | None, act, *, dry_run: bool = False,
               after=None) -> BatchResult:
    """``act(mgr, log, now) -> dict`` per partition, then ``after(mgr, results) -> list[str]`` per manager."""
    t0 = time.monotonic()
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    tps = as_topic_partitions(partitions)
    failures: list[PartitionFailure] = []
    results_by_tp: dict[TopicPartition, dict] = {}
    errors: list[str] = []
    skipped: list[SkippedPartition] = []
    offline: dict[str, str] = {}
    for mgr, group in _open_isolating(config, clock, tps, failures) if tps else []:
        with mgr:
            done = []
            for tp in group:
                try:
                    # get_log: a partition another process moved since the listing is found where it is now
                    log = mgr.get_log(*tp)
                except LogDirOfflineError as exc:
                    skipped.append({"topic": tp[0], "partition": tp[1], "reason": str(exc)})
                    continue
                if log is None:
                    failures.append(partition_failure(tp, PartitionNotFoundError(
                        f"partition {tp[0]}-{tp[1]} does not exist in {list(config.log_dirs)}")))
                    continue
                started = time.monotonic()
                try:
                    result = act(mgr, log, now)
                except Exception as exc:
                    if mgr.failures.is_offline(log.log_dir):     # its dir failed meanwhile: offline, skipped
                        skipped.append({"topic": tp[0], "partition": tp[1],
                                        "reason": f"log dir {log.log_dir} went offline: {type(exc).__name__}: {exc}"})
                        continue
                    failures.append(partition_failure(tp, exc))
                    continue
                result["duration_s"] = round(time.monotonic() - started, 4)
                results_by_tp[tp] = result
                done.append(result)
            if after is not None:
                try:
                    errors.extend(after(mgr, done))
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
            offline.update(mgr.offline_dirs())
    order = {tp: i for i, tp in enumerate(tps)}
    failures.sort(key=lambda f: order.get((f["topic"], f["partition"]), len(order)))
    return {"now_ms": now, "dry_run": dry_run, "partitions": len(tps),
            "results": [results_by_tp[tp] for tp in tps if tp in results_by_tp], "failures": failures,
            "errors": errors, "duration_s": round(time.monotonic() - t0, 3), "skipped": skipped,
            "offline_dirs": offline}


def plan_batches(config: StorageConfig, *, topics=None, batch_size: int = 500) -> list[Batch]:
    """The partitions of the log dirs (read-only listing, folder names only) cut into batches: per log dir,
    in name order, at most ``batch_size`` each. Unknown topics raise :class:`PartitionNotFoundError`."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    listed = list_partitions(config, topics=topics)
    batches: list[Batch] = []
    for d in config.log_dirs:
        here = [[p["topic"], p["partition"]] for p in listed if p["log_dir"] == d]
        for start in range(0, len(here), batch_size):
            chunk = here[start:start + batch_size]
            first, last = (f"{t}-{p}" for t, p in (chunk[0], chunk[-1]))
            label = first if len(chunk) == 1 else f"{_short(first)}..{_short(last)}"
            batches.append({"log_dir": d, "index": len(batches), "partitions": chunk,
                            "label": f"{label} ({len(chunk)} in {os.path.basename(d.rstrip(os.sep)) or d})"})
    return batches


def _short(name: str, keep: int = 80) -> str:
    return name if len(name) <= keep else name[:keep // 2] + "~" + name[-(keep // 2):]


def retention_batch(config: StorageConfig, partitions, now_ms: int | None = None, *,
                    dry_run: bool = False) -> BatchResult:
    """Retention of each partition of a batch (see :func:`retention`); the log start offsets of the dirs
    where segments went are checkpointed once at the end."""
    def act(mgr, log, now):
        result: dict = dict(retention_mod.run(log, now, dry_run=dry_run))
        result["size_bytes_after"] = log.size_in_bytes() - (result["bytes_reclaimed"] if dry_run else 0)
        result["segments_after"] = len(log.segments) - (result["segments_deleted"] if dry_run else 0)
        result["log_dir"] = log.log_dir
        # Offsets below the new log start offset are gone: what an operator calls records removed.
        new_start = result["log_start_offset"]
        if dry_run and result["segments_deleted"]:        # retention deletes a prefix of the segments
            kept = log.segments[result["segments_deleted"]:]
            new_start = max(new_start, kept[0].base_offset if kept else log.log_end_offset)
        result["records_removed"] = new_start - result["log_start_offset_before"]
        future = mgr.future_logs.get((log.topic, log.partition))
        if future is not None and future.lock.is_open and not mgr.failures.is_offline(future.log_dir):
            # The copy being made for a move is kept like its partition (Kafka retains future logs too).
            copy = retention_mod.run(future, now, dry_run=dry_run)
            result["future"] = {"folder": future.folder, "log_dir": future.log_dir,
                                "segments_deleted": copy["segments_deleted"],
                                "bytes_reclaimed": copy["bytes_reclaimed"]}
            if copy["segments_deleted"] and not dry_run:
                result.setdefault("checkpoint_dirs", []).append(future.log_dir)
        return result

    def after(mgr, done):
        dirs = sorted({r["log_dir"] for r in done if r["segments_deleted"]}
                      | {d for r in done for d in r.pop("checkpoint_dirs", [])})
        if not dry_run and dirs:
            mgr.checkpoint(dirs)
        return []
    return _run_batch(config, partitions, now_ms, act, dry_run=dry_run, after=after)


def expire_producers_batch(config: StorageConfig, partitions, now_ms: int | None = None, *,
                           dry_run: bool = False) -> BatchResult:
    """Producer-id expiry (see :func:`expire_producers`) of each partition of a batch, each isolated."""
    expiration_ms = config.producer_id_expiration_ms

    def act(mgr, log, now):
        expired = log.expire_producers(now, expiration_ms, dry_run=dry_run)
        result = {"topic": log.topic, "partition": log.partition, "expired_producer_ids": expired,
                  "producers": len(log.producer_state.producers),
                  "open_transactions": len(log.producer_state.ongoing_txns),
                  "producer_id_expiration_ms": expiration_ms, "dry_run": dry_run, "nothing_to_do": not expired}
        future = mgr.future_logs.get((log.topic, log.partition))
        if future is not None and future.lock.is_open and not mgr.failures.is_offline(future.log_dir):
            # The copy being made for a move forgets the same producers, or they would come back with it.
            result["future"] = {"folder": future.folder, "log_dir": future.log_dir,
                                "expired_producer_ids": future.expire_producers(now, expiration_ms,
                                                                                dry_run=dry_run)}
        return result
    return _run_batch(config, partitions, now_ms, act, dry_run=dry_run)


def flush_batch(config: StorageConfig, partitions, now_ms: int | None = None, *, due_only: bool = True,
                dry_run: bool = False) -> BatchResult:
    """Time-based flush (``flush.ms``) of each partition of a batch; ``dry_run`` only says which are due."""
    def act(mgr, log, now):
        log.refresh()
        due = log.flush_due(now)
        before = log.recovery_point
        after = log.flush() if (due or not due_only) and not dry_run else before
        return {"topic": log.topic, "partition": log.partition, "due": due, "recovery_point_before": before,
                "recovery_point": after, "flushed": after > before, "log_end_offset": log.log_end_offset,
                "dry_run": dry_run}
    return _run_batch(config, partitions, now_ms, act, dry_run=dry_run)


def checkpoint_batch(config: StorageConfig, partitions, now_ms: int | None = None, *, flush: bool = True,
                     dry_run: bool = False) -> BatchResult:
    """Kafka's checkpoint tasks for a batch: flush each log to its end, then write the recovery-point and
    log-start-offset checkpoint files of the batch's log dirs (entries of partitions outside the batch are
    kept as they are in the files)."""
    def act(mgr, log, now):
        before = log.recovery_point
        after = log.flush() if flush and not dry_run else before
        return {"topic": log.topic, "partition": log.partition, "recovery_point_before": before,
                "recovery_point": after, "flushed": after > before, "log_dir": log.log_dir,
                "log_end_offset": log.log_end_offset, "dry_run": dry_run}

    def after(mgr, done):
        dirs = sorted({r["log_dir"] for r in done})
        if not dry_run and dirs:
            mgr.checkpoint(dirs)
        return []
    return _run_batch(config, partitions, now_ms, act, dry_run=dry_run, after=after)
