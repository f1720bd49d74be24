"""log_retention: delete expired segments of every partition, in batches, then purge old ``.deleted`` files and
``-delete`` folders; expire idle producer ids."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.tasks.operators import ExpireProducersOperator, LogRetentionOperator, PurgeDeletedOperator
from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.wiring import DRY_RUN, end_of_run, for_each, host_group, plan_batches, storage_hosts

DOC_MD = """
### Log retention

Kafka's `log.retention.check.interval.ms` (5 minutes) as a DAG:

1. **plan_batches** lists the partitions of the log dirs (folder names only) and cuts them into batches per
   log dir (`batch_size` partitions each; more than `max_batches` batches make the batches bigger instead).
2. **retention**, one mapped task per batch (named after its first and last partition), deletes a prefix of
   segments of each partition: below the log start offset, above `retention.bytes`, older than `retention.ms`.
   Deleted segments are renamed `.deleted`, the log start offset advances and is checkpointed. A partition
   that fails does not stop the others; the task then fails naming every failed partition (errors no retry can
   fix fail at once). Per-partition figures are in the batch's XCom.
3. **purge_deleted** removes `.deleted` files and the `-delete` folders of deleted (or moved-away) partitions
   older than `file.delete.delay.ms`, even when a batch failed.
   **expire_producers**, one mapped task per batch beside retention, forgets the producer ids that have no open
   transaction and wrote nothing for `producer.id.expiration.ms` (Kafka's expiration check).
4. **run_report** writes the run summary (one row per partition that changed or failed; the "Run summary"
   tab of the run), emits the run's asset event `kafka-log-maintenance://log_retention` with the totals and,
   if anything failed, sends **one** alert for the run listing every failed partition.
   **fail_run_if_upstream_failed** keeps the run red when any step failed.

**Several storage hosts** (the storage config's `hosts:`): steps 1-3 run once per host, in the task group named
after it (`storage-a.plan_batches`, `storage-a.retention`, `storage-a.purge_deleted`, `storage-a.expire_producers`),
on the Celery queue of its name and over its log dirs only; **run_report** covers every group.

**What "now" is:** every task acts as of the run's **data interval end**, or its trigger time when the run
was started by hand or has no data interval (triggered through the REST API with `logical_date: null`); logs,
XComs, the alert and the Storage view say which. A segment is expired when `now - largest timestamp > retention.ms`, so a
backfilled run deletes what was expired at the end of its interval, and re-running an interval changes nothing.

Params: `dry_run`, `topics` (empty = all), `batch_size`, `max_batches`, `as_of` (act as of that instant).
"""

with DAG(
    dag_id="log_retention",
    description="Delete expired log segments in batches of partitions, then purge .deleted files",
    schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=maintenance_params(batches=True),
    default_args=maintenance_default_args(retry_delay_s=30, execution_timeout_min=30),
    tags=["storage", "maintenance", "retention"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            plan = plan_batches()
            retention = for_each(LogRetentionOperator, "retention", plan)
            purge = PurgeDeletedOperator(task_id="purge_deleted", dry_run=DRY_RUN, trigger_rule="all_done")
            expire = for_each(ExpireProducersOperator, "expire_producers", plan)
            retention >> purge
        steps += [plan, retention, purge, expire]
    end_of_run("log_retention", *steps, label_task=plan)
