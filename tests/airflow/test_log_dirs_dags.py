"""Log dirs in the maintenance DAGs: an offline log dir is skipped and alerted once (at a real SMTP server and
webhook), whichever DAGs and runs meet it, until it is seen online again; ``log_dir_balance`` plans moves off a
full dir (dry run first) and moves each partition in its own task while a writer process holds it open.

A log dir goes offline for real: its path becomes a symbolic link to itself, so every access fails (ELOOP), as
for a dir whose disk failed; the test process runs as root, for which a ``chmod 000`` would change nothing (the
engine test ``test_lifecycle_processes.py`` does that under a process without the capability).
"""
from __future__ import annotations

import os

import pytest

from storage_engine.clock import ManualClock
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

from .conftest import parse_dag, run_results, task_instances
from .storage_fixtures import MINUTE_MS, T, T_MS, old_then_recent
from tests.typed import present

pytestmark = pytest.mark.airflow


@pytest.fixture
def alerting(monkeypatch, smtp_server, webhook_server):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_WEBHOOK", webhook_server.url)
    return smtp_server, webhook_server


def break_dir(path) -> str:
    aside = str(path) + ".aside"
    os.rename(path, aside)
    os.symlink(os.path.basename(path), path)
    return aside


def repair_dir(path, aside: str) -> None:
    os.remove(path)
    os.rename(aside, path)


def offline_alerts(mailbox, webhook):
    mails = [m for m in mailbox.messages if "LOG DIR OFFLINE" in m["Subject"]]
    posts = [p["body"] for p in webhook.received if p["body"].get("event") == "storage_log_dir_offline"]
    return mails, posts


def test_an_offline_dir_is_skipped_and_alerted_once_by_all_the_dags(storage, alerting):
    mailbox, webhook = alerting
    storage.produce("events", 0, old_then_recent())         # dir-a (the first partition goes to the first dir)
    storage.produce("audit", 0, old_then_recent(20, 0))     # dir-b
    dir_b = storage.log_dirs[1]
    assert storage.partition_dir("audit", 0).parent == dir_b
    aside = break_dir(dir_b)
    try:
        first = parse_dag("log_retention").test(logical_date=T)
        # The run is green: the partitions of dir-a were maintained, those of dir-b skipped, not failed.
        assert first.state == "success"
        results = run_results(first)
        report = results[("run_report", -1)]
        assert list(report["offline_dirs"]) == [str(dir_b)] and "Too many levels" in report["offline_dirs"][str(dir_b)]
        assert report["totals"]["failed"] == 0 and report["failed_tasks"] == []
        assert report["log_dir_alerts"][0]["log_dir"] == str(dir_b) and report["log_dir_alerts"][0]["sent"]
        retained = [r for (t, _), batch in results.items() if t == "retention" for r in batch["results"]]
        assert [(r["topic"], r["segments_deleted"] > 0) for r in retained] == [("events", True)]
        assert f"log dir offline, skipped:** `{dir_b}`" in report["markdown"]

        mails, posts = offline_alerts(mailbox, webhook)
        assert len(mails) == len(posts) == 1
        assert mails[0]["Subject"] == f"[storage maintenance] LOG DIR OFFLINE {dir_b} (seen by log_retention)"
        body = mails[0].get_body(preferencelist=("html",)).get_content()
        assert str(dir_b) in body and "Too many levels of symbolic links" in body and first.run_id in body
        assert posts[0]["log_dir"] == str(dir_b) and posts[0]["dag_id"] == "log_retention"
        assert posts[0]["as_of"] == "2026-01-01T12:00:00.000Z"

        # Other DAGs and later runs meet the same offline dir: they skip it and alert nothing more.
        later = T.replace(minute=5)
        for dag_id, when in (("log_checkpoint", T), ("log_flush", later), ("log_retention", later),
                             ("log_verify", T)):
            run = parse_dag(dag_id).test(logical_date=when)
            assert run.state == "success", dag_id
            assert list(run_results(run)[("run_report", -1)]["offline_dirs"]) == [str(dir_b)], dag_id
        assert [len(x) for x in offline_alerts(mailbox, webhook)] == [1, 1]
    finally:
        repair_dir(dir_b, aside)
    # Seen online again by a run; offline once more later: a new alert.
    back = parse_dag("log_checkpoint").test(logical_date=T.replace(minute=1))
    assert run_results(back)[("run_report", -1)]["log_dirs_back_online"] == [str(dir_b)]
    aside = break_dir(dir_b)
    try:
        parse_dag("log_checkpoint").test(logical_date=T.replace(minute=2))
    finally:
        repair_dir(dir_b, aside)
    assert [len(x) for x in offline_alerts(mailbox, webhook)] == [2, 2]
    with LogManager.open(storage.config(), clock=ManualClock(T_MS)) as mgr:
        assert len(list(present(mgr.get_log("audit", 0)).read_records())) == 20, "nothing of the offline dir was touched"


