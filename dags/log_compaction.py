"""log_compaction: clean the dirtiest compacted logs, with key maps built on Spark."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from storage_maintenance.tasks.assets import COMPACTED_ALIAS
from storage_maintenance.tasks.compaction import (
    BuildKeyMapOperator,
    CompactPartitionOperator,
    PlanPartOperator,
    SelectDirtiestLogsOperator,
)
from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.wiring import end_of_run, for_each, host_group, storage_hosts

DOC_MD = """
### Log compaction

Kafka's log cleaner as a DAG: for keyed (`cleanup.policy=compact`) topics only the latest value per key
survives; offsets never change.

1. **select_dirtiest_logs** ranks compacted partitions by dirty ratio (`min.cleanable.dirty.ratio`, strict;
   `max.compaction.lag.ms` forces), skips partitions another run is cleaning, and picks where each key map is built (`map_strategy`: `spark`,
   `local`, or `auto` = Spark when the dirty section is larger than the in-process map,
   `log.cleaner.dedupe.buffer.size`, can hold).
2. **build_key_map** (one mapped Spark submission per Spark partition, named `topic-partition`, master from
   the `spark_default` connection) writes the latest offset of every key of the dirty section as Parquet.
3. **clean** (one mapped task per selected partition, named `topic-partition`) copies what survives into new
   segments and swaps them in crash-safely; tombstones stay until their delete horizon. Its XCom holds bytes
   before/after, records removed, tombstones purged and duration; it emits an asset event
   `kafka-log://<topic>/<partition>` with the same figures. The run's key-map folder is removed after use.
   A partition marked uncleanable (a damaged batch) or that cannot be read gets a clean task that fails, on
   every run, naming the error and the fix, until an operator repairs it and clears the mark
   (`compact --clear-uncleanable --topic T --partition P`, or the Storage view's Clear); it is alerted once.
4. **run_report** summarises the run and sends one alert if anything failed.

**Several storage hosts** (the storage config's `hosts:`): steps 1-3 run once per host, in the task group named
after it (`storage-a.select_dirtiest_logs`, `storage-a.build_key_map`, `storage-a.clean`, ...), on the Celery
queue of its name and over its log dirs only (the Spark driver runs on that host's worker); **run_report** covers
every group.

**What "now" is:** the run's **data interval end** T (the trigger time of a run started by hand or without an
interval; see below). A run
cleans only segments whose records all lie before T (and honours `min.compaction.lag.ms` as of T), so a
backfill over N intervals makes N bounded, ordered steps, and re-running a finished interval reports "nothing
to do" and changes no byte.

Params: `dry_run`, `topics`, `max_partitions` (the dirtiest N), `map_strategy`, `as_of`.
"""

params = maintenance_params()
params["max_partitions"] = Param(10, type="integer", minimum=1, title="Max partitions",
                                 description="Clean at most this many partitions (the dirtiest) in one run.")
params["map_strategy"] = Param("auto", type="string", enum=["auto", "spark", "local"], title="Key map",
                               description="Where key maps are built: Spark, in process, or auto by size.")

with DAG(
    dag_id="log_compaction",
    description="Compact the dirtiest keyed logs; key maps on Spark",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=params,
    default_args=maintenance_default_args(retry_delay_s=30, execution_timeout_min=120),
    tags=["storage", "maintenance", "compaction", "spark"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    partition_label = "{{ task.topic }}-{{ task.partition }}"
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            select = SelectDirtiestLogsOperator(
                task_id="select_dirtiest_logs",
                topics="{{ params.topics }}",
                max_partitions="{{ params.max_partitions }}",
                map_strategy="{{ params.map_strategy }}",
                dry_run="{{ params.dry_run }}",
            )
            plan = f"{{{{ ti.xcom_pull(task_ids='{select.task_id}') }}}}"
            spark_submissions = PlanPartOperator(task_id="spark_submissions", plan=plan, part="spark_submissions")
            clean_kwargs = PlanPartOperator(task_id="partitions_to_clean", plan=plan, part="clean_kwargs")
            build_key_map = for_each(
                BuildKeyMapOperator, "build_key_map", spark_submissions, label=partition_label, dry_run=False,
                conn_id="spark_default",
                name="build-key-map",     # PATH and PYSPARK_PYTHON: the worker's, when the task runs
            )
            clean = for_each(CompactPartitionOperator, "clean", clean_kwargs, label=partition_label,
                             trigger_rule="none_failed", outlets=[COMPACTED_ALIAS])
            select >> [spark_submissions, clean_kwargs]
            build_key_map >> clean
        steps += [select, spark_submissions, clean_kwargs, build_key_map, clean]
    end_of_run("log_compaction", *steps, label_task=clean_kwargs)
