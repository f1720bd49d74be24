"""log_flush: fsync the logs whose time-based flush (flush.ms) is due, every five minutes."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.notifiers import MaintenanceFailureNotifier
from storage_maintenance.operators import LogFlushOperator
from storage_maintenance.params import maintenance_params

DOC_MD = """
### Log flush

Kafka's time-based flush (`flush.ms` per topic, `log.flush.interval.ms` for the broker) as a DAG:
**flush** fsyncs every log whose last flush is at least `flush.ms` old and that has unflushed data, and
advances its recovery point. Kafka's default `flush.ms` is "never" (the OS page cache decides); topics that
set it are the ones this DAG flushes.

**What "now" is:** the run's **data interval end**, passed to the engine as `now_ms`; a log is due when
`now - last flush >= flush.ms`.

Params: `dry_run` lists the partitions that would be checked without opening any log; `topics` limits the
flush. Failures alert by e-mail (see `plugins/storage_maintenance/README.md`).
"""

with DAG(
    dag_id="log_flush",
    description="Time-based flush (flush.ms) of the logs that are due",
    schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=maintenance_params(),
    default_args={
        "retries": 2,
        "retry_delay": datetime.timedelta(seconds=30),
        "execution_timeout": datetime.timedelta(minutes=10),
        "on_failure_callback": [MaintenanceFailureNotifier()],
    },
    tags=["storage", "maintenance", "flush"],
    doc_md=DOC_MD,
) as dag:
    LogFlushOperator(
        task_id="flush",
        topics="{{ params.topics }}",
        dry_run="{{ params.dry_run }}",
    )
