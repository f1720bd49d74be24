"""The demo's runs show how long they really took: ``airflow dags test <dag> <midnight>`` (``DAG.test()``) records a
run as started at its logical date, which made a 5-second run as of midnight show as lasting 9.5 hours at half past
nine; the demo gives such runs the start of their first task (:func:`include.demo.record_real_starts`)."""
from __future__ import annotations

import datetime
import pathlib

import pytest

from include.demo import record_real_starts
from tests.typed import present

from .conftest import parse_dag
from .storage_fixtures import T

pytestmark = pytest.mark.airflow


def _run_times(dag_id: str, run_id: str) -> tuple:
    from sqlalchemy import func, select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with create_session() as session:
        run = present(session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)))
        first_task = session.scalar(select(func.min(TI.start_date)).where(TI.dag_id == dag_id, TI.run_id == run_id))
        return run.logical_date, run.start_date, run.end_date, first_task


def test_a_run_as_of_midnight_lasts_as_long_as_its_tasks(storage):
    from airflow.configuration import conf

    before = datetime.datetime.now(datetime.timezone.utc)
    dag_run = parse_dag("log_checkpoint").test(logical_date=T)          # what `airflow dags test` runs
    assert dag_run.state == "success"
    logical, start, end, first_task = _run_times("log_checkpoint", dag_run.run_id)
    assert start == logical == T                   # the cause: the run "started" at its logical date, months ago
    db_path = pathlib.Path(conf.get("database", "sql_alchemy_conn").removeprefix("sqlite:///"))

    # this run, and any other DAG.test() run of log_checkpoint that earlier tests left in the session's DB
    assert record_real_starts(db_path, "log_checkpoint") >= 1
    logical, start, end, first_task = _run_times("log_checkpoint", dag_run.run_id)
    assert logical == T and start == first_task and before <= start <= end       # its real start, then its end
    assert record_real_starts(db_path, "log_checkpoint") == 0                  # a corrected run is left alone
