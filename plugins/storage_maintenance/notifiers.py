"""Alerts: one e-mail (and optionally a webhook POST) per failed maintenance run, listing every failed task
and partition; and a per-task notifier kept for the run report's own failure.

Configuration, read when the alert is sent (so a change needs no DAG re-parse); an argument wins over the
environment:

* e-mail goes through Airflow's SMTP connection (``smtp_default`` unless ``smtp_conn_id`` says otherwise,
  the smtp provider's :class:`SmtpHook`); recipients: ``to`` or ``$STORAGE_MAINTENANCE_ALERT_EMAILS``
  (comma-separated); sender: ``from_email``, else the connection's ``from_email`` extra, else
  ``storage-maintenance@localhost``;
* webhook: ``webhook_url`` or ``$STORAGE_MAINTENANCE_ALERT_WEBHOOK``; the alert is POSTed as JSON.

Both channels are tried independently (e-mail first), so a failing webhook never masks the e-mail and vice
versa; if either failed, :class:`AlertNotDelivered` names both outcomes afterwards.

Every alert says which instant the run acted as of (its data interval end, or its trigger time when it has
no interval), with the DAG, run, failed tasks (name, the partitions each could not maintain with the
error, try, log link) and a link to the run.
"""
from __future__ import annotations

import html
import json
import os
import urllib.request
from collections.abc import Iterable
from typing import Any

from airflow.sdk import BaseNotifier

ENV_EMAILS = "STORAGE_MAINTENANCE_ALERT_EMAILS"
ENV_WEBHOOK = "STORAGE_MAINTENANCE_ALERT_WEBHOOK"
DEFAULT_FROM = "storage-maintenance@localhost"
MAX_PARTITIONS_IN_MAIL = 100


class AlertNotDelivered(RuntimeError):
    """At least one alert channel failed (the message names each)."""


def recipients(value: str | Iterable[str] | None = None) -> list[str]:
    if value is None:
        value = os.environ.get(ENV_EMAILS)
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item and item.strip()]


def send(alert: dict, subject: str, html_body: str, *, to=None, webhook_url: str | None = None,
         smtp_conn_id: str = "smtp_default", from_email: str | None = None, timeout_s: float = 10.0,
         log=None) -> dict:
    """Send one alert on both channels; returns ``{"emailed": [...], "webhook_status": int|None}`` or raises
    :class:`AlertNotDelivered` after trying both."""
    failures: list[str] = []
    outcome: dict[str, Any] = {"emailed": [], "webhook_status": None}
    rcpt = recipients(to)
    if rcpt:
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook

            with SmtpHook(smtp_conn_id=smtp_conn_id) as smtp:
                smtp.send_email_smtp(to=rcpt, subject=subject, html_content=html_body,
                                     from_email=from_email or smtp.from_email or DEFAULT_FROM)
            outcome["emailed"] = rcpt
        except Exception as exc:
            failures.append(f"e-mail via {smtp_conn_id}: {type(exc).__name__}: {exc}")
    elif log is not None:
        log.warning("no alert recipients: set %s or the notifier's 'to'", ENV_EMAILS)
    url = webhook_url or os.environ.get(ENV_WEBHOOK)
    if url:
        try:
            request = urllib.request.Request(url, data=json.dumps(alert).encode("utf-8"), method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout_s) as response:   # noqa: S310
                outcome["webhook_status"] = response.status
        except Exception as exc:
            failures.append(f"webhook: {type(exc).__name__}: {exc}")
    if failures:
        raise AlertNotDelivered("alert not fully delivered: " + "; ".join(failures))
    return outcome


def _table(rows: list[tuple[str, Any]]) -> str:
    return "<table>\n" + "".join(f"<tr><th align='left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>\n"
                                 for k, v in rows if v is not None) + "</table>\n"


def _link(url: str | None, text: str | None = None) -> str:
    if not url:
        return "unavailable"
    return f"<a href=\"{html.escape(url, quote=True)}\">{html.escape(text or url)}</a>"


# -- the run digest -----------------------------------------------------------------------------------------

def digest_subject(alert: dict) -> str:
    parts = alert["failed_partitions"]
    what = f"{len(alert['failed_tasks'])} task(s)"
    if parts:
        shown = ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")
        what += f", {len(parts)} partition(s): {shown}"
    return f"[storage maintenance] FAILED {alert['dag_id']} run {alert['run_id']}: {what}"


def digest_html(alert: dict) -> str:
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
    return (f"<p>A storage maintenance run failed.</p>\n{head}<p>Run: {_link(alert.get('run_url'))}</p>\n"
            + "".join(blocks))


# -- an offline log dir -------------------------------------------------------------------------------------

def offline_subject(alert: dict) -> str:
    return f"[storage maintenance] LOG DIR OFFLINE {alert['log_dir']} (seen by {alert['dag_id']})"


def offline_html(alert: dict) -> str:
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
            + _table(rows) + (f"<p>Partitions skipped:</p>\n<ul>\n{items}</ul>\n" if items else "")
            + f"<p>Run: {_link(alert.get('run_url'))}</p>\n")


# -- the per-task notifier ----------------------------------------------------------------------------------

def task_alert(context: Any) -> dict:
    """A failed task's alert as a JSON-able dict, from a failure callback's context."""
    from .hooks import as_of

    ti = context.get("ti") or context.get("task_instance")
    exc = context.get("exception")
    exception = (f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException)
                 else str(exc) if exc is not None else "unknown (no exception in the callback context)")
    try:
        log_url = ti.log_url if ti is not None else None
    except Exception:   # a log URL is a convenience; never lose the alert over it
        log_url = None
    as_of_iso: str | None
    try:
        when = as_of(context)
        as_of_iso, as_of_source = when["iso"], when["source"]
    except Exception:
        as_of_iso, as_of_source = None, "unknown"
    iso = (lambda v: v.isoformat() if hasattr(v, "isoformat") else v)
    return {
        "event": "storage_maintenance_task_failed",
        "dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None),
        "map_index": getattr(ti, "map_index", -1), "run_id": getattr(ti, "run_id", None) or context.get("run_id"),
        "as_of": as_of_iso, "as_of_source": as_of_source,
        "data_interval_start": iso(context.get("data_interval_start")),
        "data_interval_end": iso(context.get("data_interval_end")),
        "try_number": getattr(ti, "try_number", None), "exception": exception, "log_url": log_url,
    }


class MaintenanceFailureNotifier(BaseNotifier):
    """E-mail (and optional webhook) alert for one failed task; use as ``on_failure_callback`` where a task's
    failure is not covered by the run's digest (the run report itself).

    :param to: recipients (list or comma-separated); default ``$STORAGE_MAINTENANCE_ALERT_EMAILS``
    :param webhook_url: URL to POST the alert to as JSON; default ``$STORAGE_MAINTENANCE_ALERT_WEBHOOK``
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
        body = ("<p>A storage maintenance task failed.</p>\n"
                + _table([("DAG", alert["dag_id"]), ("Task", alert["task_id"]), ("Run", alert["run_id"]),
                          ("Acted as of", f"{alert['as_of']} ({alert['as_of_source']})"),
                          ("Try", alert["try_number"]), ("Exception", alert["exception"])])
                + f"<p>Task log: {_link(alert['log_url'])}</p>\n")
        send(alert, subject, body, to=self.to, webhook_url=self.webhook_url, smtp_conn_id=self.smtp_conn_id,
             from_email=self.from_email, log=self.log)
