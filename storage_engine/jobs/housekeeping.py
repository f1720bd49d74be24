"""Maintenance operations as whole jobs: open the logs, act as of ``now_ms``, close, return a JSON-able summary.

These are what the CLI's maintenance commands and the Airflow operators call; each is safe to run while
other processes use the same log dirs (every change takes the partition lock) and each is idempotent for a
given ``now_ms``: running it twice changes nothing the second time and says so. ``now_ms`` is also the time
the logs are opened as of (so a backfilled run never purges ``.deleted`` files stamped after its interval).

This module holds the read-only listing of log dirs and partitions and the jobs over the whole store:
checkpoint, flush, retention, producer-id expiry and purge. Compaction's jobs are in
:mod:`storage_engine.jobs.compaction`; the jobs over one batch of partitions, each partition
isolated (the Airflow DAGs' tasks), in :mod:`storage_engine.jobs.batches`.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator
from typing import TypedDict, TypeVar

from storage_engine.jobs.summaries import (CheckpointResult, ExpireProducersResult, FlushedPartition, FlushResult,
                                           PartitionFailure, ProducerExpiry, partition_failure)
from storage_engine.maintenance import retention as retention_mod
from storage_engine.maintenance.retention import PurgeResult, RemoteUpperFor, RetentionResult
from storage_engine.clock import Clock, clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError, PartitionUnreadableError
from storage_engine.log import health as log_health
from storage_engine.log.health import MissingPartition
from storage_engine.log.log import Log
from storage_engine.jobs.partition import open_isolating, open_partition
from storage_engine.log.manager import LogManager


def check_topics(mgr: LogManager, topics: Collection[str] | None, failures: Collection[PartitionFailure] = ()) -> None:
    """:class:`PartitionNotFoundError` for a topic of ``topics`` the store does not have. A topic whose partitions
    are all unreadable (``failures``) exists: a job over it fails naming them, it does not call the topic unknown."""
    if not topics:
        return
    known = {t for t, _ in mgr.logs} | {f["topic"] for f in failures}
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


def missing_partitions(config: StorageConfig, *, health: LogDirHealth | None = None) -> list[MissingPartition]:
    """The partitions of the online log dirs whose folder vanished or became a file while the dir's checkpoint
    files (or the engine's partition lock) still list them (:mod:`storage_engine.log.health`), read-only."""
    health = health or log_dir_health(config)
    out: list[MissingPartition] = []
    for d in health["online"]:
        try:
            out += log_health.missing_partitions(d)
        except OSError:
            continue
    return out


def _topics_on_other_hosts(config: StorageConfig) -> set[str] | None:
    """The topics the store's other storage hosts hold (:meth:`StorageConfig.for_host`), or None when one of
    their log dirs cannot be read from here (on its own machine): any topic may then live there."""
    from storage_engine import layout
    out: set[str] = set()
    for d in config.other_host_dirs:
        if not os.path.isdir(d):
            return None
        try:
            out |= {t for _name, (t, _p) in layout.partition_dirs(d)}
        except OSError:
            return None
    return out


def list_partitions(config: StorageConfig, topics: Collection[str] | None = None, *,
                    health: LogDirHealth | None = None, include_missing: bool = False) -> list[dict]:
    """The partitions of the log dirs, read-only: folder names only, no log is opened, nothing changes
    (so listing as part of a backfilled run cannot purge or recover anything). Offline dirs are skipped
    (:func:`log_dir_health`). ``include_missing``: also the partitions whose folder vanished or became a file
    (:func:`missing_partitions`; their entry says why under ``"missing"``), so that maintaining them fails."""
    from storage_engine import layout
    health = health or log_dir_health(config)
    found = [(t, p, d) for d in health["online"] for _name, (t, p) in layout.partition_dirs(d)]
    why: dict[tuple[str, int], str] = {}
    if include_missing:
        present = {(t, p) for t, p, _d in found}
        for m in missing_partitions(config, health=health):
            if (m["topic"], m["partition"]) not in present and (m["topic"], m["partition"]) not in why:
                why[(m["topic"], m["partition"])] = m["reason"]
                found.append((m["topic"], m["partition"], m["log_dir"]))
    if topics:
        known = {t for t, _p, _d in found}
        missing = sorted(set(topics) - known)
        elsewhere = _topics_on_other_hosts(config) if missing and config.other_host_dirs else set()
        if missing and elsewhere is not None and set(missing) - elsewhere:
            raise PartitionNotFoundError(f"unknown topic(s) {sorted(set(missing) - elsewhere)}; existing topics: "
                                         f"{sorted(known | elsewhere)}")
        found = [x for x in found if x[0] in topics]
    return [{"topic": t, "partition": p, "log_dir": d, "cleanup_policy": ",".join(config.log_config(t).cleanup_policy),
             **({"missing": why[(t, p)]} if (t, p) in why else {})}
            for t, p, d in sorted(found)]


def unreadable(mgr: LogManager, topics: Collection[str] | None) -> list[PartitionFailure]:
    """The partitions a whole-store job cannot maintain, as its failures: those whose folder vanished or became a
    file, and the loaded ones with a segment file that is no file (:mod:`storage_engine.log.health`)."""
    failures: list[PartitionFailure] = []
    for d in mgr.online_dirs():
        try:
            missing = log_health.missing_partitions(d)
        except OSError:
            continue
        failures += [partition_failure((m["topic"], m["partition"]), PartitionUnreadableError(m["reason"]))
                     for m in missing if (not topics or m["topic"] in topics)
                     and (m["topic"], m["partition"]) not in mgr.logs]
    for tp in mgr.partitions(topics):
        try:
            log_health.check_partition(mgr.logs[tp])
        except PartitionUnreadableError as exc:
            failures.append(partition_failure(tp, exc))
    return sorted(failures, key=lambda f: (f["topic"], f["partition"]))


@contextlib.contextmanager
def open_store(config: StorageConfig, clock: Clock, topics: Collection[str] | None = None, *,
               read_only: bool = False) -> Iterator[tuple[LogManager, list[PartitionFailure]]]:
    """The store opened for a whole-store job, with the partitions of ``topics`` it cannot maintain: those of
    :func:`unreadable`, and those that fail to load. A partition that fails to load does not stop the job for the
    others: it is found by halving (:func:`open_isolating`) and the store is opened without it. An error that
    no single partition explains (a lock, a config) is raised as it was. ``read_only`` (a dry run): opened
    without changing anything (:mod:`storage_engine.log.read_only`)."""
    load_failures: list[PartitionFailure] = []
    try:
        mgr = LogManager.open(config, clock=clock, read_only=read_only)
    except Exception as first:
        tps = [(p["topic"], p["partition"]) for p in list_partitions(config)]
        for probe, _group in open_isolating(config, clock, tps, load_failures, read_only=read_only):
            probe.close()
        if not load_failures:
            raise
        bad = {(f["topic"], f["partition"]) for f in load_failures}
        try:
            mgr = LogManager.open(config, clock=clock, partitions=[tp for tp in tps if tp not in bad],
                                  read_only=read_only)
        except Exception:   # noqa: BLE001 - the first failure is the one reported
            raise first from None
    with mgr:
        failures = unreadable(mgr, topics) + [f for f in load_failures if not topics or f["topic"] in topics]
        yield mgr, sorted(failures, key=lambda f: (f["topic"], f["partition"]))


def _skip(failures: list[PartitionFailure]) -> set[tuple[str, int]]:
    return {(f["topic"], f["partition"]) for f in failures}


def checkpoint(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
               flush: bool = True) -> CheckpointResult:
    """Kafka's checkpoint tasks: flush each log to its end, then write both checkpoint files of every dir."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with open_store(config, clock, topics) as (mgr, failures):
        check_topics(mgr, topics, failures)
        skip = _skip(failures)
        flushed = [f for f in mgr.flush_all(topics) if (f["topic"], f["partition"]) not in skip] if flush else []
        written = mgr.checkpoint()
        offline = mgr.offline_dirs()
    return {"now_ms": now, "flushed": flushed, "checkpoints": written,
            "partitions_flushed": sum(1 for f in flushed if f["recovery_point"] > f["recovery_point_before"]),
            "offline_dirs": offline, "failures": failures}


def flush(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
          due_only: bool = True) -> FlushResult:
    """Time-based flush (``flush.ms``): fsync the logs whose last flush is at least flush.ms old."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with open_store(config, clock, topics) as (mgr, failures):
        check_topics(mgr, topics, failures)
        out: list[FlushedPartition] = []
        skipped = 0
        for tp in mgr.partitions(topics):
            if tp in _skip(failures):
                continue
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
            "offline_dirs": offline, "failures": failures}


