"""Operators of the ``log_compaction`` DAG: select the dirtiest logs, build key maps on Spark, clean.

Flow of one run (data interval [S, T)):

1. :class:`SelectDirtiestLogsOperator` ranks compacted partitions by dirty ratio (``min.cleanable.dirty.ratio``,
   ``max.compaction.lag.ms`` forcing), bounded by ``T`` (never clean a segment holding a record at or after the
   interval end), and decides per partition where the key map is built (``map_strategy``). It returns the
   selection (ratios, for the UI) with two lists that :class:`PlanPartOperator` tasks hand on to the mapped
   tasks: the ``spark-submit`` arguments of the partitions whose map Spark builds, and the keyword arguments
   of one mapped :class:`CompactPartitionOperator` per partition.
2. ``SparkSubmitOperator`` (mapped; the ``spark_default`` connection decides the master) runs
   ``spark_jobs/build_key_map.py`` per Spark partition, writing the map to a run-scoped folder.
3. :class:`CompactPartitionOperator` (mapped) cleans one partition over exactly the selected offset range, with
   the Spark map or the in-process one, reports bytes before/after, records removed, tombstones purged and the
   duration, and emits an Airflow asset event ``kafka-log://<topic>/<partition>`` carrying that report.

Re-running an interval that is done finds the cleaner checkpoint already past it: "nothing to do", no byte
changes.
"""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from storage_engine import layout
from storage_engine.maintenance import jobs as maintenance

from .operators import StorageMaintenanceOperator, _as_dry_run, _as_positive_int, _as_topics, human_bytes

COMPACTED_ALIAS = AssetAlias("kafka-log-compactions")
KEYMAP_DIR_ENV = "STORAGE_ENGINE_KEYMAP_DIR"
SPARK_JOB = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "spark_jobs", "build_key_map.py")


def partition_asset(topic: str, partition: int) -> Asset:
    return Asset(uri=f"kafka-log://{topic}/{partition}", name=f"kafka-log-{topic}-{partition}")


def keymap_root(config) -> str:
    """Where run-scoped key maps go: ``$STORAGE_ENGINE_KEYMAP_DIR``, else ``keymaps/`` beside the first log dir
    (never inside a log dir; shared storage in a cluster deployment)."""
    env = os.environ.get(KEYMAP_DIR_ENV)
    if env:
        return os.path.abspath(env)
    return layout.keymap_root(config.log_dirs)


def keymap_path(config, run_id: str, topic: str, partition: int) -> str:
    safe_run = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return os.path.join(keymap_root(config), safe_run, f"{topic}-{partition}")


class SelectDirtiestLogsOperator(StorageMaintenanceOperator):
    """Rank compacted partitions and plan their cleaning (see the module docstring).

    :param topics: only these topics; empty = all
    :param max_partitions: clean at most this many partitions (the dirtiest) in one run
    :param map_strategy: ``spark`` | ``local`` | ``auto`` (Spark when the dirty section holds more offsets than
        the in-process map can take)
    :param dry_run: plan only; no Spark job is submitted and the clean tasks only report
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topics", "max_partitions",
                                      "map_strategy", "dry_run")

    def __init__(self, *, topics=None, max_partitions: int | str = 10, map_strategy: str = "auto",
                 dry_run: bool | str = False, spark_conn_id: str = "spark_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.max_partitions = max_partitions
        self.map_strategy = map_strategy
        self.dry_run = dry_run
        self.spark_conn_id = spark_conn_id

    def execute(self, context) -> Any:
        self._context = context
        return super().execute(context)

    def run(self, now_ms: int) -> dict:
        topics, dry_run = _as_topics(self.topics), _as_dry_run(self.dry_run)
        limit = _as_positive_int("max_partitions", self.max_partitions)
        if self.map_strategy not in maintenance.MAP_STRATEGIES:
            raise AirflowFailException(f"map_strategy must be one of {list(maintenance.MAP_STRATEGIES)}, got "
                                       f"{self.map_strategy!r}")
        config = self.hook.config
        plan = maintenance.compaction_plan(config, now_ms, topics=topics, max_partitions=limit,
                                           strategy=self.map_strategy, upper_time_bound_ms=now_ms)
        run_id = self._context["run_id"]
        spark_args, clean_kwargs = [], []
        for sel in plan["selected"]:
            use_spark = sel["map_strategy"] == "spark" and not dry_run
            path = keymap_path(config, run_id, sel["topic"], sel["partition"]) if use_spark else None
            if use_spark:
                spark_args.append(["--config", self.hook.config_path, "--topic", sel["topic"],
                                   "--partition", str(sel["partition"]),
                                   "--start-offset", str(sel["first_dirty_offset"]),
                                   "--end-offset", str(sel["first_uncleanable_offset"]), "--output", path])
            clean_kwargs.append({"topic": sel["topic"], "partition": sel["partition"],
                                 "first_dirty_offset": sel["first_dirty_offset"],
                                 "first_uncleanable_offset": sel["first_uncleanable_offset"],
                                 "keymap_path": path})
        if spark_args:
            self._check_spark_connection()
        plan["spark_args"] = spark_args
        plan["clean_kwargs"] = clean_kwargs
        plan["dry_run"] = dry_run
        plan["spark_partitions"] = len(spark_args)
        return plan

    def _check_spark_connection(self) -> None:
        """The Spark provider silently submits to YARN when the connection is missing or unparsable."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
        try:
            conn = BaseHook.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            raise AirflowFailException(
                f"connection {self.spark_conn_id!r} is missing, so spark-submit would go to YARN; define it, e.g. "
                "AIRFLOW_CONN_SPARK_DEFAULT='{\"conn_type\":\"spark\",\"host\":\"local[*]\"}'") from None
        host = (conn.host or "").strip()
        if not host or host == "yarn":
            raise AirflowFailException(f"connection {self.spark_conn_id!r} has host {conn.host!r}; set it to "
                                       "local[*] or spark://host:port")

    def summary(self, result: dict) -> str:
        if result["nothing_to_do"]:
            return (f"compaction selection {self._as_of(result)}: nothing to do "
                    f"({len(result['not_dirty'])} compacted partition(s) below their dirty ratio, "
                    f"{len(result['skipped'])} skipped)")
        parts = ", ".join(f"{s['topic']}-{s['partition']} ratio {s['dirty_ratio']:.3f} ({s['map_strategy']} map)"
                          for s in result["selected"])
        return f"compaction selection {self._as_of(result)}: {parts}"


