"""Compaction as whole jobs (what a job guarantees: :mod:`storage_engine.jobs.housekeeping`).

:func:`compact` selects the dirtiest compacted logs and cleans them in one call (the CLI's ``compact``);
:func:`compaction_plan` and :func:`compact_partition` are the same work as separate steps (the Airflow DAG:
select -> Spark key map -> clean per partition); :func:`clear_uncleanable` forgets that cleaning a partition
failed (:func:`mark_uncleanable` records it). The selection is :mod:`~storage_engine.maintenance.cleaner_manager`'s,
the cleaning :mod:`~storage_engine.maintenance.cleaner`'s.

Damage: the cleaner checks every batch it reads (both phases). A damaged batch fails that partition's round
with a ``CorruptRecordError`` naming the partition, the file, the byte position and the offsets; nothing of the
damaged group is swapped or deleted, the cleaner checkpoint does not move, and the partition is marked
uncleanable with that reason (skipped until an operator clears it: ``compact --clear-uncleanable``).

Failing loudly: a partition marked uncleanable, and one that cannot be read (its folder became a file, a segment
file that is no file, a load that fails), is a failure of every job that selects over it (``failures`` of
:func:`compact`, ``blocked`` of :func:`compaction_plan`), run after run, until an operator acts; the other
partitions are still cleaned.
"""
from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError, PartitionNotFoundError
from storage_engine.jobs.housekeeping import check_topics, future_partitions, list_partitions, log_dir_health, open_store
from storage_engine.jobs.partition import open_isolating, open_partition
from storage_engine.jobs.summaries import PartitionFailure, partition_failure
from storage_engine.log import health as log_health

if TYPE_CHECKING:
    from storage_engine.maintenance.cleaner import OffsetMap


