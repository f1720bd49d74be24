"""Operators of the log-storage housekeeping DAGs: templated parameters in, one hook call, a summary out.

Every operator first refuses to run on a worker of another storage host than its own
(:func:`storage_maintenance.hooks.check_worker_host`), then a run whose ``conf`` holds a key its DAG does not
declare (:func:`storage_maintenance.params.check_conf_keys`: a typo such as ``dryrun`` fails the run's first task,
so nothing mutates), then acts as of the run's stated instant (:func:`storage_maintenance.params.run_as_of`: the
data interval end; the trigger time of a manual run or of a run without an interval; or ``as_of`` from the
conf), logs it with one human line per partition that changed, and returns a JSON-able summary carrying
``as_of`` and ``as_of_source`` (which rule chose it), which Airflow stores as the task's XCom.

A task that finishes tells :mod:`storage_maintenance.root_causes` which partitions it maintained without error,
which closes the root causes alerted for them (so the next failure alerts again).

Fan-out follows the cost of the work (ARCHITECTURE.md section 9): :class:`PlanBatchesOperator` cuts the partitions
into batches (per log dir, ``batch_size`` each) and one mapped batch task per batch does the cheap
per-partition work (retention, flush, checkpoint, verify). Inside a batch each partition is isolated: its
failure is recorded, the others still run, and the task fails at the end naming every failed partition. The
batch's result (including the failures) is its XCom either way, which the run's report reads.

Failures: bad parameters and errors that no retry can fix (unknown topic or partition, invalid config, corrupt
bytes, a path in the way) raise :class:`AirflowFailException`, so the task fails at once; errors that may pass
(lock contention, a full disk, too many open files) are retried.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from storage_engine import errors
from storage_engine.units import human_bytes

from .hooks import StorageEngineHook, check_worker_host
from .params import as_dry_run, as_partitions, as_positive_int, as_topics, check_conf_keys, run_as_of
from .root_causes import note_healthy


def record_error(context, exc: BaseException) -> None:
    """Keep a failing task's error where the run report finds it (XCom ``error``); never mask ``exc``."""
    ti = context.get("ti")
    try:
        ti.xcom_push(key="error", value={"error": f"{type(exc).__name__}: {exc}",
                                         "try_number": getattr(ti, "try_number", None)})
    except Exception:   # the report then says "see the task log"
        pass


def compact_retention(r: dict) -> dict:
    """A partition's retention result as kept in the batch's XCom: the figures, the deleted segments' base
    offsets and reasons, counts instead of lists (a batch of 500 partitions stays near 100 KB, which the
    metadata DB writes in one go)."""
    out = {k: r[k] for k in ("topic", "partition", "segments_deleted", "bytes_reclaimed", "records_removed",
                             "log_start_offset_before", "log_start_offset", "size_bytes_after", "nothing_to_do",
                             "duration_s")}
    if r["segments"]:
        out["deleted_base_offsets"] = [s["base_offset"] for s in r["segments"]]
        out["reasons"] = sorted({s["reason"] for s in r["segments"]})
    if r.get("future_segments"):
        out["future_segments"] = len(r["future_segments"])
    if r.get("skipped"):
        out["skipped"] = r["skipped"]
    return out


class PartitionsFailed(AirflowException):
    """Some partitions of a batch failed with errors a retry may fix (the task is retried)."""