class PlanPartOperator(BaseOperator):
    """Hands one list of the selection's plan (``spark_args`` or ``clean_kwargs``) to a mapped task: Airflow
    maps only over a task's return value, and the selection returns the whole plan for the UI.

    :param plan: the selection's return value (templated, rendered as a native object)
    :param part: which list to return
    """

    template_fields: Sequence[str] = ("plan",)
    ui_color = "#eef3e8"

    def __init__(self, *, plan: Any, part: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.part = part

    def execute(self, context) -> list:
        if not isinstance(self.plan, dict) or not isinstance(self.plan.get(self.part), list):
            raise AirflowFailException(f"the selection's plan has no list {self.part!r}: {self.plan!r}")
        return self.plan[self.part]


class CompactPartitionOperator(StorageMaintenanceOperator):
    """Clean one partition over the offset range its selection fixed, then emit its asset event.

    :param topic, partition: the partition (templated, mapped)
    :param first_dirty_offset, first_uncleanable_offset: the range the selection fixed
    :param keymap_path: the Spark-built map, or None for the in-process map
    :param dry_run: report what would be removed, change nothing
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "dry_run")

    def __init__(self, *, topic: str, partition: int, first_dirty_offset: int, first_uncleanable_offset: int,
                 keymap_path: str | None = None, dry_run: bool | str = False, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [COMPACTED_ALIAS])
        super().__init__(**kwargs)
        self.topic = topic
        self.partition = partition
        self.first_dirty_offset = first_dirty_offset
        self.first_uncleanable_offset = first_uncleanable_offset
        self.keymap_path = keymap_path
        self.dry_run = dry_run

    def execute(self, context) -> Any:
        result = super().execute(context)
        if not result.get("nothing_to_do") and not result.get("dry_run"):
            extra = {k: result.get(k) for k in ("size_bytes_before", "size_bytes_after", "records_removed",
                                                "tombstones_purged", "duration_s", "end_offset", "map",
                                                "first_dirty_offset", "first_uncleanable_offset", "now_ms")}
            context["outlet_events"][COMPACTED_ALIAS].add(partition_asset(self.topic, self.partition), extra=extra)
        if self.keymap_path and not result.get("dry_run"):
            shutil.rmtree(self.keymap_path, ignore_errors=True)  # run-scoped; the swap is durable by now
        return result

    def run(self, now_ms: int) -> dict:
        if self.keymap_path and not os.path.isdir(self.keymap_path):
            raise AirflowFailException(f"the key map {self.keymap_path} for {self.topic}-{self.partition} is "
                                       "missing: did build_key_map run?")
        return maintenance.compact_partition(
            self.hook.config, self.topic, int(self.partition), int(self.first_dirty_offset),
            int(self.first_uncleanable_offset), now_ms, keymap_path=self.keymap_path,
            dry_run=_as_dry_run(self.dry_run))

    def summary(self, result: dict) -> str:
        name = f"{result['topic']}-{result['partition']}"
        if result.get("nothing_to_do"):
            return f"compaction {name} {self._as_of(result)}: nothing to do ({result.get('skipped')})"
        for line in result.get("log_lines", []):
            self.log.info("%s", line)
        verb = "would remove" if result["dry_run"] else "removed"
        return (f"compaction {name} {self._as_of(result)} with the {result['map']} map: {verb} "
                f"{result['records_removed']} record(s) ({result['tombstones_purged']} tombstone(s)); size "
                f"{human_bytes(result['size_bytes_before'])} -> {human_bytes(result['size_bytes_after'])}; "
                f"cleaned [{result['first_dirty_offset']}, {result['end_offset']}) in {result['duration_s']} s")
