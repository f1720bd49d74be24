"""log_flush: fsync the logs whose time-based flush (flush.ms) is due, in batches, every five minutes."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.tasks.operators import LogFlushOperator
from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.wiring import end_of_run, for_each, host_group, plan_batches, storage_hosts

DOC_MD = """
### Log flush

Kafka's time-based flush (`flush.ms` per topic, `log.flush.interval.ms` for the broker) as a DAG:
**plan_batches** cuts the partitions into batches, **flush** (one mapped task per batch) fsyncs every log whose
last flush is at least `flush.ms` old and that has unflushed data, and advances its recovery point. Kafka's
default `flush.ms` is "never" (the OS page cache decides); topics that set it are the ones this DAG flushes.
A partition that fails does not stop the others. **run_report** summarises the run and sends one alert if
anything failed.

**Several storage hosts** (the storage config's `hosts:`): these steps run once per host, in the task group named
after it (`storage-a.plan_batches`, `storage-a.flush`), on the Celery queue of its name and over its log dirs only;
**run_report** covers every group.

**What "now" is:** the run's **data interval end** (the trigger time of a run started by hand or without an
interval; see below); a log is due when `now - last flush >= flush.ms`.

Params: `dry_run` (say which logs are due, flush nothing), `topics`, `batch_size`, `max_batches`, `as_of`.
"""

with DAG(
    dag_id="log_flush",
    description="Time-based flush (flush.ms) of the logs that are due, in batches of partitions",
    schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=maintenance_params(batches=True),
    default_args=maintenance_default_args(retry_delay_s=30, execution_timeout_min=10),
    tags=["storage", "maintenance", "flush"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            plan = plan_batches()
            flush = for_each(LogFlushOperator, "flush", plan)
        steps += [plan, flush]
    end_of_run("log_flush", *steps, label_task=plan)
