"""log_checkpoint: flush every log and write both offset checkpoint files of its log dir, in batches, every minute."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.tasks.operators import LogCheckpointOperator
from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.wiring import end_of_run, for_each, host_group, plan_batches, storage_hosts

DOC_MD = """
### Log checkpoint

Kafka's checkpoint tasks (`log.flush.offset.checkpoint.interval.ms` and
`log.flush.start.offset.checkpoint.interval.ms`, one minute by default) as a DAG: **plan_batches** cuts the
partitions into batches per log dir; **checkpoint** (one mapped task per batch) flushes each log of its batch
to its end (fsync), then writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` of its log
dir (Kafka's text format, written atomically; entries of other batches' partitions are kept). After a crash,
logs are recovered only from their checkpointed recovery point, so a recent checkpoint keeps start-up short.
**run_report** summarises the run and sends one alert if anything failed.

**Several storage hosts** (the storage config's `hosts:`): these steps run once per host, in the task group named
after it (`storage-a.plan_batches`, `storage-a.checkpoint`), on the Celery queue of its name and over its log dirs
only; **run_report** covers every group.

**What "now" is:** the run's **data interval end** (the trigger time of a run started by hand or without an
interval; see below), passed to the engine as `now_ms`; it is the time recorded for the flush.

Params: `dry_run` (report, write nothing), `topics`, `batch_size`, `max_batches`, `as_of`.
"""

with DAG(
    dag_id="log_checkpoint",
    description="Flush logs and write recovery-point and log-start-offset checkpoints, in batches",
    schedule=CronDataIntervalTimetable("* * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=datetime.timedelta(minutes=10),
    render_template_as_native_obj=True,
    params=maintenance_params(batches=True),
    default_args=maintenance_default_args(retry_delay_s=10, execution_timeout_min=5),
    tags=["storage", "maintenance", "checkpoint"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            plan = plan_batches()
            checkpoint = for_each(LogCheckpointOperator, "checkpoint", plan)
        steps += [plan, checkpoint]
    end_of_run("log_checkpoint", *steps, label_task=plan)
