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
3. emits the run's asset event (``kafka-log-maintenance://<dag_id>``) with the totals;
4. alerts **once per offline log dir**: the tasks of the run report the log dirs they found offline (an I/O
   error; their partitions are skipped, not failed) and the ones they found online; a dir seen offline for the
   first time is alerted (one alert per dir), and not again, by this DAG or any other, until a run has seen it
   online (:meth:`.hooks.StorageEngineHook.note_log_dirs`).

It does not fail when maintenance failed (``fail_run_if_upstream_failed`` keeps the run red), nor when a
channel of the alert failed (that is logged and recorded in the summary's ``alert``); its own unexpected
failure alerts through :class:`.notifiers.MaintenanceFailureNotifier`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperator

from storage_engine.units import human_bytes

from .assets import run_asset
from .hooks import StorageEngineHook
from .maintenance_dags import in_group, step_of
from .params import run_as_of
from .notifiers import AlertNotDelivered, digest_html, digest_subject, offline_html, offline_subject, send

MAX_ROWS = 1000          # rows kept in the summary XCom; totals always cover every partition
RAN_STATES = ("success", "failed")   # a task instance in these states ran in the run's latest try
MAX_MARKDOWN_ROWS = 200


def _base_url() -> str:
    from airflow.configuration import conf
    return conf.get("api", "base_url", fallback="http://localhost:8080/").rstrip("/")


def run_url(dag_id: str, run_id: str) -> str:
    return f"{_base_url()}/dags/{dag_id}/runs/{quote(run_id)}"


def task_url(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    return run_url(dag_id, run_id) + f"/tasks/{task_id}" + (f"/mapped/{map_index}" if map_index >= 0 else "")


def partition_rows(task_id: str, result: Any) -> list[dict]:
    """Summary rows of one task's result: one per partition (or one for a DAG-wide task)."""
    if not isinstance(result, dict):
        return []
    rows = []
    if "results" in result:                                         # a batch
        for r in result["results"]:
            rows.append(_row(task_id, {"dry_run": result.get("dry_run"), **r}))
        for sk in result.get("skipped", []):
            rows.append({"task": task_id, "partition": f"{sk['topic']}-{sk['partition']}", "status": "skipped",
                         "segments": 0, "bytes": 0, "records": 0, "duration_s": None, "detail": sk["reason"]})
        for f in result.get("failures", []):
            rows.append({"task": task_id, "partition": f"{f['topic']}-{f['partition']}", "status": "failed",
                         "segments": 0, "bytes": 0, "records": 0, "duration_s": None,
                         "detail": f"{f['error_type']}: {f['error']}"})
    elif "topic" in result and "partition" in result:                # one partition (compaction clean)
        rows.append(_row(task_id, result))
    elif "files_removed" in result:                                  # purge
        folders = len(result.get("folders_removed") or [])
        rows.append({"task": task_id, "partition": "all partitions",
                     "status": "changed" if result["files_removed"] or folders else "nothing to do", "segments": 0,
                     "bytes": result["bytes_freed"], "records": 0, "duration_s": None,
                     "detail": f"{'would remove' if result.get('dry_run') else 'removed'} "
                               f"{result['files_removed']} .deleted file(s) and {folders} deleted partition "
                               f"folder(s), {result['files_waiting']} file(s) waiting"})
    return rows


def _row(task_id: str, r: dict) -> dict:
    name = f"{r['topic']}-{r['partition']}" + (" (copy being moved)" if r.get("future") is True else "")
    row = {"task": task_id, "partition": name, "segments": 0, "bytes": 0, "records": 0,
           "duration_s": r.get("duration_s"), "detail": ""}
    if "segments_deleted" in r:                                     # retention
        row.update(segments=r["segments_deleted"], bytes=r["bytes_reclaimed"], records=r.get("records_removed", 0),
                   detail=(f"log start offset {r['log_start_offset_before']} -> {r['log_start_offset']}"
                           if r["segments_deleted"] else r.get("skipped", "")))
    elif "size_bytes_before" in r:                                  # compaction
        row.update(bytes=r["size_bytes_before"] - r["size_bytes_after"], records=r.get("records_removed", 0),
                   segments=r.get("segments_removed", 0),
                   detail=f"cleaned [{r['first_dirty_offset']}, {r.get('end_offset')}) with the {r['map']} map")
    elif "recovery_point" in r:                                     # flush, checkpoint
        row["detail"] = f"recovery point {r['recovery_point_before']} -> {r['recovery_point']}"
    elif "expired_producer_ids" in r:                               # producer-id expiry
        row["detail"] = (f"{'would expire' if r.get('dry_run') else 'expired'} producer id(s) "
                         f"{r['expired_producer_ids']}" if r["expired_producer_ids"] else "")
    elif "target_dir" in r:                                         # a move between log dirs
        row.update(bytes=r.get("bytes_copied", 0),
                   detail=(f"{'would move' if r.get('dry_run') else 'moved'} from {r.get('source_dir')} to "
                           f"{r['target_dir']}" + (f", {r.get('bytes_copied', 0)} bytes copied"
                                                  f"{' (copy resumed)' if r.get('resumed') else ''}"
                                                  if r.get("committed") else "")))
    elif "problems" in r:                                           # verify
        row["detail"] = (f"{len(r['problems'])} problem(s)" if r["problems"]
                         else f"{r.get('segments', 0)} segment(s), {r.get('records', 0)} record(s) verified")
    if r.get("nothing_to_do") is False or r.get("damaged"):
        row["status"] = "damaged" if r.get("damaged") else ("would change" if r.get("dry_run") else "changed")
    else:
        row["status"] = "nothing to do"
        if r.get("skipped") and not row["detail"]:
            row["detail"] = r["skipped"]
    return row


def markdown_table(rows: list[dict], totals: dict) -> str:
    lines = [f"**{totals['partitions']} partition(s)**: {totals['changed']} changed, {totals['failed']} failed, "
             f"{totals['unchanged']} with nothing to do; {totals['segments']} segment(s), "
             f"{human_bytes(totals['bytes'])}, {totals['records']} record(s) reclaimed.", "",
             "| task | partition | status | segments | bytes | records | duration (s) | detail |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows[:MAX_MARKDOWN_ROWS]:
        lines.append(f"| {r['task']} | {r['partition']} | {r['status']} | {r['segments']} | "
                     f"{human_bytes(r['bytes'])} | "
                     f"{r['records']} | {'' if r['duration_s'] is None else r['duration_s']} | "
                     f"{str(r['detail']).replace('|', '/')} |")
    if len(rows) > MAX_MARKDOWN_ROWS:
        lines.append(f"| ... | {len(rows) - MAX_MARKDOWN_ROWS} more row(s) in the XCom | | | | | | |")
    return "\n".join(lines)


class RunReportOperator(BaseOperator):
    """The run summary and the digest alert (see the module docstring). Use ``trigger_rule="all_done"``.

    :param report_tasks: the maintenance tasks of the DAG whose results and failures are reported
    :param label_task: a task whose XCom lists the mapped tasks' arguments in map-index order (the batch
        plan), used to name a failed mapped task that left no result; its id without a host group: a task of
        group ``storage-a`` is named by ``storage-a.<label_task>``
    :param to, webhook_url, smtp_conn_id, from_email: alert settings (see :mod:`.notifiers`)
    """

    template_fields: Sequence[str] = ()
    ui_color = "#eef0e8"

    def __init__(self, *, report_tasks: Sequence[str], label_task: str | None = None, to=None,
                 webhook_url: str | None = None, smtp_conn_id: str = "smtp_default", from_email: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report_tasks = list(report_tasks)
        self.label_task = label_task
        self.to, self.webhook_url, self.smtp_conn_id, self.from_email = to, webhook_url, smtp_conn_id, from_email

    def _task_instances(self, context) -> list[tuple[str, int, str]]:
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

    def execute(self, context) -> dict:
        ti = context["ti"]
        when = run_as_of(context, strict=False)     # a refused as_of fails the tasks, not the report
        plans: dict[str, list] = {}    # the labels of each label task pulled so far
        rows, failed_tasks, not_run = [], [], []
        states: dict[str, int] = {}    # task instances per state
        ran = []                       # (task_id, map_index) of the instances that ran in this try
        for task_id, map_index, state in self._task_instances(context):
            states[state] = states.get(state, 0) + 1
            pull = {"task_ids": task_id, **({"map_indexes": map_index} if map_index >= 0 else {})}
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
                  "failed_tasks": len(failed_tasks)}
        notable = [r for r in rows if r["status"] != "nothing to do"]
        report = {"dag_id": ti.dag_id, "run_id": ti.run_id, "as_of": when["iso"], "as_of_source": when["source"],
                  "now_ms": when["now_ms"], "totals": totals, "rows": notable[:MAX_ROWS],
                  "rows_omitted": max(0, len(notable) - MAX_ROWS), "failed_tasks": failed_tasks,
                  "not_run": not_run,
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

    def _labels(self, ti, task_id: str, plans: dict[str, list]) -> list:
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

    def _log_dirs(self, ti, ran: list[dict]) -> tuple[dict[str, str], list[str]]:
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

    def _log_dir_alerts(self, context, report: dict, offline: dict[str, str], online: list[str],
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

    def _alert(self, context, report: dict) -> dict:
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


def _pulled(value) -> list:
    """An XCom pull of a mapped task gives a list of its map indexes' values, of an unmapped one the value."""
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, dict) or v is None for v in value):
        return [v for v in value if v is not None]
    return [value]


def run_outcome_tasks(dag_id: str, report_tasks: Sequence[str], label_task: str | None = None):
    """The two tasks that end every maintenance DAG: ``run_report`` (summary, digest alert, the run's asset
    event; after everything, also after failures) and ``fail_run_if_upstream_failed`` (keeps the run red).
    The caller sets the maintenance tasks upstream of both."""
    from .notifiers import MaintenanceFailureNotifier
    from .operators import FailRunIfUpstreamFailedOperator

    report = RunReportOperator(task_id="run_report", report_tasks=report_tasks, label_task=label_task,
                               trigger_rule="all_done", retries=0, outlets=[run_asset(dag_id)],
                               on_failure_callback=[MaintenanceFailureNotifier()])
    run_failed = FailRunIfUpstreamFailedOperator(task_id="fail_run_if_upstream_failed", trigger_rule="one_failed",
                                                 retries=0)
    return report, run_failed
