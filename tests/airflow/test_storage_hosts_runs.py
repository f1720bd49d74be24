"""Runs of a store whose log dirs are on two storage hosts (``hosts:``): each host's group maintains its own dir,
the run report covers both groups, the Storage view's history reads both; a worker of the other host is refused.

``dag.test()`` runs every task in this process whatever its queue (as a LocalExecutor would), so
``$STORAGE_MAINTENANCE_HOST`` here plays the worker that would have picked the task up. The metadata DB is shared
with the other test modules: what is read back is filtered by this module's run ids.
"""
from __future__ import annotations

import datetime

import pytest

from .conftest import parse_dag, partition_results, run_results, task_instances
from .storage_fixtures import T, old_then_recent

pytestmark = pytest.mark.airflow

HOSTS = ("storage-a", "storage-b")
PARTITIONS = {("events", 0), ("events", 1), ("audit", 0)}
DAY = datetime.timedelta(days=1)


@pytest.fixture
def logs(storage, monkeypatch):
    monkeypatch.delenv("STORAGE_MAINTENANCE_HOST", raising=False)
    storage.write_config(hosts={"storage-a": ["logs/dir-a"], "storage-b": ["logs/dir-b"]})
    for p in (0, 1):
        storage.produce("events", p, old_then_recent(30, 5))
    storage.produce("audit", 0, old_then_recent(10, 0))
    return storage


def host_of(logs) -> dict:
    """{(topic, partition): the host whose dir has it}; both hosts have some."""
    out = {tp: HOSTS[logs.log_dirs.index(logs.partition_dir(*tp).parent)] for tp in PARTITIONS}
    assert set(out.values()) == set(HOSTS)
    return out


def history(call, *args):
    from airflow.utils.session import create_session
    from storage_maintenance.reporting import history as module

    with create_session() as session:
        return getattr(module, call)(session, *args)


def test_retention_runs_per_host_and_the_report_and_history_cover_both(logs):
    hosts = host_of(logs)
    run = parse_dag("log_retention").test(logical_date=T)
    assert run.state == "success"
    results = run_results(run)
    for host, log_dir in zip(HOSTS, logs.log_dirs):
        mine = {tp for tp, h in hosts.items() if h == host}
        plan = results[(f"{host}.plan_batches", -1)]
        assert {(t, p) for b in plan for t, p in b["partitions"]} == mine
        assert {b["log_dir"] for b in plan} == {str(log_dir)}
        assert set(partition_results(results, f"{host}.retention")) == mine
        assert set(partition_results(results, f"{host}.expire_producers")) == mine
        assert results[(f"{host}.purge_deleted", -1)]["dry_run"] is False
    report = results[("run_report", -1)]
    assert report["totals"]["partitions"] == 3 and report["totals"]["failed"] == 0
    # the events partitions had expired segments: one row each, by the retention task of its host's group
    assert sorted((r["task"], r["partition"], r["status"]) for r in report["rows"] if r["task"].endswith("retention")) \
        == sorted((f"{hosts[('events', p)]}.retention", f"events-{p}", "changed") for p in (0, 1))
    assert f"| {hosts[('events', 1)]}.retention | events-1 | changed |" in report["markdown"]

    run_id, last = history("last_results", "log_retention", "retention")
    assert run_id == run.run_id
    assert set(last) == PARTITIONS and all(r["failed"] is False for r in last.values())
    assert last[("events", 1)]["segments_deleted"] > 0
    for p in (0, 1):
        (event,) = [e for e in history("retention_history", "events", p) if e["run_id"] == run.run_id]
        assert event["task_id"] == f"{hosts[('events', p)]}.retention"
        batch = results[(event["task_id"], event["map_index"])]
        assert ("events", p) in {(r["topic"], r["partition"]) for r in batch["results"]}
        assert event["extra"]["segments_deleted"] == last[("events", p)]["segments_deleted"]


def open_problems(run_ids) -> dict:
    return {tp: found for tp, problems in history("open_problems").items()
            if (found := [p for p in problems if p["run_id"] in run_ids])}


def dir_problems(run_ids) -> list:
    return [p for p in history("open_dir_problems") if p["run_id"] in run_ids]


