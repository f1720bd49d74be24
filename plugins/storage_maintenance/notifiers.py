"""MaintenanceFailureNotifier: an e-mail (and optionally a webhook POST) when a maintenance task fails.

Configuration, read when the alert is sent (so a change needs no DAG re-parse); an argument wins over the
environment:

* e-mail goes through Airflow's SMTP connection (``smtp_default`` unless ``smtp_conn_id`` says otherwise,
  the smtp provider's :class:`SmtpHook`); recipients: ``to`` or ``$STORAGE_MAINTENANCE_ALERT_EMAILS``
  (comma-separated); sender: ``from_email``, else the connection's ``from_email`` extra, else
  ``storage-maintenance@localhost``;
* webhook: ``webhook_url`` or ``$STORAGE_MAINTENANCE_ALERT_WEBHOOK``; the alert is POSTed as JSON.

Both channels are tried independently (e-mail first), so a failing webhook never masks the e-mail and vice
versa; if either failed, an error naming both outcomes is raised afterwards (Airflow logs it in the task log).

The alert names the DAG, task, partition (``topic-partition`` for a mapped retention task; the topic filter,
or "all partitions", for DAG-wide tasks), run id, data interval, try, exception and the task log URL.

One instance may be shared by every task of a DAG (``default_args``): it keeps no per-alert state and has no
Jinja template fields, whose rendering would change the shared instance in place.
"""
from __future__ import annotations

import html
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

from airflow.sdk import BaseNotifier

ENV_EMAILS = "STORAGE_MAINTENANCE_ALERT_EMAILS"
ENV_WEBHOOK = "STORAGE_MAINTENANCE_ALERT_WEBHOOK"
DEFAULT_FROM = "storage-maintenance@localhost"


def _recipients(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item and item.strip()]


def _iso(value: Any) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else (None if value is None else str(value))


def partition_label(task: Any, ti: Any) -> str:
    """What the failed task was acting on: ``topic-partition``, a topic filter, or "all partitions"."""
    topic, partition = getattr(task, "topic", None), getattr(task, "partition", None)
    if isinstance(topic, str) and partition is not None:
        return f"{topic}-{partition}"
    rendered = getattr(ti, "rendered_map_index", None)
    if rendered:
        return str(rendered)
    if hasattr(task, "topics"):
        topics = getattr(task, "topics")
        if isinstance(topics, (list, tuple)) and topics:
            return "topics " + ", ".join(map(str, topics))
        return "all partitions"
    return "n/a"


def build_alert(context: Any) -> dict:
    """The alert as a JSON-able dict, from a task failure callback's context."""
    ti = context.get("ti") or context.get("task_instance")
    task = context.get("task") or getattr(ti, "task", None)
    exc = context.get("exception")
    if isinstance(exc, BaseException):
        exception = f"{type(exc).__name__}: {exc}"
    else:
        exception = str(exc) if exc is not None else "unknown (no exception in the callback context)"
    map_index = getattr(ti, "map_index", -1)
    try:
        log_url = ti.log_url if ti is not None else None
    except Exception:   # a log URL is a convenience; never lose the alert over it
        log_url = None
    try_number = getattr(ti, "try_number", None)
    max_tries = getattr(ti, "max_tries", None)
    return {
        "event": "storage_maintenance_task_failed",
        "dag_id": getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", None),
        "task_id": getattr(ti, "task_id", None) or getattr(task, "task_id", None),
        "map_index": map_index if isinstance(map_index, int) else -1,
        "partition": partition_label(task, ti),
        "run_id": getattr(ti, "run_id", None) or context.get("run_id"),
        "data_interval_start": _iso(context.get("data_interval_start")),
        "data_interval_end": _iso(context.get("data_interval_end")),
        "try_number": try_number,
        "max_tries": max_tries,
        "exception": exception,
        "log_url": log_url,
    }


