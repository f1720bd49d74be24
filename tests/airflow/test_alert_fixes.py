"""Alerts that say the fix, sent where the Airflow Variables say at the moment they are sent, once per root cause:
each failure class of a real run (a path in the way, a partition folder that became a file, damaged bytes, lost
offsets, damage under compaction, a full disk, a broken config, a mistyped conf key, an offline log dir) reaches
a real SMTP server and a real webhook with its fix (the command with the actual topic, partition, file or log dir,
and the Storage view page); a root cause met again, by the same DAG or another, sends nothing until it was seen
fixed."""
from __future__ import annotations

import errno
import html
import json
import os
import shlex
import shutil
import struct
import sys

import pytest

from storage_engine.clock import ManualClock
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

from .conftest import parse_dag, run_results
from .storage_fixtures import HOUR_MS, T, T_MS, StorageFixture, old_then_recent

pytestmark = pytest.mark.airflow

VIEW = "http://airflow.test:8080/storage-maintenance"
VAR_EMAILS = "storage_maintenance_alert_emails"
VAR_WEBHOOK = "storage_maintenance_alert_webhook"


def mail_text(message) -> str:
    return html.unescape(message.get_body(preferencelist=("html",)).get_content())


@pytest.fixture
def alerting(monkeypatch, smtp_server, webhook_server):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_WEBHOOK", webhook_server.url)
    return smtp_server, webhook_server


@pytest.fixture
def variables():
    """Set Airflow Variables in the metadata DB (as the UI or `airflow variables set` does); removed afterwards."""
    from airflow.models.variable import Variable

    keys = set()

    def set_variable(key: str, value: str) -> None:
        Variable.set(key, value)
        keys.add(key)

    yield set_variable
    for key in keys:
        Variable.delete(key)


def cli(storage, *args: str) -> str:
    """A fix's command: the full path of the Python running the tasks, so that it works from any shell."""
    return shlex.join([sys.executable, "-m", "storage_engine", "--config", str(storage.config_path), *args])


def digests(webhook) -> list[dict]:
    return [p["body"] for p in webhook.received if p["body"]["event"] == "storage_maintenance_run_failed"]


def only_cause(alerting) -> tuple[dict, str]:
    """The one root cause of the one digest sent, and the e-mail's text."""
    mailbox, webhook = alerting
    assert len(mailbox.messages) == 1 and len(digests(webhook)) == 1
    (cause,) = digests(webhook)[0]["root_causes"]
    return cause, mail_text(mailbox.messages[0])


def assert_fix_in_mail(cause: dict, body: str) -> None:
    assert "What to do" in body and cause["fix"] in body
    for command in cause["commands"]:
        assert command in body, command
    if cause["page"]:
        assert cause["page"] in body


# -- where alerts go -----------------------------------------------------------------------------------------

def test_recipients_and_webhook_are_read_from_variables_when_each_alert_is_sent(storage, alerting, variables):
    """Four failed runs in one process, the settings changed between them: each alert goes where the settings
    said at that moment (no restart, no re-parse: the DAG object is parsed once)."""
    from airflow.models.variable import Variable

    mailbox, webhook = alerting
    storage.produce("events", 0, old_then_recent())
    dag = parse_dag("log_retention")

    def failed_run() -> None:
        run = dag.test(logical_date=T, run_conf={"dryrun": True})      # a mistyped key: always alerted
        assert run.state == "failed"

    failed_run()
    assert mailbox.envelopes[-1].rcpt_tos == ["ops@example.com"] and webhook.received[-1]["path"] == "/alerts"

    variables(VAR_EMAILS, "lead@example.com, oncall@example.com")
    variables(VAR_WEBHOOK, webhook.url.replace("/alerts", "/from-variable"))
    failed_run()
    assert len(mailbox.messages) == 2 and len(webhook.received) == 2
    assert sorted(mailbox.envelopes[-1].rcpt_tos) == ["lead@example.com", "oncall@example.com"]
    assert webhook.received[-1]["path"] == "/from-variable"

    variables(VAR_EMAILS, '["night@example.com"]')                     # a JSON list works too
    failed_run()
    assert mailbox.envelopes[-1].rcpt_tos == ["night@example.com"]

    variables(VAR_EMAILS, "")                                           # empty: no e-mail, the webhook still
    failed_run()
    assert len(mailbox.messages) == 3 and len(webhook.received) == 4

    Variable.delete(VAR_EMAILS)
    Variable.delete(VAR_WEBHOOK)                                        # gone: the environment again
    failed_run()
    assert mailbox.envelopes[-1].rcpt_tos == ["ops@example.com"] and webhook.received[-1]["path"] == "/alerts"

    (cause,) = webhook.received[-1]["body"]["root_causes"]
    assert cause["kind"] == "run-conf" and "Trigger the DAG again with only the keys" in cause["fix"]
    assert cause["page"] == "http://airflow.test:8080/dags/log_retention"
    assert "unknown key(s) in the run's conf: 'dryrun'" in cause["error"]


