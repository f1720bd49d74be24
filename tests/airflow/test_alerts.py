"""Alerts an on-call person can act on: one digest per failed run at a real SMTP server and a real webhook,
naming every failed partition; errors no retry can fix fail at once; a damaged partition fails only its own
batch; one stated "as of" instant in the alert, the logs and the XComs."""
from __future__ import annotations

import datetime
import html
import os
import shutil
import urllib.parse

import pytest

from .conftest import parse_dag, partition_results, run_results, task_instances
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


@pytest.fixture
def three_partitions(storage):
    """events-0 and audit-0 in dir-a (one batch), events-1 in dir-b (another); events-* have expired segments."""
    for p in (0, 1):
        storage.produce("events", p, old_then_recent())
    storage.produce("audit", 0, old_then_recent(20, 0))
    assert storage.partition_dir("events", 0).parent == storage.partition_dir("audit", 0).parent
    assert storage.partition_dir("events", 1).parent != storage.partition_dir("events", 0).parent
    return storage


def block_first_deletion(storage, topic: str, partition: int):
    """A stale directory where retention must rename the partition's first expired segment (as a botched
    restore could leave): the rename fails for that partition only, and no retry can make it pass."""
    blocker = storage.partition_dir(topic, partition) / "00000000000000000000.log.deleted"
    blocker.mkdir()
    (blocker / "left-over").write_text("stale")
    os.utime(blocker, (T_MS / 1000 + 3600, T_MS / 1000 + 3600))      # not yet due for the purge
    return blocker


def test_damaged_partition_fails_only_its_batch_and_one_digest_names_it(three_partitions, alerting):
    storage = three_partitions
    mailbox, webhook = alerting
    blocker = block_first_deletion(storage, "events", 0)
    files_before = storage.files("events", 0)

    dag_run = parse_dag("log_retention").test(logical_date=T)

    # The run is red; the damaged partition's batch failed at once (try 1: no retry can remove the blocker);
    # its batch-mate and the other batch were maintained, and the purge ran.
    assert dag_run.state == "failed"
    tis = task_instances(dag_run)
    batches = {ti.rendered_map_index: ti for (task, _), ti in tis.items() if task == "retention"}
    failed = batches["audit-0..events-0 (2 in dir-a)"]
    assert failed.state == "failed" and failed.try_number == 1
    assert batches["events-1 (1 in dir-b)"].state == "success"
    assert tis[("purge_deleted", -1)].state == "success"
    assert tis[("run_report", -1)].state == "success"
    assert tis[("fail_run_if_upstream_failed", -1)].state == "failed"
    results = run_results(dag_run)
    done = partition_results(results, "retention")
    assert done[("events", 1)]["segments_deleted"] > 0
    assert done[("audit", 0)]["nothing_to_do"] is True                     # same batch, still maintained
    assert ("events", 0) not in done
    # Nothing stored was lost: every segment of events-0 is still there, the log still starts at 0.
    assert storage.files("events", 0) == files_before
    assert storage.describe()[("events", 0)]["log_start_offset"] == 0

    # Exactly one alert for the run, on each channel, naming the partition, the error and where to look.
    assert len(mailbox.messages) == 1 and len(webhook.received) == 1
    assert sorted(mailbox.envelopes[0].rcpt_tos) == sorted(RECIPIENTS)
    message = mailbox.messages[0]
    assert message["Subject"] == (f"[storage maintenance] FAILED log_retention run {dag_run.run_id}: 1 task(s), "
                                  "1 partition(s): events-0")
    run_url = f"http://airflow.test:8080/dags/log_retention/runs/{urllib.parse.quote(dag_run.run_id)}"
    log_url = f"{run_url}/tasks/retention/mapped/{failed.map_index}"
    body = mail_text(message)
    for expected in ("log_retention", dag_run.run_id, "2026-01-01T12:00:00.000Z (data interval end)",
                     "2026-01-01T11:55:00+00:00 -> 2026-01-01T12:00:00+00:00",
                     "retention [audit-0..events-0 (2 in dir-a)]", "events-0: StorageIOError", str(blocker),
                     log_url, run_url):
        assert expected in body, expected
    assert "events-1" not in body and "audit-0: " not in body

    post = webhook.received[0]
    assert post["path"] == "/alerts" and post["content_type"] == "application/json"
    alert = post["body"]
    assert alert["event"] == "storage_maintenance_run_failed"
    assert (alert["dag_id"], alert["run_id"], alert["failed_partitions"]) == ("log_retention", dag_run.run_id,
                                                                              ["events-0"])
    assert (alert["as_of"], alert["as_of_source"]) == ("2026-01-01T12:00:00.000Z", "data interval end")
    (task,) = alert["failed_tasks"]
    assert (task["task_id"], task["map_index"], task["label"], task["state"], task["try_number"]) == (
        "retention", failed.map_index, "audit-0..events-0 (2 in dir-a)", "failed", 1)
    assert task["log_url"] == log_url
    (part,) = task["partitions"]
    assert (part["topic"], part["partition"], part["error_type"], part["permanent"]) == (
        "events", 0, "StorageIOError", True)
    assert str(blocker) in part["error"]
    assert task["error"].startswith("AirflowFailException: 1 of 2 partition(s) failed to retention: events-0")

    # The run summary lists the failure beside what was done, and records that the alert went out.
    report = results[("run_report", -1)]
    assert report["totals"]["failed"] == 1 and report["totals"]["changed"] == 1
    assert report["alert"]["sent"] is True and report["alert"]["failed_partitions"] == ["events-0"]
    assert ("retention", "events-0", "failed") in {(r["task"], r["partition"], r["status"]) for r in report["rows"]}


