"""log_dir_balance: move partitions off log dirs above a usage threshold into the least-used one, online."""
from __future__ import annotations

import datetime

from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from storage_maintenance.tasks.balance import MovePartitionOperator, PlanMovesOperator
from storage_maintenance.tasks.compaction import PlanPartOperator
from storage_maintenance.tasks.params import RUN_INPUT_DOC, maintenance_default_args, maintenance_params
from storage_maintenance.tasks.wiring import end_of_run, for_each, host_group, storage_hosts

DOC_MD = """
### Log dir balance

Kafka's alter-log-dirs, planned: when a disk fills up, partitions move to a log dir with room while they keep
serving (writers and readers follow them; nothing is lost or repeated, whatever crashes when).

1. **plan_moves** measures every log dir (read-only) and plans, for each dir above the threshold, which
   partitions to move (largest first) to the least-used dir, until the dir is under the threshold without
   taking the target over it. The plan (usage before and after each dir) is the task's result; with
   `dry_run` nothing else happens.
2. **move_partition**, one mapped task per move (named after the partition), copies the partition into a
   `-future` folder of the target dir while it keeps serving, catches up, and swaps it in crash-safely; the old
   folder becomes `-delete` and is removed by `log_retention`'s purge after `file.delete.delay.ms`. A copy left
   by a failed move is resumed by the next run. The Storage view shows moves in progress.
3. **run_report** summarises the moves and alerts once for failures and once per offline log dir.

**Several storage hosts** (the storage config's `hosts:`): a partition moves only between the log dirs of one
host, so these steps run once per host, in the task group named after it (`storage-a.plan_moves`, ...), on the
Celery queue of its name and over its log dirs only; **run_report** covers every group.

**Usage**: `max_used_percent` of each dir's filesystem (dirs sharing a filesystem are never balanced against
each other: moving between them frees nothing), or, when `max_dir_bytes` is set, the bytes of log data a dir
holds. **What "now" is:** the run's data interval end (the trigger time of a run started by hand; see below); it
stamps the moved folders.

Params: `dry_run`, `topics` (only these move), `max_used_percent`, `max_dir_bytes`, `max_moves`, `as_of`.
"""

params = maintenance_params()
params["max_used_percent"] = Param(85.0, type="number", exclusiveMinimum=0, maximum=100, title="Max used percent",
                                   description="Move partitions off log dirs whose filesystem is used above this.")
params["max_dir_bytes"] = Param(None, type=["null", "integer"], minimum=0, title="Max dir bytes",
                                description="Instead of the percentage: move off dirs holding more log data "
                                            "than this many bytes.")
params["max_moves"] = Param(5, type="integer", minimum=1, title="Max moves",
                            description="Move at most this many partitions in one run.")

with DAG(
    dag_id="log_dir_balance",
    description="Move partitions off full log dirs into the least-used one, while they keep serving",
    schedule=CronDataIntervalTimetable("17 * * * *", timezone="UTC"),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params=params,
    default_args=maintenance_default_args(retry_delay_s=60, execution_timeout_min=180),
    tags=["storage", "maintenance", "log-dirs"],
    doc_md=DOC_MD + RUN_INPUT_DOC,
) as dag:
    steps: list = []
    for host in storage_hosts():         # [None] without hosts: no group
        with host_group(host):
            plan = PlanMovesOperator(
                task_id="plan_moves",
                max_used_percent="{{ params.max_used_percent }}",
                max_dir_bytes="{{ params.max_dir_bytes }}",
                max_moves="{{ params.max_moves }}",
                topics="{{ params.topics }}",
                dry_run="{{ params.dry_run }}",
            )
            moves = PlanPartOperator(task_id="moves", plan=f"{{{{ ti.xcom_pull(task_ids='{plan.task_id}') }}}}",
                                     part="move_kwargs")
            move = for_each(MovePartitionOperator, "move_partition", moves, label="{{ task.move_label }}",
                            dry_run=False, max_active_tis_per_dagrun=2)
            plan >> moves
        steps += [plan, moves, move]
    end_of_run("log_dir_balance", *steps, label_task=moves)
