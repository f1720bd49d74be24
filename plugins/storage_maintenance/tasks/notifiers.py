"""Alerts: one e-mail (and optionally a webhook POST) per root cause of failed maintenance, each naming its fix;
and a per-task notifier kept for the run report's own failure.

Configuration, read each time an alert is sent (a change takes effect with the next alert: no restart, no DAG
re-parse); first match wins:

* recipients: the notifier's ``to``; the Airflow Variable ``storage_maintenance_alert_emails`` (comma-separated,
  or a JSON list; an empty value sends no e-mail); ``$STORAGE_MAINTENANCE_ALERT_EMAILS``. E-mail goes through
  Airflow's SMTP connection (``smtp_default`` unless ``smtp_conn_id`` says otherwise, the smtp provider's
  :class:`SmtpHook`); sender: ``from_email``, else the connection's ``from_email`` extra, else
  ``storage-maintenance@localhost``;
* webhook: the notifier's ``webhook_url``; the Variable ``storage_maintenance_alert_webhook`` (empty: none);
  ``$STORAGE_MAINTENANCE_ALERT_WEBHOOK``. The alert is POSTed as JSON.

(Variables are looked up as Airflow looks them up: secrets backends, ``AIRFLOW_VAR_...`` in the environment,
then the metadata DB, where ``airflow variables set`` and the UI's Admin > Variables put them.)

The e-mail is multipart/alternative: a text/plain part with the same facts and fix as the HTML part (made from
it, :mod:`.notifiers_text`), for clients and terminals that show text only.

Both channels are tried independently (e-mail first), so a failing webhook never masks the e-mail and vice
versa; if either failed, :class:`AlertNotDelivered` names both outcomes afterwards.

**Fixes and one alert per root cause.** A run digest's failures are grouped into root causes
(:mod:`storage_maintenance.reporting.root_causes`), each with its fix: a sentence, the commands with the actual topic,
partition, file and log dir, and the Storage view page; the e-mail shows them first ("What to do") and the
webhook JSON carries them as ``root_causes`` (``key``, ``kind``, ``title``, ``partition``, ``log_dir``,
``path``, ``error``, ``fix``, ``commands``, ``page``, ``seen_in``, ``alerted_before``). A root cause already
alerted and still open, by this DAG or another, sends nothing again; a digest with a new root cause lists the
old ones as still failing. An offline log dir's alert carries its fix the same way (``fix``, ``commands``,
``page``).

Every alert says which instant the run acted as of (and which rule chose it), with the DAG, run, failed tasks
(name, the partitions each could not maintain with the error, try, log link) and a link to the run.
"""
from __future__ import annotations

import html
import json
import os
import smtplib
import urllib.request
from collections.abc import Iterable
from email.message import EmailMessage
from typing import Any, cast

from airflow.sdk import BaseNotifier

from ..reporting import root_causes
from .hooks import StorageEngineHook
from .notifiers_text import alert_message

ENV_EMAILS = "STORAGE_MAINTENANCE_ALERT_EMAILS"
ENV_WEBHOOK = "STORAGE_MAINTENANCE_ALERT_WEBHOOK"
VAR_EMAILS = "storage_maintenance_alert_emails"
VAR_WEBHOOK = "storage_maintenance_alert_webhook"
DEFAULT_FROM = "storage-maintenance@localhost"
MAX_PARTITIONS_IN_MAIL = 100
RUN_FAILED = "storage_maintenance_run_failed"
LOG_DIR_OFFLINE = "storage_log_dir_offline"
_NOT_SET = object()


class AlertNotDelivered(RuntimeError):
    """At least one alert channel failed (the message names each)."""


def airflow_variable(key: str) -> Any:
    """The Airflow Variable ``key`` as it is now, or ``_NOT_SET`` (absent, or no Airflow to ask)."""
    try:
        from airflow.sdk import Variable
        return Variable.get(key, default=_NOT_SET)
    except Exception:   # noqa: BLE001 - no Airflow to ask (or it cannot answer): the Variable is unset
        return _NOT_SET


def setting(variable: str, env: str) -> Any:
    """An alert setting: the Variable ``variable`` if it exists (even empty), else ``$env`` (None if unset)."""
    value = airflow_variable(variable)
    return os.environ.get(env) if value is _NOT_SET else value