# -- each failure class names its fix ------------------------------------------------------------------------

def test_a_path_in_the_way(storage, alerting):
    storage.produce("events", 0, old_then_recent())
    blocker = storage.partition_dir("events", 0) / "00000000000000000000.log.deleted"
    blocker.mkdir()
    (blocker / "left-over").write_text("stale")
    os.utime(blocker, (T_MS / 1000 + 3600, T_MS / 1000 + 3600))

    assert parse_dag("log_retention").test(logical_date=T).state == "failed"

    cause, body = only_cause(alerting)
    assert (cause["kind"], cause["partition"], cause["path"]) == ("in-the-way", "events-0", str(blocker))
    assert cause["key"] == f"in-the-way:{blocker}"
    assert f"{blocker} is not the engine's" in cause["fix"] and f"ls -la {blocker}" in cause["commands"]
    assert cause["page"] == f"{VIEW}/partitions/events/0"
    assert cause["seen_in"] == ["retention [events-0 (1 in dir-a)]"]
    assert_fix_in_mail(cause, body)


def test_a_partition_folder_that_became_a_file(storage, alerting, tmp_path):
    storage.produce("events", 0, old_then_recent())
    storage.produce("events", 1, old_then_recent())
    pdir = storage.partition_dir("events", 0)
    shutil.move(str(pdir), str(tmp_path / "events-0.saved"))
    pdir.write_text("not a folder")

    assert parse_dag("log_retention").test(logical_date=T).state == "failed"

    cause, body = only_cause(alerting)            # retention and producer-id expiry both met it: one cause
    assert (cause["kind"], cause["key"], cause["path"]) == ("unreadable", "unreadable:events-0", str(pdir))
    assert sorted(cause["seen_in"]) == ["expire_producers [events-0 (1 in dir-a)]", "retention [events-0 (1 in dir-a)]"]
    assert "Put the partition folder" in cause["fix"] and "from a replica or a backup" in cause["fix"]
    assert cli(storage, "delete-topic", "--topic", "events", "--partition", "0") in cause["commands"]
    assert_fix_in_mail(cause, body)


def test_damaged_bytes_found_by_verify(storage, alerting):
    storage.produce("events", 1, old_then_recent(30, 5))
    sealed = sorted(storage.partition_dir("events", 1).glob("*.log"))[0]
    data = bytearray(sealed.read_bytes())
    data[120] ^= 0xFF
    sealed.write_bytes(bytes(data))

    assert parse_dag("log_verify").test(logical_date=T).state == "failed"

    cause, body = only_cause(alerting)
    assert (cause["kind"], cause["key"], cause["path"]) == ("corrupt", "corrupt:events-1", str(sealed))
    assert "from a replica or a backup" in cause["fix"]
    assert cause["commands"] == [cli(storage, "dump-log", "--files", str(sealed), "--deep-iteration"),
                                 cli(storage, "verify")]
    assert cause["page"] == f"{VIEW}/partitions/events/1"
    assert_fix_in_mail(cause, body)


