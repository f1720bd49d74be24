"""A re-run counts only its own try: the run summary and the Storage view's history read the XComs of the task
instances that ran in the run's latest try, never those a re-run left behind (mapped instances it no longer
expands to, ``removed``, keep the XComs of the first try)."""
from __future__ import annotations

import pytest

from storage_engine.clock import ManualClock
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

from .conftest import parse_dag, run_results, task_instances
from .rerun import rerun
from .storage_fixtures import HOUR_MS, T, T_MS, StorageFixture, old_then_recent

pytestmark = pytest.mark.airflow


def history():
    from storage_maintenance.reporting import history as module
    return module


def session():
    from airflow.utils.session import create_session
    return create_session()


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    """ue-0: 360 keyed records (20 keys), one every 30 s over the 3 hours before T."""
    fixture = StorageFixture(tmp_path / "storage", topics={
        "ue": {"cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 0.01,
               "delete.retention.ms": 0}})
    monkeypatch.setenv("STORAGE_ENGINE_CONFIG", str(fixture.config_path))
    with LogManager.open(fixture.config(), clock=ManualClock(T_MS)) as mgr:
        log = mgr.get_or_create_log("ue", 0)
        for i in range(360):
            ts = T_MS - 3 * HOUR_MS + i * 30_000
            assert isinstance(log.clock, ManualClock)   # the clock the test opened the store with
            log.clock.set(ts)
            log.append_records([SimpleRecord(b"k%d" % (i % 20), b"value-%d" % i, ts)])
    return fixture


def test_a_rerun_of_a_compaction_interval_that_did_nothing_reports_nothing(keyed):
    dag = parse_dag("log_compaction")
    first = dag.test(logical_date=T, run_conf={"map_strategy": "local"})
    assert first.state == "success"
    report = run_results(first)[("run_report", -1)]
    assert report["totals"]["changed"] == 1 and report["totals"]["bytes"] > 0 and report["totals"]["records"] > 0

    again = rerun(dag, first)                     # the same run, cleared and run again: nothing left to clean
    assert again.state == "success" and again.run_id == first.run_id
    tis = task_instances(again)
    assert tis[("clean", 0)].state == "removed"                  # the first try's clean, its XCom still there
    assert run_results(again)[("clean", 0)]["size_bytes_before"] > 0
    report = run_results(again)[("run_report", -1)]
    assert run_results(again)[("select_dirtiest_logs", -1)]["nothing_to_do"] is True
    totals = report["totals"]
    assert (totals["partitions"], totals["changed"], totals["failed"], totals["segments"], totals["bytes"],
            totals["records"]) == (0, 0, 0, 0, 0, 0), totals
    assert report["rows"] == [] and "removed" not in totals["task_states"]
    with session() as s:
        assert history().run_report(s, "log_compaction", again.run_id)["totals"] == totals
        (listed,) = [r for r in history().run_list(s, ["log_compaction"])["runs"] if r["run_id"] == again.run_id]
        assert listed["totals"]["changed"] == 0


def test_a_rerun_with_fewer_batches_counts_only_its_batches(storage):
    """The first try has three batches (one partition each); a topic deleted before the re-run leaves two: the
    third batch's instance is removed, with the first try's XCom."""
    from storage_engine.jobs.lifecycle import delete_topic

    for p in (0, 1):
        storage.produce("events", p, old_then_recent())
    storage.produce("audit", 0, old_then_recent(20, 0))
    dag = parse_dag("log_retention")
    first = dag.test(logical_date=T, run_conf={"batch_size": 1})
    assert first.state == "success"
    batches = [k for k in run_results(first) if k[0] == "retention"]
    assert len(batches) == 3
    assert run_results(first)[("run_report", -1)]["totals"]["changed"] == 2

    delete_topic(storage.config(), "audit", now_ms=T_MS)
    again = rerun(dag, first)
    assert again.state == "success"
    assert [b["partitions"] for b in run_results(again)[("plan_batches", -1)]] == [[["events", 0]], [["events", 1]]]
    tis = task_instances(again)
    assert tis[("retention", 2)].state == "removed" and ("retention", 2) in run_results(again)
    report = run_results(again)[("run_report", -1)]
    assert report["totals"]["partitions"] == 2 and report["totals"]["changed"] == 0, report["totals"]
    assert report["totals"]["bytes"] == 0 and report["rows"] == []
    with session() as s:
        run_id, results = history().last_results(s, "log_retention", "retention")
        assert run_id == again.run_id
        assert set(results) == {("events", 0), ("events", 1)}
        assert all(r["segments_deleted"] == 0 for r in results.values()), results
        # the re-run deleted nothing (other modules' runs in the same metadata DB may have retained events-1)
        assert [h for h in history().retention_history(s, "events", 1) if h["run_id"] == again.run_id] == []