def recipients(value: str | Iterable[str] | None = None) -> list[str]:
    """The alert's recipients: ``value``, else the Variable, else the environment (see the module docstring)."""
    if value is None:
        value = setting(VAR_EMAILS, ENV_EMAILS)
    if value is None:
        return []
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [item.strip() for item in items if item and item.strip()]


def webhook(value: str | None = None) -> str | None:
    """The webhook URL: ``value``, else the Variable, else the environment; empty means none."""
    url = value if value else setting(VAR_WEBHOOK, ENV_WEBHOOK)
    return (str(url).strip() or None) if url else None


def _where() -> root_causes.Where:
    """Where the storage config the tasks use puts things (for the fixes an alert names)."""
    return root_causes.Where.current(StorageEngineHook())


def annotate(alert: dict, where: root_causes.Where | None = None) -> dict:
    """Add the root causes and their fixes to an alert, in place (once: the renderers and :func:`send` all call
    it): ``root_causes`` for a run digest, ``fix``/``commands``/``page`` for an offline log dir."""
    if alert.get("event") == RUN_FAILED and "root_causes" not in alert:
        alert["root_causes"] = root_causes.causes_of_run(alert, where or _where())
    elif alert.get("event") == LOG_DIR_OFFLINE and "fix" not in alert:
        alert.update(root_causes.fix_for_offline_dir(alert["log_dir"], alert.get("reason") or "",
                                                     where or _where()))
    return alert


def send(alert: dict, subject: str, html_body: str, *, to: str | Iterable[str] | None = None,
         webhook_url: str | None = None, smtp_conn_id: str = "smtp_default", from_email: str | None = None,
         timeout_s: float = 10.0, log: Any = None) -> dict:
    """Send one alert on both channels; returns ``{"emailed": [...], "webhook_status": int|None}`` (and
    ``"suppressed"``: the root causes not alerted again) or raises :class:`AlertNotDelivered` after trying both.

    A run digest (event ``storage_maintenance_run_failed``) is first reduced to what is new: when every root
    cause of it was alerted before and is still open, nothing is sent (``"suppressed"`` lists them); otherwise
    its subject and body are rendered here, with the old causes marked as still failing. A suppressed digest's
    outcome says why in ``"suppressed_causes"``: per cause, its ``title`` and ``where``, and the alert it
    repeats (``alerted_at``, ``dag_id``, ``run_id``); the run page shows that. ``subject`` and
    ``html_body`` are used as given for every other alert."""
    annotate(alert)
    record, claimed = None, []
    if alert.get("event") == RUN_FAILED:
        record, new, repeated = _claim(alert, log)
        claimed = [c["key"] for c in new if c["kind"] not in root_causes.RUN_SCOPED]
        alert["new_root_causes"] = [c["key"] for c in new]
        if record is not None and not new:
            keys = [c["key"] for c in repeated]
            if log is not None:
                log.info("every root cause of this failure was alerted before and is still open: %s",
                         ", ".join(keys))
            return {"emailed": [], "webhook_status": None, "suppressed": keys,
                    "suppressed_causes": [suppressed_cause(c) for c in repeated]}
        subject, html_body = digest_subject(alert), digest_html(alert)
    try:
        outcome = _deliver(alert, subject, html_body, to=to, webhook_url=webhook_url, smtp_conn_id=smtp_conn_id,
                           from_email=from_email, timeout_s=timeout_s, log=log)
    except AlertNotDelivered:
        if record is not None and claimed:
            record.release(claimed)              # the next run alerts them again
        raise
    if alert.get("event") == RUN_FAILED:
        outcome["root_causes"] = alert["new_root_causes"]
    return outcome


def suppressed_cause(cause: dict) -> dict:
    """What the run summary keeps of a root cause not alerted again: what it is, and which alert it repeats."""
    last = cause.get("last_alert") or {}
    return {"key": cause["key"], "title": cause.get("title"),
            "where": cause.get("partition") or cause.get("log_dir") or cause.get("path"),
            "alerted_at": last.get("at") or cause.get("alerted_before"), "first_alerted": cause.get("alerted_before"),
            "dag_id": last.get("dag_id"), "run_id": last.get("run_id")}