def test_lost_offsets_found_by_verify(storage, alerting):
    storage.produce("events", 0, old_then_recent(30, 5))
    first = sorted(storage.partition_dir("events", 0).glob("00000000000000000000.*"))
    for f in first:                                   # the first segment deleted behind the engine's back
        f.unlink()

    assert parse_dag("log_verify").test(logical_date=T).state == "failed"

    cause, body = only_cause(alerting)
    assert (cause["kind"], cause["key"]) == ("data-loss", "data-loss:events-0")
    assert "accept the loss" in cause["fix"]
    assert cli(storage, "accept-loss", "--topic", "events", "--partition", "0") in cause["commands"]
    assert_fix_in_mail(cause, body)


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    """ue-0: keyed records (20 keys, each written many times) over the 3 hours before T, compacted topic."""
    fixture = StorageFixture(tmp_path / "keyed", topics={"ue": {"cleanup.policy": "compact", "segment.bytes": 1024,
                                                               "min.cleanable.dirty.ratio": 0.01}})
    monkeypatch.setenv("STORAGE_ENGINE_CONFIG", str(fixture.config_path))
    with LogManager.open(fixture.config(), clock=ManualClock(T_MS)) as mgr:
        log = mgr.get_or_create_log("ue", 0)
        for i in range(360):
            ts = T_MS - 3 * HOUR_MS + i * 30_000
            assert isinstance(log.clock, ManualClock)   # the clock the test opened the store with
            log.clock.set(ts)
            log.append_records([SimpleRecord(b"k%d" % (i % 20), b"value-%d" % i, ts)])
    return fixture


def test_damage_under_compaction_names_the_uncleanable_mark_to_clear(keyed, alerting):
    path = sorted(keyed.partition_dir("ue", 0).glob("*.log"))[1]
    with open(path, "r+b") as f:               # one bit inside the records of the segment's second batch
        data = f.read()
        position = 12 + struct.unpack_from(">i", data, 8)[0]
        f.seek(position + 64)
        f.write(bytes([data[position + 64] ^ 0x01]))

    assert parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "local"}).state == "failed"

    cause, body = only_cause(alerting)
    assert (cause["kind"], cause["key"], cause["path"]) == ("corrupt", "corrupt:ue-0", str(path))
    assert "Clear button" in cause["fix"]
    assert cli(keyed, "compact", "--clear-uncleanable", "--topic", "ue", "--partition", "0") in cause["commands"]
    assert cause["page"] == f"{VIEW}/partitions/ue/0"
    assert_fix_in_mail(cause, body)


def test_a_full_disk(storage, alerting, monkeypatch):
    """No space left in dir-a when its checkpoint files are written (the disk is simulated full at the one call
    that writes them): the dir goes offline for the run (its partitions skipped, dir-b maintained) and its one
    alert says how to free space there."""
    from storage_engine import durable

    storage.produce("events", 0, old_then_recent())     # dir-a
    storage.produce("events", 1, old_then_recent())     # dir-b
    dir_a = str(storage.log_dirs[0])
    # The run has something to write in dir-a (a checkpoint file whose entries equal what the run would write is
    # left as it is): its recovery points are behind the log, as after a crash before the last checkpoint.
    recovery = os.path.join(dir_a, "recovery-point-offset-checkpoint")
    with open(recovery) as f:
        version, count, *entries = f.read().splitlines()
    with open(recovery, "w") as f:
        f.write("\n".join([version, count, *(" ".join(e.split()[:2] + ["0"]) for e in entries)]) + "\n")
    real_open = open

    def full_disk_open(path, *args, **kwargs):
        if str(path).startswith(dir_a + os.sep) and str(path).endswith(durable.TMP_SUFFIX):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(durable, "open", full_disk_open, raising=False)
    run = parse_dag("log_checkpoint").test(logical_date=T)

    assert run.state == "success"
    assert "No space left on device" in run_results(run)[("run_report", -1)]["offline_dirs"][dir_a]
    mailbox, webhook = alerting
    (alert,) = [p["body"] for p in webhook.received if p["body"]["event"] == "storage_log_dir_offline"]
    assert (alert["log_dir"], alert["kind"]) == (dir_a, "disk-full")
    assert f"Free disk space on the file system of {dir_a}" in alert["fix"]
    assert alert["commands"] == [f"df -h {dir_a}", cli(storage, "purge-deleted"),
                                 cli(storage, "log-dirs", "--max-used-percent", "85", "--execute")]
    assert alert["page"] == f"{VIEW}/"
    (mail,) = mailbox.messages
    body = mail_text(mail)
    assert "What to do" in body and alert["fix"] in body and all(c in body for c in alert["commands"])


