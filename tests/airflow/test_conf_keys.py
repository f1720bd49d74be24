"""Safe trigger input: a conf key no param declares (a typo such as ``dryrun``) fails the run's first task at once
and nothing else runs; and which instant a run acts as of: ``as_of`` from the conf, the trigger time of a manual
run (whatever logical date the form filled in), the data interval end of scheduled runs, backfills and
``dag.test()``; every task's XCom says which rule chose it."""
from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING, Any, cast

import pytest

from storage_maintenance.maintenance_dags import MAINTENANCE_DAGS

from .conftest import parse_dag, run_results, task_instances
from .storage_fixtures import HOUR_MS, T, T_MS, expired_segments, old_then_recent

if TYPE_CHECKING:
    from airflow.sdk import Context

pytestmark = pytest.mark.airflow

# The tasks each DAG starts with (no upstream); every other maintenance task depends on them.
FIRST_TASKS = {"log_checkpoint": {"plan_batches"}, "log_flush": {"plan_batches"}, "log_retention": {"plan_batches"},
               "log_compaction": {"select_dirtiest_logs"}, "log_verify": {"verify_log_dirs", "plan_batches"},
               "log_dir_balance": {"plan_moves"}, "log_tiering": {"plan_batches"}}
END_TASKS = {"run_report", "fail_run_if_upstream_failed"}


@pytest.fixture
def expired(storage):
    """Two partitions (one per log dir) whose old segments retention deletes at T."""
    storage.produce("events", 0, old_then_recent())
    storage.produce("events", 1, old_then_recent())
    return storage


def test_the_first_tasks_are_the_ones_every_other_task_waits_for(storage):
    for dag_id in MAINTENANCE_DAGS:
        dag = parse_dag(dag_id)
        assert {t.task_id for t in dag.tasks if not t.upstream_task_ids} == FIRST_TASKS[dag_id], dag_id


@pytest.mark.parametrize("dag_id", MAINTENANCE_DAGS)
def test_a_mistyped_conf_key_starts_nothing(expired, dag_id):
    storage = expired
    before = storage.snapshot()
    dag = parse_dag(dag_id)
    accepted = ", ".join(sorted(dag.params))

    run = dag.test(logical_date=T, run_conf={"dryrun": True})

    assert run.state == "failed"
    tis = task_instances(run)
    started = set()
    for (task_id, _), ti in tis.items():
        if task_id in END_TASKS:
            continue
        assert ti.state in ("failed", "upstream_failed"), (task_id, ti.state)      # nothing succeeded
        if ti.state == "failed":
            assert ti.try_number == 1, task_id                                      # no retry: input, not luck
            started.add(task_id)
    # The first tasks refused; so did a step that runs after failures (retention's purge, "all_done"): every
    # maintenance operator checks the conf before it touches anything.
    assert FIRST_TASKS[dag_id] <= started <= FIRST_TASKS[dag_id] | {"purge_deleted"}
    assert storage.snapshot() == before
    report = run_results(run)[("run_report", -1)]
    errors = {t["task_id"]: t["error"] for t in report["failed_tasks"]}
    assert set(errors) == started
    for error in errors.values():
        assert "unknown key(s) in the run's conf: 'dryrun' (did you mean 'dry_run'?)" in error
        assert f"{dag_id} accepts only {accepted}. Nothing was done" in error
    assert "as_of" in dag.params and "dry_run" in dag.params


def test_every_unknown_key_is_named_beside_the_known_ones(expired):
    before = expired.snapshot()
    run = parse_dag("log_retention").test(logical_date=T, run_conf={"dry_run": True, "topic": ["events"],
                                                                    "batchsize": 5, "zzz": 1})
    assert run.state == "failed" and expired.snapshot() == before
    failed = {t["task_id"]: t for t in run_results(run)[("run_report", -1)]["failed_tasks"]}["plan_batches"]
    assert re.search(r"unknown key\(s\) in the run's conf: 'batchsize' \(did you mean 'batch_size'\?\), "
                     r"'topic' \(did you mean 'topics'\?\), 'zzz'; log_retention accepts only as_of, batch_size, "
                     r"dry_run, max_batches, topics\.", failed["error"]), failed["error"]


def test_declared_keys_run(expired):
    run = parse_dag("log_retention").test(logical_date=T, run_conf={"dry_run": True, "topics": ["events"],
                                                                    "batch_size": 1, "max_batches": 4})
    assert run.state == "success"


# -- what "now" is -------------------------------------------------------------------------------------------

def retention_batches(run) -> list[dict]:
    return [batch for (task, _), batch in run_results(run).items() if task == "retention"]


def test_as_of_from_the_conf_replays_that_instant_and_says_so(expired):
    storage = expired
    describe = storage.describe()
    as_of_ms = T_MS - HOUR_MS - 50 * 60_000                     # 10:10: only the oldest segments had expired
    at_as_of = {tp: expired_segments(d, as_of_ms, HOUR_MS) for tp, d in describe.items()}
    at_t = {tp: expired_segments(d, T_MS, HOUR_MS) for tp, d in describe.items()}
    assert all(at_as_of[tp] and len(at_as_of[tp]) < len(at_t[tp]) for tp in describe)

    run = parse_dag("log_retention").test(logical_date=T, run_conf={"as_of": "2026-01-01T10:10:00Z"})

    assert run.state == "success"
    for batch in retention_batches(run):
        assert (batch["as_of"], batch["as_of_source"]) == ("2026-01-01T10:10:00.000Z", "as_of from the run's conf")
        assert batch["now_ms"] == as_of_ms
        for r in batch["results"]:
            assert r["deleted_base_offsets"] == at_as_of[(r["topic"], r["partition"])]