def remote_upper(log: Log, remote_upper_for: RemoteUpperFor | None) -> int | None:
    """What retention is told of ``log``'s remote copy: for a tiered topic, ``remote_upper_for``'s answer (none
    known without it: then size and time delete nothing, :mod:`storage_engine.maintenance.retention`)."""
    if not retention_mod.is_tiered(log.config) or remote_upper_for is None:
        return None
    return remote_upper_for(log.topic, log.partition)


def remote_upper_from_view(mgr: LogManager) -> RemoteUpperFor:
    """Kafka's highest offset in remote storage of a partition ``mgr`` holds: the last offset of its segments with a
    finished copy in ``__remote_log_metadata`` (the remote view, read through ``mgr`` on the first question, so a job
    over topics that are not tiered never reads it), for the partition's own topic id (a topic deleted and created
    again does not inherit the old one's copies). -1 when none is known: a partition without a topic id has no
    remote copy (the tiering job gives one to every partition it copies)."""
    from storage_engine.log.topic_id import read_topic_id
    from storage_engine.tiered.remote_log import RemoteLogView
    views: list[RemoteLogView] = []

    def upper(topic: str, partition: int) -> int:
        log = mgr.logs.get((topic, partition))
        if log is not None:
            topic_id = read_topic_id(log.dir)
        else:   # a manager that did not load it (a read-only look at the metadata topic alone)
            from storage_engine import layout
            name = layout.partition_dir_name(topic, partition)
            topic_id = next((tid for d in mgr.online_dirs()
                             if (tid := read_topic_id(os.path.join(d, name))) is not None), None)
        if topic_id is None:
            return -1
        if not views:
            views.append(RemoteLogView.load(mgr))
        return views[0].highest_offset(topic, partition, topic_id=topic_id)
    return upper