def test_a_broken_config(storage, alerting):
    storage.produce("events", 0, old_then_recent(5, 0))
    dag = parse_dag("log_checkpoint")
    storage.config_path.write_text("broker:\n  log.dirs: [logs/dir-a]\n  log.segment.bytes: 5\n")

    assert dag.test(logical_date=T).state == "failed"

    cause, body = only_cause(alerting)
    assert (cause["kind"], cause["key"]) == ("config", f"config:{storage.config_path}")
    assert f"Correct {storage.config_path}" in cause["fix"] and cause["commands"] == [cli(storage, "describe")]
    assert "log.segment.bytes = 5" in cause["error"]
    assert_fix_in_mail(cause, body)


def test_an_offline_log_dir(storage, alerting):
    storage.produce("events", 0, old_then_recent())
    storage.produce("audit", 0, old_then_recent(20, 0))
    dir_b = storage.log_dirs[1]
    aside = str(dir_b) + ".aside"
    os.rename(dir_b, aside)
    os.symlink(os.path.basename(dir_b), dir_b)          # a link to itself: ELOOP
    try:
        assert parse_dag("log_retention").test(logical_date=T).state == "success"
    finally:
        os.remove(dir_b)
        os.rename(aside, dir_b)
    mailbox, webhook = alerting
    (alert,) = [p["body"] for p in webhook.received if p["body"]["event"] == "storage_log_dir_offline"]
    assert f"{dir_b} is no longer the log dir's folder" in alert["fix"]
    assert f"ls -ld {dir_b}" in alert["commands"] and alert["page"] == f"{VIEW}/"
    (mail,) = [m for m in mailbox.messages if "LOG DIR OFFLINE" in m["Subject"]]
    body = mail_text(mail)
    assert "What to do" in body and alert["fix"] in body and f"ls -ld {dir_b}" in body


# -- one alert per root cause --------------------------------------------------------------------------------

def record(storage) -> dict:
    path = storage.root / "logs" / "maintenance-state" / "alerted-failures.json"
    return json.loads(path.read_text())["causes"] if path.exists() else {}


def test_one_alert_per_root_cause_across_dags_and_runs_until_it_is_fixed(storage, alerting, tmp_path):
    mailbox, webhook = alerting
    storage.produce("events", 0, old_then_recent())     # dir-a
    storage.produce("events", 1, old_then_recent())     # dir-b
    dirs = {p: storage.partition_dir("events", p) for p in (0, 1)}

    def break_partition(p: int) -> None:
        shutil.move(str(dirs[p]), str(tmp_path / f"events-{p}.saved"))
        dirs[p].write_text("not a folder")

    def repair_partition(p: int) -> None:
        dirs[p].unlink()
        shutil.move(str(tmp_path / f"events-{p}.saved"), str(dirs[p]))

    break_partition(0)
    first = parse_dag("log_retention").test(logical_date=T)
    assert first.state == "failed" and len(mailbox.messages) == 1
    assert list(record(storage)) == ["unreadable:events-0"]
    assert record(storage)["unreadable:events-0"]["run_id"] == first.run_id

    # The same root cause met by three other DAGs and by the next retention run: nothing more is sent, and each
    # report says why.
    for dag_id, when in (("log_checkpoint", T), ("log_flush", T), ("log_verify", T),
                         ("log_retention", T.replace(minute=5))):
        run = parse_dag(dag_id).test(logical_date=when)
        assert run.state == "failed", dag_id
        alert = run_results(run)[("run_report", -1)]["alert"]
        assert alert["sent"] is False and alert["suppressed"] == ["unreadable:events-0"], (dag_id, alert)
    assert len(mailbox.messages) == 1 and len(digests(webhook)) == 1
    detectors = record(storage)["unreadable:events-0"]["detectors"]
    assert {"log_retention.retention", "log_checkpoint.checkpoint", "log_flush.flush",
            "log_verify.verify_log_dirs"} <= set(detectors)

    # A new root cause while the old one persists: one alert, for the new one, listing the old as still failing.
    break_partition(1)
    run = parse_dag("log_checkpoint").test(logical_date=T.replace(minute=10))
    assert run.state == "failed" and len(mailbox.messages) == 2
    digest = digests(webhook)[-1]
    assert digest["new_root_causes"] == ["unreadable:events-1"]
    old = {c["key"]: c for c in digest["root_causes"]}["unreadable:events-0"]
    assert old["alerted_before"] == record(storage)["unreadable:events-0"]["first_alerted"]
    body = mail_text(mailbox.messages[-1])
    assert f"partition cannot be read: events-0 (still failing; alerted {old['alerted_before']})" in body
    assert body.index("partition cannot be read: events-1") < body.index("still failing")   # the new one first

    # Both fixed: the next run maintains both partitions, which closes both root causes ...
    repair_partition(0)
    repair_partition(1)
    assert parse_dag("log_checkpoint").test(logical_date=T.replace(minute=15)).state == "success"
    assert record(storage) == {}
    # ... so the next failure is a new alert, whichever DAG meets it.
    break_partition(0)
    try:
        assert parse_dag("log_flush").test(logical_date=T.replace(minute=20)).state == "failed"
    finally:
        repair_partition(0)
    assert len(mailbox.messages) == 3
    assert digests(webhook)[-1]["new_root_causes"] == ["unreadable:events-0"]


