"""log_tiering: tiered storage in batches of partitions: copy sealed segments to the object store, then local and
remote retention of tiered topics and the clean-up of orphaned objects (Kafka's remote log manager as a DAG)."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.tiering import TIER_FIGURES, TierOperator, TierPlanOperator
from storage_maintenance.tasks.wiring import end_of_run, for_each, host_group, plan_batches, storage_hosts

DOC_MD = """
### Log tiering

Kafka's tiered storage (KIP-405): the work of the broker's `RemoteLogManager` threads (every
`remote.log.manager.task.interval.ms`) as a DAG, for the topics with `remote.storage.enable=true`, once the
store has `remote.log.storage.system.enable=true` and an object store under `rsm.config.storage.s3.*`:

1. **plan_batches** lists the partitions of the topics tiering has work for (`remote.storage.enable`, or
   `remote.log.delete.on.disable` after it was turned off; none while remote storage is disabled: the run then
   has nothing to do and asks no object store), checks the object store with one request (a store that is down,
   a missing bucket or refused credentials fail the task at once, naming the fix; no partition is touched), and
   cuts the partitions into batches per log dir (`batch_size` partitions each; more than `max_batches` batches
   make the batches bigger instead). A run's cost follows the tiered partitions, not the store's.
2. **tier**, one mapped task per batch (named after its first and last partition), for each partition (holding
   its tiering claim: a partition another run is tiering is skipped and reported):
   - cleans up what an interrupted run left (a copy or deletion started and never finished, objects no metadata
     names, multipart uploads cut short), so no object stays untracked;
   - copies the sealed segments below the last stable offset and the high watermark that have no remote copy
     yet (unless `remote.log.copy.disable`), each with its indexes, producer snapshot and leader-epoch entries;
     every object is checked after upload (size and checksum) before the copy is marked finished in
     `__remote_log_metadata`;
   - local retention: deletes the local copies past `local.retention.ms` / `local.retention.bytes` whose remote
     copy has finished (never one without);
   - remote retention: deletes remote segments past `retention.ms` / `retention.bytes` (over the whole log,
     local and remote) or below the log start offset, and raises the log start offset;
   - a topic whose `remote.storage.enable` was turned off with `remote.log.delete.on.disable=true` has its remote
     segments deleted.
   A partition that fails (a remote object missing or damaged: the error names the offsets) does not stop the
   others; the task then fails naming every failed partition. Per-partition figures are in the batch's XCom.
3. **run_report** writes the run summary, emits the run's asset event `kafka-log-maintenance://log_tiering`
   with the totals (segments and bytes copied, local and remote deletions, orphaned segments, objects and
   uploads cleaned, the lag still to copy) and, if anything failed, sends **one** alert per root cause naming the fix (the object store
   unreachable, its bucket missing, the credentials refused, a remote object missing or damaged).
   **fail_run_if_upstream_failed** keeps the run red when any step failed.

**Several storage hosts** (the storage config's `hosts:`): steps 1-2 run once per host, in the task group named
after it (`storage-a.plan_batches`, `storage-a.tier`), on the Celery queue of its name and over its log dirs
only; **run_report** covers every group.

**What "now" is:** every task acts as of the run's **data interval end** (or its trigger time when the run was
started by hand or has no data interval): `local.retention.ms` and `retention.ms` expire segments as of that
instant, so a backfilled run acts as its interval's run would have, and re-running an interval changes nothing.

Params: `dry_run` (plan the copies and deletions, change nothing: no upload, no deletion, no metadata record),
`topics` (empty = all), `batch_size`, `max_batches`, `as_of` (act as of that instant).
"""

with DAG(
    dag_id="log_tiering",
    description="Copy sealed log segments to the object store, then local and remote retention of tiered topics",
    schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=maintenance_params(batches=True),
    default_args=maintenance_default_args(retry_delay_s=30, execution_timeout_min=60),
    tags=["storage", "maintenance", "tiering"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            plan = plan_batches(TierPlanOperator)
            tier = for_each(TierOperator, "tier", plan)
        steps += [plan, tier]
    end_of_run("log_tiering", *steps, label_task=plan, figures=TIER_FIGURES)
