"""The DAG files import cleanly and every maintenance DAG keeps the rules of ARCHITECTURE.md sections 5 and 9."""
from __future__ import annotations

import pytest

from storage_maintenance.maintenance_dags import MAINTENANCE_DAGS

from .conftest import DAGS_FOLDER, parse_dag

pytestmark = pytest.mark.airflow

BATCHED = {"log_checkpoint": "checkpoint", "log_flush": "flush", "log_retention": "retention", "log_verify": "verify",
           "log_tiering": "tier"}


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

    from storage_maintenance.tasks.notifiers import MaintenanceFailureNotifier
    from storage_maintenance.tasks.operators import FailRunIfUpstreamFailedOperator
    from storage_maintenance.tasks.params import maintenance_default_args
    from storage_maintenance.tasks.run_report import RunReportOperator

    dag = parse_dag(dag_id)
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    # A real [start, end) interval: "@daily"-style schedules give start == end in Airflow 3.
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.render_template_as_native_obj is True
    assert dag.tags and "maintenance" in dag.tags
    assert dag.doc_md and "data interval end" in dag.doc_md and "trigger time" in dag.doc_md
    assert {"dry_run", "topics"} <= set(dag.params)
    assert dag.params["dry_run"] is False and dag.params["topics"] is None
    # The run ends with its report (after everything, also after failures) and a leaf that keeps it red.
    report = dag.get_task("run_report")
    assert isinstance(report, RunReportOperator) and report.trigger_rule == "all_done"
    assert report.retries == 0 and any(isinstance(cb, MaintenanceFailureNotifier) for cb in report.on_failure_callback)
    maintenance = {t.task_id for t in dag.tasks} - {"run_report", "fail_run_if_upstream_failed"}
    assert set(report.report_tasks) == maintenance
    run_failed = dag.get_task("fail_run_if_upstream_failed")
    assert isinstance(run_failed, FailRunIfUpstreamFailedOperator) and run_failed.trigger_rule == "one_failed"
    assert run_failed.upstream_task_ids == maintenance
    assert dag.get_task("run_report").upstream_task_ids <= maintenance
    # One set of defaults: retries for errors that may pass, no per-task alert (the report sends one per run).
    defaults = maintenance_default_args()
    for task in dag.tasks:
        if task.task_id in ("run_report", "fail_run_if_upstream_failed"):
            continue
        assert task.retries == defaults["retries"], task.task_id
        assert task.retry_delay.total_seconds() <= 60, task.task_id
        assert not task.on_failure_callback, task.task_id


@pytest.mark.parametrize("dag_id, task_id", sorted(BATCHED.items()))
def test_batched_dags_map_one_task_per_batch(storage, dag_id, task_id):
    dag = parse_dag(dag_id)
    assert dag.params["batch_size"] >= 1 and dag.params["max_batches"] >= 1
    batch = dag.get_task(task_id)
    assert batch.map_index_template == "{{ task.batch_label }}"
    assert batch.upstream_task_ids >= {"plan_batches"}


def test_retention_and_compaction_declare_their_asset_outlets_where_a_mapped_task_keeps_them(storage):
    from storage_maintenance.tasks.assets import COMPACTED_ALIAS, run_asset

    retention = parse_dag("log_retention")
    assert retention.timetable.expression == "*/5 * * * *"
    assert retention.get_task("purge_deleted").trigger_rule == "all_done"
    assert retention.get_task("run_report").outlets == [run_asset("log_retention")]
    compaction = parse_dag("log_compaction")
    assert compaction.get_task("clean").partial_kwargs["outlets"] == [COMPACTED_ALIAS]
    assert compaction.get_task("clean").map_index_template == "{{ task.topic }}-{{ task.partition }}"
    assert compaction.get_task("build_key_map").map_index_template == "{{ task.topic }}-{{ task.partition }}"


def test_schedules(storage):
    assert parse_dag("log_checkpoint").timetable.expression == "* * * * *"
    assert parse_dag("log_flush").timetable.expression == "*/5 * * * *"
    assert parse_dag("log_tiering").timetable.expression == "*/5 * * * *"
    assert parse_dag("log_compaction").timetable.expression == "0 * * * *"
    assert parse_dag("log_verify").timetable.expression == "30 3 * * *"
    assert parse_dag("log_dir_balance").timetable.expression == "17 * * * *"
