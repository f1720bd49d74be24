"""Alert e-mails as every reader gets them: multipart/alternative with a text/plain part carrying the same facts
and fix as the HTML part, at a real SMTP server; the fix's commands, copied from the text part, work as printed
from a shell outside the venv (an empty environment, another folder); and a run whose alert was suppressed as a
duplicate says why on its run page, opened in chromium through a real ``airflow api-server``."""
from __future__ import annotations

import html
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import urllib.parse

import pytest

from .api_server import ApiServer
from .browser import logged_in
from .conftest import REPO, parse_dag, run_results
from .storage_fixtures import T, old_then_recent

pytestmark = pytest.mark.airflow

ARTIFACTS = REPO / "var" / "test-artifacts" / "alerts"


@pytest.fixture
def alerting(monkeypatch, smtp_server, webhook_server):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_WEBHOOK", webhook_server.url)
    return smtp_server, webhook_server


def digests(webhook) -> list[dict]:
    return [p["body"] for p in webhook.received if p["body"]["event"] == "storage_maintenance_run_failed"]


def damage(storage) -> pathlib.Path:
    """events-1's first sealed segment with one flipped byte (verify finds it); returns the file."""
    storage.produce("events", 1, old_then_recent(30, 5))
    sealed = sorted(storage.partition_dir("events", 1).glob("*.log"))[0]
    data = bytearray(sealed.read_bytes())
    data[120] ^= 0xFF
    sealed.write_bytes(bytes(data))
    return sealed


def test_alert_mail_has_a_text_part_with_the_same_facts_and_fix(storage, alerting):
    mailbox, webhook = alerting
    sealed = damage(storage)
    run = parse_dag("log_verify").test(logical_date=T)
    assert run.state == "failed"

    (message,) = mailbox.messages
    assert message.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]   # HTML preferred
    text = message.get_body(preferencelist=("plain",)).get_content()
    page = html.unescape(message.get_body(preferencelist=("html",)).get_content())
    assert "<" not in text.replace("<http", "")                          # no markup, only addresses in <...>

    (digest,) = digests(webhook)
    (cause,) = digest["root_causes"]
    # The fix first, each command on a line of its own, as it is to be typed; then the facts.
    assert text.index("What to do") < text.index(cause["fix"]) < text.index("Details")
    lines = text.splitlines()
    for command in cause["commands"]:
        assert "    " + command in lines, command
        assert command in page
    assert f"Page: {cause['page']}" in lines
    assert f"Error: {cause['error']}" in lines
    for fact in ("DAG: log_verify", f"Run: {run.run_id}", "Failed partitions: 1", "Failed tasks: 1",
                 f"Acted as of: {digest['as_of']} ({digest['as_of_source']})", digest["run_url"]):
        assert fact in text, fact
    assert "events-1: " in text and str(sealed) in text
    for url in (cause["page"], digest["run_url"]):
        assert url in page


def test_the_commands_an_alert_prints_work_from_any_shell(storage, alerting, tmp_path):
    """The commands are copied from the text part and run by ``sh`` with an empty environment (no PATH beyond
    the shell's default, no venv, no PYTHONPATH) in another folder: they reach the engine and its config."""
    mailbox, webhook = alerting
    sealed = damage(storage)
    assert parse_dag("log_verify").test(logical_date=T).state == "failed"
    text = mailbox.messages[0].get_body(preferencelist=("plain",)).get_content()
    commands = [line.strip() for line in text.splitlines() if line.startswith("    ")]
    (cause,) = digests(webhook)[0]["root_causes"]
    assert commands == cause["commands"] and len(commands) == 2
    dump, verify = commands
    assert shlex.split(verify)[0] == os.path.abspath(shlex.split(verify)[0])   # a full path, not "python"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def from_any_shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["/usr/bin/env", "-i", "/bin/sh", "-c", command], cwd=elsewhere,
                              capture_output=True, text=True, timeout=300)

    done = from_any_shell(verify)
    assert done.returncode == 1, done.stderr                # verify's exit status for damage found
    assert "events-1" in done.stdout and "No module named" not in done.stderr
    done = from_any_shell(dump)
    assert done.returncode == 1, done.stderr                # the dump reaches the damage and names it
    assert f"at position 120 of {sealed}" in done.stderr
    # What the alert used to print does not reach the engine in that shell (no "python" on the default PATH, or
    # one without the engine: "No module named storage_engine", also exit status 1, but no report).
    old = from_any_shell(shlex.join(["python", "-m", "storage_engine", *shlex.split(verify)[3:]]))
    assert old.returncode != 0 and "events-1" not in old.stdout, old


@pytest.fixture
def server(storage):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    srv = ApiServer(pathlib.Path(os.environ["AIRFLOW_HOME"]), storage.config_path, ARTIFACTS / "api-server.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_a_suppressed_alert_says_why_on_the_run_page(storage, alerting, tmp_path, server):
    mailbox, webhook = alerting
    storage.produce("events", 0, old_then_recent())
    pdir = storage.partition_dir("events", 0)
    shutil.move(str(pdir), str(tmp_path / "events-0.saved"))
    pdir.write_text("not a folder")
    first = parse_dag("log_retention").test(logical_date=T)
    second = parse_dag("log_checkpoint").test(logical_date=T)        # another DAG meets the same root cause
    assert first.state == second.state == "failed"
    assert len(mailbox.messages) == 1 and len(digests(webhook)) == 1

    alert = run_results(second)[("run_report", -1)]["alert"]
    assert alert["sent"] is False and alert["suppressed"] == ["unreadable:events-0"]
    (why,) = alert["suppressed_causes"]
    assert (why["dag_id"], why["run_id"], why["where"]) == ("log_retention", first.run_id, "events-0")
    assert why["alerted_at"] and why["alerted_at"] == why["first_alerted"]

    with logged_in(server, viewport={"width": 1280, "height": 900}) as context:
        page = context.new_page()
        page.goto(server.url + f"/storage-maintenance/runs/log_checkpoint/{urllib.parse.quote(second.run_id)}")
        shown = page.locator("#alert").inner_text()
        assert (f"suppressed: the same root cause (partition cannot be read: events-0) alerted at "
                f"{why['alerted_at']} by run {first.run_id} of log_retention") in shown, shown
        assert "not delivered" not in shown and page.locator("#alert .bad").count() == 0
        page.screenshot(path=str(ARTIFACTS / "suppressed-alert-run-page.png"), full_page=True)
        # The run named links to its own page, where the alert went out.
        page.locator("#suppressed a").click()
        page.wait_for_url("**/runs/log_retention/**")
        assert page.locator("#alert").inner_text().strip() == "Alert: sent"


def test_where_operators_reach_the_engine_differently_the_command_prefix_is_configured(monkeypatch):
    from storage_maintenance.reporting.root_causes import ENV_ENGINE_COMMAND, Where

    where = Where("conf/storage.yaml")
    assert shlex.split(where.cli("verify")) == [sys.executable, "-m", "storage_engine", "--config",
                                               os.path.abspath("conf/storage.yaml"), "verify"]
    monkeypatch.setenv(ENV_ENGINE_COMMAND, "docker compose exec 'airflow worker' /opt/venv/bin/python -m storage_engine")
    assert shlex.split(where.cli("verify")) == ["docker", "compose", "exec", "airflow worker", "/opt/venv/bin/python",
                                               "-m", "storage_engine", "--config",
                                               os.path.abspath("conf/storage.yaml"), "verify"]
