"""The DAG files import cleanly and every maintenance DAG keeps the rules of DESIGN.md (sections 4, 5)."""
from __future__ import annotations

import pytest

from .conftest import DAGS_FOLDER, parse_dag

pytestmark = pytest.mark.airflow

MAINTENANCE_DAGS = ("log_checkpoint", "log_flush", "log_retention")


def test_dags_folder_imports_without_errors(storage):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    assert bag.import_errors == {}
    assert set(MAINTENANCE_DAGS) <= set(bag.dag_ids)


def test_plugin_loads_and_only_plugin_py_is_imported_by_the_plugin_manager():
    from airflow import plugins_manager

    plugins_manager.ensure_plugins_loaded()
    plugins, errors = plugins_manager._get_plugins()
    assert errors == {}
    assert "storage_maintenance" in [p.name for p in plugins]
    import sys
    # .airflowignore: the package's modules are not re-imported under their bare file names.
    assert "hooks" not in sys.modules and "operators" not in sys.modules


@pytest.mark.parametrize("dag_id", MAINTENANCE_DAGS)
def test_maintenance_dag_rules(storage, dag_id):
    from airflow.sdk import CronDataIntervalTimetable

    from storage_maintenance.notifiers import MaintenanceFailureNotifier
    from storage_maintenance.operators import FailRunIfUpstreamFailedOperator

    dag = parse_dag(dag_id)
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    # A real [start, end) interval: "@daily"-style schedules give start == end in Airflow 3.
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.render_template_as_native_obj is True
    assert dag.tags and "maintenance" in dag.tags
    assert dag.doc_md and "data interval end" in dag.doc_md
    assert {"dry_run", "topics"} <= set(dag.params)
    assert dag.params["dry_run"] is False and dag.params["topics"] == []
    for task in dag.tasks:
        if isinstance(task, FailRunIfUpstreamFailedOperator):
            assert task.trigger_rule == "one_failed"
            continue                 # it only marks the run failed; the failed task already alerted
        assert task.retries == 2, task.task_id
        assert task.retry_delay.total_seconds() <= 60, task.task_id
        assert any(isinstance(cb, MaintenanceFailureNotifier) for cb in task.on_failure_callback), task.task_id


def test_retention_dag_shape(storage):
    dag = parse_dag("log_retention")
    assert dag.timetable.expression == "*/5 * * * *"
    assert dag.params["max_partitions"] == 1000
    retention = dag.get_task("retention")
    assert retention.map_index_template == "{{ task.topic }}-{{ task.partition }}"
    assert dag.get_task("purge_deleted").trigger_rule == "all_done"
    assert dag.get_task("purge_deleted").upstream_task_ids == {"retention"}
    assert dag.get_task("fail_run_if_upstream_failed").upstream_task_ids == {
        "list_partitions", "retention", "purge_deleted"}


def test_checkpoint_and_flush_schedules(storage):
    assert parse_dag("log_checkpoint").timetable.expression == "* * * * *"
    assert parse_dag("log_flush").timetable.expression == "*/5 * * * *"
