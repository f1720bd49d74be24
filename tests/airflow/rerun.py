"""Run a finished DAG run again, as an operator's "Clear" (or a backfill with ``--reprocess-behavior``) does.

``dag.test()`` cannot: it deletes an existing run of the same logical date and creates a new one, so nothing of
the first try is left. :func:`rerun` clears every task instance of the same run with Airflow's own
``clear_task_instances`` (the path of the UI's Clear and of backfills; XComs stay until each task runs again),
then drives the run to its end with the scheduler's decisions (``DagRun.update_state``: mapped tasks are expanded
again, the instances a smaller expansion no longer has become ``removed``) and runs each task in process exactly
as ``dag.test()`` does.
"""
from __future__ import annotations


def rerun(dag, dag_run, timeout_s: float = 300):
    """Clear ``dag_run`` (of ``dag``, as parsed by ``parse_dag``) and run it again with its own conf; returns the
    run, fresh from the metadata DB."""
    import time

    from sqlalchemy import select

    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils import timezone  # type: ignore[attr-defined]  # a deprecated alias Airflow resolves when it is imported
    from airflow.utils.state import DagRunState, TaskInstanceState

    session = settings.Session()  # type: ignore[misc]  # None until Airflow configures its ORM, which the tests' Airflow has done
    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == dag_run.run_id))
    clear_task_instances(list(run.get_task_instances(session=session)), session, dag_run_state=DagRunState.QUEUED)
    session.commit()
    run.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    run.state = DagRunState.RUNNING           # what the scheduler does with a queued run it starts
    run.start_date = timezone.utcnow()
    session.commit()
    finished = {TaskInstanceState.SUCCESS, TaskInstanceState.FAILED, TaskInstanceState.SKIPPED,
                TaskInstanceState.UPSTREAM_FAILED, TaskInstanceState.REMOVED}
    deadline = time.monotonic() + timeout_s
    while run.state == DagRunState.RUNNING:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {dag_run.run_id} did not finish within {timeout_s} s")
        session.expire_all()
        schedulable, _ = run.update_state(session=session)
        for ti in schedulable:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
            ti.scheduled_dttm = timezone.utcnow()
        session.commit()
        scheduled = [ti for ti in run.get_task_instances(session=session) if ti.state == TaskInstanceState.SCHEDULED]
        if not scheduled and all(ti.state in finished for ti in run.get_task_instances(session=session)):
            session.expire_all()
            run.update_state(session=session)
            session.commit()
            break
        if not scheduled:
            time.sleep(0.2)
        for ti in scheduled:
            _run_task(ti=ti, task=dag.task_dict[ti.task_id])
    session.expire_all()
    result = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == dag_run.run_id))
    session.expunge_all()
    session.close()
    return result
