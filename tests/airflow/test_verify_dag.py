"""log_verify: the read-only audit in batches; damage fails its batch at once and the run's one alert carries
the problems; nothing on disk changes."""
from __future__ import annotations

import pytest

from .conftest import parse_dag, partition_results, run_results, task_instances
from .storage_fixtures import T, old_then_recent

pytestmark = pytest.mark.airflow


@pytest.fixture
def logs(storage):
    for p in (0, 1):
        storage.produce("events", p, old_then_recent(30, 5))
    storage.produce("audit", 0, old_then_recent(10, 0))
    return storage


def test_clean_logs_verify_without_alert(logs, smtp_server, monkeypatch):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    before = logs.snapshot()
    run = parse_dag("log_verify").test(logical_date=T)
    assert run.state == "success"
    results = run_results(run)
    verified = partition_results(results, "verify")
    assert set(verified) == {("audit", 0), ("events", 0), ("events", 1)}
    assert all(not r["damaged"] and r["records"] > 0 for r in verified.values())
    assert verified[("events", 0)]["records"] == 35
    assert results[("verify_log_dirs", -1)]["damaged"] is False
    assert smtp_server.messages == []
    assert logs.snapshot() == before


def test_damage_fails_its_batch_at_once_and_the_alert_lists_the_problems(logs, smtp_server, webhook_server,
                                                                         monkeypatch):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_WEBHOOK", webhook_server.url)
    sealed = sorted(logs.partition_dir("events", 1).glob("*.log"))[0]
    data = bytearray(sealed.read_bytes())
    data[120] ^= 0xFF                                  # the second batch's base offset: the offsets go wrong
    sealed.write_bytes(bytes(data))
    before = logs.snapshot()

    run = parse_dag("log_verify").test(logical_date=T)

    assert run.state == "failed"
    tis = task_instances(run)
    failed = [ti for (task, _), ti in tis.items() if task == "verify" and ti.state == "failed"]
    assert [ti.rendered_map_index for ti in failed] == ["events-1 (1 in dir-b)"]
    assert failed[0].try_number == 1
    verified = partition_results(run_results(run), "verify")
    assert verified[("events", 0)]["damaged"] is False and verified[("audit", 0)]["damaged"] is False
    assert verified[("events", 1)]["damaged"] is True
    assert logs.snapshot() == before                   # the audit repairs nothing
    assert len(smtp_server.messages) == 1 and len(webhook_server.received) == 1
    alert = webhook_server.received[0]["body"]
    assert alert["failed_partitions"] == ["events-1"]
    (part,) = alert["failed_tasks"][0]["partitions"]
    assert part["error_type"] == "DamageFound" and str(sealed) in part["error"]
    assert "batch at position 120" in part["error"] and part["permanent"] is True