def remote_upper_of(config: StorageConfig, mgr: LogManager,
                    remote_upper_for: RemoteUpperFor | None) -> RemoteUpperFor | None:
    """The retention jobs' source of remote upper bounds: the caller's, else the remote view when the store has
    tiered storage on (``remote.log.storage.system.enable``), else none."""
    if remote_upper_for is not None or not config.remote_storage_system_enabled:
        return remote_upper_for
    return remote_upper_from_view(mgr)


def retention(config: StorageConfig, topic: str, partition: int, now_ms: int | None = None, *,
              dry_run: bool = False, remote_upper_for: RemoteUpperFor | None = None) -> RetentionResult:
    """Retention for one partition; advances and checkpoints the log start offset. ``remote_upper_for(topic,
    partition)``: for a tiered topic, the highest offset with a finished remote copy (default: the remote view's,
    :func:`remote_upper_of`)."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with open_partition(config, clock, topic, partition, read_only=dry_run) as (mgr, log):
        log_health.check_partition(log)
        uppers = remote_upper_of(config, mgr, remote_upper_for)
        result = retention_mod.run(log, now, dry_run=dry_run, remote_upper=remote_upper(log, uppers))
        if not dry_run and result["segments_deleted"]:
            mgr.checkpoint([log.log_dir])
    return result


def retention_all(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
                  dry_run: bool = False, failures: list[PartitionFailure] | None = None,
                  remote_upper_for: RemoteUpperFor | None = None) -> list[RetentionResult]:
    """Retention for every partition, and for the copies being made of partitions moving between log dirs
    (Kafka applies retention to future logs too; their results say ``"future": true``). The partitions that
    cannot be read (:func:`unreadable`) are left alone and added to ``failures``. ``remote_upper_for``: see
    :func:`retention`."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with open_store(config, clock, topics, read_only=dry_run) as (mgr, bad):
        uppers = remote_upper_of(config, mgr, remote_upper_for)

        def run(log: Log) -> RetentionResult:
            return retention_mod.run(log, now, dry_run=dry_run, remote_upper=remote_upper(log, uppers))
        check_topics(mgr, topics, bad)
        if failures is not None:
            failures += bad
        results = [run(mgr.logs[tp]) for tp in mgr.partitions(topics) if tp not in _skip(bad)]
        results += [_future_result(run(mgr.future_logs[tp]), mgr.future_logs[tp])
                    for tp in future_partitions(mgr, topics)]
        if not dry_run and any(r["segments_deleted"] for r in results):
            mgr.checkpoint()
    return results