def compact(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
            partition: int | None = None, dry_run: bool = False, upper_time_bound_ms: int | None = None,
            max_partitions: int | None = None, offset_maps: Mapping[tuple[str, int], OffsetMap] | None = None) -> dict:
    """Select the dirtiest compacted logs and clean them (one round each).

    ``upper_time_bound_ms`` (a DAG run's data interval end) stops cleaning at the first segment holding a
    record at or after it. ``offset_maps`` maps (topic, partition) -> a prebuilt key map (Spark).

    ``failures`` lists the compacted partitions the call could not clean: those whose cleaning failed now (and
    were marked uncleanable), those marked uncleanable before (every call, until the mark is cleared), and those
    that cannot be read; the others are cleaned all the same."""
    from storage_engine.maintenance import cleaner_manager
    from storage_engine.maintenance.cleaner import Cleaner
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with open_store(config, clock, topics, read_only=dry_run) as (mgr, failures):
        check_topics(mgr, topics, failures)
        failures = [f for f in failures if (partition is None or f["partition"] == partition)
                    and config.log_config(f["topic"]).compact]
        logs = [mgr.logs[tp] for tp in mgr.partitions(topics) if partition is None or tp[1] == partition]
        if partition is not None and not logs and not failures:
            raise PartitionNotFoundError(f"partition {', '.join(topics or [])}-{partition} does not exist")
        # Copies being made for moves are compacted like their partitions (Kafka cleans future logs too).
        logs += [mgr.future_logs[tp] for tp in future_partitions(mgr, topics)
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
            except Exception as exc:  # noqa: BLE001 - Kafka marks a partition uncleanable on any unexpected error
                if not dry_run:
                    cleaner_manager.mark_uncleanable(log.log_dir, log.name, f"{type(exc).__name__}: {exc}", now)
                entry["error"] = f"{type(exc).__name__}: {exc}"
                entry["marked_uncleanable"] = not dry_run
            finally:
                claim.release()
            results.append(entry)
        offline = mgr.offline_dirs()
    failures += [uncleanable_failure(s) for s in selection["skipped"] if s["reason"].startswith(UNCLEANABLE)]
    failures += [_failure(r["topic"], r["partition"], r["error"],
                          uncleanable_note(r["topic"], r["partition"]) if r.get("marked_uncleanable") else "")
                 for r in results if "error" in r]
    return {"now_ms": now, "dry_run": dry_run, "upper_time_bound_ms": upper_time_bound_ms, "offline_dirs": offline,
            "selected": [r["selection"] for r in results], "results": results,
            "skipped": selection["skipped"], "not_dirty": [c.as_dict() for c in selection["not_dirty"]],
            "nothing_to_do": not eligible and not failures,
            "failed": [f"{r['topic']}-{r['partition']}" for r in results if "error" in r],
            "failures": sorted(failures, key=lambda f: (f["topic"], f["partition"]))}


UNCLEANABLE = "uncleanable: "      # how the selection's skipped entries name a partition marked uncleanable


def _failure(topic: str, partition: int, text: str, note: str = "") -> PartitionFailure:
    """A failure already put in words, ``"<ErrorType>: <message>"``, named by the type it names (permanent: a
    partition that failed cleaning is marked uncleanable, and no retry cleans it before an operator acts)."""
    error_type, sep, message = text.partition(": ")
    if not sep or not error_type.isidentifier():
        error_type, message = "CleaningFailed", text
    return {"topic": topic, "partition": partition, "error_type": error_type, "error": message + note,
            "permanent": True}


def uncleanable_failure(skipped: Mapping[str, object]) -> PartitionFailure:
    """A partition the selection skipped because it is marked uncleanable, as a failure of the job: it fails every
    run until an operator clears the mark. It carries the type and message of the error that marked it (so it is
    the same root cause as that first failure, alerted once) and names the command that clears the mark."""
    topic, partition = str(skipped["topic"]), int(str(skipped["partition"]))
    return _failure(topic, partition, str(skipped["reason"])[len(UNCLEANABLE):], uncleanable_note(topic, partition))


def uncleanable_note(topic: str, partition: int) -> str:
    return (f" (partition {topic}-{partition} is marked uncleanable: compaction fails on it until an operator "
            f"repairs it and clears the mark with compact --clear-uncleanable --topic {topic} --partition {partition})")


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


def mark_uncleanable(config: StorageConfig, topic: str, partition: int, reason: str,
                     now_ms: int | None = None) -> dict:
    """Record that cleaning a partition failed (what :func:`compact` and :func:`compact_partition` do on any
    error; the Airflow task of a Spark key map does it with the damage the job reports): the selection skips it,
    the Storage view shows ``reason``, and :func:`clear_uncleanable` (``compact --clear-uncleanable``) forgets it."""
    from storage_engine.maintenance import cleaner_manager
    log_dir, name = _partition_log_dir(config, topic, partition)
    now = clock_at(now_ms).milliseconds()
    cleaner_manager.mark_uncleanable(log_dir, name, reason, now)
    return {"log_dir": log_dir, "topic": topic, "partition": partition, "reason": reason, "since_ms": now}


def _partition_log_dir(config: StorageConfig, topic: str, partition: int) -> tuple[str, str]:
    """(log dir, folder name) of an existing partition."""
    from storage_engine import layout
    name = layout.partition_dir_name(topic, partition)
    for d in config.log_dirs:
        if os.path.isdir(os.path.join(d, name)):
            return d, name
    raise PartitionNotFoundError(f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


# -- compaction as separate steps (the Airflow DAG: select -> Spark key map -> clean per partition) ----------

MAP_STRATEGIES = ("spark", "local", "auto")
PLAN_BATCH_SIZE = 500   # compacted partitions open at once while ranking (the batches of the maintenance DAGs)


def compaction_plan(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
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
    tps = [(p["topic"], p["partition"]) for p in list_partitions(config, topics=topics, health=health,
                                                                 include_missing=True)
           if config.log_config(p["topic"]).compact]
    unreadable: list[PartitionFailure] = []
    capacity = Cleaner(config.cleaner).new_offset_map().max_entries
    ranked: list[tuple[float, int, dict]] = []
    skipped: list[dict] = []
    not_dirty: list[dict] = []
    for start in range(0, len(tps), PLAN_BATCH_SIZE):
        groups = open_isolating(config, clock, tps[start:start + PLAN_BATCH_SIZE], unreadable)
        try:
            logs = [mgr.logs[tp] for mgr, group in groups for tp in group if tp in mgr.logs]
            for mgr, group in groups:     # a folder that vanished or became a file loads as nothing
                unreadable += [partition_failure(tp, log_health.why_missing(mgr.online_dirs(), tp) or
                                                 PartitionNotFoundError(f"partition {tp[0]}-{tp[1]} vanished"))
                               for tp in group if tp not in mgr.logs]
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
    # Uncleanable and unreadable partitions are skipped and are failures of the run (each fails its own clean task
    # in the DAG, every run, until an operator acts), so that no run over them is green.
    blocked = sorted(unreadable + [uncleanable_failure(s) for s in skipped if s["reason"].startswith(UNCLEANABLE)],
                     key=lambda f: (f["topic"], f["partition"]))
    skipped += [{"topic": f["topic"], "partition": f["partition"],
                 "reason": f"cannot be read: {f['error_type']}: {f['error']}"} for f in unreadable]
    return {"now_ms": now, "upper_time_bound_ms": upper_time_bound_ms, "selected": selected,
            "skipped": skipped, "unreadable": unreadable, "blocked": blocked, "offline_dirs": health["offline"],
            "online_dirs": health["online"], "not_dirty": not_dirty, "nothing_to_do": not selected and not blocked}


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
    with open_partition(config, clock, topic, partition, read_only=dry_run) as (_mgr, log):
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