def test_partition_that_cannot_be_loaded_is_isolated_inside_its_batch(three_partitions, alerting):
    storage = three_partitions
    mailbox, webhook = alerting
    # The active segment's time index replaced by a directory: events-0 cannot even be loaded.
    pdir = storage.partition_dir("events", 0)
    active = sorted(pdir.glob("*.timeindex"))[-1]
    saved = active.read_bytes()
    active.unlink()
    active.mkdir()
    try:
        dag_run = parse_dag("log_retention").test(logical_date=T)
    finally:
        active.rmdir()
        active.write_bytes(saved)
    assert dag_run.state == "failed"
    done = partition_results(run_results(dag_run), "retention")
    assert set(done) == {("audit", 0), ("events", 1)}
    assert len(mailbox.messages) == 1 and len(webhook.received) == 1
    # one alert; the partition failed in each task that opens it (retention and producer-id expiry) and only it
    failed_tasks = webhook.received[0]["body"]["failed_tasks"]
    assert sorted(t["task_id"] for t in failed_tasks) == ["expire_producers", "retention"]
    for task in failed_tasks:
        (part,) = task["partitions"]
        assert (part["topic"], part["partition"]) == ("events", 0)
        assert "cannot open time index" in part["error"] and "Is a directory" in part["error"]
        assert task["try_number"] == 1


def test_partition_folder_that_became_a_file_fails_the_retention_run_with_one_alert_naming_it(three_partitions,
                                                                                             alerting, tmp_path):
    """A partition folder replaced by a file is not silently left out of the listing (7 of 8
    partitions maintained, a green run): the dir's checkpoint files still list it, so it fails its batch in every
    task that maintains it, and the run alerts once, naming it."""
    from storage_engine.segment.checkpoint import OffsetCheckpointFile

    storage = three_partitions
    mailbox, webhook = alerting
    pdir = storage.partition_dir("events", 0)
    dir_a = pdir.parent
    listed = OffsetCheckpointFile(str(dir_a / "recovery-point-offset-checkpoint")).read()
    assert ("events", 0) in listed
    shutil.move(str(pdir), str(tmp_path / "events-0.saved"))
    pdir.write_text("not a folder")

    dag_run = parse_dag("log_retention").test(logical_date=T)

    assert dag_run.state == "failed"
    tis = task_instances(dag_run)
    batches = {ti.rendered_map_index: ti for (task, _), ti in tis.items() if task == "retention"}
    failed = batches["audit-0..events-0 (2 in dir-a)"]
    assert failed.state == "failed" and failed.try_number == 1           # permanent: no retry
    assert batches["events-1 (1 in dir-b)"].state == "success"
    done = partition_results(run_results(dag_run), "retention")
    assert set(done) == {("audit", 0), ("events", 1)} and done[("events", 1)]["segments_deleted"] > 0
    # One alert, naming the partition and why, in each task that maintains it (retention, producer-id expiry).
    assert len(mailbox.messages) == 1 and len(webhook.received) == 1
    alert = webhook.received[0]["body"]
    assert alert["failed_partitions"] == ["events-0"]
    assert sorted(t["task_id"] for t in alert["failed_tasks"]) == ["expire_producers", "retention"]
    for task in alert["failed_tasks"]:
        (part,) = task["partitions"]
        assert (part["topic"], part["partition"], part["error_type"], part["permanent"]) == (
            "events", 0, "PartitionUnreadableError", True)
        assert f"{pdir} is a regular file, not a folder" in part["error"]
    assert "events-0" in mailbox.messages[0]["Subject"] and "is a regular file, not a folder" in mail_text(
        mailbox.messages[0])
    report = run_results(dag_run)[("run_report", -1)]
    assert report["totals"]["failed"] >= 1 and report["alert"]["failed_partitions"] == ["events-0"]
    # The evidence stays: the dir's checkpoint still lists the partition (the next run reports it again).
    assert ("events", 0) in OffsetCheckpointFile(str(dir_a / "recovery-point-offset-checkpoint")).read()