def expire_producers(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
                     dry_run: bool = False) -> ExpireProducersResult:
    """Kafka's producer-id expiration check (every ``producer.id.expiration.check.interval.ms``): forget, in every
    partition, the producers with no open transaction whose last write is ``producer.id.expiration.ms`` old as of
    ``now_ms``. Cheap per partition, so one job covers all of them."""
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    expiration_ms = config.producer_id_expiration_ms
    with open_store(config, clock, topics, read_only=dry_run) as (mgr, failures):
        check_topics(mgr, topics, failures)
        out: list[ProducerExpiry] = []
        for tp in mgr.partitions(topics):
            if tp in _skip(failures):
                continue
            log = mgr.logs[tp]
            expired = log.expire_producers(now, expiration_ms, dry_run=dry_run)
            out.append({"topic": tp[0], "partition": tp[1], "expired_producer_ids": expired,
                        "producers": len(log.producer_state.producers),
                        "open_transactions": len(log.producer_state.ongoing_txns)})
        # A copy being made for a move forgets the same producers, or they would come back when it takes over.
        for tp in future_partitions(mgr, topics):
            log = mgr.future_logs[tp]
            expired = log.expire_producers(now, expiration_ms, dry_run=dry_run)
            entry: ProducerExpiry = {"topic": tp[0], "partition": tp[1], "expired_producer_ids": expired,
                                     "producers": len(log.producer_state.producers),
                                     "open_transactions": len(log.producer_state.ongoing_txns)}
            out.append(_future_result(entry, log))
        offline = mgr.offline_dirs()
    total = sum(len(p["expired_producer_ids"]) for p in out if not p.get("future"))
    return {"now_ms": now, "dry_run": dry_run, "producer_id_expiration_ms": expiration_ms, "partitions": out,
            "producers_expired": total, "nothing_to_do": total == 0, "offline_dirs": offline, "failures": failures}


def future_partitions(mgr: LogManager, topics: Collection[str] | None) -> list[tuple[str, int]]:
    offline = mgr.offline_dirs()
    return sorted(tp for tp, log in mgr.future_logs.items()
                  if log.log_dir not in offline and (not topics or tp[0] in topics) and log.lock.is_open)


_Summary = TypeVar("_Summary", RetentionResult, ProducerExpiry)


def _future_result(result: _Summary, log: Log) -> _Summary:
    result["future"] = True
    result["folder"] = log.folder
    return result


def purge(config: StorageConfig, now_ms: int | None = None, *, dry_run: bool = False) -> PurgeResult:
    """Remove ``.deleted`` files and ``-delete`` folders older than their topic's ``file.delete.delay.ms``."""
    from storage_engine.jobs.lifecycle import purge_delete_dirs
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
