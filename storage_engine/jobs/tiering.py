"""Tiering: the ``log_tiering`` DAG's job and the ``tier`` command (Kafka's ``RemoteLogManager`` tasks, run as
maintenance jobs instead of hidden broker threads).

Per partition (:func:`tier_partition`), holding the partition's tiering claim (:mod:`storage_engine.tiered.locks`;
a partition another run is tiering is skipped and reported), never its write lock during an upload:

1. orphans: copies and deletions an earlier run left half done are finished (their objects deleted); the
   partition's objects are listed, and those no live segment names deleted, after such a run, on the run after
   it, or with ``sweep_orphans`` (:mod:`storage_engine.tiered.orphans`);
2. copy: the eligible sealed segments, oldest first (:mod:`storage_engine.tiered.copy`), unless
   ``remote.log.copy.disable``;
3. local retention: the local copies past ``local.retention.*`` whose remote copy is finished
   (:func:`storage_engine.tiered.expire.local_retention`);
4. remote retention: the remote segments past ``retention.*`` (over local + remote) or below the log start offset,
   the log start offset raised past them before their objects are deleted, as Kafka does
   (:func:`storage_engine.tiered.expire.remote_retention`).

A topic whose ``remote.storage.enable`` is off is not tiered; with ``remote.log.delete.on.disable`` its remote
segments are deleted (:func:`storage_engine.tiered.expire.delete_on_disable`). Nothing is done while the broker's
``remote.log.storage.system.enable`` is off.

Each partition reports its figures: segments and bytes copied, local and remote segments and bytes deleted,
orphans cleaned, the remote log (segments, bytes, highest offset) and how far tiering lags (sealed segments and
bytes above the highest remote offset). An object-store failure fails the partition with the
``RemoteStorageError`` subclass that names the fix (the store down, the bucket missing, credentials refused);
since the local retention of step 3 only deletes what has a finished remote copy, nothing local is deleted for
a store that fails. ``now_ms`` (``--now-ms``; the DAG's data interval end) is the time the run acts as of. The log
dirs' checkpoint files are written once per batch (a raised log start offset is durable before that).
"""
from __future__ import annotations

import uuid
from collections.abc import Collection

from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError, PartitionNotFoundError
from storage_engine.jobs.batches import BatchPartitions, BatchResult, run_batch, as_topic_partitions
from storage_engine.jobs.housekeeping import list_partitions
from storage_engine.log import topic_id as topic_ids
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.tiered import copy as copy_mod
from storage_engine.tiered import expire, orphans
from storage_engine.tiered.context import TierContext
from storage_engine.tiered.locks import TieringClaim
from storage_engine.tiered.object_store import ObjectStore
from storage_engine.tiered import remote_log
from storage_engine.tiered.remote_log import RemoteLogView
from storage_engine.tiered.settings import RemoteStorageSettings

METADATA_TOPIC = remote_log.TOPIC
FIGURES = ("copied_segments", "copied_bytes", "local_segments_deleted", "local_bytes_deleted",
           "remote_segments_deleted", "remote_bytes_deleted", "orphan_segments", "orphan_objects", "orphan_uploads")


def _base(log: Log, dry_run: bool) -> dict:
    return {"topic": log.topic, "partition": log.partition, "dry_run": dry_run, "tiered": False,
            **{k: 0 for k in FIGURES}}


