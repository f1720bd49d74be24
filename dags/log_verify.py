"""log_verify: the read-only integrity audit of every partition, in batches, daily; damage alerts with the report."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.tasks.operators import VerifyLogDirsOperator, VerifyPartitionsOperator
from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.wiring import end_of_run, for_each, host_group, plan_batches, storage_hosts

DOC_MD = """
### Log verify

The engine's read-only `verify` (like diskcache's `check(fix=False)`) as a daily DAG. It changes nothing and
repairs nothing:

1. **verify_log_dirs** checks that the checkpoint files of every log dir parse and that every folder is a
   valid partition name.
2. **plan_batches** cuts the partitions into batches; **verify** (one mapped task per batch) reads every batch
   of every segment of each partition (size, magic, CRC, record decoding), checks offsets increase within and
   across segments, and that the offset and time indexes point at real batches; leftovers of interrupted
   operations are listed as pending. A damaged partition fails its batch at once (a retry reads the same
   bytes), the others are still verified.
3. **run_report** sends one alert for the run with each damaged partition and its problems.

**Several storage hosts** (the storage config's `hosts:`): steps 1-2 run once per host, in the task group named
after it (`storage-a.verify_log_dirs`, `storage-a.plan_batches`, `storage-a.verify`), on the Celery queue of its
name and over its log dirs only; **run_report** covers every group.

**What "now" is:** the run's data interval end (or trigger time; see below); it only names the run, the audit
reads the files as they are.

Params: `topics`, `batch_size`, `max_batches`, `as_of` (`dry_run` changes nothing: the audit never writes).
"""

with DAG(
    dag_id="log_verify",
    description="Read-only integrity audit of every partition, in batches",
    schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=maintenance_params(batches=True),
    default_args=maintenance_default_args(retry_delay_s=60, execution_timeout_min=120),
    tags=["storage", "maintenance", "verify"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            log_dirs = VerifyLogDirsOperator(task_id="verify_log_dirs")
            plan = plan_batches()
            verify = for_each(VerifyPartitionsOperator, "verify", plan, dry_run=False)   # the audit never writes
        steps += [log_dirs, plan, verify]
    end_of_run("log_verify", *steps, label_task=plan)
