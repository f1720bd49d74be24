"""Several storage hosts: with the storage config's ``hosts:`` every DAG declares each step that touches a log dir
once per host, in the host's task group and on the Celery queue of its name; without it, every DAG is what it was
(same task ids, same order between them, every task on the default queue). A task of one host refuses to run on a
worker of another (``$STORAGE_MAINTENANCE_HOST``)."""
from __future__ import annotations

import pytest

from storage_maintenance.maintenance_dags import MAINTENANCE_DAGS

from .conftest import parse_dag

pytestmark = pytest.mark.airflow

HOSTS = ("storage-a", "storage-b")
END = ("run_report", "fail_run_if_upstream_failed")
# Every DAG's tasks and their upstream tasks as they were before hosts could be declared.
TODAY = {
    "log_checkpoint": {"plan_batches": [], "checkpoint": ["plan_batches"], "run_report": ["checkpoint"],
                       "fail_run_if_upstream_failed": ["checkpoint", "plan_batches"]},
    "log_compaction": {"select_dirtiest_logs": [], "spark_submissions": ["select_dirtiest_logs"],
                       "partitions_to_clean": ["select_dirtiest_logs"], "build_key_map": ["spark_submissions"],
                       "clean": ["build_key_map", "partitions_to_clean"], "run_report": ["clean"],
                       "fail_run_if_upstream_failed": ["build_key_map", "clean", "partitions_to_clean",
                                                       "select_dirtiest_logs", "spark_submissions"]},
    "log_dir_balance": {"plan_moves": [], "moves": ["plan_moves"], "move_partition": ["moves"],
                        "run_report": ["move_partition"],
                        "fail_run_if_upstream_failed": ["move_partition", "moves", "plan_moves"]},
    "log_flush": {"plan_batches": [], "flush": ["plan_batches"], "run_report": ["flush"],
                  "fail_run_if_upstream_failed": ["flush", "plan_batches"]},
    "log_retention": {"plan_batches": [], "retention": ["plan_batches"], "purge_deleted": ["retention"],
                      "expire_producers": ["plan_batches"], "run_report": ["expire_producers", "purge_deleted"],
                      "fail_run_if_upstream_failed": ["expire_producers", "plan_batches", "purge_deleted",
                                                      "retention"]},
    "log_tiering": {"plan_batches": [], "tier": ["plan_batches"], "run_report": ["tier"],
                    "fail_run_if_upstream_failed": ["plan_batches", "tier"]},
    "log_verify": {"verify_log_dirs": [], "plan_batches": [], "verify": ["plan_batches"],
                   "run_report": ["verify", "verify_log_dirs"],
                   "fail_run_if_upstream_failed": ["plan_batches", "verify", "verify_log_dirs"]},
}
# run_report's reported tasks (in order) and the task naming the mapped ones, before hosts.
REPORTED = {
    "log_checkpoint": (["plan_batches", "checkpoint"], "plan_batches"),
    "log_compaction": (["select_dirtiest_logs", "spark_submissions", "partitions_to_clean", "build_key_map",
                        "clean"], "partitions_to_clean"),
    "log_dir_balance": (["plan_moves", "moves", "move_partition"], "moves"),
    "log_flush": (["plan_batches", "flush"], "plan_batches"),
    "log_retention": (["plan_batches", "retention", "purge_deleted", "expire_producers"], "plan_batches"),
    "log_tiering": (["plan_batches", "tier"], "plan_batches"),
    "log_verify": (["verify_log_dirs", "plan_batches", "verify"], "plan_batches"),
}


@pytest.fixture
def two_hosts(storage):
    storage.write_config(hosts={"storage-a": ["logs/dir-a"], "storage-b": ["logs/dir-b"]})
    return storage


def test_every_maintenance_dag_is_covered():
    assert set(TODAY) == set(REPORTED) == set(MAINTENANCE_DAGS)


@pytest.mark.parametrize("dag_id", sorted(TODAY))
def test_without_hosts_every_dag_keeps_its_task_ids_and_the_default_queue(storage, dag_id):
    dag = parse_dag(dag_id)
    assert {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks} == TODAY[dag_id]
    assert {t.queue for t in dag.tasks} == {"default"}
    assert list(dag.task_group.children) == list(TODAY[dag_id])          # no task group
    report = dag.get_task("run_report")
    assert (report.report_tasks, report.label_task) == REPORTED[dag_id]


@pytest.mark.parametrize("dag_id", sorted(TODAY))
def test_two_hosts_give_each_host_its_own_steps_on_its_queue(two_hosts, dag_id):
    from storage_maintenance.tasks.operators import StorageMaintenanceOperator

    dag = parse_dag(dag_id)
    steps = [s for s in TODAY[dag_id] if s not in END]
    assert sorted(t.task_id for t in dag.tasks) == sorted([f"{h}.{s}" for h in HOSTS for s in steps] + list(END))
    assert list(dag.task_group.children) == [*HOSTS, *END]
    for host in HOSTS:
        group = dag.task_group.children[host]
        assert group.default_args == {"queue": host, "host": host}
        for step in steps:
            task = dag.get_task(f"{host}.{step}")
            assert task.queue == host, task.task_id
            assert task.task_group.group_id == host and task.task_id in group.children, task.task_id
            # the same order between the steps, inside the group
            assert task.upstream_task_ids == {f"{host}.{u}" for u in TODAY[dag_id][step]}, task.task_id
            if isinstance(task, StorageMaintenanceOperator):
                assert task.host == host
    for end in END:                                       # they touch no log dir: the default queue, no group
        task = dag.get_task(end)
        assert task.queue == "default" and task.task_group.group_id is None
    report, run_failed = dag.get_task("run_report"), dag.get_task("fail_run_if_upstream_failed")
    tasks, label = REPORTED[dag_id]
    assert (report.report_tasks, report.label_task) == ([f"{h}.{t}" for h in HOSTS for t in tasks], label)
    assert report.upstream_task_ids == {f"{h}.{u}" for h in HOSTS for u in TODAY[dag_id]["run_report"]}
    assert run_failed.upstream_task_ids == {f"{h}.{s}" for h in HOSTS for s in steps}