def _claim(alert: dict, log: Any) -> tuple[root_causes.AlertRecord | None, list[dict], list[dict]]:
    """(the record, causes to alert now, causes alerted before); every cause is new when there is no record."""
    causes = alert["root_causes"]
    seen = {"dag_id": alert.get("dag_id"), "run_id": alert.get("run_id")}
    for record in root_causes.AlertRecord.locations(StorageEngineHook()):
        try:
            new, repeated = record.claim(causes, seen)
            return record, new, repeated
        except OSError as exc:
            if log is not None:
                log.warning("cannot keep the record of alerted failures in %s: %s", record.state_dir, exc)
    return None, list(causes), []


def _deliver(alert: dict, subject: str, html_body: str, *, to: str | Iterable[str] | None,
             webhook_url: str | None, smtp_conn_id: str,
             from_email: str | None, timeout_s: float, log: Any) -> dict:
    failures: list[str] = []
    outcome: dict[str, Any] = {"emailed": [], "webhook_status": None}
    rcpt = recipients(to)
    if rcpt:
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook

            with SmtpHook(smtp_conn_id=smtp_conn_id) as smtp:
                sender = from_email or smtp.from_email or DEFAULT_FROM
                _send_mail(smtp, alert_message(subject, html_body, sender, rcpt), sender, rcpt)
            outcome["emailed"] = rcpt
        except Exception as exc:   # noqa: BLE001 - each channel's failure is named in AlertNotDelivered
            failures.append(f"e-mail via {smtp_conn_id}: {type(exc).__name__}: {exc}")
    elif log is not None:
        log.warning("no alert recipients: set the Variable %s (or %s)", VAR_EMAILS, ENV_EMAILS)
    url = webhook(webhook_url)
    if url:
        try:
            request = urllib.request.Request(url, data=json.dumps(alert).encode("utf-8"), method="POST",   # noqa: S310 - the configured webhook
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout_s) as response:   # noqa: S310
                outcome["webhook_status"] = response.status
        except Exception as exc:   # noqa: BLE001 - each channel's failure is named in AlertNotDelivered
            failures.append(f"webhook: {type(exc).__name__}: {exc}")
    if failures:
        raise AlertNotDelivered("alert not fully delivered: " + "; ".join(failures))
    return outcome


def _send_mail(smtp: Any, message: EmailMessage, sender: str, rcpt: list[str]) -> None:
    """Send ``message`` through the SMTP connection ``smtp`` (an entered ``SmtpHook``: connected, TLS and login as
    the connection says), retrying as the connection's ``retry_limit`` says (as the hook's own sending does). The hook's own ``send_email_smtp``
    builds an HTML-only message; the alert has a text part too (:func:`.notifiers_text.alert_message`)."""
    client = cast(smtplib.SMTP, smtp._smtp_client)   # the hook's logged-in client (set by entering the hook)
    limit = int(smtp.smtp_retry_limit)
    for attempt in range(limit + 1):
        try:
            client.send_message(message, from_addr=sender, to_addrs=rcpt)
            return
        except smtplib.SMTPException:
            if attempt == limit:
                raise


def _table(rows: list[tuple[str, Any]]) -> str:
    return "<table>\n" + "".join(f"<tr><th align='left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>\n"
                                 for k, v in rows if v is not None) + "</table>\n"


def _link(url: str | None, text: str | None = None) -> str:
    if not url:
        return "unavailable"
    return f"<a href=\"{html.escape(url, quote=True)}\">{html.escape(text or url)}</a>"


# -- the run digest -----------------------------------------------------------------------------------------

def digest_subject(alert: dict) -> str:
    annotate(alert)
    parts = alert["failed_partitions"]
    what = f"{len(alert['failed_tasks'])} task(s)"
    if parts:
        shown = ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")
        what += f", {len(parts)} partition(s): {shown}"
    return f"[storage maintenance] FAILED {alert['dag_id']} run {alert['run_id']}: {what}"


def _commands(commands: list[str]) -> str:
    if not commands:
        return ""
    return "<pre>" + "\n".join(html.escape(c) for c in commands) + "</pre>\n"