def test_as_of_without_an_offset_is_utc_and_one_after_the_trigger_is_refused(expired):
    storage = expired
    run = parse_dag("log_flush").test(logical_date=T, run_conf={"as_of": "2026-01-01T11:30"})
    assert run.state == "success"
    assert {b["as_of"] for (t, _), b in run_results(run).items() if t == "flush"} == {"2026-01-01T11:30:00.000Z"}

    before = storage.snapshot()
    pressed = T + datetime.timedelta(minutes=1)
    run = parse_dag("log_retention").test(logical_date=T, run_after=pressed,
                                          run_conf={"as_of": "2026-01-01T13:00:00+00:00"})
    assert run.state == "failed" and storage.snapshot() == before
    assert task_instances(run)[("plan_batches", -1)].try_number == 1
    failed = run_results(run)[("run_report", -1)]["failed_tasks"]
    assert {t["task_id"] for t in failed} == {"plan_batches", "purge_deleted"}
    for task in failed:
        assert ("as_of '2026-01-01T13:00:00+00:00' lies after the moment the run was triggered "
                "(2026-01-01T12:01:00.000Z)") in task["error"]


def context_of(*, run_type: str, logical: datetime.datetime | None, run_after: datetime.datetime,
               user: str | None, as_of: str | None = None) -> Context:
    """A task's context as the task runner builds it: the DAG run the execution API hands out, with the data
    interval of the hourly compaction timetable (a manual run's inferred from its logical date, a scheduled or
    backfill run's the hour its logical date starts), and the params."""
    import pendulum
    from airflow.sdk.api.datamodels._generated import DagRun
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow.timetables.base import DataInterval

    interval = None
    if logical is not None and run_type == "manual":
        interval = CronDataIntervalTimetable("0 * * * *", timezone="UTC").infer_manual_data_interval(
            run_after=pendulum.instance(logical))
    elif logical is not None:
        interval = DataInterval(logical, logical + datetime.timedelta(hours=1))  # type: ignore[arg-type]  # aware datetimes, which Airflow accepts for pendulum's
    dag_run = DagRun(dag_id="log_compaction", run_id="r", logical_date=logical,
                     data_interval_start=interval.start if interval else None,
                     data_interval_end=interval.end if interval else None, run_after=run_after, start_date=run_after,
                     end_date=None, run_type=run_type, state="running", conf={"as_of": as_of} if as_of else {},  # type: ignore[arg-type]  # plain strings, as a trigger sends them
                     triggering_user_name=user, consumed_asset_events=[], partition_key=None)
    # the part of the context run_as_of reads
    return cast("Context", {"dag_run": dag_run, "data_interval_end": dag_run.data_interval_end,
                            "params": {"as_of": as_of}})


def test_the_rule_for_each_kind_of_run():
    from storage_maintenance.tasks.params import run_as_of

    pressed = datetime.datetime(2026, 1, 1, 12, 59, 43, tzinfo=datetime.timezone.utc)
    form_filled = datetime.datetime(2026, 1, 1, 12, 59, 10, tzinfo=datetime.timezone.utc)
    cases: list[tuple[dict[str, Any], str, str]] = [
        # The trigger form (and the REST API) fill in a logical date: the hourly timetable aligns its interval
        # to 12:00, 59 minutes before the button was pressed; the run acts as of the press.
        (dict(run_type="manual", logical=form_filled, run_after=pressed, user="admin"),
         "2026-01-01T12:59:43.000Z", "trigger time (manual run)"),
        (dict(run_type="manual", logical=None, run_after=pressed, user="admin"),
         "2026-01-01T12:59:43.000Z", "trigger time (the run has no data interval)"),
        (dict(run_type="manual", logical=form_filled, run_after=pressed, user="admin", as_of="2026-01-01T08:00:00Z"),
         "2026-01-01T08:00:00.000Z", "as_of from the run's conf"),
        (dict(run_type="scheduled", logical=T, run_after=pressed, user=None),
         "2026-01-01T13:00:00.000Z", "data interval end"),
        (dict(run_type="backfill", logical=T, run_after=pressed, user="admin"),
         "2026-01-01T13:00:00.000Z", "data interval end"),
        # `airflow dags test` / dag.test() replay the logical date they are given.
        (dict(run_type="manual", logical=form_filled, run_after=pressed, user="dag_test"),
         "2026-01-01T12:00:00.000Z", "data interval end"),
    ]
    for kwargs, iso, source in cases:
        when = run_as_of(context_of(**kwargs))
        assert (when["iso"], when["source"]) == (iso, source), kwargs


def test_a_bad_as_of_fails_naming_it():
    from airflow.sdk.exceptions import AirflowFailException

    from storage_maintenance.tasks.params import run_as_of

    pressed = T + datetime.timedelta(minutes=5)
    with pytest.raises(AirflowFailException, match=re.escape("as_of must be an ISO date-time such as "
                                                             "2026-01-01T12:00:00Z, got 'yesterday'")):
        run_as_of(context_of(run_type="manual", logical=T, run_after=pressed, user="admin", as_of="yesterday"))
