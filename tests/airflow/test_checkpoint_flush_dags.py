"""log_checkpoint and log_flush end to end with dag.test(), while an application process holds the logs open."""
from __future__ import annotations

import datetime
import json

import pytest

from .conftest import parse_dag, partition_results, run_results
from .storage_fixtures import MINUTE_MS, T, T_MS, old_then_recent

pytestmark = pytest.mark.airflow

TOPICS = {"events": {"flush.ms": 0, "segment.bytes": 1024}, "audit": {"segment.bytes": 1024}}


@pytest.fixture
def logs(storage):
    """audit-0, events-0 (dir-a) and events-1 (dir-b), 20 records each; events-1 starts at offset 5."""
    storage.write_config(TOPICS)
    for topic, partition in (("audit", 0), ("events", 0), ("events", 1)):
        storage.produce(topic, partition, old_then_recent(20, 0))
    storage.delete_records("events", 1, 5)
    return storage


def kafka_checkpoint(entries: dict) -> str:
    """Kafka's offset checkpoint text: version 0, the entry count, then "topic partition offset" lines."""
    lines = [f"{t} {p} {offset}" for (t, p), offset in sorted(entries.items())]
    return "".join(f"{line}\n" for line in ["0", str(len(lines)), *lines])


def recent(n: int = 5) -> list[int]:
    return [T_MS - MINUTE_MS + i * 1000 for i in range(n)]


def test_checkpoint_flushes_every_log_and_writes_both_checkpoint_files(logs):
    dag = parse_dag("log_checkpoint")
    with logs.live_writer({("events", 0): recent(), ("audit", 0): recent()}):
        dag_run = dag.test(logical_date=T)
        assert dag_run.state == "success"
        assert (dag_run.data_interval_start, dag_run.data_interval_end) == (T - datetime.timedelta(minutes=1), T)

        results = run_results(dag_run)
        batches = [b for (task, _), b in results.items() if task == "checkpoint"]
        assert len(batches) == 2                                # one per log dir
        assert all(b["now_ms"] == T_MS and b["dry_run"] is False and not b["failures"] for b in batches)
        flushed = partition_results(results, "checkpoint")
        for tp in (("audit", 0), ("events", 0)):              # the writer's unflushed appends
            assert flushed[tp]["recovery_point_before"] < flushed[tp]["recovery_point"] == 25
        assert flushed[("events", 1)]["recovery_point"] == 20
        assert sum(b["partitions_flushed"] for b in batches) == 2
        assert results[("run_report", -1)]["totals"]["changed"] == 2
        # Written by the task itself: the writer still holds the logs open, so no close wrote them. The
        # log start offset is recorded only where it is above the first segment's base (Kafka's rule).
        recovery_points = {("audit", 0): 25, ("events", 0): 25, ("events", 1): 20}
        log_starts = {("events", 1): 5}
        for log_dir in logs.log_dirs:
            here = {tp for tp in recovery_points if logs.partition_dir(*tp).parent == log_dir}
            assert logs.checkpoint_text(log_dir, "recovery-point-offset-checkpoint") == kafka_checkpoint(
                {tp: v for tp, v in recovery_points.items() if tp in here})
            assert logs.checkpoint_text(log_dir, "log-start-offset-checkpoint") == kafka_checkpoint(
                {tp: v for tp, v in log_starts.items() if tp in here})


def test_checkpoint_dry_run_lists_partitions_and_touches_nothing(logs):
    before = logs.snapshot()
    dag_run = parse_dag("log_checkpoint").test(logical_date=T, run_conf={"dry_run": True, "topics": ["events"]})
    assert dag_run.state == "success"
    results = partition_results(run_results(dag_run), "checkpoint")
    assert sorted(results) == [("events", 0), ("events", 1)]
    assert all(r["dry_run"] is True and r["flushed"] is False for r in results.values())
    assert logs.snapshot() == before


def test_storage_config_comes_from_the_connection_first(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("STORAGE_ENGINE_CONFIG", str(tmp_path / "no-such.yaml"))
    monkeypatch.setenv("AIRFLOW_CONN_STORAGE_ENGINE_DEFAULT", json.dumps(
        {"conn_type": "generic", "extra": {"config": str(logs.config_path)}}))
    dag_run = parse_dag("log_checkpoint").test(logical_date=T)
    assert dag_run.state == "success"
    results = run_results(dag_run)
    assert sorted({b["log_dir"] for (task, _), b in results.items() if task == "checkpoint"}) == sorted(
        str(d) for d in logs.log_dirs)
    assert len(partition_results(results, "checkpoint")) == 3


def test_flush_reports_logs_that_are_not_due(logs):
    dag_run = parse_dag("log_flush").test(logical_date=T, run_conf={"topics": ["audit", "events"]})
    assert dag_run.state == "success"
    assert (dag_run.data_interval_start, dag_run.data_interval_end) == (T - datetime.timedelta(minutes=5), T)
    results = partition_results(run_results(dag_run), "flush")
    assert len(results) == 3
    assert all(r["flushed"] is False for r in results.values())     # all flushed when the producer closed
    assert [tp for tp, r in results.items() if r["due"]] == []


def test_flush_fsyncs_a_due_log_with_unflushed_data(logs):
    dag = parse_dag("log_flush")
    with logs.live_writer({("events", 0): recent(), ("audit", 0): recent()}):
        dag_run = dag.test(logical_date=T)
        assert dag_run.state == "success"
        results = partition_results(run_results(dag_run), "flush")
    # events: flush.ms = 0, due at once; audit: Kafka's default flush.ms, never due (the page cache decides).
    flushed = {tp: r for tp, r in results.items() if r["flushed"]}
    assert list(flushed) == [("events", 0)]
    assert flushed[("events", 0)]["recovery_point_before"] < flushed[("events", 0)]["recovery_point"] == 25
    # events-1 (flush.ms = 0) holds nothing unflushed, so it is not due either.
    assert sorted(tp for tp, r in results.items() if not r["due"]) == [("audit", 0), ("events", 1)]


def test_flush_fsyncs_a_log_unflushed_for_longer_than_flush_ms(logs):
    logs.write_config({**TOPICS, "audit": {"segment.bytes": 1024, "flush.ms": MINUTE_MS}})
    dag = parse_dag("log_flush")
    # Appended five minutes before T and never flushed: older than flush.ms (one minute) at T.
    with logs.live_writer({("audit", 0): [T_MS - 5 * MINUTE_MS + i for i in range(5)]}):
        results = partition_results(run_results(dag.test(logical_date=T)), "flush")
    assert [tp for tp, r in results.items() if r["flushed"]] == [("audit", 0)]
