"""Operators of the ``log_compaction`` DAG: select the dirtiest logs, build key maps on Spark, clean.

Flow of one run (acting as of T, its data interval end or trigger time):

1. :class:`SelectDirtiestLogsOperator` ranks compacted partitions by dirty ratio (``min.cleanable.dirty.ratio``,
   ``max.compaction.lag.ms`` forcing), bounded by T (never clean a segment holding a record at or after T),
   skipping and reporting partitions it cannot read, and decides per partition where the key map is built
   (``map_strategy``). It returns the selection (ratios, for the UI) with two lists that
   :class:`PlanPartOperator` tasks hand on to the mapped tasks: the Spark submissions and the cleans.
2. :class:`BuildKeyMapOperator` (a ``SparkSubmitOperator``, mapped; the ``spark_default`` connection decides the
   master) runs ``spark_jobs/build_key_map.py`` per Spark partition, writing the map to a run-scoped folder.
3. :class:`CompactPartitionOperator` (mapped, one per selected partition: few, heavy) cleans one partition over
   exactly the selected offset range, with the Spark map or the in-process one, reports bytes before/after,
   records removed, tombstones purged and the duration, and emits the asset event
   ``kafka-log://<topic>/<partition>`` (kind ``compaction``) carrying that report.

Damage: the cleaner and the Spark source check every batch they read. A damaged batch fails that partition's
task at once (no retry: it reads the same bytes), with the partition, file, byte position and offsets in the
error; the partition is marked uncleanable with that reason (by the engine for a clean, by
:class:`BuildKeyMapOperator` from the job's damage report for a Spark map) and the run report's one digest
alert names it. ``compact --clear-uncleanable`` or the Storage view's "Clear" button lets it be cleaned again.
Until then every run fails that partition's clean task (the selection plans it as ``blocked``), and so does a
partition that cannot be read; the other partitions are cleaned. The failure is the same root cause run after
run, so it is alerted once (:mod:`storage_maintenance.reporting.root_causes`), with the fix.

Every engine and connection call goes through :class:`~storage_maintenance.tasks.hooks.StorageEngineHook`.
Re-running an interval that is done finds the cleaner checkpoint already past it: "nothing to do", no byte
changes.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from spark_jobs import build_key_map
from spark_jobs.build_key_map import SUBMIT_CONF
from storage_engine import errors
from storage_engine.units import human_bytes

from .assets import COMPACTED_ALIAS, partition_asset
from .hooks import AsOf, StorageEngineHook, check_worker_host, iso_ms, spark_submit_env
from .operators import StorageMaintenanceOperator, record_error
from .params import as_dry_run, as_map_strategy, as_partition, as_positive_int, as_topic, as_topics, run_as_of

# The job's file where the project is installed (the Spark workers import the project from there too).
SPARK_JOB = os.path.abspath(build_key_map.__file__)


class SelectDirtiestLogsOperator(StorageMaintenanceOperator):
    """Rank compacted partitions and plan their cleaning (see the module docstring).

    :param topics: only these topics; empty = all
    :param max_partitions: clean at most this many partitions (the dirtiest) in one run
    :param map_strategy: ``spark`` | ``local`` | ``auto`` (Spark when the dirty section holds more offsets than
        the in-process map can take)
    :param dry_run: plan only; no Spark job is submitted and the clean tasks only report
    :param spark_conn_id: the Spark connection checked before any submission is planned
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topics", "max_partitions",
                                      "map_strategy", "dry_run")

    def __init__(self, *, topics: str | list[str] | None = None, max_partitions: int | str = 10,
                 map_strategy: str = "auto",
                 dry_run: bool | str = False, spark_conn_id: str = "spark_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.max_partitions = max_partitions
        self.map_strategy = map_strategy
        self.dry_run = dry_run
        self.spark_conn_id = spark_conn_id

    def run(self, now_ms: int, context: Context) -> dict:
        topics, dry_run = as_topics(self.topics), as_dry_run(self.dry_run)
        limit = as_positive_int("max_partitions", self.max_partitions)
        strategy = as_map_strategy(self.map_strategy)
        plan = self.hook.compaction_plan(now_ms, topics, limit, strategy)
        run_id = context["run_id"]
        spark, clean = [], []
        for sel in plan["selected"]:
            use_spark = sel["map_strategy"] == "spark" and not dry_run
            path = self.hook.keymap_path(run_id, sel["topic"], sel["partition"]) if use_spark else None
            if use_spark:
                spark.append({"topic": sel["topic"], "partition": sel["partition"], "application_args": [
                    "--config", self.hook.config_path, "--topic", sel["topic"], "--partition", str(sel["partition"]),
                    "--start-offset", str(sel["first_dirty_offset"]),
                    "--end-offset", str(sel["first_uncleanable_offset"]), "--output", path]})
            clean.append({"topic": sel["topic"], "partition": sel["partition"],
                          "first_dirty_offset": sel["first_dirty_offset"],
                          "first_uncleanable_offset": sel["first_uncleanable_offset"], "keymap_path": path,
                          "blocked": None})
        # A partition marked uncleanable or that cannot be read gets a clean task too, which fails naming it and
        # the fix: the run fails every time until an operator acts (its root cause is alerted once).
        for b in plan.get("blocked", []):
            clean.append({"topic": b["topic"], "partition": b["partition"], "first_dirty_offset": -1,
                          "first_uncleanable_offset": -1, "keymap_path": None, "blocked": b})
        if spark:
            self.hook.check_spark_connection(self.spark_conn_id)
        for s in plan["skipped"]:
            self.log.warning("skipped %s-%s: %s", s["topic"], s["partition"], s["reason"])
        for b in plan.get("blocked", []):
            self.log.error("%s-%s fails its clean task: %s: %s", b["topic"], b["partition"], b["error_type"],
                           b["error"])
        plan.update(spark_submissions=spark, clean_kwargs=clean, dry_run=dry_run, spark_partitions=len(spark))
        return plan

    def summary(self, result: dict, when: AsOf) -> str:
        if result["nothing_to_do"]:
            return (f"compaction selection as of {when['iso']}: nothing to do "
                    f"({len(result['not_dirty'])} compacted partition(s) below their dirty ratio, "
                    f"{len(result['skipped'])} skipped)")
        parts = ", ".join([f"{s['topic']}-{s['partition']} ratio {s['dirty_ratio']:.3f} ({s['map_strategy']} map)"
                           for s in result["selected"]]
                          + [f"{b['topic']}-{b['partition']} failing ({b['error_type']})"
                             for b in result.get("blocked", [])])
        return f"compaction selection as of {when['iso']} ({when['source']}): {parts}"


class PlanPartOperator(BaseOperator):
    """Hands one list of the selection's plan (``spark_submissions`` or ``clean_kwargs``) to a mapped task:
    Airflow maps only over a task's return value, and the selection returns the whole plan for the UI.

    :param plan: the selection's return value (templated, rendered as a native object)
    :param part: which list to return
    """

    template_fields: Sequence[str] = ("plan",)
    ui_color = "#eef3e8"

    def __init__(self, *, plan: Any, part: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.part = part

    def execute(self, context: Context) -> list:
        if not isinstance(self.plan, dict) or not isinstance(self.plan.get(self.part), list):
            raise AirflowFailException(f"the selection's plan has no list {self.part!r}: {self.plan!r}")
        return self.plan[self.part]


class BuildKeyMapOperator(SparkSubmitOperator):
    """``spark_jobs/build_key_map.py`` for one partition: a ``SparkSubmitOperator`` that knows which partition it
    is for, so the DAG names the mapped task ``{{ task.topic }}-{{ task.partition }}`` whatever the order of
    the job's arguments.

    :param topic, partition: the partition whose key map is built (mapped)
    :param application_args: the job's arguments (mapped; the selection wrote them)
    :param conf: Spark settings over the job's own (``spark_jobs.build_key_map.SUBMIT_CONF``)
    :param host: the storage host that has the partition (the driver runs on its worker); None: any
    :param env_vars: spark-submit's environment over the worker's ``PATH`` and ``PYSPARK_PYTHON``
        (:func:`~storage_maintenance.tasks.hooks.spark_submit_env`, resolved when the task runs)
    """

    def __init__(self, *, topic: str, partition: int, application: str = SPARK_JOB,
                 conf: dict | None = None, host: str | None = None, **kwargs: Any) -> None:
        super().__init__(application=application, conf={**SUBMIT_CONF, **(conf or {})}, **kwargs)
        self.topic = topic
        self.partition = partition
        self.host = host

    def execute(self, context: Context) -> None:
        # A DAG rendering templates as native objects turns "--partition", "0" into 0; spark-submit takes strings.
        self.application_args = [str(a) for a in (self.application_args or [])]
        try:
            check_worker_host(self.host)        # a worker of another host lacks the partition's files
            return super().execute(context)
        except Exception as exc:
            damage = self._damage_report()
            if damage is None:
                record_error(context, exc)
                raise
        # The job's source found a damaged batch: no retry can fix that. The partition is marked uncleanable with
        # the damage (the selection skips it until an operator clears it), and the task fails at once naming it.
        name = f"{self.topic}-{self.partition}"
        reason = str(damage.get("error") or "damaged batch")
        error_type = str(damage.get("error_type") or "CorruptRecordError")
        hook = StorageEngineHook(config_path=self._arg("--config"), host=self.host)
        # The mark names the error's type as the engine's marks do, so that the later runs, which fail on the mark,
        # report the same root cause as this one (alerted once).
        hook.mark_uncleanable(self.topic, int(self.partition), f"{error_type}: {reason}", run_as_of(context)["now_ms"])
        error = AirflowFailException(f"{name} is damaged and now marked uncleanable: {reason}")
        fail_partition(context, self.topic, int(self.partition), error_type, reason)
        record_error(context, error)
        raise error

    def _get_hook(self) -> SparkSubmitHook:
        # The provider's hook, with the environment of the worker that runs the task (this task's env_vars over it).
        given = self.env_vars
        self.env_vars = spark_submit_env(given)
        try:
            return super()._get_hook()
        finally:
            self.env_vars = given

    def _arg(self, name: str) -> str | None:
        args = list(self.application_args or [])
        return args[args.index(name) + 1] if name in args[:-1] else None

    def _damage_report(self) -> dict | None:
        """The damage the failed job reported beside its output (``build_key_map.damage_report_path``), if any."""
        output = self._arg("--output")
        if not output:
            return None
        path = build_key_map.damage_report_path(output)
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError):
            return None
        os.remove(path)
        return report if isinstance(report, dict) else None


def fail_partition(context: Context, topic: str, partition: int, error_type: str, error: str,
                   permanent: bool = True) -> None:
    """Leave a single-partition task's failure where the run report reads a batch's (XCom ``return_value`` with
    ``failures``), so the run's one digest alert names the partition and the error."""
    context["ti"].xcom_push(key="return_value", value={
        "topic": topic, "partition": partition, "label": f"{topic}-{partition}", "results": [], "partitions": 1,
        "failures": [{"topic": topic, "partition": partition, "error_type": error_type, "error": error,
                      "permanent": permanent}]})


class CompactPartitionOperator(StorageMaintenanceOperator):
    """Clean one partition over the offset range its selection fixed, then emit its asset event.

    The asset event goes through :data:`~storage_maintenance.tasks.assets.COMPACTED_ALIAS`, which the mapped task must
    list in ``.partial(outlets=[COMPACTED_ALIAS])`` (outlets set in ``__init__`` never reach a mapped task).

    :param topic, partition: the partition (mapped)
    :param first_dirty_offset, first_uncleanable_offset: the range the selection fixed
    :param keymap_path: the Spark-built map, or None for the in-process map
    :param dry_run: report what would be removed, change nothing
    :param blocked: the selection's failure of a partition marked uncleanable or that cannot be read
        (``{"error_type", "error", "permanent"}``): the task fails at once naming it and the fix, no retry
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "dry_run")

    def __init__(self, *, topic: str, partition: int, first_dirty_offset: int, first_uncleanable_offset: int,
                 keymap_path: str | None = None, dry_run: bool | str = False, blocked: dict | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.blocked = blocked
        self.topic = topic
        self.partition = partition
        self.first_dirty_offset = first_dirty_offset
        self.first_uncleanable_offset = first_uncleanable_offset
        self.keymap_path = keymap_path
        self.dry_run = dry_run

    def run(self, now_ms: int, context: Context) -> dict:
        topic, partition, dry_run = as_topic(self.topic), as_partition(self.partition), as_dry_run(self.dry_run)
        if self.blocked:
            error_type, error = str(self.blocked.get("error_type")), str(self.blocked.get("error"))
            fail_partition(context, topic, partition, error_type, error, permanent=True)
            raise AirflowFailException(f"{topic}-{partition} cannot be compacted: {error_type}: {error}")
        if self.keymap_path and not os.path.isdir(self.keymap_path):
            raise AirflowFailException(f"the key map {self.keymap_path} for {topic}-{partition} is missing: did "
                                       "build_key_map run?")
        try:
            result = self.hook.compact_partition(topic, partition, int(self.first_dirty_offset),
                                                 int(self.first_uncleanable_offset), now_ms,
                                                 keymap_path=self.keymap_path, dry_run=dry_run)
        except errors.StorageError as exc:
            # Damage (and any error of the engine) fails this partition: the engine marked it uncleanable with
            # the reason; the report's alert names it. The base class decides whether a retry may help.
            fail_partition(context, topic, partition, type(exc).__name__, str(exc),
                           permanent=not errors.is_retriable(exc))
            raise
        if self.keymap_path and not dry_run:
            self.hook.remove_keymap(self.keymap_path)       # run-scoped; the swap is durable by now
        if not result.get("nothing_to_do") and not dry_run and COMPACTED_ALIAS in (self.outlets or []):
            extra = {k: result.get(k) for k in ("size_bytes_before", "size_bytes_after", "records_removed",
                                                "tombstones_purged", "duration_s", "end_offset", "map",
                                                "first_dirty_offset", "first_uncleanable_offset", "now_ms")}
            extra.update(kind="compaction", as_of=iso_ms(now_ms),
                         bytes_reclaimed=result["size_bytes_before"] - result["size_bytes_after"])
            context["outlet_events"][COMPACTED_ALIAS].add(partition_asset(topic, partition), extra=extra)
        return result

    def summary(self, result: dict, when: AsOf) -> str:
        name = f"{result['topic']}-{result['partition']}"
        if result.get("nothing_to_do"):
            return f"compaction {name} as of {when['iso']}: nothing to do ({result.get('skipped')})"
        for line in result.get("log_lines", []):
            self.log.info("%s", line)
        verb = "would remove" if result["dry_run"] else "removed"
        return (f"compaction {name} as of {when['iso']} ({when['source']}) with the {result['map']} map: {verb} "
                f"{result['records_removed']} record(s) ({result['tombstones_purged']} tombstone(s)); size "
                f"{human_bytes(result['size_bytes_before'])} -> {human_bytes(result['size_bytes_after'])}; "
                f"cleaned [{result['first_dirty_offset']}, {result['end_offset']}) in {result['duration_s']} s")
