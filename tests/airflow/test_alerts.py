"""Failure alerts: tasks that really fail (the engine raises) e-mail a real SMTP server and POST to a real
HTTP server, and one channel failing does not stop the other."""
from __future__ import annotations

import html
import os
import urllib.parse

import pytest

from .conftest import parse_dag, task_instances, without_retry_delay
from .storage_fixtures import T, T_MS, old_then_recent

pytestmark = pytest.mark.airflow

RECIPIENTS = ["ops@example.com", "oncall@example.com"]


def mail_text(message) -> str:
    """The alert's HTML body as plain text (entities decoded)."""
    return html.unescape(message.get_body(preferencelist=("html",)).get_content())


@pytest.fixture
def alerting(monkeypatch, smtp_server, webhook_server):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", ", ".join(RECIPIENTS))
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_WEBHOOK", webhook_server.url)
    return smtp_server, webhook_server


def test_failed_partition_alerts_once_naming_dag_task_partition_run_and_exception(storage, alerting):
    mailbox, webhook = alerting
    for p in (0, 1):
        storage.produce("events", p, old_then_recent())
    storage.produce("audit", 0, old_then_recent(20, 0))
    # A stale directory where retention must rename events-1's first expired segment (as a botched restore
    # could leave): the engine's rename fails, for that partition only.
    pdir = storage.partition_dir("events", 1)
    blocker = pdir / "00000000000000000000.log.deleted"
    blocker.mkdir()
    (blocker / "left-over").write_text("stale")
    os.utime(blocker, (T_MS / 1000 + 3600, T_MS / 1000 + 3600))      # not yet due for the purge
    files_before = storage.files("events", 1)

    dag_run = without_retry_delay(parse_dag("log_retention")).test(logical_date=T)

    # The run is red, the other partitions and the purge still ran.
    assert dag_run.state == "failed"
    tis = task_instances(dag_run)
    retention = {ti.rendered_map_index: ti for (task, _), ti in tis.items() if task == "retention"}
    assert retention["events-1"].state == "failed"
    assert retention["events-1"].try_number == 3                       # retries: 2
    assert retention["events-0"].state == retention["audit-0"].state == "success"
    assert tis[("purge_deleted", -1)].state == "success"
    assert tis[("fail_run_if_upstream_failed", -1)].state == "failed"
    # Nothing stored was lost: every segment of events-1 is still there, the log still starts at 0.
    assert storage.files("events", 1) == files_before
    assert storage.describe()[("events", 1)]["log_start_offset"] == 0

    # One e-mail, after the last try (none for the retries, none from the run-outcome task).
    assert len(mailbox.messages) == 1
    message = mailbox.messages[0]
    assert sorted(mailbox.envelopes[0].rcpt_tos) == sorted(RECIPIENTS)
    map_index = retention["events-1"].map_index
    log_url = (f"http://airflow.test:8080/dags/log_retention/runs/{urllib.parse.quote(dag_run.run_id)}"
               f"/tasks/retention/mapped/{map_index}?try_number=3")
    assert message["Subject"] == (f"[storage maintenance] FAILED log_retention.retention [events-1] "
                                  f"run {dag_run.run_id}")
    body = mail_text(message)
    for expected in ("DAG", "log_retention", "Task", "retention", "Partition", "events-1",
                     "Run", dag_run.run_id, "2026-01-01T11:55:00+00:00 -> 2026-01-01T12:00:00+00:00",
                     "Try", "3 of 3", "StorageIOError", str(blocker), log_url):
        assert expected in body, expected

    # The same alert as JSON on the webhook.
    assert len(webhook.received) == 1
    post = webhook.received[0]
    assert post["path"] == "/alerts" and post["content_type"] == "application/json"
    alert = post["body"]
    assert {k: alert[k] for k in ("dag_id", "task_id", "partition", "run_id", "map_index", "try_number")} == {
        "dag_id": "log_retention", "task_id": "retention", "partition": "events-1", "run_id": dag_run.run_id,
        "map_index": map_index, "try_number": 3}
    assert (alert["data_interval_start"], alert["data_interval_end"]) == (
        "2026-01-01T11:55:00+00:00", "2026-01-01T12:00:00+00:00")
    assert alert["exception"].startswith("StorageIOError: ") and str(blocker) in alert["exception"]
    assert alert["log_url"] == log_url


@pytest.fixture
def config_broken_after_parse(storage):
    """log_checkpoint parsed on a good config, which then becomes invalid: the task fails for real."""
    storage.produce("events", 0, old_then_recent(5, 0))
    dag = parse_dag("log_checkpoint")
    storage.config_path.write_text("broker:\n  log.dirs: [logs/dir-a]\n  log.segment.bytes: 5\n")
    return dag


def test_failing_webhook_does_not_mask_the_email(storage, alerting, config_broken_after_parse):
    mailbox, webhook = alerting
    webhook.status = 500

    dag_run = config_broken_after_parse.test(logical_date=T)

    assert dag_run.state == "failed"
    checkpoint = task_instances(dag_run)[("checkpoint", -1)]
    assert checkpoint.try_number == 1                 # an invalid config is not retried
    assert len(webhook.received) == 1                 # tried, answered 500
    assert len(mailbox.messages) == 1
    body = mail_text(mailbox.messages[0])
    for expected in ("log_checkpoint", "checkpoint", "all partitions", dag_run.run_id,
                     "ConfigError", "log.segment.bytes = 5: must be >= 14", str(storage.config_path)):
        assert expected in body, expected


def test_failing_smtp_does_not_stop_the_webhook(storage, alerting, config_broken_after_parse, monkeypatch):
    from .conftest import free_port

    mailbox, webhook = alerting
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", (
        '{"conn_type": "smtp", "host": "127.0.0.1", "port": %d, '
        '"extra": {"disable_ssl": true, "disable_tls": true, "retry_limit": 0, "timeout": 5}}') % free_port())

    dag_run = config_broken_after_parse.test(logical_date=T)

    assert dag_run.state == "failed"
    assert mailbox.messages == []
    assert len(webhook.received) == 1
    assert webhook.received[0]["body"]["dag_id"] == "log_checkpoint"
    assert webhook.received[0]["body"]["exception"].startswith("AirflowFailException: ConfigError:")