def test_verify_runs_per_host_and_damage_stays_on_its_groups_history_until_an_audit_finds_it_gone(logs):
    hosts = host_of(logs)
    verify = parse_dag("log_verify")
    clean = verify.test(logical_date=T)
    assert clean.state == "success"
    results = run_results(clean)
    for host in HOSTS:
        assert set(partition_results(results, f"{host}.verify")) == {tp for tp, h in hosts.items() if h == host}
        assert results[(f"{host}.verify_log_dirs", -1)]["online_dirs"] == \
            [str(logs.log_dirs[HOSTS.index(host)])]
    assert results[("run_report", -1)]["totals"]["partitions"] == 3
    run_id, last = history("last_results", "log_verify", "verify")
    assert run_id == clean.run_id and set(last) == PARTITIONS

    # Damage in a partition of the second host, and in that host's dir's own files.
    host_b = hosts[("events", 1)]
    sealed = sorted(logs.partition_dir("events", 1).glob("*.log"))[0]
    good = sealed.read_bytes()
    bad = bytearray(good)
    bad[120] ^= 0xFF
    sealed.write_bytes(bytes(bad))
    checkpoint = logs.partition_dir("events", 1).parent / "recovery-point-offset-checkpoint"
    saved_checkpoint = checkpoint.read_bytes()
    checkpoint.write_text("not a checkpoint\n")
    found = verify.test(logical_date=T + DAY)
    assert found.state == "failed"
    states = {task: ti.state for (task, _), ti in task_instances(found).items()}
    assert states[f"{host_b}.verify"] == states[f"{host_b}.verify_log_dirs"] == "failed"
    other = next(h for h in HOSTS if h != host_b)
    assert states[f"{other}.verify"] == states[f"{other}.verify_log_dirs"] == "success"
    report = run_results(found)[("run_report", -1)]
    assert {t["task_id"] for t in report["failed_tasks"]} == {f"{host_b}.verify", f"{host_b}.verify_log_dirs"}

    runs = {clean.run_id, found.run_id}
    problems = open_problems(runs)
    assert set(problems) == {("events", 1)}
    assert [(p["task"], p["run_id"], p["kind"]) for p in problems[("events", 1)]] == [
        (f"{host_b}.verify", found.run_id, "damaged")]
    (dir_problem,) = dir_problems(runs)
    assert dir_problem["file"] == str(checkpoint) and dir_problem["run_id"] == found.run_id

    sealed.write_bytes(good)                       # repaired; still reported until an audit looks again
    checkpoint.write_bytes(saved_checkpoint)
    assert set(open_problems(runs)) == {("events", 1)}
    later = verify.test(logical_date=T + 2 * DAY)
    assert later.state == "success"
    runs.add(later.run_id)
    assert open_problems(runs) == {} and dir_problems(runs) == []


def test_a_worker_of_the_other_host_refuses_the_tasks_of_this_one(logs, monkeypatch):
    hosts = host_of(logs)
    monkeypatch.setenv("STORAGE_MAINTENANCE_HOST", "storage-b")
    run = parse_dag("log_verify").test(logical_date=T)
    assert run.state == "failed"
    tis = task_instances(run)
    states = {task: ti.state for (task, _), ti in tis.items()}
    assert states["storage-a.verify_log_dirs"] == states["storage-a.plan_batches"] == "failed"
    assert states["storage-a.verify"] == "upstream_failed"
    assert states["storage-b.verify_log_dirs"] == states["storage-b.plan_batches"] == "success"
    assert {ti.state for (task, _), ti in tis.items() if task == "storage-b.verify"} == {"success"}
    assert tis[("storage-a.plan_batches", -1)].try_number == 1          # refused at once, no retry
    report = run_results(run)[("run_report", -1)]
    assert {t["task_id"] for t in report["failed_tasks"]} == {"storage-a.verify_log_dirs", "storage-a.plan_batches"}
    for failed in report["failed_tasks"]:
        assert ("maintains the log dirs of storage host 'storage-a' but runs on a worker of storage host "
                "'storage-b'") in failed["error"]
    # what the worker of storage-b did run is reported: the partitions of its dir
    assert set(partition_results(run_results(run), "storage-b.verify")) == \
        {tp for tp, h in hosts.items() if h == "storage-b"}
