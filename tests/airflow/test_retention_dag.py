"""log_retention end to end with dag.test(): real log dirs, real metadata DB, files checked on disk."""
from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, cast

import pytest

from .conftest import asset_events, parse_dag, partition_results, run_results, task_instances
from .storage_fixtures import HOUR_MS, T, T_MS, expired_segments, old_then_recent
from tests.typed import present

if TYPE_CHECKING:
    from airflow.sdk import Context

pytestmark = pytest.mark.airflow

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def segment_files(base: int, suffix: str = "") -> list[str]:
    return [f"{base:020d}{s}{suffix}" for s in SEGMENT_SUFFIXES]


@pytest.fixture
def three_partitions(storage):
    """events-0/1: 40 records from T-3h (expired at T, retention.ms = 1 h) then 10 from T-30min; audit-0 never
    expires (retention.ms = -1). Returns the expected expired base offsets per events partition."""
    for p in (0, 1):
        storage.produce("events", p, old_then_recent())
    storage.produce("audit", 0, old_then_recent(20, 0))
    before = storage.describe()
    expected = {p: expired_segments(before[("events", p)], T_MS, HOUR_MS) for p in (0, 1)}
    assert expected[0] and expected[0] == expected[1]
    return expected


def test_retention_runs_in_batches_and_advances_the_log_start(storage, three_partitions):
    expired = three_partitions[0]
    describe_before = storage.describe()
    new_start = [s["base_offset"] for s in describe_before[("events", 0)]["segments"]][len(expired)]

    dag_run = parse_dag("log_retention").test(logical_date=T)

    assert dag_run.state == "success"
    assert (dag_run.data_interval_start, dag_run.data_interval_end) == (T - datetime.timedelta(minutes=5), T)
    tis = task_instances(dag_run)
    # One task per batch (per log dir here), named after its partitions.
    assert sorted(ti.rendered_map_index for (task, _), ti in tis.items() if task == "retention") == [
        "audit-0..events-0 (2 in dir-a)", "events-1 (1 in dir-b)"]
    assert tis[("fail_run_if_upstream_failed", -1)].state == "skipped"

    results = run_results(dag_run)
    assert [b["partitions"] for b in results[("plan_batches", -1)]] == [
        [["audit", 0], ["events", 0]], [["events", 1]]]
    by_partition = partition_results(results, "retention")
    assert set(by_partition) == {("audit", 0), ("events", 0), ("events", 1)}
    assert by_partition[("audit", 0)]["nothing_to_do"] is True
    for (task, _), batch in results.items():
        if task == "retention":
            assert batch["failures"] == [] and batch["as_of"] == "2026-01-01T12:00:00.000Z"
            assert batch["now_ms"] == T_MS
            assert batch["as_of_source"] == "data interval end"
    for p in (0, 1):
        r = by_partition[("events", p)]
        assert r["deleted_base_offsets"] == expired
        assert r["reasons"] == ["retention-ms"]
        assert r["segments_deleted"] == len(expired) and r["bytes_reclaimed"] > 0
        assert (r["log_start_offset_before"], r["log_start_offset"]) == (0, new_start)
        assert r["records_removed"] == new_start

    # On disk: the expired segments are renamed .deleted (readers holding them open can finish), stamped with
    # T as their deletion time; no expired segment is live; the logs start at new_start.
    for p in (0, 1):
        names = storage.files("events", p)
        deleted = sorted(f for f in names if f.endswith(".deleted"))
        assert [f for f in deleted if ".snapshot" not in f] == sorted(
            f for base in expired for f in segment_files(base, ".deleted"))
        # the producer snapshots taken when those segments' bases were rolled go with them (Kafka's rule)
        assert [f for f in deleted if ".snapshot" in f] == [f"{b:020d}.snapshot.deleted" for b in expired if b > 0]
        live = [f for f in names if not f.endswith(".deleted")]
        assert min(live) == segment_files(new_start)[1]          # 000...40.index sorts first
        assert not {f for base in expired for f in segment_files(base)} & set(live)
        for name in names:
            if name.endswith(".deleted"):
                assert os.stat(storage.partition_dir("events", p) / name).st_mtime * 1000 == T_MS
    purge = results[("purge_deleted", -1)]                         # file.delete.delay.ms: 60 s after T
    assert purge["files_removed"] == 0 and purge["files_waiting"] == 2 * (3 * len(expired) + len(expired) - 1)
    after = storage.describe()                                    # the engine reloads the logs that way
    for p in (0, 1):
        assert after[("events", p)]["log_start_offset"] == new_start
        assert after[("events", p)]["log_end_offset"] == describe_before[("events", p)]["log_end_offset"]
    assert after[("audit", 0)] == describe_before[("audit", 0)]

    # The run summary: one row per partition that changed, totals over all of them.
    report = results[("run_report", -1)]
    assert report["as_of"] == "2026-01-01T12:00:00.000Z" and report["failed_tasks"] == [] and report["alert"] is None
    assert report["totals"]["partitions"] == 3 and report["totals"]["changed"] == 2
    assert report["totals"]["unchanged"] == 1 and report["totals"]["failed"] == 0
    assert report["totals"]["segments"] == 2 * len(expired)
    assert report["totals"]["bytes"] == sum(by_partition[("events", p)]["bytes_reclaimed"] for p in (0, 1))
    assert [(r["task"], r["partition"], r["status"]) for r in report["rows"]] == [
        ("retention", "events-0", "changed"), ("retention", "events-1", "changed")]
    assert "| retention | events-0 | changed | %d |" % len(expired) in report["markdown"]

    # Asset events, read back from the metadata DB: one for the run, with its totals (per-partition figures
    # stay in the batches' XComs).
    assert asset_events(run_id=dag_run.run_id) == []
    (run_event,) = asset_events("kafka-log-maintenance://log_retention", run_id=dag_run.run_id)
    assert run_event["source_task_id"] == "run_report" and run_event["source_dag_id"] == "log_retention"
    assert (run_event["extra"]["changed"], run_event["extra"]["segments"]) == (2, 2 * len(expired))
    assert run_event["extra"]["bytes"] == report["totals"]["bytes"]
    assert run_event["extra"]["as_of"] == "2026-01-01T12:00:00.000Z"

    # The next interval's run: nothing left to expire, no .deleted file anywhere, no new partition event.
    later_run = parse_dag("log_retention").test(logical_date=T + datetime.timedelta(minutes=5))
    assert later_run.state == "success"
    later = partition_results(run_results(later_run), "retention")
    assert all(r["nothing_to_do"] for r in later.values())
    assert not [path for path in storage.snapshot() if path.endswith(".deleted")]
    (later_event,) = asset_events("kafka-log-maintenance://log_retention", run_id=later_run.run_id)
    assert later_event["extra"]["changed"] == 0