def test_an_alert_not_delivered_is_sent_again_by_the_next_run(storage, alerting):
    mailbox, webhook = alerting
    storage.produce("events", 0, old_then_recent())
    blocker = storage.partition_dir("events", 0) / "00000000000000000000.log.deleted"
    blocker.mkdir()
    (blocker / "left-over").write_text("stale")
    os.utime(blocker, (T_MS / 1000 + 3600, T_MS / 1000 + 3600))
    webhook.status = 500
    run = parse_dag("log_retention").test(logical_date=T)
    assert run_results(run)[("run_report", -1)]["alert"]["sent"] is False
    assert record(storage) == {}                        # forgotten: it was not delivered everywhere
    webhook.status = 200
    parse_dag("log_retention").test(logical_date=T.replace(minute=5))
    assert len(mailbox.messages) == 2 and len(digests(webhook)) == 2
    assert list(record(storage)) == [f"in-the-way:{blocker}"]


def test_an_open_root_cause_is_alerted_again_after_a_day(tmp_path):
    from storage_maintenance.reporting.root_causes import REMIND_AFTER_S, AlertRecord, Where, classify

    where = Where("/etc/storage.yaml", ["/data/dir-a"])
    cause = classify("PartitionUnreadableError", "partition events-0 cannot be read in /data/dir-a: /data/dir-a/"
                     "events-0 is a regular file, not a folder", topic="events", partition=0, dag_id="log_flush",
                     task_id="flush", where=where)
    record = AlertRecord(str(tmp_path / "state"))
    seen = {"dag_id": "log_flush", "run_id": "r1"}
    t0 = 1_767_268_800.0
    assert record.claim([dict(cause)], seen, now_s=t0) == ([cause], [])
    new, repeated = record.claim([dict(cause)], seen, now_s=t0 + REMIND_AFTER_S - 1)
    assert new == [] and [c["key"] for c in repeated] == ["unreadable:events-0"]
    new, repeated = record.claim([dict(cause)], seen, now_s=t0 + REMIND_AFTER_S + 1)
    assert [c["key"] for c in new] == ["unreadable:events-0"] and repeated == []
    assert new[0]["alerted_before"] == "2026-01-01T12:00:00+00:00"        # a reminder says since when
    # Another task of the same DAG maintaining the partition does not close it; the task that met it does.
    assert record.close("log_flush.plan_batches", {"events-0"}) == []
    assert record.close("log_flush.flush", {"events-1"}) == []
    assert record.close("log_flush.flush", {"events-0"}) == ["unreadable:events-0"]
