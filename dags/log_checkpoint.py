"""log_checkpoint: flush every log and write both offset checkpoint files of every log dir, every minute."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.notifiers import MaintenanceFailureNotifier
from storage_maintenance.operators import LogCheckpointOperator
from storage_maintenance.params import maintenance_params

DOC_MD = """
### Log checkpoint

Kafka's checkpoint tasks (`log.flush.offset.checkpoint.interval.ms` and
`log.flush.start.offset.checkpoint.interval.ms`, one minute by default) as a DAG: **checkpoint** flushes each
log to its end (fsync) and then writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint`
in every log dir (Kafka's text format, written atomically). After a crash, logs are recovered only from
their checkpointed recovery point, so a recent checkpoint keeps start-up short.

**What "now" is:** the run's **data interval end** (the minute the run stands for), passed to the engine as
`now_ms`; it is the time recorded for the flush.

Params: `dry_run` lists the partitions that would be flushed without opening any log; `topics` limits the
flush to some topics (the checkpoint files of every dir are still written). Failures alert by e-mail (see
`plugins/storage_maintenance/README.md`).
"""

with DAG(
    dag_id="log_checkpoint",
    description="Flush logs and write recovery-point and log-start-offset checkpoints",
    schedule=CronDataIntervalTimetable("* * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=datetime.timedelta(minutes=10),
    render_template_as_native_obj=True,
    params=maintenance_params(),
    default_args={
        "retries": 2,
        "retry_delay": datetime.timedelta(seconds=10),
        "execution_timeout": datetime.timedelta(minutes=5),
        "on_failure_callback": [MaintenanceFailureNotifier()],
    },
    tags=["storage", "maintenance", "checkpoint"],
    doc_md=DOC_MD,
) as dag:
    LogCheckpointOperator(
        task_id="checkpoint",
        topics="{{ params.topics }}",
        dry_run="{{ params.dry_run }}",
    )
