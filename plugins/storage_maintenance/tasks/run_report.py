"""The end of every maintenance run: a summary of what it did per partition, and one alert if anything failed.

:class:`RunReportOperator` runs last (``trigger_rule="all_done"``, so also after failures), reads the state
and XCom of every maintenance task of its run, and

1. returns the **run summary** of the run's latest try as its XCom (a re-run counts only what it did: the
   XComs of mapped instances it no longer expands to, ``removed``, and of tasks it did not reach are left out):
   totals (partitions checked, changed, failed; segments, bytes and
   records reclaimed) and one row per partition that changed or failed (bytes and segments reclaimed, records
   removed, duration), as a table in ``markdown`` too; it logs the table. The Storage view shows it as the
   "Run summary" tab of every run of a maintenance DAG;
2. sends **one digest alert** (e-mail and webhook, :mod:`.notifiers`) when any task failed: the failed tasks,
   each with the partitions it could not maintain and why, try, log link; instead of one alert per task;
3. emits the run's asset event (``kafka-log-maintenance://<dag_id>``) with the totals (for ``log_tiering`` also
   the sums of its figures: ``copied_segments``, ``copied_bytes``, ``local_segments_deleted``,
   ``local_bytes_deleted``, ``remote_segments_deleted``, ``remote_bytes_deleted``, ``orphan_segments``,
   ``orphan_objects``, ``orphan_uploads``, ``lag_segments``, ``lag_bytes``);
4. alerts **once per offline log dir**: the tasks of the run report the log dirs they found offline (an I/O
   error; their partitions are skipped, not failed) and the ones they found online; a dir seen offline for the
   first time is alerted (one alert per dir), and not again, by this DAG or any other, until a run has seen it
   online (:meth:`.hooks.StorageEngineHook.note_log_dirs`).

It does not fail when maintenance failed (``fail_run_if_upstream_failed`` keeps the run red), nor when a
channel of the alert failed (that is logged and recorded in the summary's ``alert``); its own unexpected
failure alerts through :class:`.notifiers.MaintenanceFailureNotifier`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.types import RuntimeTaskInstanceProtocol

from ..maintenance_dags import in_group, step_of
from ..reporting.report import (MAX_ROWS, RAN_STATES, figure_totals, markdown_table, partition_rows, run_url,
                                task_url)
from .assets import run_asset
from .hooks import StorageEngineHook
from .notifiers import (AlertNotDelivered, MaintenanceFailureNotifier, digest_html, digest_subject, offline_html,
                        offline_subject, send)
from .operators import FailRunIfUpstreamFailedOperator
from .params import run_as_of


class RunReportOperator(BaseOperator):
    """The run summary and the digest alert (see the module docstring). Use ``trigger_rule="all_done"``.

    :param report_tasks: the maintenance tasks of the DAG whose results and failures are reported
    :param label_task: a task whose XCom lists the mapped tasks' arguments in map-index order (the batch
        plan), used to name a failed mapped task that left no result; its id without a host group: a task of
        group ``storage-a`` is named by ``storage-a.<label_task>``
    :param figures: per-partition figures summed into the totals (and the asset event) even when no partition
        reported any (``log_tiering``'s :data:`~storage_maintenance.reporting.report.TIER_FIGURES`: zeros)
    :param to, webhook_url, smtp_conn_id, from_email: alert settings (see :mod:`.notifiers`)
    """

    template_fields: Sequence[str] = ()
    ui_color = "#eef0e8"

    def __init__(self, *, report_tasks: Sequence[str], label_task: str | None = None,
                 figures: Sequence[str] = (), to: str | Iterable[str] | None = None,
                 webhook_url: str | None = None, smtp_conn_id: str = "smtp_default", from_email: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report_tasks = list(report_tasks)
        self.label_task = label_task
        self.figures = list(figures)
        self.to, self.webhook_url, self.smtp_conn_id, self.from_email = to, webhook_url, smtp_conn_id, from_email

    def _task_instances(self, context: Context) -> list[tuple[str, int, str]]:
        """[(task_id, map_index, state)] of the reported tasks in this run's latest try: the mapped instances a
        re-run expanded to fewer items (``removed``) are no part of it."""
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id], task_ids=self.report_tasks)
        out = []
        for key, state in (states.get(ti.run_id) or {}).items():
            if state == "removed":
                continue
            for task_id in self.report_tasks:
                if key == task_id:
                    out.append((task_id, -1, state))
                elif key.startswith(task_id + "_") and key[len(task_id) + 1:].isdigit():
                    out.append((task_id, int(key[len(task_id) + 1:]), state))
        order = {t: i for i, t in enumerate(self.report_tasks)}
        return sorted(out, key=lambda x: (order[x[0]], x[1]))

    def execute(self, context: Context) -> dict:
        ti = context["ti"]
        when = run_as_of(context, strict=False)     # a refused as_of fails the tasks, not the report
        plans: dict[str, list] = {}    # the labels of each label task pulled so far
        rows, failed_tasks, not_run = [], [], []
        states: dict[str, int] = {}    # task instances per state
        ran = []                       # (task_id, map_index) of the instances that ran in this try
        for task_id, map_index, state in self._task_instances(context):
            states[state] = states.get(state, 0) + 1
            pull: dict[str, Any] = {"task_ids": task_id, **({"map_indexes": map_index} if map_index >= 0 else {})}
            # Only an instance that ran in this try has this try's XCom: one that did not run (upstream failed,
            # skipped) still holds the one of the try before, if the run was cleared.
            result = ti.xcom_pull(**pull) if state in RAN_STATES else None
            if state in RAN_STATES:
                ran.append(pull)
            rows.extend(partition_rows(task_id, result))
            if state == "upstream_failed":
                not_run.append(task_id if map_index < 0 else f"{task_id}[{map_index}]")
            elif state == "failed":
                error = ti.xcom_pull(key="error", **pull) or {}
                labels = self._labels(ti, task_id, plans) if map_index >= 0 else []
                label = (result.get("label") if isinstance(result, dict) else None) or (
                    labels[map_index] if 0 <= map_index < len(labels) else None)
                parts = result.get("failures", []) if isinstance(result, dict) else []
                failed_tasks.append({
                    "task_id": task_id, "map_index": map_index, "label": label, "state": state,
                    "try_number": error.get("try_number"),
                    "error": error.get("error") or "no error recorded; see the task log",
                    "partitions": parts, "log_url": task_url(ti.dag_id, ti.run_id, task_id, map_index)})
        offline, online = self._log_dirs(ti, ran)
        per_partition = [r for r in rows if r["partition"] != "all partitions"]
        # A partition several tasks touched (retention and producer-id expiry) counts once: failed if any task
        # failed it, else changed if any changed it, else skipped if a task skipped it (its log dir offline).
        names = {r["partition"] for r in per_partition}
        failed_names = {r["partition"] for r in per_partition if r["status"] in ("failed", "damaged")}
        changed_names = {r["partition"] for r in per_partition
                         if r["status"] in ("changed", "would change")} - failed_names
        skipped_names = {r["partition"] for r in per_partition if r["status"] == "skipped"} - failed_names \
            - changed_names
        totals = {"partitions": len(names), "changed": len(changed_names), "failed": len(failed_names),
                  "unchanged": len(names - failed_names - changed_names - skipped_names),
                  "skipped": len(skipped_names),
                  "segments": sum(r["segments"] for r in rows), "bytes": sum(r["bytes"] for r in rows),
                  "records": sum(r["records"] for r in rows), "task_states": states,
                  "failed_tasks": len(failed_tasks),
                  **dict.fromkeys(self.figures, 0), **figure_totals(rows)}
        notable = [r for r in rows if r["status"] != "nothing to do"]
        report: dict[str, Any] = {
            "dag_id": ti.dag_id, "run_id": ti.run_id, "as_of": when["iso"], "as_of_source": when["source"],
            "now_ms": when["now_ms"], "totals": totals, "rows": notable[:MAX_ROWS],
            "rows_omitted": max(0, len(notable) - MAX_ROWS), "failed_tasks": failed_tasks, "not_run": not_run,
            "markdown": markdown_table(notable, totals), "alert": None,
            "offline_dirs": offline, "log_dir_alerts": [], "log_dirs_back_online": []}
        if offline:
            report["markdown"] = "".join(f"**log dir offline, skipped:** `{d}` ({reason})\n\n"
                                         for d, reason in sorted(offline.items())) + report["markdown"]
        self.log.info("run summary as of %s (%s):\n%s", when["iso"], when["source"], report["markdown"])
        if failed_tasks:
            report["alert"] = self._alert(context, report)
        if offline or online:
            report["log_dir_alerts"], report["log_dirs_back_online"] = self._log_dir_alerts(
                context, report, offline, online, rows)
        asset = run_asset(ti.dag_id)
        if asset in (self.outlets or []):
            context["outlet_events"][asset].extra = {"as_of": when["iso"], "now_ms": when["now_ms"],
                                                     "run_id": ti.run_id, **{k: v for k, v in totals.items()
                                                                             if k != "task_states"}}
        return report

    def _labels(self, ti: RuntimeTaskInstanceProtocol, task_id: str, plans: dict[str, list]) -> list:
        """The names of ``task_id``'s mapped instances in map-index order, from the result of ``label_task`` in
        the same host group (``storage-a.retention`` is named by ``storage-a.plan_batches``)."""
        if not self.label_task:
            return []
        source = in_group(step_of(task_id)[0], self.label_task)
        if source not in plans:
            plan = ti.xcom_pull(task_ids=source)
            plans[source] = [b.get("batch_label") or (f"{b['topic']}-{b['partition']}" if "topic" in b else None)
                             if isinstance(b, dict) else None for b in plan] if isinstance(plan, list) else []
        return plans[source]

    def _log_dirs(self, ti: RuntimeTaskInstanceProtocol, ran: list[dict]) -> tuple[dict[str, str], list[str]]:
        """The log dirs the task instances that ran in this try (``ran``: their XCom pull arguments) found
        offline (with the error) and online."""
        offline: dict[str, str] = {}
        online: set[str] = set()
        for pull in ran:
            for value in _pulled(ti.xcom_pull(**pull)) + _pulled(ti.xcom_pull(key="log_dirs", **pull)):
                if not isinstance(value, dict):
                    continue
                for d, reason in (value.get("offline_dirs") or value.get("offline") or {}).items():
                    offline.setdefault(d, reason)
                online.update(value.get("online_dirs") or value.get("online") or [])
        return offline, sorted(online - set(offline))

    def _log_dir_alerts(self, context: Context, report: dict, offline: dict[str, str], online: list[str],
                        rows: list[dict]) -> tuple[list[dict], list[str]]:
        ti = context["ti"]
        hook = StorageEngineHook()
        seen = {"dag_id": ti.dag_id, "run_id": ti.run_id, "as_of": report["as_of"]}
        try:
            new, back = hook.note_log_dirs(offline, online, seen)
        except OSError as exc:   # no record: alert every offline dir rather than none
            self.log.error("cannot keep the record of offline log dirs in %s: %s", hook.state_dir(), exc)
            new, back = sorted(offline), []
        for d in back:
            self.log.info("log dir %s is online again", d)
        sent = []
        for d in new:
            skipped = sorted({r["partition"] for r in rows if r["status"] == "skipped" and d in str(r["detail"])})
            alert = {"event": "storage_log_dir_offline", "log_dir": d, "reason": offline[d],
                     "dag_id": ti.dag_id, "run_id": ti.run_id, "as_of": report["as_of"],
                     "as_of_source": report["as_of_source"], "run_url": run_url(ti.dag_id, ti.run_id),
                     "skipped_partitions": skipped}
            try:
                outcome = send(alert, offline_subject(alert), offline_html(alert), to=self.to,
                               webhook_url=self.webhook_url, smtp_conn_id=self.smtp_conn_id,
                               from_email=self.from_email, log=self.log)
                self.log.warning("log dir %s is offline (%s): alert sent", d, offline[d])
                sent.append({"log_dir": d, "sent": True, **outcome})
            except AlertNotDelivered as exc:
                self.log.error("log dir %s is offline; %s", d, exc)
                hook.forget_offline(d)       # the next run tries again
                sent.append({"log_dir": d, "sent": False, "error": str(exc)})
        return sent, back

    def _alert(self, context: Context, report: dict) -> dict:
        dag_run = context.get("dag_run")
        iso = (lambda v: v.isoformat() if hasattr(v, "isoformat") else v)   # noqa: E731
        failed_partitions = sorted({f"{p['topic']}-{p['partition']}" for t in report["failed_tasks"]
                                    for p in t["partitions"]})
        alert = {"event": "storage_maintenance_run_failed", "dag_id": report["dag_id"], "run_id": report["run_id"],
                 "as_of": report["as_of"], "as_of_source": report["as_of_source"],
                 "data_interval_start": iso(getattr(dag_run, "data_interval_start", None)),
                 "data_interval_end": iso(getattr(dag_run, "data_interval_end", None)),
                 "run_url": run_url(report["dag_id"], report["run_id"]),
                 "failed_tasks": report["failed_tasks"], "failed_partitions": failed_partitions,
                 "not_run": report["not_run"]}
        try:
            outcome = send(alert, digest_subject(alert), digest_html(alert), to=self.to,
                           webhook_url=self.webhook_url, smtp_conn_id=self.smtp_conn_id, from_email=self.from_email,
                           log=self.log)
            if outcome.get("suppressed"):
                self.log.info("failure digest not sent again: every root cause was alerted before and is still "
                              "open (%s)", ", ".join(map(str, outcome["suppressed"])))
                return {"sent": False, **outcome, "failed_partitions": failed_partitions}
            self.log.info("failure digest sent: e-mailed to %s, webhook HTTP %s",
                          ", ".join(outcome["emailed"]) or "nobody", outcome["webhook_status"])
            return {"sent": True, **outcome, "failed_partitions": failed_partitions}
        except AlertNotDelivered as exc:
            # Failing the report would only send the same alert again through its failure callback on the
            # channel that did work; the run is red anyway, and the report records what went wrong.
            self.log.error("%s", exc)
            return {"sent": False, "error": str(exc), "failed_partitions": failed_partitions}


def _pulled(value: Any) -> list:
    """An XCom pull of a mapped task gives a list of its map indexes' values, of an unmapped one the value."""
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, dict) or v is None for v in value):
        return [v for v in value if v is not None]
    return [value]


def run_outcome_tasks(dag_id: str, report_tasks: Sequence[str], label_task: str | None = None,
                      figures: Sequence[str] = ()) -> tuple[RunReportOperator, FailRunIfUpstreamFailedOperator]:
    """The two tasks that end every maintenance DAG: ``run_report`` (summary, digest alert, the run's asset
    event; after everything, also after failures) and ``fail_run_if_upstream_failed`` (keeps the run red).
    The caller sets the maintenance tasks upstream of both."""
    report = RunReportOperator(task_id="run_report", report_tasks=report_tasks, label_task=label_task,
                               figures=figures,
                               trigger_rule="all_done", retries=0, outlets=[run_asset(dag_id)],
                               on_failure_callback=[MaintenanceFailureNotifier()])
    run_failed = FailRunIfUpstreamFailedOperator(task_id="fail_run_if_upstream_failed", trigger_rule="one_failed",
                                                 retries=0)
    return report, run_failed