def test_a_hosts_mapped_tasks_get_its_host_when_they_run(two_hosts):
    batch = parse_dag("log_retention").get_task("storage-b.retention")
    assert batch.queue == "storage-b"
    task = batch.unmap({"partitions": [["events", 0]], "batch_label": "events-0", "log_dir": None,
                        "batch_index": 0})
    assert (task.task_id, task.host, task.queue) == ("storage-b.retention", "storage-b", "storage-b")
    assert task.hook.config.log_dirs == (str(two_hosts.log_dirs[1]),)

    key_map = parse_dag("log_compaction").get_task("storage-a.build_key_map")
    task = key_map.unmap({"topic": "events", "partition": 0, "application_args": []})
    assert (task.host, task.queue) == ("storage-a", "storage-a")


def test_a_hosts_plan_parts_read_the_selection_of_their_own_group(two_hosts):
    compaction = parse_dag("log_compaction")
    for host in HOSTS:
        for part in ("spark_submissions", "partitions_to_clean"):
            assert compaction.get_task(f"{host}.{part}").plan == \
                f"{{{{ ti.xcom_pull(task_ids='{host}.select_dirtiest_logs') }}}}"
        assert parse_dag("log_dir_balance").get_task(f"{host}.moves").plan == \
            f"{{{{ ti.xcom_pull(task_ids='{host}.plan_moves') }}}}"


def test_the_report_names_a_hosts_mapped_tasks_from_the_plan_of_the_same_group(two_hosts):
    report = parse_dag("log_retention").get_task("run_report")

    class Ti:                               # answers xcom_pull as the run's XComs would
        pulled: list = []

        def xcom_pull(self, task_ids):
            self.pulled.append(task_ids)
            return {"storage-a.plan_batches": [{"batch_label": "a0"}, {"batch_label": "a1"}],
                    "storage-b.plan_batches": [{"batch_label": "b0"}]}.get(task_ids)

    plans: dict = {}
    assert report._labels(Ti(), "storage-b.retention", plans) == ["b0"]
    assert report._labels(Ti(), "storage-a.expire_producers", plans) == ["a0", "a1"]
    assert report._labels(Ti(), "storage-a.retention", plans) == ["a0", "a1"]
    assert Ti.pulled == ["storage-b.plan_batches", "storage-a.plan_batches"]     # once per group


def test_a_config_without_hosts_gives_its_hook_every_log_dir_and_a_host_only_its_own(two_hosts):
    from storage_engine.errors import ConfigError
    from storage_maintenance.tasks.hooks import StorageEngineHook

    every = tuple(str(d) for d in two_hosts.log_dirs)
    assert StorageEngineHook().config.log_dirs == every
    assert StorageEngineHook(host="storage-a").config.log_dirs == every[:1]
    # the record of alerted failures and offline dirs is one for the tasks of every host
    assert StorageEngineHook(host="storage-b").state_dir() == StorageEngineHook().state_dir()
    with pytest.raises(ConfigError, match="storage host 'storage-c' is not declared"):
        StorageEngineHook(host="storage-c").config


@pytest.mark.parametrize("worker, refused", [("storage-b", True), ("storage-a", False), ("", False), (None, False)])
def test_a_task_of_one_host_refuses_a_worker_of_another(monkeypatch, worker, refused):
    from airflow.sdk.exceptions import AirflowFailException

    from storage_maintenance.tasks.compaction import BuildKeyMapOperator
    from storage_maintenance.tasks.hooks import check_worker_host
    from storage_maintenance.tasks.operators import PlanBatchesOperator

    if worker is None:
        monkeypatch.delenv("STORAGE_MAINTENANCE_HOST", raising=False)
    else:
        monkeypatch.setenv("STORAGE_MAINTENANCE_HOST", worker)
    check_worker_host(None)                 # a task of no host runs anywhere
    if not refused:
        check_worker_host("storage-a")
        return
    message = "maintains the log dirs of storage host 'storage-a' but runs on a worker of storage host 'storage-b'"
    with pytest.raises(AirflowFailException, match=message):
        check_worker_host("storage-a")
    # the operators check first, before they read the run or the config
    for task in (PlanBatchesOperator(task_id="plan_batches", host="storage-a"),
                 BuildKeyMapOperator(task_id="build_key_map", topic="events", partition=0, host="storage-a")):
        with pytest.raises(AirflowFailException, match=message):
            task.execute({})
