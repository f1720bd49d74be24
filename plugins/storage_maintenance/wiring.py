"""The wiring every maintenance DAG shares: a plan, one mapped task per item of the plan
(``operator.partial(...).expand_kwargs(plan.output)``), and the run's end (``run_report`` after the last steps,
``fail_run_if_upstream_failed`` after every step)::

    with DAG(dag_id="log_flush", params=maintenance_params(batches=True), ...):
        plan = plan_batches()
        flush = for_each(LogFlushOperator, "flush", plan)
        end_of_run("log_flush", plan, flush, label_task=plan)

A DAG file names its steps and the order between them; these build what must be the same in every DAG: the
task ids that the run report and the Storage view read, the trigger form's params, the mapped tasks' names.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .operators import FailRunIfUpstreamFailedOperator, PlanBatchesOperator
from .report import RunReportOperator, run_outcome_tasks

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    Task = BaseOperator | MappedOperator

DRY_RUN = "{{ params.dry_run }}"
BATCH_LABEL = "{{ task.batch_label }}"


def plan_batches() -> PlanBatchesOperator:
    """``plan_batches``: the run's batches of partitions, from the form's ``topics``, ``batch_size`` and
    ``max_batches`` (``maintenance_params(batches=True)``)."""
    return PlanBatchesOperator(
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


def end_of_run(dag_id: str, *tasks: Task, label_task: Task | None = None
               ) -> tuple[RunReportOperator, FailRunIfUpstreamFailedOperator]:
    """The two tasks that end the run (:func:`storage_maintenance.report.run_outcome_tasks`), after ``tasks``:
    every step of the DAG, in the order the report lists them, with the order between them already set.
    ``run_report`` follows the steps that no other step follows, ``fail_run_if_upstream_failed`` every step.
    ``label_task``: the step whose result names the mapped tasks in the report (the plan)."""
    report, run_failed = run_outcome_tasks(dag_id, [t.task_id for t in tasks],
                                           label_task=None if label_task is None else label_task.task_id)
    ids = {t.task_id for t in tasks}
    last = [t for t in tasks if not ids & set(t.downstream_task_ids)]
    for task in last:
        task >> report
    for task in tasks:
        task >> run_failed
    return report, run_failed