def tier_partition(ctx: TierContext, log: Log) -> dict:
    """Tier one partition (module docstring); its figures. Raises ``RemoteStorageError`` for the store's faults."""
    result = _base(log, ctx.dry_run)
    cfg = log.config
    if log.topic == METADATA_TOPIC:
        result["skipped"] = "the remote log metadata topic itself is never tiered"
        return result
    if not ctx.settings.enabled:
        result["skipped"] = "remote.log.storage.system.enable is false"
        return result
    claim = TieringClaim(log.log_dir, log.folder)
    if not claim.try_acquire():
        result["skipped"] = "another process is tiering this partition"
        return result
    try:
        # a topic no longer tiered gets no topic id written: without one it never had remote data
        tid = ctx.topic_id(log) if cfg.remote_storage_enable else topic_ids.read_topic_id(log.dir)
        _refresh(ctx, log, tid)
        if not cfg.remote_storage_enable:
            if cfg.remote_log_delete_on_disable:
                gone = expire.delete_on_disable(ctx, log, tid)
                result.update(remote_segments_deleted=gone["remote_segments_deleted"],
                              remote_bytes_deleted=gone["remote_bytes_deleted"],
                              remote_partition_deleted=gone["partition_deleted"])
            else:
                result["skipped"] = "remote.storage.enable is false for this topic"
            result.update(_remote_figures(ctx, log, tid))
            return result
        result["tiered"] = True
        cleaned = orphans.clean(ctx, log, tid, sweep=ctx.sweep_orphans, claim=claim)
        result.update(orphan_segments=cleaned["orphan_segments"], orphan_objects=cleaned["orphan_objects"],
                      orphan_uploads=cleaned["orphan_uploads"])
        if cleaned["orphans"] or cleaned["orphan_keys"]:
            result["orphans"] = cleaned["orphans"]
            result["orphan_keys"] = cleaned["orphan_keys"]
        copied = _copy(ctx, log, tid, result)
        result["copied"] = copied
        result["copied_segments"] = len(copied)
        result["copied_bytes"] = sum(c["size_bytes"] for c in copied)
        upper = ctx.highest_offset(log, tid)
        if ctx.dry_run:     # what the copies would finish
            upper = max([upper] + [c["end_offset"] for c in copied])
        local = expire.local_retention(ctx, log, upper)
        result.update(local)
        remote = expire.remote_retention(ctx, log, tid)
        result.update(remote)
        result.update(_remote_figures(ctx, log, tid))
        with log.locked():
            result.update(copy_mod.lag(log, upper))
        return result
    finally:
        claim.release()


def _refresh(ctx: TierContext, log: Log, tid: uuid.UUID | None) -> None:
    """Bring the view up to date for this partition, now that its claim is held (an earlier run's records are in):
    only the metadata partition that holds its records, so a run over N partitions reads N, not N x 50."""
    if tid is None:
        ctx.refresh()
    else:
        ctx.view.refresh_partition(ctx.mgr, tid, log.partition, ctx.settings.metadata_partitions)


def _copy(ctx: TierContext, log: Log, tid: uuid.UUID | None, result: dict) -> list[dict]:
    if log.config.remote_log_copy_disable:
        result["copy_skipped"] = "remote.log.copy.disable is true for this topic"
        return []
    highest = ctx.highest_offset(log, tid)
    with log.locked():
        candidates = copy_mod.eligible(log, highest)
    if ctx.dry_run:
        return [c.as_dict() for c in candidates]
    done = []
    for cand in candidates:
        copied = copy_mod.copy_segment(ctx, log, cand)
        if copied is None:
            result.setdefault("abandoned", []).append(cand.as_dict())
            continue
        done.append(copied)
    return done


def _remote_figures(ctx: TierContext, log: Log, tid: uuid.UUID | None) -> dict:
    # (the view is current: every record of this run was published through it, and no other run tiers the partition)
    segs = ctx.segments(log, tid)
    return {"remote_segments": len(segs), "remote_bytes": sum(s.size_bytes for s in segs),
            "highest_remote_offset": max((s.end_offset for s in segs), default=-1),
            "remote_log_start_offset": min((s.start_offset for s in segs), default=None),
            "log_start_offset": log.log_start_offset,
            "local_log_start_offset": log.local_log_start_offset,
            "log_end_offset": log.log_end_offset}