def causes_html(alert: dict) -> str:
    """The "What to do" section: one block per root cause, new ones first, each with its fix."""
    causes = alert.get("root_causes") or []
    if not causes:
        return ""
    blocks = []
    for c in sorted(causes, key=lambda c: c.get("alerted_before") is not None):
        where = c.get("partition") or c.get("log_dir") or c.get("path") or ""
        head = f"{c['title']}" + (f": {where}" if where else "")
        if c.get("alerted_before"):
            head += f" (still failing; alerted {c['alerted_before']})"
        rows = [("Error", c.get("error")), ("Seen in", ", ".join(c.get("seen_in") or []) or None)]
        blocks.append(f"<h3>{html.escape(head)}</h3>\n<p><b>Fix:</b> {html.escape(c['fix'])}</p>\n"
                      + _commands(c.get("commands") or [])
                      + (f"<p>Page: {_link(c.get('page'))}</p>\n" if c.get("page") else "") + _table(rows))
    return "<h2>What to do</h2>\n" + "".join(blocks) + "<h2>Details</h2>\n"


def digest_html(alert: dict) -> str:
    annotate(alert)
    head = _table([("DAG", alert["dag_id"]), ("Run", alert["run_id"]),
                   ("Acted as of", f"{alert['as_of']} ({alert['as_of_source']})"),
                   ("Data interval", f"{alert['data_interval_start']} -> {alert['data_interval_end']}"
                    if alert.get("data_interval_end") else "none (the run acted as of its trigger time)"),
                   ("Failed tasks", len(alert["failed_tasks"])), ("Failed partitions", len(alert["failed_partitions"])),
                   ("Not run (an upstream task failed)", ", ".join(alert.get("not_run") or []) or None)])
    blocks = []
    for t in alert["failed_tasks"]:
        name = t["task_id"] + (f" [{t['label']}]" if t.get("label") else "")
        rows = [("Task", name), ("State", t["state"]), ("Try", t.get("try_number")), ("Error", t.get("error"))]
        parts = t.get("partitions") or []
        items = "".join(f"<li>{html.escape(p['topic'])}-{p['partition']}: {html.escape(p['error_type'])}: "
                        f"{html.escape(p['error'])}{'' if p.get('permanent') else ' (retried)'}</li>\n"
                        for p in parts[:MAX_PARTITIONS_IN_MAIL])
        if len(parts) > MAX_PARTITIONS_IN_MAIL:
            items += f"<li>... and {len(parts) - MAX_PARTITIONS_IN_MAIL} more (see the task log)</li>\n"
        blocks.append(f"<h3>{html.escape(name)}</h3>\n{_table(rows)}"
                      + (f"<p>Partitions that failed:</p>\n<ul>\n{items}</ul>\n" if items else "")
                      + f"<p>Task log: {_link(t.get('log_url'))}</p>\n")
    return (f"<p>A storage maintenance run failed.</p>\n{causes_html(alert)}{head}"
            f"<p>Run: {_link(alert.get('run_url'))}</p>\n" + "".join(blocks))


# -- an offline log dir -------------------------------------------------------------------------------------

def offline_subject(alert: dict) -> str:
    return f"[storage maintenance] LOG DIR OFFLINE {alert['log_dir']} (seen by {alert['dag_id']})"


def offline_html(alert: dict) -> str:
    annotate(alert)
    skipped = alert.get("skipped_partitions") or []
    rows = [("Log dir", alert["log_dir"]), ("Error", alert["reason"]), ("Seen by", f"{alert['dag_id']} run "
            f"{alert['run_id']}"), ("Acted as of", f"{alert['as_of']} ({alert['as_of_source']})"),
            ("Partitions skipped by this run", len(skipped))]
    items = "".join(f"<li>{html.escape(p)}</li>\n" for p in skipped[:MAX_PARTITIONS_IN_MAIL])
    if len(skipped) > MAX_PARTITIONS_IN_MAIL:
        items += f"<li>... and {len(skipped) - MAX_PARTITIONS_IN_MAIL} more</li>\n"
    return ("<p>A log dir is offline: it failed with an I/O error. Its partitions are unavailable; every "
            "maintenance DAG skips it until it can be read again, and the other log dirs keep working. This "
            "alert is sent once for this log dir; none follows until it has been seen online again.</p>\n"
            + f"<h2>What to do</h2>\n<p><b>Fix:</b> {html.escape(alert['fix'])}</p>\n"
            + _commands(alert.get("commands") or [])
            + (f"<p>Page: {_link(alert.get('page'))}</p>\n" if alert.get("page") else "")
            + "<h2>Details</h2>\n"
            + _table(rows) + (f"<p>Partitions skipped:</p>\n<ul>\n{items}</ul>\n" if items else "")
            + f"<p>Run: {_link(alert.get('run_url'))}</p>\n")


