"""log_retention: delete expired segments of every partition, then purge old ``.deleted`` files."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.notifiers import MaintenanceFailureNotifier
from storage_maintenance.operators import (
    FailRunIfUpstreamFailedOperator,
    ListPartitionsOperator,
    LogRetentionOperator,
    PurgeDeletedOperator,
)
from storage_maintenance.params import maintenance_params

DOC_MD = """
### Log retention

Kafka's `log.retention.check.interval.ms` (5 minutes) as a DAG:

1. **list_partitions** lists the partitions of the configured log dirs (the `topics` param narrows them;
   more than `max_partitions` fails the run instead of flooding the scheduler).
2. **retention**, one mapped task per partition (named `topic-partition` in the UI), deletes a prefix of
   segments: below the log start offset, above `retention.bytes`, older than `retention.ms`. Deleted segments
   are renamed `.deleted` and the log start offset advances and is checkpointed. The task's XCom holds the
   segments deleted, bytes reclaimed and segments whose timestamps lie in the future.
3. **purge_deleted** removes `.deleted` files older than `file.delete.delay.ms`. It runs even when a partition
   failed (`trigger_rule="all_done"`): one broken partition must not stop disk space being reclaimed for the
   others; its own input is only files that earlier, successful deletions scheduled.
4. **fail_run_if_upstream_failed** keeps the run red when any step failed (a run's state comes from its leaf
   tasks, and the all-done purge would otherwise be a green leaf).

**What "now" is:** every task acts as of the run's **data interval end**, not the wall clock. A segment is
expired when `data_interval_end - largest timestamp > retention.ms`. So a backfilled run deletes what was
expired at the end of its interval, and re-running an interval that is done changes nothing.

Params: `dry_run` (report only), `topics` (empty = all), `max_partitions`. Failures e-mail the addresses in
`$STORAGE_MAINTENANCE_ALERT_EMAILS` through the `smtp_default` connection (see
`plugins/storage_maintenance/README.md`).
"""

with DAG(
    dag_id="log_retention",
    description="Delete expired log segments per partition, then purge .deleted files",
    schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=maintenance_params(max_partitions=True),
    default_args={
        "retries": 2,
        "retry_delay": datetime.timedelta(seconds=30),
        "execution_timeout": datetime.timedelta(minutes=30),
        "on_failure_callback": [MaintenanceFailureNotifier()],
    },
    tags=["storage", "maintenance", "retention"],
    doc_md=DOC_MD,
) as dag:
    partitions = ListPartitionsOperator(
        task_id="list_partitions",
        topics="{{ params.topics }}",
        max_partitions="{{ params.max_partitions }}",
    )
    retention = LogRetentionOperator.partial(
        task_id="retention",
        dry_run="{{ params.dry_run }}",
        map_index_template="{{ task.topic }}-{{ task.partition }}",
    ).expand_kwargs(partitions.output)
    purge = PurgeDeletedOperator(
        task_id="purge_deleted",
        dry_run="{{ params.dry_run }}",
        trigger_rule="all_done",
    )
    run_failed = FailRunIfUpstreamFailedOperator(
        task_id="fail_run_if_upstream_failed",
        trigger_rule="one_failed",
        retries=0,
        on_failure_callback=[],
    )

    retention >> purge
    [partitions, retention, purge] >> run_failed