def _fill(storage, placement: dict[tuple[str, int], int]):
    """Create partitions with ``records`` 200-byte records each; returns {tp: log dir}."""
    with LogManager.open(storage.config(), clock=ManualClock(T_MS)) as mgr:
        for (topic, partition), records in placement.items():
            log = mgr.get_or_create_log(topic, partition)
            for i in range(records):
                log.append_records([SimpleRecord(b"k%d" % i, b"v" * 200, T_MS - MINUTE_MS)])
        return {tp: mgr.dir_of(tp) for tp in placement}


def _dir_bytes(path) -> int:
    """Bytes of log data (segment .log files) under ``path``: the balance DAG's ``max_dir_bytes`` measure."""
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total


def test_log_dir_balance_plans_first_then_moves_one_partition_per_task(storage):
    storage.write_config(topics={"events": {"retention.ms": -1, "segment.bytes": 4096}})
    # events-0 and events-2 land in dir-a, events-1 in dir-b; dir-a holds far more.
    homes = _fill(storage, {("events", 0): 120, ("events", 1): 10, ("events", 2): 100})
    dir_a, dir_b = (str(d) for d in storage.log_dirs)
    assert homes == {("events", 0): dir_a, ("events", 1): dir_b, ("events", 2): dir_a}
    limit = _dir_bytes(dir_a) * 2 // 3
    before = storage.snapshot()

    # (dag.test() keeps a run's conf in the DAG's params: every run parses the DAG afresh.)
    dry = parse_dag("log_dir_balance").test(logical_date=T, run_conf={"dry_run": True, "max_dir_bytes": limit})
    assert dry.state == "success"
    plan = run_results(dry)[("plan_moves", -1)]
    assert plan["measure"] == "data_bytes" and plan["dry_run"] is True
    assert [(m["topic"], m["partition"], m["from_dir"], m["to_dir"]) for m in plan["moves"]] == [
        ("events", 0, dir_a, dir_b)]
    assert not [k for k in task_instances(dry) if k[0] == "move_partition" and k[1] >= 0], "the dry run moved"
    assert storage.snapshot() == before

    # The moves run while an application process has the partition open and appends to it.
    with storage.live_writer({("events", 0): [T_MS - MINUTE_MS] * 5}) as _writer:
        run = parse_dag("log_dir_balance").test(logical_date=T.replace(hour=13), run_conf={"max_dir_bytes": limit})
    results = run_results(run)
    assert run.state == "success", results
    assert ("move_partition", 0) in results, (results[("plan_moves", -1)], {k: t.state for k, t in task_instances(run).items()})
    moved = results[("move_partition", 0)]
    assert moved["committed"] and (moved["topic"], moved["partition"]) == ("events", 0)
    assert moved["source_dir"] == dir_a and moved["target_dir"] == dir_b
    tis = task_instances(run)
    assert tis[("move_partition", 0)].rendered_map_index == "events-0"
    report = results[("run_report", -1)]
    assert [(r["partition"], r["status"]) for r in report["rows"]] == [("events-0", "changed")]
    assert f"moved from {dir_a} to {dir_b}" in report["rows"][0]["detail"]
    assert _dir_bytes(dir_a) - _dir_bytes(os.path.join(dir_a, moved["deleted_folder"])) <= limit
    with LogManager.open(storage.config(), clock=ManualClock(T_MS)) as mgr:
        log = present(mgr.get_log("events", 0))
        assert log.log_dir == dir_b
        offsets = [r.offset for r in log.read_records()]
        assert offsets == list(range(125)), "every record, the writer's five included, once"
    # Nothing over the limit any more: the next run plans nothing.
    again = parse_dag("log_dir_balance").test(logical_date=T.replace(hour=14), run_conf={"max_dir_bytes": limit})
    assert run_results(again)[("plan_moves", -1)]["moves"] == []


def test_balance_params_are_checked(storage):
    from airflow.sdk.exceptions import AirflowFailException, ParamValidationError

    from storage_maintenance.tasks.balance import as_threshold

    _fill(storage, {("events", 0): 5})
    for conf, name in (({"max_used_percent": 0}, "max_used_percent"), ({"max_dir_bytes": -1}, "max_dir_bytes"),
                       ({"max_moves": 0}, "max_moves")):
        with pytest.raises(ParamValidationError, match=name):
            parse_dag("log_dir_balance").test(logical_date=T, run_conf=conf)
    # The operator checks them again (a run created without the form's validation).
    assert as_threshold(85, None) == (85.0, None) and as_threshold(85, 1000) == (None, 1000)
    for bad in ((0, None), (101, None), ("85", None), (True, None), (85, -5), (85, "1k")):
        with pytest.raises(AirflowFailException):
            as_threshold(*bad)
