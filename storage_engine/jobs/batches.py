"""Maintenance jobs over one batch of partitions (the Airflow DAGs: one task per batch, each partition isolated).

:func:`plan_batches` cuts the store's partitions into batches; :func:`retention_batch`,
:func:`expire_producers_batch`, :func:`flush_batch` and :func:`checkpoint_batch` are jobs of
:mod:`storage_engine.jobs.housekeeping` for one batch, each returning a :class:`BatchResult`. Under them the
isolation (:func:`open_isolating`, :func:`run_batch`); each failure says whether a retry may fix it
(:func:`storage_engine.errors.is_retriable`).

A batch opens only its own partitions (``LogManager.open(..., partitions=...)``). If one of them cannot be
loaded, the batch is split in halves until the damaged partitions stand alone: they are reported as
failures, the others are still maintained (:func:`storage_engine.jobs.partition.open_isolating`). Errors
while acting on one partition are recorded the same way.
Nothing here raises for a partition's failure: the caller decides (the Airflow task fails at the end,
naming every failed partition).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TypedDict

from storage_engine import layout
from storage_engine.maintenance import retention as retention_mod
from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import LogDirOfflineError, PartitionNotFoundError
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.jobs.housekeeping import list_partitions, remote_upper, remote_upper_of
from storage_engine.maintenance.retention import RemoteUpperFor
from storage_engine.jobs.partition import open_isolating
from storage_engine.jobs.summaries import PartitionFailure, partition_failure
from storage_engine.log import health


TopicPartition = tuple[str, int]
# The partitions a job is given: ``[topic, partition]`` pairs or ``{"topic", "partition"}`` dicts (a Batch's
# ``partitions``, as Airflow hands them over), checked by :func:`as_topic_partitions`.
BatchPartitions = Iterable[Sequence[object] | Mapping[str, object]]


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


def as_topic_partitions(partitions: BatchPartitions) -> list[TopicPartition]:
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


def run_batch(config: StorageConfig, partitions: BatchPartitions, now_ms: int | None,
               act: Callable[[LogManager, Log, int], dict], *, dry_run: bool = False,
               after: Callable[[LogManager, list[dict]], list[str]] | None = None) -> BatchResult:
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
    for mgr, group in open_isolating(config, clock, tps, failures, read_only=dry_run) if tps else []:
        with mgr:
            done = []
            for tp in group:
                try:
                    # get_log: a partition another process moved since the listing is found where it is now
                    log = mgr.get_log(*tp)
                except LogDirOfflineError as exc:
                    skipped.append({"topic": tp[0], "partition": tp[1], "reason": str(exc)})
                    continue
                if log is None:     # never there, or its folder vanished or became a file (health.py)
                    failures.append(partition_failure(tp, health.why_missing(mgr.online_dirs(), tp) or
                                                      PartitionNotFoundError(f"partition {tp[0]}-{tp[1]} does not "
                                                                             f"exist in {list(config.log_dirs)}")))
                    continue
                started = time.monotonic()
                try:
                    health.check_partition(log)     # a segment file that is no file: failed, not maintained
                    result = act(mgr, log, now)
                except Exception as exc:   # noqa: BLE001 - the partition's failure; the batch goes on
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
                except Exception as exc:   # noqa: BLE001 - reported among the run's errors
                    errors.append(f"{type(exc).__name__}: {exc}")
            offline.update(mgr.offline_dirs())
    order = {tp: i for i, tp in enumerate(tps)}
    failures.sort(key=lambda f: order.get((f["topic"], f["partition"]), len(order)))
    return {"now_ms": now, "dry_run": dry_run, "partitions": len(tps),
            "results": [results_by_tp[tp] for tp in tps if tp in results_by_tp], "failures": failures,
            "errors": errors, "duration_s": round(time.monotonic() - t0, 3), "skipped": skipped,
            "offline_dirs": offline}


def plan_batches(config: StorageConfig, *, topics: Collection[str] | None = None,
                 batch_size: int = 500) -> list[Batch]:
    """The partitions of the log dirs (read-only listing, folder names only) cut into batches: per log dir,
    in name order, at most ``batch_size`` each. Unknown topics raise :class:`PartitionNotFoundError`."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    listed = list_partitions(config, topics=topics, include_missing=True)
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