def tier_batch(config: StorageConfig, partitions: BatchPartitions, now_ms: int | None = None, *,
               dry_run: bool = False, sweep_orphans: bool = False) -> BatchResult:
    """Tiering of each partition of a batch, each isolated (a failure is the partition's, and the others go
    on); an object-store fault fails every partition it touches with the same ``RemoteStorageError``.
    ``sweep_orphans``: list every partition's objects, for objects no metadata record announced (one LIST per
    partition; without it only partitions with an unfinished copy or deletion are listed)."""
    settings = RemoteStorageSettings.of(config)
    store = ObjectStore(settings) if settings.enabled else None
    contexts: dict[int, TierContext] = {}
    broker_id = int(config.server.get("node.id", 0) or 0)

    def act(mgr: LogManager, log: Log, now: int) -> dict:
        ctx = contexts.get(id(mgr))
        if ctx is None:
            if store is None:
                return {**_base(log, dry_run), "skipped": "remote.log.storage.system.enable is false"}
            ctx = TierContext(mgr, settings, store, RemoteLogView.load(mgr), now, broker_id=broker_id,
                              dry_run=dry_run, sweep_orphans=sweep_orphans)
            contexts[id(mgr)] = ctx
        return tier_partition(ctx, log)

    def after(mgr: LogManager, done: list[dict]) -> list[str]:
        ctx = contexts.get(id(mgr))
        if ctx is not None and ctx.dirty_dirs and not dry_run:
            mgr.checkpoint(sorted(ctx.dirty_dirs))     # once per batch: a checkpoint lists its whole log dir
        return []

    # A topic neither tiered nor deleting its remote data has nothing to do: its partitions are not even opened,
    # so a run over thousands of partitions costs what its tiered ones cost.
    tps = as_topic_partitions(partitions)
    work = [tp for tp in tps if _has_work(config, tp[0])]
    batch = run_batch(config, work, now_ms, act, dry_run=dry_run, after=after)
    idle = [tp for tp in tps if not _has_work(config, tp[0])]
    if idle:
        by_tp = {(r["topic"], r["partition"]): r for r in batch["results"]}
        for topic, p in idle:
            by_tp[(topic, p)] = {"topic": topic, "partition": p, "dry_run": dry_run, "tiered": False,
                                 **{k: 0 for k in FIGURES}, "skipped": "remote.storage.enable is false for this topic"}
        failed = {(f["topic"], f["partition"]) for f in batch["failures"]}
        batch["results"] = [by_tp[tp] for tp in tps if tp in by_tp and tp not in failed]
        batch["partitions"] = len(tps)
    return batch


def _has_work(config: StorageConfig, topic: str) -> bool:
    if topic == METADATA_TOPIC:
        return False
    cfg = config.log_config(topic)
    return bool(cfg.remote_storage_enable or cfg.remote_log_delete_on_disable)


def tiering_topics(config: StorageConfig, topics: Collection[str]) -> list[str]:
    """The topics among ``topics`` that a run has work for (tiered, or deleting their remote data after remote
    storage was turned off), none while ``remote.log.storage.system.enable`` is off: what the ``log_tiering``
    DAG plans batches for."""
    if not config.remote_storage_system_enabled:
        return []
    return sorted(t for t in set(topics) if _has_work(config, t))


def check_object_store(config: StorageConfig) -> dict[str, str | None]:
    """One request to the configured object store (a listing of one page under the key prefix) before a run
    touches any partition: raises the ``RemoteStorageError`` subclass that names the fix (the store unreachable,
    the bucket missing, the credentials refused). Returns the store checked: ``{"endpoint_url", "bucket"}``."""
    settings = RemoteStorageSettings.of(config)
    store = ObjectStore(settings)
    try:
        next(iter(store.list(settings.key_prefix)), None)
    finally:
        store.close()
    return {"endpoint_url": settings.endpoint_url, "bucket": settings.bucket}


def tier(config: StorageConfig, now_ms: int | None = None, *, topics: Collection[str] | None = None,
         partition: int | None = None, dry_run: bool = False, sweep_orphans: bool = False) -> dict:
    """The ``tier`` command: every partition (of ``topics``; ``partition`` only that one) tiered in one batch, and
    the totals. Unknown topics or partitions raise :class:`PartitionNotFoundError`."""
    if partition is not None and not topics:
        raise InvalidRequestError("--partition needs --topic")
    listed = list_partitions(config, topics=topics, include_missing=True)
    tps = [[p["topic"], p["partition"]] for p in listed
           if p["topic"] != METADATA_TOPIC and (partition is None or p["partition"] == partition)]
    if partition is not None and not tps:
        raise PartitionNotFoundError(f"partition {sorted(topics or [])[0]}-{partition} does not exist in "
                                     f"{list(config.log_dirs)}")
    now = clock_at(now_ms).milliseconds()
    batch = tier_batch(config, tps, now, dry_run=dry_run, sweep_orphans=sweep_orphans)
    results = batch["results"]
    totals = {k: sum(r.get(k, 0) for r in results) for k in FIGURES}
    totals["lag_segments"] = sum(r.get("lag_segments", 0) for r in results)
    totals["lag_bytes"] = sum(r.get("lag_bytes", 0) for r in results)
    return {"dry_run": dry_run, "now_ms": now, "partitions": results, **totals, "failures": batch["failures"],
            "errors": batch["errors"], "skipped": batch["skipped"], "duration_s": batch["duration_s"]}