def test_expired_segments_become_deleted_files_that_purge_removes_after_the_delay(storage):
    from storage_maintenance.tasks.operators import PurgeDeletedOperator

    storage.produce("events", 0, old_then_recent())
    before = storage.describe()[("events", 0)]
    expired = expired_segments(before, T_MS, HOUR_MS)
    kept = [s["base_offset"] for s in before["segments"]][len(expired):]
    pdir = storage.partition_dir("events", 0)

    dag_run = parse_dag("log_retention").test(logical_date=T)
    assert dag_run.state == "success"

    # Renamed, not removed: readers holding a segment open can finish. Scheduled at T (the mtime).
    deleted = sorted(f for f in storage.files("events", 0) if f.endswith(".deleted"))
    assert deleted == sorted([f for base in expired for f in segment_files(base, ".deleted")] +
                             [f"{base:020d}.snapshot.deleted" for base in expired if base > 0])
    for name in deleted:
        assert os.stat(pdir / name).st_mtime * 1000 == T_MS
    purge = run_results(dag_run)[("purge_deleted", -1)]
    assert purge["files_removed"] == 0 and purge["files_waiting"] == len(deleted)

    # log-start-offset-checkpoint: Kafka (and the engine) only record a start above the first segment's base,
    # which a retention that deletes whole segments never leaves; the recovery point stays the log end.
    log_dir = pdir.parent
    assert storage.checkpoint_text(log_dir, "recovery-point-offset-checkpoint") == (
        f"0\n1\nevents 0 {before['log_end_offset']}\n")
    assert storage.checkpoint_text(log_dir, "log-start-offset-checkpoint") == "0\n0\n"

    # file.delete.delay.ms (60 s) is measured from T, the "now" of the run that scheduled the deletion.
    def purge_at(delay: datetime.timedelta) -> dict:
        # the part of the context the operator reads (no task instance: nothing is pushed to XCom)
        return PurgeDeletedOperator(task_id="purge_deleted").execute(
            cast("Context", {"data_interval_end": T + delay, "ti": None}))

    assert purge_at(datetime.timedelta(seconds=59))["files_removed"] == 0
    assert sorted(f for f in storage.files("events", 0) if f.endswith(".deleted")) == deleted
    removed = purge_at(datetime.timedelta(seconds=60))
    assert removed["files_removed"] == len(deleted) and removed["files_waiting"] == 0
    assert removed["bytes_freed"] > 0
    assert [f for f in storage.files("events", 0) if ".snapshot" not in f and f != "leader-epoch-checkpoint"] == sorted(
        f for base in kept for f in segment_files(base))
    assert storage.describe()[("events", 0)]["log_start_offset"] == kept[0]


def rerun_same_interval(storage) -> tuple[dict, dict, dict]:
    """Run log_retention for the interval ending at T twice; (first results, second results, files after the
    first run); asserts the second run deleted nothing."""
    for p in (0, 1):
        storage.produce("events", p, old_then_recent())
    storage.produce("audit", 0, old_then_recent(20, 0))
    dag = parse_dag("log_retention")

    first = run_results(dag.test(logical_date=T))
    assert sum(r["segments_deleted"] for r in partition_results(first, "retention").values()) > 0
    files_after_first = storage.snapshot()

    second_run = dag.test(logical_date=T)
    assert second_run.state == "success"
    second = run_results(second_run)
    retention = partition_results(second, "retention")
    assert len(retention) == 3
    assert all(r["nothing_to_do"] and r["segments_deleted"] == 0 for r in retention.values())
    assert second[("purge_deleted", -1)]["files_removed"] == 0
    return first, second, files_after_first