def retention_batch(config: StorageConfig, partitions: BatchPartitions, now_ms: int | None = None, *,
                    dry_run: bool = False, remote_upper_for: RemoteUpperFor | None = None) -> BatchResult:
    """Retention of each partition of a batch (see :func:`retention`); the log start offsets of the dirs
    where segments went are checkpointed once at the end. ``remote_upper_for(topic, partition)``: for a tiered
    topic, the highest offset with a finished remote copy (default: the remote view's,
    :func:`storage_engine.jobs.housekeeping.remote_upper_of`; none known, a tiered topic's segments go by the log
    start offset only)."""
    source: list[tuple[LogManager, RemoteUpperFor | None]] = []

    def uppers(mgr: LogManager) -> RemoteUpperFor | None:
        if not source or source[0][0] is not mgr:   # one per manager the batch opens (a split batch opens several)
            source[:] = [(mgr, remote_upper_of(config, mgr, remote_upper_for))]
        return source[0][1]

    def act(mgr: LogManager, log: Log, now: int) -> dict:
        result: dict = dict(retention_mod.run(log, now, dry_run=dry_run,
                                              remote_upper=remote_upper(log, uppers(mgr))))
        result["size_bytes_after"] = log.size_in_bytes() - (result["bytes_reclaimed"] if dry_run else 0)
        result["segments_after"] = len(log.segments) - (result["segments_deleted"] if dry_run else 0)
        result["log_dir"] = log.log_dir
        # Offsets below the new log start offset are gone: what an operator calls records removed (a tiered
        # topic's local deletions remove none: their records are in remote storage).
        new_start = result["log_start_offset"]
        if dry_run and result["segments_deleted"] and not result.get("tiered"):   # a prefix of the segments
            kept = log.segments[result["segments_deleted"]:]
            new_start = max(new_start, kept[0].base_offset if kept else log.log_end_offset)
        result["records_removed"] = new_start - result["log_start_offset_before"]
        future = mgr.future_logs.get((log.topic, log.partition))
        if future is not None and future.lock.is_open and not mgr.failures.is_offline(future.log_dir):
            # The copy being made for a move is kept like its partition (Kafka retains future logs too).
            copy = retention_mod.run(future, now, dry_run=dry_run, remote_upper=remote_upper(future, uppers(mgr)))
            result["future"] = {"folder": future.folder, "log_dir": future.log_dir,
                                "segments_deleted": copy["segments_deleted"],
                                "bytes_reclaimed": copy["bytes_reclaimed"]}
            if copy["segments_deleted"] and not dry_run:
                result.setdefault("checkpoint_dirs", []).append(future.log_dir)
        return result

    def after(mgr: LogManager, done: list[dict]) -> list[str]:
        dirs = sorted({r["log_dir"] for r in done if r["segments_deleted"]}
                      | {d for r in done for d in r.pop("checkpoint_dirs", [])})
        if not dry_run and dirs:
            mgr.checkpoint(dirs)
        return []
    return run_batch(config, partitions, now_ms, act, dry_run=dry_run, after=after)


def expire_producers_batch(config: StorageConfig, partitions: BatchPartitions, now_ms: int | None = None, *,
                           dry_run: bool = False) -> BatchResult:
    """Producer-id expiry (see :func:`expire_producers`) of each partition of a batch, each isolated."""
    expiration_ms = config.producer_id_expiration_ms

    def act(mgr: LogManager, log: Log, now: int) -> dict:
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
    return run_batch(config, partitions, now_ms, act, dry_run=dry_run)


def flush_batch(config: StorageConfig, partitions: BatchPartitions, now_ms: int | None = None, *,
                due_only: bool = True, dry_run: bool = False) -> BatchResult:
    """Time-based flush (``flush.ms``) of each partition of a batch; ``dry_run`` only says which are due."""
    def act(mgr: LogManager, log: Log, now: int) -> dict:
        log.refresh()
        due = log.flush_due(now)
        before = log.recovery_point
        after = log.flush() if (due or not due_only) and not dry_run else before
        return {"topic": log.topic, "partition": log.partition, "due": due, "recovery_point_before": before,
                "recovery_point": after, "flushed": after > before, "log_end_offset": log.log_end_offset,
                "dry_run": dry_run}
    return run_batch(config, partitions, now_ms, act, dry_run=dry_run)


def checkpoint_batch(config: StorageConfig, partitions: BatchPartitions, now_ms: int | None = None, *,
                     flush: bool = True, dry_run: bool = False) -> BatchResult:
    """Kafka's checkpoint tasks for a batch: flush each log to its end, then write the recovery-point and
    log-start-offset checkpoint files of the batch's log dirs (entries of partitions outside the batch are
    kept as they are in the files)."""
    def act(mgr: LogManager, log: Log, now: int) -> dict:
        before = log.recovery_point
        after = log.flush() if flush and not dry_run else before
        return {"topic": log.topic, "partition": log.partition, "recovery_point_before": before,
                "recovery_point": after, "flushed": after > before, "log_dir": log.log_dir,
                "log_end_offset": log.log_end_offset, "dry_run": dry_run}

    def after(mgr: LogManager, done: list[dict]) -> list[str]:
        dirs = sorted({r["log_dir"] for r in done})
        if not dry_run and dirs:
            mgr.checkpoint(dirs)
        return []
    return run_batch(config, partitions, now_ms, act, dry_run=dry_run, after=after)
