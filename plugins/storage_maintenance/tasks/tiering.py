"""Operators of the ``log_tiering`` DAG: tiered storage (Kafka's KIP-405 remote log manager) as batches of partitions.

1. :class:`TierPlanOperator` (``plan_batches``) cuts into batches, as every batched DAG does, the partitions of
   the topics tiering has work for (``remote.storage.enable``, or ``remote.log.delete.on.disable`` after it was
   turned off): a run's cost follows the tiered partitions, not the store's. None (or
   ``remote.log.storage.system.enable`` off): no batch, the run succeeds with nothing to do and the object store
   is not asked. Otherwise one real request to the object store (a listing of one page under the key prefix)
   must succeed first: a store that is down, a missing bucket or refused credentials fail this task with the
   engine's ``RemoteStorageError`` naming the fix, so the run alerts once for the store instead of once per
   partition, and no batch touches a partition.
2. :class:`TierOperator` (``tier``, one mapped task per batch) runs the engine's tiering job
   (:func:`storage_engine.jobs.tiering.tier_batch`) for each partition of its batch, isolated: copy the eligible
   sealed segments (each object checked after upload), local retention (only segments whose remote copy has
   finished), remote retention, and the clean-up of objects an interrupted copy left behind. A partition whose
   object is missing or damaged fails with the offsets; the others go on.

The per-partition figures (:data:`TIER_FIGURES`) stay in the batch's XCom; the run report sums them into the run's
asset event ``kafka-log-maintenance://log_tiering``.
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from storage_engine.jobs.batches import BatchPartitions
from storage_engine.units import human_bytes

from ..reporting.report import TIER_FIGURES
from .hooks import AsOf
from .operators import PartitionBatchOperator, PlanBatchesOperator
from .params import as_topics


def compact_tiering(r: dict) -> dict:
    """A partition's tiering result as kept in the batch's XCom: its figures (0 when the job reports none), the
    offsets it names, and whether anything changed."""
    out: dict[str, Any] = {"topic": r["topic"], "partition": r["partition"]}
    for key in TIER_FIGURES:
        value = r.get(key, 0)
        out[key] = len(value) if isinstance(value, (list, tuple)) else int(value or 0)
    for key in ("tiered", "skipped", "copy_skipped", "duration_s", "remote_segments", "remote_bytes",
                "highest_remote_offset", "remote_log_start_offset", "log_start_offset", "local_log_start_offset",
                "log_end_offset", "remote_partition_deleted"):
        if key in r:
            out[key] = r[key]
    changed = any(out[k] for k in ("copied_segments", "local_segments_deleted", "remote_segments_deleted",
                                   "orphan_segments", "orphan_objects", "orphan_uploads"))
    out["nothing_to_do"] = bool(r.get("nothing_to_do", not changed))
    return out


def tiering_line(r: dict, dry_run: bool) -> str | None:
    """One human line for a partition that changed (None: nothing worth a line)."""
    done = [(r["copied_segments"], ("would copy", "copied"), "segment(s) to the object store", r["copied_bytes"]),
            (r["local_segments_deleted"], ("would delete", "deleted"), "tiered segment(s) locally",
             r["local_bytes_deleted"]),
            (r["remote_segments_deleted"], ("would delete", "deleted"), "remote segment(s)",
             r["remote_bytes_deleted"]),
            (r["orphan_segments"], ("would clean", "cleaned"), "segment(s) of interrupted copies or deletions", None),
            (r["orphan_objects"], ("would delete", "deleted"), "untracked object(s)", None),
            (r["orphan_uploads"], ("would abort", "aborted"), "multipart upload(s) cut short", None)]
    parts = [f"{verbs[0] if dry_run else verbs[1]} {count} {what}"
             + ("" if size is None else f" ({human_bytes(size)}, {size} bytes)")
             for count, verbs, what, size in done if count]
    if not parts:
        return None
    if r["lag_segments"]:
        parts.append(f"{r['lag_segments']} segment(s) ({human_bytes(r['lag_bytes'])}) still to copy")
    return "; ".join(parts)


class TierPlanOperator(PlanBatchesOperator):
    """``plan_batches`` of ``log_tiering``: batches of the partitions of the topics tiering has work for, once the
    object store answers (see the module docstring). Its XCom ``object_store`` says which store was checked."""

    def run(self, now_ms: int, context: Context) -> list[dict]:
        asked = as_topics(self.topics)
        listed = sorted({p["topic"] for p in self.hook.list_partitions(asked)})   # an unknown topic fails here
        topics = self.hook.tiering_topics(listed)
        if not topics:
            why = ("remote.log.storage.system.enable is false" if not self.hook.config.remote_storage_system_enabled
                   else "no topic has remote.storage.enable (or remote.log.delete.on.disable) set")
            self.log.info("nothing to tier in %s: %s", self.hook.config_path, why)
            context["ti"].xcom_push(key="object_store", value={"checked": False, "why": why})
            return []
        self.log.info("topics with tiering work: %s; checking the object store", ", ".join(topics))
        store = self.hook.check_object_store()
        self.log.info("object store %s, bucket %s: reachable", store["endpoint_url"], store["bucket"])
        context["ti"].xcom_push(key="object_store", value={"checked": True, **store})
        self.topics = topics
        return super().run(now_ms, context)

    def summary(self, result: list[dict], when: AsOf) -> str:
        if not result:
            return f"nothing to tier as of {when['iso']}"
        return super().summary(result, when)


class TierOperator(PartitionBatchOperator):
    """Tiered storage for a batch of partitions (see the module docstring). With ``dry_run`` the job plans the
    copies and deletions and reports them; nothing is uploaded, deleted or recorded."""

    verb = "tier"

    def run_batch(self, partitions: BatchPartitions, now_ms: int, dry_run: bool) -> dict:
        result: dict[str, Any] = dict(self.hook.tier_batch(partitions, now_ms, dry_run=dry_run))
        result["results"] = [compact_tiering(r) for r in result["results"]]
        result["totals"] = {k: sum(r[k] for r in result["results"]) for k in TIER_FIGURES}
        return result

    def partition_line(self, r: dict) -> str | None:
        return tiering_line(r, self.dry_run is True)