def test_rerunning_a_processed_interval_changes_nothing(storage):
    storage.write_config(None, log_segment_delete_delay_ms=0)    # .deleted files go within the first run
    _, _, files_after_first = rerun_same_interval(storage)
    assert not [path for path in files_after_first if path.endswith(".deleted")]
    assert storage.snapshot() == files_after_first


def test_rerunning_a_processed_interval_keeps_the_deleted_files_that_are_not_due(storage):
    _, _, files_after_first = rerun_same_interval(storage)     # file.delete.delay.ms: 60 s
    assert [path for path in files_after_first if path.endswith(".deleted")]
    assert storage.snapshot() == files_after_first


def test_dry_run_reports_and_changes_nothing(storage, three_partitions):
    before = storage.snapshot()
    dag_run = parse_dag("log_retention").test(logical_date=T, run_conf={"dry_run": True, "topics": ["events"]})
    assert dag_run.state == "success"
    results = run_results(dag_run)
    retention = partition_results(results, "retention")
    assert set(retention) == {("events", 0), ("events", 1)}
    assert all(b["dry_run"] is True for (task, _), b in results.items() if task == "retention")
    for p in (0, 1):
        assert retention[("events", p)]["deleted_base_offsets"] == three_partitions[p]
    assert results[("purge_deleted", -1)]["dry_run"] is True
    report = results[("run_report", -1)]
    assert {r["status"] for r in report["rows"]} == {"would change"}
    assert storage.snapshot() == before
    assert asset_events(run_id=dag_run.run_id) == []


def test_batch_size_and_max_batches_bound_the_fan_out(storage):
    for p in range(5):
        storage.produce("events", p, old_then_recent(3, 2))
    dag = parse_dag("log_retention")
    run = dag.test(logical_date=T, run_conf={"batch_size": 1})
    assert run.state == "success"
    assert len([k for k in task_instances(run) if k[0] == "retention"]) == 5
    # More batches than max_batches would allow: the batches grow instead (at most max_batches + one per dir).
    run = dag.test(logical_date=T + datetime.timedelta(minutes=5), run_conf={"batch_size": 1, "max_batches": 2})
    assert run.state == "success"
    plan = run_results(run)[("plan_batches", -1)]
    assert [len(b["partitions"]) for b in plan] == [3, 2]
    assert sorted(p for b in plan for p in map(tuple, b["partitions"])) == [("events", p) for p in range(5)]


def test_expire_producers_forgets_idle_producer_ids_as_of_the_interval_end(storage):
    from storage_engine.clock import ManualClock
    from storage_engine.log.manager import LogManager
    from storage_engine.record.records import SimpleRecord
    storage.write_config(None, producer_id_expiration_ms=HOUR_MS)
    with LogManager.open(storage.config(), clock=ManualClock(T_MS - 2 * HOUR_MS)) as mgr:
        log = mgr.get_or_create_log("audit", 0)
        log.append_records([SimpleRecord(b"k", b"v", T_MS - 2 * HOUR_MS)], producer_id=11, producer_epoch=0,
                           base_sequence=0)                              # idle for 2 h at T
        assert isinstance(log.clock, ManualClock)   # the clock the test opened the store with
        log.clock.set(T_MS - 10 * 60_000)
        log.append_records([SimpleRecord(b"k", b"v", T_MS - 10 * 60_000)], producer_id=12, producer_epoch=0,
                           base_sequence=0)                              # idle for 10 min at T
    run = parse_dag("log_retention").test(logical_date=T)
    assert run.state == "success"
    results = run_results(run)
    batches = [r for (task, _), r in results.items() if task == "expire_producers"]
    assert batches and all(b["now_ms"] == T_MS and not b["dry_run"] for b in batches)
    by_partition = {(r["topic"], r["partition"]): r for b in batches for r in b["results"]}
    assert set(by_partition) == {("audit", 0)}
    assert by_partition[("audit", 0)]["expired_producer_ids"] == [11] and by_partition[("audit", 0)]["producers"] == 1
    assert sum(len(r["expired_producer_ids"]) for r in by_partition.values()) == 1
    summary = results[("run_report", -1)]
    assert ("expire_producers", "audit-0", "changed") in {(r["task"], r["partition"], r["status"])
                                                          for r in summary["rows"]}
    # the engine's state agrees, and re-running the interval has nothing left to do
    with LogManager.open(storage.config(), clock=ManualClock(T_MS)) as mgr:
        assert sorted(present(mgr.get_log("audit", 0)).producer_state.producers) == [12]
    again = run_results(parse_dag("log_retention").test(logical_date=T))
    assert all(r["nothing_to_do"] for (task, _), b in again.items() if task == "expire_producers"
               for r in b["results"])