# -- the per-task notifier ----------------------------------------------------------------------------------

def task_alert(context: Any) -> dict:
    """A failed task's alert as a JSON-able dict, from a failure callback's context, with its root cause and fix
    (``root_causes``: one entry)."""
    from .params import run_as_of

    ti = context.get("ti") or context.get("task_instance")
    exc = context.get("exception")
    exception = (f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException)
                 else str(exc) if exc is not None else "unknown (no exception in the callback context)")
    try:
        log_url = ti.log_url if ti is not None else None
    except Exception:   # noqa: BLE001 - a log URL is a convenience; never lose the alert over it
        log_url = None
    as_of_iso: str | None
    try:
        when = run_as_of(context)
        as_of_iso, as_of_source = when["iso"], when["source"]
    except Exception:   # noqa: BLE001 - the alert goes out with an unknown as-of time
        as_of_iso, as_of_source = None, "unknown"
    iso = (lambda v: v.isoformat() if hasattr(v, "isoformat") else v)   # noqa: E731
    error_type, text = (type(exc).__name__, str(exc)) if isinstance(exc, BaseException) else ("", exception)
    cause = root_causes.classify(error_type, text, dag_id=getattr(ti, "dag_id", None),
                                 task_id=getattr(ti, "task_id", None), where=_where(),
                                 log_url=log_url, run_id=getattr(ti, "run_id", None))
    return {
        "event": "storage_maintenance_task_failed",
        "dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None),
        "map_index": getattr(ti, "map_index", -1), "run_id": getattr(ti, "run_id", None) or context.get("run_id"),
        "as_of": as_of_iso, "as_of_source": as_of_source,
        "data_interval_start": iso(context.get("data_interval_start")),
        "data_interval_end": iso(context.get("data_interval_end")),
        "try_number": getattr(ti, "try_number", None), "exception": exception, "log_url": log_url,
        "root_causes": [cause],
    }


class MaintenanceFailureNotifier(BaseNotifier):
    """E-mail (and optional webhook) alert for one failed task; use as ``on_failure_callback`` where a task's
    failure is not covered by the run's digest (the run report itself).

    :param to: recipients (list or comma-separated); default the Variable ``storage_maintenance_alert_emails``,
        else ``$STORAGE_MAINTENANCE_ALERT_EMAILS``
    :param webhook_url: URL to POST the alert to as JSON; default the Variable
        ``storage_maintenance_alert_webhook``, else ``$STORAGE_MAINTENANCE_ALERT_WEBHOOK``
    :param smtp_conn_id: Airflow SMTP connection (default ``smtp_default``)
    :param from_email: sender; default the connection's ``from_email`` extra, else ``storage-maintenance@localhost``
    """

    template_fields = ()

    def __init__(self, *, to: str | Iterable[str] | None = None, webhook_url: str | None = None,
                 smtp_conn_id: str = "smtp_default", from_email: str | None = None) -> None:
        super().__init__()
        self.to, self.webhook_url, self.smtp_conn_id, self.from_email = to, webhook_url, smtp_conn_id, from_email

    def notify(self, context: Any) -> None:
        alert = task_alert(context)
        subject = f"[storage maintenance] FAILED {alert['dag_id']}.{alert['task_id']} run {alert['run_id']}"
        body = ("<p>A storage maintenance task failed.</p>\n" + causes_html(alert)
                + _table([("DAG", alert["dag_id"]), ("Task", alert["task_id"]), ("Run", alert["run_id"]),
                          ("Acted as of", f"{alert['as_of']} ({alert['as_of_source']})"),
                          ("Try", alert["try_number"]), ("Exception", alert["exception"])])
                + f"<p>Task log: {_link(alert['log_url'])}</p>\n")
        send(alert, subject, body, to=self.to, webhook_url=self.webhook_url, smtp_conn_id=self.smtp_conn_id,
             from_email=self.from_email, log=self.log)