def alert_subject(alert: dict) -> str:
    return (f"[storage maintenance] FAILED {alert['dag_id']}.{alert['task_id']} [{alert['partition']}] "
            f"run {alert['run_id']}")


def alert_html(alert: dict) -> str:
    rows = [
        ("DAG", alert["dag_id"]),
        ("Task", alert["task_id"]),
        ("Partition", alert["partition"]),
        ("Run", alert["run_id"]),
        ("Data interval", f"{alert['data_interval_start']} -> {alert['data_interval_end']} "
                          "(the task acts as of the interval end)"),
        ("Try", f"{alert['try_number']} of {(alert['max_tries'] or 0) + 1}"
                if alert["try_number"] is not None else None),
        ("Exception", alert["exception"]),
    ]
    body = "".join(f"<tr><th align='left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>\n"
                   for k, v in rows if v is not None)
    link = alert["log_url"]
    log_line = (f"<p>Task log: <a href=\"{html.escape(link, quote=True)}\">{html.escape(link)}</a></p>\n"
                if link else "<p>Task log: unavailable</p>\n")
    return f"<p>A storage maintenance task failed.</p>\n<table>\n{body}</table>\n{log_line}"


class MaintenanceFailureNotifier(BaseNotifier):
    """E-mail (and optional webhook) alert for a failed maintenance task; use as ``on_failure_callback``.

    :param to: recipients (list or comma-separated); default ``$STORAGE_MAINTENANCE_ALERT_EMAILS``
    :param webhook_url: URL to POST the alert to as JSON; default ``$STORAGE_MAINTENANCE_ALERT_WEBHOOK``
    :param smtp_conn_id: Airflow SMTP connection (default ``smtp_default``)
    :param from_email: sender; default the connection's ``from_email`` extra, else ``storage-maintenance@localhost``
    :param webhook_timeout_s: seconds to wait for the webhook
    """

    template_fields = ()

    def __init__(self, *, to: str | Iterable[str] | None = None, webhook_url: str | None = None,
                 smtp_conn_id: str = "smtp_default", from_email: str | None = None,
                 webhook_timeout_s: float = 10.0) -> None:
        super().__init__()
        self.to = to
        self.webhook_url = webhook_url
        self.smtp_conn_id = smtp_conn_id
        self.from_email = from_email
        self.webhook_timeout_s = webhook_timeout_s

    def notify(self, context: Any) -> None:
        alert = build_alert(context)
        failures = []
        recipients = _recipients(self.to if self.to is not None else os.environ.get(ENV_EMAILS))
        if recipients:
            try:
                self.send_email(alert, recipients)
                self.log.info("failure alert e-mailed to %s", ", ".join(recipients))
            except Exception as exc:
                self.log.exception("could not e-mail the failure alert")
                failures.append(f"e-mail via {self.smtp_conn_id}: {type(exc).__name__}: {exc}")
        else:
            self.log.warning("no alert recipients: set %s or the notifier's 'to'", ENV_EMAILS)
        url = self.webhook_url or os.environ.get(ENV_WEBHOOK)
        if url:
            try:
                status = self.post_webhook(alert, url)
                self.log.info("failure alert posted to the webhook (HTTP %s)", status)
            except Exception as exc:
                self.log.exception("could not post the failure alert to the webhook")
                failures.append(f"webhook: {type(exc).__name__}: {exc}")
        if failures:
            raise RuntimeError("failure alert not fully delivered: " + "; ".join(failures))

    def send_email(self, alert: dict, recipients: list[str]) -> None:
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        with SmtpHook(smtp_conn_id=self.smtp_conn_id) as smtp:
            smtp.send_email_smtp(to=recipients, subject=alert_subject(alert), html_content=alert_html(alert),
                                 from_email=self.from_email or smtp.from_email or DEFAULT_FROM)

    def post_webhook(self, alert: dict, url: str) -> int:
        request = urllib.request.Request(url, data=json.dumps(alert).encode("utf-8"), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.webhook_timeout_s) as response:   # noqa: S310
            return response.status