def test_retryable_failure_is_retried_then_alerted_once(three_partitions, alerting, monkeypatch):
    """An error that may pass (too many open files here) is retried; the run alerts once, after the last try."""
    from .conftest import without_retry_delay

    storage = three_partitions
    mailbox, webhook = alerting
    # events-1's active index is briefly unreadable as "too many open files" would leave it: EMFILE is raised
    # by the engine's open of that file in the task's process.
    from storage_engine.segment import index_file

    real_open = os.open
    target = str(storage.partition_dir("events", 1))

    def failing_open(path, flags, *args, **kwargs):
        if str(path).startswith(target) and str(path).endswith(".index"):
            raise OSError(24, "Too many open files", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(index_file.os, "open", failing_open)
    dag_run = without_retry_delay(parse_dag("log_retention")).test(logical_date=T)
    assert dag_run.state == "failed"
    tis = task_instances(dag_run)
    failed = [ti for (task, _), ti in tis.items() if task == "retention" and ti.state == "failed"]
    assert [ti.rendered_map_index for ti in failed] == ["events-1 (1 in dir-b)"]
    assert failed[0].try_number == 3                                       # retries: 2
    assert len(mailbox.messages) == 1 and len(webhook.received) == 1
    failed_tasks = webhook.received[0]["body"]["failed_tasks"]     # retention and producer-id expiry both open it
    assert sorted(t["task_id"] for t in failed_tasks) == ["expire_producers", "retention"]
    for task in failed_tasks:
        assert task["try_number"] == 3 and task["partitions"][0]["permanent"] is False
        assert "Too many open files" in task["partitions"][0]["error"]


def test_run_without_data_interval_acts_as_of_its_trigger_time_and_says_so(three_partitions, alerting):
    storage = three_partitions
    mailbox, webhook = alerting
    block_first_deletion(storage, "events", 0)
    trigger = T + datetime.timedelta(minutes=2, seconds=17)           # not on the schedule's 5-minute grid
    dag_run = parse_dag("log_retention").test(logical_date=None, run_after=trigger)
    assert dag_run.data_interval_end is None
    results = run_results(dag_run)
    expected = "2026-01-01T12:02:17.000Z"
    for (task, _), batch in results.items():
        if task == "retention":
            assert (batch["as_of"], batch["as_of_source"]) == (expected, "trigger time (the run has no data interval)")
            assert batch["now_ms"] == T_MS + 137_000
    assert results[("run_report", -1)]["as_of"] == expected
    alert = webhook.received[0]["body"]
    assert alert["as_of"] == expected and alert["data_interval_end"] is None
    body = mail_text(mailbox.messages[0])
    assert f"{expected} (trigger time (the run has no data interval))" in body
    assert "none (the run acted as of its trigger time)" in body


@pytest.fixture
def config_broken_after_parse(storage):
    """log_checkpoint parsed on a good config, which then becomes invalid: the run fails for real."""
    storage.produce("events", 0, old_then_recent(5, 0))
    dag = parse_dag("log_checkpoint")
    storage.config_path.write_text("broker:\n  log.dirs: [logs/dir-a]\n  log.segment.bytes: 5\n")
    return dag


def test_failing_webhook_does_not_mask_the_email(storage, alerting, config_broken_after_parse):
    mailbox, webhook = alerting
    webhook.status = 500

    dag_run = config_broken_after_parse.test(logical_date=T)

    assert dag_run.state == "failed"
    tis = task_instances(dag_run)
    assert tis[("plan_batches", -1)].try_number == 1                  # an invalid config is not retried
    assert len(webhook.received) == 1                                  # tried, answered 500
    assert len(mailbox.messages) == 1
    body = mail_text(mailbox.messages[0])
    for expected in ("log_checkpoint", "plan_batches", dag_run.run_id, "ConfigError",
                     "log.segment.bytes = 5: must be >= 14", str(storage.config_path)):
        assert expected in body, expected
    # The report records that the webhook refused the alert; it does not fail (that would mail again).
    alert = run_results(dag_run)[("run_report", -1)]["alert"]
    assert alert["sent"] is False and "webhook: HTTPError: HTTP Error 500" in alert["error"]


def test_failing_smtp_does_not_stop_the_webhook(storage, alerting, config_broken_after_parse, monkeypatch):
    from .conftest import free_port

    mailbox, webhook = alerting
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", (
        '{"conn_type": "smtp", "host": "127.0.0.1", "port": %d, '
        '"extra": {"disable_ssl": true, "disable_tls": true, "retry_limit": 0, "timeout": 5}}') % free_port())

    dag_run = config_broken_after_parse.test(logical_date=T)

    assert dag_run.state == "failed"
    assert mailbox.messages == []
    digest = [r["body"] for r in webhook.received if r["body"]["event"] == "storage_maintenance_run_failed"]
    assert len(digest) == 1 and digest[0]["dag_id"] == "log_checkpoint"
    assert digest[0]["failed_tasks"][0]["error"].startswith("AirflowFailException: ConfigError:")