class StorageMaintenanceOperator(BaseOperator):
    """Base of the maintenance operators: the hook, the run's "as of" instant and the error policy.

    :param storage_engine_conn_id: connection whose ``extra`` may name the storage config
        (``{"config": "/path/storage.yaml"}``); see :mod:`storage_maintenance.hooks` for the full order
    :param config_path: storage config file overriding the connection and ``$STORAGE_ENGINE_CONFIG``
        (templated)
    :param host: the storage host (the config's ``hosts:``) whose log dirs the task maintains, given to the tasks of
        that host's task group; None: every log dir
    """

    template_fields: Sequence[str] = ("config_path",)
    ui_color = "#e8f0f7"
    # The templated ``dry_run`` param of the operators that have one (the name the trigger form, the DAG files and
    # the rendered templates use). It stands where BaseOperator has a ``dry_run()`` method (log the rendered
    # templates), which Airflow 3 never calls.
    dry_run: bool | str  # type: ignore[assignment]

    def __init__(self, *, storage_engine_conn_id: str = StorageEngineHook.default_conn_name,
                 config_path: str | None = None, host: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_engine_conn_id = storage_engine_conn_id
        self.config_path = config_path
        self.host = host

    @cached_property
    def hook(self) -> StorageEngineHook:
        return StorageEngineHook(storage_engine_conn_id=self.storage_engine_conn_id, config_path=self.config_path,
                                 host=self.host)

    def execute(self, context) -> Any:
        try:
            check_worker_host(self.host)    # a worker of another host lacks this task's log dirs
            # Before anything else: a mistyped key must not start a run that mutates.
            check_conf_keys(getattr(context.get("dag_run"), "conf", None), self.declared_params(),
                            self.dag_id if self.has_dag() else None)
            when = run_as_of(context)
            self.log.info("storage config %s; acting as of %s (%s), now_ms=%d", self.hook.config_path, when["iso"],
                          when["source"], when["now_ms"])
            try:
                result = self.run(when["now_ms"], context)
            except errors.StorageError as exc:
                if not errors.is_retriable(exc):
                    raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
                raise
        except Exception as exc:
            record_error(context, exc)
            raise
        if isinstance(result, dict):
            result.setdefault("as_of", when["iso"])
            result.setdefault("as_of_source", when["source"])
        self.log.info("%s", self.summary(result, when))
        self.note_healthy(context, result)
        return result

    def declared_params(self) -> set[str]:
        """The keys a run's conf may hold: the params of the DAG and of this task."""
        keys = set(self.params or {})
        if self.has_dag():
            keys |= set(self.dag.params or {})
        return keys

    def note_healthy(self, context, result: Any) -> None:
        """Close the root causes alerted for what this task just maintained without error (never fails)."""
        ti = context.get("ti")
        try:
            note_healthy(self.hook, getattr(ti, "dag_id", None) or self.dag_id, self.task_id, result,
                         log_dir=getattr(self, "log_dir", None))
        except Exception as exc:      # the record is an aid to alerting; maintenance has already succeeded
            self.log.warning("could not update the record of alerted failures: %s: %s", type(exc).__name__, exc)

    def run(self, now_ms: int, context) -> Any:
        raise NotImplementedError

    def summary(self, result: Any, when) -> str:
        raise NotImplementedError


class PlanBatchesOperator(StorageMaintenanceOperator):
    """The batches to maintain: ``[{"partitions": [[topic, partition], ...], "batch_label", "log_dir",
    "batch_index"}]``,
    the keyword arguments of one mapped batch task each (``.partial(...).expand_kwargs(plan.output)``).

    :param topics: only these topics; empty = all; an unknown topic fails the task at once
    :param batch_size: partitions per batch (per log dir)
    :param max_batches: at most this many batches (plus one per log dir); above, batches grow instead
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topics", "batch_size",
                                      "max_batches")

    def __init__(self, *, topics=None, batch_size: int | str = 500, max_batches: int | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.batch_size = batch_size
        self.max_batches = max_batches

    def run(self, now_ms: int, context) -> list[dict]:
        size = as_positive_int("batch_size", self.batch_size)
        limit = None if self.max_batches is None else as_positive_int("max_batches", self.max_batches)
        health = self.hook.log_dir_health()
        for d, reason in health["offline"].items():
            self.log.warning("log dir %s is offline, its partitions are skipped: %s", d, reason)
        context["ti"].xcom_push(key="log_dirs", value=health)     # the run's report alerts offline dirs
        batches = self.hook.plan_batches(as_topics(self.topics), size, limit)
        for b in batches:
            self.log.info("batch %d: %s", b["index"], b["label"])
        return [{"partitions": b["partitions"], "batch_label": b["label"], "log_dir": b["log_dir"],
                 "batch_index": b["index"]} for b in batches]

    def summary(self, result: list[dict], when) -> str:
        partitions = sum(len(b["partitions"]) for b in result)
        return f"{partitions} partition(s) in {len(result)} batch(es) as of {when['iso']}"


class PartitionBatchOperator(StorageMaintenanceOperator):
    """One batch of partitions (mapped once per batch); subclasses say which engine job runs.

    Give the mapped task ``map_index_template="{{ task.batch_label }}"`` to name it after its partitions.

    :param partitions: ``[[topic, partition], ...]`` (templated, mapped)
    :param batch_label: a short name for the batch (the map index shown in the UI)
    :param log_dir: the log dir the batch's partitions live in (informative)
    :param batch_index: the batch's number in the plan
    :param dry_run: report what would be done, change nothing
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "partitions", "dry_run")
    verb = "maintain"

    def __init__(self, *, partitions, batch_label: str = "", log_dir: str | None = None,
                 batch_index: int | None = None, dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.partitions = partitions
        self.batch_label = batch_label
        self.log_dir = log_dir
        self.batch_index = batch_index
        self.dry_run = dry_run

    def run(self, now_ms: int, context) -> dict:
        result = self.run_batch(as_partitions(self.partitions), now_ms, as_dry_run(self.dry_run))
        when = run_as_of(context)
        result.update(label=self.batch_label, log_dir=self.log_dir, batch_index=self.batch_index,
                      as_of=when["iso"], as_of_source=when["source"])
        for r in result["results"]:
            line = self.partition_line(r)
            if line:
                self.log.info("%s-%s: %s", r["topic"], r["partition"], line)
        self.on_results(result, context)
        for sk in result.get("skipped", []):
            self.log.warning("%s-%s skipped: %s", sk["topic"], sk["partition"], sk["reason"])
        failures, errors = result["failures"], result["errors"]
        if failures or errors:
            for f in failures:
                self.log.error("%s-%s FAILED: %s: %s", f["topic"], f["partition"], f["error_type"], f["error"])
            for e in errors:
                self.log.error("FAILED: %s", e)
            context["ti"].xcom_push(key="return_value", value=result)    # the report reads failed batches too
            self.note_healthy(context, result)                            # its partitions that did not fail
            names = ", ".join(f"{f['topic']}-{f['partition']}" for f in failures)
            message = (f"{len(failures)} of {result['partitions']} partition(s) failed to {self.verb}: {names}"
                       if failures else f"the batch could not finish: {'; '.join(errors)}")
            if failures and not errors and all(f["permanent"] for f in failures):
                raise AirflowFailException(message + " (no retry can fix these)")
            raise PartitionsFailed(message)
        return result

    def run_batch(self, partitions, now_ms: int, dry_run: bool) -> dict:
        raise NotImplementedError

    def partition_line(self, r: dict) -> str | None:
        """One log line for a partition that changed (None: nothing worth a line)."""
        return None

    def on_results(self, result: dict, context) -> None:
        """Hook for subclasses (asset events)."""

    def summary(self, result: dict, when) -> str:
        done = sum(1 for r in result["results"] if not r.get("nothing_to_do", True))
        skipped = len(result.get("skipped", []))
        return (f"{self.verb} {result['label']} as of {when['iso']} ({when['source']}): "
                f"{len(result['results'])} partition(s) checked, {done} changed, "
                f"{len(result['failures'])} failed" + (f", {skipped} skipped (log dir offline)" if skipped else "")
                + f", {result['duration_s']} s")


class LogRetentionOperator(PartitionBatchOperator):
    """Retention of a batch of partitions (log start offset, ``retention.bytes``, ``retention.ms``): expired
    segments are renamed ``.deleted``, the log start offset advances; :class:`PurgeDeletedOperator` removes the
    files later. The per-partition figures stay in the batch's XCom; the run's asset event
    (``kafka-log-maintenance://log_retention``, from the run report) carries the totals. (One asset event per
    partition would be 10,000 events a run on a broker-sized store: the metadata DB could not keep up.)"""

    verb = "retention"

    def run_batch(self, partitions, now_ms: int, dry_run: bool) -> dict:
        result: dict[str, Any] = dict(self.hook.retention_batch(partitions, now_ms, dry_run=dry_run))
        result["results"] = [compact_retention(r) for r in result["results"]]
        return result

    def partition_line(self, r: dict) -> str | None:
        line = None
        if r["segments_deleted"]:
            verb = "would delete" if self.dry_run is True else "deleted"
            line = (f"{verb} {r['segments_deleted']} segment(s), reclaimed {human_bytes(r['bytes_reclaimed'])} "
                    f"({r['bytes_reclaimed']} bytes); log start offset {r['log_start_offset_before']} -> "
                    f"{r['log_start_offset']}")
        if r.get("future_segments"):
            line = (line + "; " if line else "") + (
                f"{r['future_segments']} segment(s) have timestamps after now and cannot expire until the "
                "clock passes them")
        return line


class LogFlushOperator(PartitionBatchOperator):
    """Time-based flush (``flush.ms``) of a batch: fsync the logs whose last flush is at least ``flush.ms``
    old (``due_only=False``: every log).

    :param due_only: ``False`` flushes every log regardless of ``flush.ms``
    """

    verb = "flush"

    def __init__(self, *, due_only: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.due_only = due_only

    def run_batch(self, partitions, now_ms: int, dry_run: bool) -> dict:
        result: dict[str, Any] = dict(self.hook.flush_batch(partitions, now_ms, due_only=self.due_only,
                                                            dry_run=dry_run))
        for r in result["results"]:
            r["nothing_to_do"] = not r["flushed"]
        result["partitions_flushed"] = sum(1 for r in result["results"] if r["flushed"])
        result["not_due"] = sum(1 for r in result["results"] if not r["due"])
        return result

    def partition_line(self, r: dict) -> str | None:
        if r["flushed"]:
            return f"flushed, recovery point {r['recovery_point_before']} -> {r['recovery_point']}"
        if r["dry_run"] and r["due"]:
            return "due: would flush"
        return None


class LogCheckpointOperator(PartitionBatchOperator):
    """Kafka's checkpoint tasks for a batch: flush each log to its end, then write the
    ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` of the batch's log dir (other
    partitions' entries are kept as they are in the files).

    :param flush: flush the logs first (the recovery point only means something once the data is on disk)
    """

    verb = "checkpoint"

    def __init__(self, *, flush: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flush = flush

    def run_batch(self, partitions, now_ms: int, dry_run: bool) -> dict:
        result: dict[str, Any] = dict(self.hook.checkpoint_batch(partitions, now_ms, flush=self.flush,
                                                                 dry_run=dry_run))
        for r in result["results"]:
            r["nothing_to_do"] = not r["flushed"]
        result["partitions_flushed"] = sum(1 for r in result["results"] if r["flushed"])
        return result

    def partition_line(self, r: dict) -> str | None:
        if r["flushed"]:
            return f"flushed, recovery point {r['recovery_point_before']} -> {r['recovery_point']}"
        return None


class VerifyPartitionsOperator(PartitionBatchOperator):
    """The read-only integrity audit (``verify``) of a batch; a damaged partition fails the task (no retry:
    a retry reads the same bytes) and its problems go into the run's alert."""

    verb = "verify"

    def run_batch(self, partitions, now_ms: int, dry_run: bool) -> dict:
        result: dict[str, Any] = dict(self.hook.verify_batch(partitions))
        result["now_ms"] = now_ms
        for r in result["results"]:
            r["nothing_to_do"] = not r["damaged"]
        return result

    def partition_line(self, r: dict) -> str | None:
        if r["problems"]:
            return f"DAMAGED: {len(r['problems'])} problem(s): " + "; ".join(
                f"{p['file']}: {p['message']}" for p in r["problems"][:5])
        if r["pending"]:
            return f"{len(r['pending'])} pending item(s) (handled at the next load)"
        return None


class VerifyLogDirsOperator(StorageMaintenanceOperator):
    """The log-dir half of the audit: checkpoint files parse, every folder is a valid partition name."""

    def run(self, now_ms: int, context) -> dict:
        result = self.hook.verify_log_dirs()
        result["now_ms"] = now_ms
        if result["damaged"]:
            for p in result["problems"]:
                self.log.error("DAMAGED: %s: %s", p["file"], p["message"])
            context["ti"].xcom_push(key="return_value", value=result)
            raise AirflowFailException(f"{len(result['problems'])} problem(s) in the log dirs: "
                                       + "; ".join(f"{p['file']}: {p['message']}" for p in result["problems"][:5]))
        return result

    def summary(self, result: dict, when) -> str:
        extra = "".join(f"; {f['kind']} folder {f['file']}" for f in result.get("foreign", [])[:10])
        extra += "".join(f"; log dir {d} OFFLINE: {r}" for d, r in result.get("offline_dirs", {}).items())
        return (f"log dirs verified as of {when['iso']}: no damage, {len(result['pending'])} pending item(s)"
                + extra)


class PurgeDeletedOperator(StorageMaintenanceOperator):
    """Remove ``.deleted`` files and ``-delete`` folders (deleted or moved-away partitions) older than their topic's
    ``file.delete.delay.ms`` (as of the run's instant); offline log dirs are left out and reported.

    :param dry_run: report what would be removed, change nothing
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "dry_run")

    def __init__(self, *, dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dry_run = dry_run

    def run(self, now_ms: int, context) -> dict:
        return dict(self.hook.purge(now_ms, dry_run=as_dry_run(self.dry_run)))

    def summary(self, result: dict, when) -> str:
        verb = "would remove" if result["dry_run"] else "removed"
        return (f"purge as of {when['iso']}: {verb} {result['files_removed']} file(s) and "
                f"{len(result.get('folders_removed') or [])} deleted partition folder(s), freed "
                f"{human_bytes(result['bytes_freed'])} ({result['bytes_freed']} bytes); "
                f"{result['files_waiting']} file(s) still within file.delete.delay.ms")


class ExpireProducersOperator(PartitionBatchOperator):
    """Kafka's producer-id expiration check over a batch of partitions: forget the producers with no open
    transaction whose last write is ``producer.id.expiration.ms`` old as of the run's instant. The partition's
    state is then snapshotted, so every process using it forgets the same producers."""

    verb = "expire producers"

    def run_batch(self, partitions, now_ms: int, dry_run: bool) -> dict:
        return self.hook.expire_producers_batch(partitions, now_ms, dry_run=dry_run)

    def partition_line(self, r: dict) -> str | None:
        if not r["expired_producer_ids"]:
            return None
        verb = "would expire" if r["dry_run"] else "expired"
        return f"{verb} producer id(s) {r['expired_producer_ids']}; {r['producers']} left"


class FailRunIfUpstreamFailedOperator(BaseOperator):
    """Fails the run when an upstream task failed (use with ``trigger_rule="one_failed"``).

    A DAG run's state is decided by its leaf tasks only. The run's report and the purge run with
    ``trigger_rule="all_done"`` (one broken partition must not stop disk space being reclaimed for the others,
    and the report must always be written); their succeeding would otherwise mark the run successful although
    a partition failed. This task is the extra leaf that keeps the run red. It sends no alert: the report does.
    """

    ui_color = "#f7e8e8"

    def execute(self, context) -> None:
        raise AirflowFailException(
            f"maintenance task(s) upstream of {self.task_id} failed in run {context['run_id']}; "
            "see the run report and its alert")
