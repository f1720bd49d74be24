"""log_compaction: clean the dirtiest compacted logs, with key maps built on Spark."""
from __future__ import annotations

import datetime
import os
import sys

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from storage_maintenance.compaction import (
    SPARK_JOB,
    CompactPartitionOperator,
    PlanPartOperator,
    SelectDirtiestLogsOperator,
)
from storage_maintenance.notifiers import MaintenanceFailureNotifier
from storage_maintenance.operators import FailRunIfUpstreamFailedOperator
from storage_maintenance.params import maintenance_params

DOC_MD = """
### Log compaction

Kafka's log cleaner as a DAG: for keyed (`cleanup.policy=compact`) topics only the latest value per key
survives; offsets never change.

1. **select_dirtiest_logs** ranks compacted partitions by dirty ratio (`min.cleanable.dirty.ratio`, strict;
   `max.compaction.lag.ms` forces), skips partitions another run is cleaning or that are marked uncleanable,
   and picks where each key map is built (`map_strategy`: `spark`, `local`, or `auto` = Spark when the dirty
   section is larger than the in-process map, `log.cleaner.dedupe.buffer.size`, can hold).
2. **build_key_map** (one mapped `SparkSubmitOperator` per Spark partition, master from the `spark_default`
   connection) writes the latest offset of every key of the dirty section as Parquet.
3. **clean** (one mapped task per partition, named `topic-partition`) copies what survives into new segments
   and swaps them in crash-safely; tombstones stay until their delete horizon. Its XCom holds bytes
   before/after, records removed, tombstones purged and duration; it emits an asset event
   `kafka-log://<topic>/<partition>` with the same figures.

**What "now" is:** the run's **data interval end** T. A run cleans only segments whose records all lie
before T (and honours `min.compaction.lag.ms` as of T), so a backfill over N intervals makes N bounded,
ordered steps, and re-running a finished interval reports "nothing to do" and changes no byte.

Params: `dry_run`, `topics`, `max_partitions` (the dirtiest N), `map_strategy`.
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
    default_args={
        "retries": 2,
        "retry_delay": datetime.timedelta(seconds=30),
        "execution_timeout": datetime.timedelta(hours=2),
        "on_failure_callback": [MaintenanceFailureNotifier()],
    },
    tags=["storage", "maintenance", "compaction", "spark"],
    doc_md=DOC_MD,
) as dag:
    select = SelectDirtiestLogsOperator(
        task_id="select_dirtiest_logs",
        topics="{{ params.topics }}",
        max_partitions="{{ params.max_partitions }}",
        map_strategy="{{ params.map_strategy }}",
        dry_run="{{ params.dry_run }}",
    )
    plan = "{{ ti.xcom_pull(task_ids='select_dirtiest_logs') }}"
    spark_args = PlanPartOperator(task_id="spark_submissions", plan=plan, part="spark_args")
    clean_kwargs = PlanPartOperator(task_id="partitions_to_clean", plan=plan, part="clean_kwargs")
    build_key_map = SparkSubmitOperator.partial(
        task_id="build_key_map",
        application=SPARK_JOB,
        conn_id="spark_default",
        name="build-key-map",
        conf={"spark.ui.enabled": "false"},
        env_vars={
            # spark-submit is the pip package's; workers run this project's interpreter.
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        },
        map_index_template="{{ task.application_args[3] }}-{{ task.application_args[5] }}",
    ).expand(application_args=spark_args.output)
    clean = CompactPartitionOperator.partial(
        task_id="clean",
        dry_run="{{ params.dry_run }}",
        trigger_rule="none_failed",
        map_index_template="{{ task.topic }}-{{ task.partition }}",
    ).expand_kwargs(clean_kwargs.output)
    run_failed = FailRunIfUpstreamFailedOperator(
        task_id="fail_run_if_upstream_failed",
        trigger_rule="one_failed",
        retries=0,
        on_failure_callback=[],
    )

    select >> [spark_args, clean_kwargs]
    build_key_map >> clean
    [select, spark_args, clean_kwargs, build_key_map, clean] >> run_failed
