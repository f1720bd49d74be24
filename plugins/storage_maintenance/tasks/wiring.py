"""The wiring every maintenance DAG shares: a plan, one mapped task per item of the plan
(``operator.partial(...).expand_kwargs(plan.output)``), and the run's end (``run_report`` after the last steps,
``fail_run_if_upstream_failed`` after every step)::

    with DAG(dag_id="log_flush", params=maintenance_params(batches=True), ...):
        plan = plan_batches()
        flush = for_each(LogFlushOperator, "flush", plan)
        end_of_run("log_flush", plan, flush, label_task=plan)

A DAG file names its steps and the order between them; these build what must be the same in every DAG: the
task ids that the run report and the Storage view read, the trigger form's params, the mapped tasks' names.

**Several storage hosts** (the storage config's ``hosts:``): a DAG declares its steps once per host, each copy in
the host's task group (:func:`host_group`: task ids ``<host>.<step>``, the Celery queue of the host's name, the
host's log dirs only); the run's end stays outside, on the default queue::

        steps: list = []
        for host in storage_hosts():            # [None] without hosts: no group, the task ids as they are
            with host_group(host):
                plan = plan_batches()
                flush = for_each(LogFlushOperator, "flush", plan)
            steps += [plan, flush]
        end_of_run("log_flush", *steps, label_task=plan)
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from storage_engine.errors import StorageError

from ..maintenance_dags import step_of
from .hooks import config_path_without_connection
from .operators import FailRunIfUpstreamFailedOperator, PlanBatchesOperator
from .run_report import RunReportOperator, run_outcome_tasks

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    Task = BaseOperator | MappedOperator

log = logging.getLogger(__name__)

DRY_RUN = "{{ params.dry_run }}"
BATCH_LABEL = "{{ task.batch_label }}"


def storage_hosts() -> list[str | None]:
    """The storage hosts the config declares (read at parse time from ``$STORAGE_ENGINE_CONFIG`` or the default, as
    the trigger form's topics are), or ``[None]`` when it declares none or cannot be read (the tasks then fail
    naming why)."""
    from storage_engine.config_file import load_config

    path = config_path_without_connection()
    try:
        hosts: list[str | None] = list(load_config(path).hosts)
    except (StorageError, OSError) as exc:
        log.warning("cannot read the storage hosts of %s: %s", path, exc)
        return [None]
    return hosts or [None]


def host_group(host: str | None) -> Any:
    """The task group of storage ``host``, to declare its copy of the steps in: task ids ``<host>.<step>``, the
    Celery queue named after the host (its workers listen on it) and ``host=`` for every operator that takes it
    (the hook then sees only that host's log dirs). None: no group."""
    from airflow.sdk import TaskGroup

    if host is None:
        return contextlib.nullcontext()
    # (default_args is typed by its converter, copy.deepcopy, as a bare TypeVar)
    return TaskGroup(host, default_args={"queue": host, "host": host},  # type: ignore[arg-type]
                     tooltip=f"the steps on storage host {host} (Celery queue {host!r})")


def plan_batches(operator: type[PlanBatchesOperator] = PlanBatchesOperator) -> PlanBatchesOperator:
    """``plan_batches``: the run's batches of partitions, from the form's ``topics``, ``batch_size`` and
    ``max_batches`` (``maintenance_params(batches=True)``); ``operator``: a planner that checks more first (the
    tiering DAG's checks the object store)."""
    return operator(
        task_id="plan_batches",
        topics="{{ params.topics }}",
        batch_size="{{ params.batch_size }}",
        max_batches="{{ params.max_batches }}",
    )


def for_each(operator: type[BaseOperator], task_id: str, plan: BaseOperator, *, label: str = BATCH_LABEL,
             dry_run: bool = True, **kwargs: Any) -> MappedOperator:
    """One ``task_id`` task per item of ``plan``'s result (a list of keyword-argument dicts), each named by
    ``label`` (a template over its arguments; by default the batch's label), with the form's ``dry_run`` unless
    ``dry_run=False`` (an operator that takes none), and ``kwargs`` for all of them."""
    if dry_run:
        kwargs["dry_run"] = DRY_RUN
    return operator.partial(task_id=task_id, map_index_template=label, **kwargs).expand_kwargs(plan.output)


def end_of_run(dag_id: str, *tasks: Task, label_task: Task | None = None, figures: Sequence[str] = ()
               ) -> tuple[RunReportOperator, FailRunIfUpstreamFailedOperator]:
    """The two tasks that end the run (:func:`.run_report.run_outcome_tasks`), after ``tasks``:
    every step of the DAG, in the order the report lists them, with the order between them already set.
    ``run_report`` follows the steps that no other step follows, ``fail_run_if_upstream_failed`` every step.
    ``label_task``: the step whose result names the mapped tasks in the report (the plan; with host groups, each
    group's copy names that group's mapped tasks). ``figures``: per-partition figures the run's totals and asset
    event always carry (see :class:`.run_report.RunReportOperator`)."""
    report, run_failed = run_outcome_tasks(dag_id, [t.task_id for t in tasks],
                                           label_task=None if label_task is None else step_of(label_task.task_id)[1],
                                           figures=figures)
    ids = {t.task_id for t in tasks}
    last = [t for t in tasks if not ids & set(t.downstream_task_ids)]
    for task in last:
        task >> report
    for task in tasks:
        task >> run_failed
    return report, run_failed
