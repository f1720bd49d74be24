"""The run summary of a maintenance run, built from its tasks' results: one row per partition that a task
changed, failed, skipped or found damaged (:func:`partition_rows`), and the rows with the run's totals as a
markdown table (:func:`markdown_table`); the links to a run and a task in the Airflow UI. The operator that
gathers the results and sends the alerts is :class:`storage_maintenance.tasks.run_report.RunReportOperator`.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from storage_engine.units import human_bytes

MAX_ROWS = 1000          # rows kept in the summary XCom; totals always cover every partition
RAN_STATES = ("success", "failed")   # a task instance in these states ran in the run's latest try
MAX_MARKDOWN_ROWS = 200
# What one partition's tiering did (the ``log_tiering`` DAG's batch XCom), summed over the run into its totals.
# (storage_engine.jobs.tiering's per-partition figures, and the lag: sealed segments and bytes not yet copied.)
TIER_FIGURES = ("copied_segments", "copied_bytes", "local_segments_deleted", "local_bytes_deleted",
                "remote_segments_deleted", "remote_bytes_deleted", "orphan_segments", "orphan_objects",
                "orphan_uploads", "lag_segments", "lag_bytes")


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
    elif "copied_segments" in r:                                    # tiering: what local disk got back
        orphans = r.get("orphan_segments", 0) + r.get("orphan_objects", 0) + r.get("orphan_uploads", 0)
        row.update(segments=r["local_segments_deleted"], bytes=r["local_bytes_deleted"],
                   figures={k: r.get(k, 0) for k in TIER_FIGURES},
                   detail=(f"{'would copy' if r.get('dry_run') else 'copied'} {r['copied_segments']} segment(s) "
                           f"({r['copied_bytes']} bytes), {r['remote_segments_deleted']} remote segment(s) deleted, "
                           f"{orphans} orphan(s) cleaned, {r.get('lag_segments', 0)} segment(s) to copy"
                           if r.get("tiered", True) or r.get("remote_segments_deleted") else r.get("skipped", "")))
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


def figure_totals(rows: list[dict]) -> dict[str, int]:
    """The sums of the rows' ``figures`` (tiering's copied segments and bytes, deletions, orphans, lag); empty
    when no row has any."""
    totals: dict[str, int] = {}
    for r in rows:
        for key, value in (r.get("figures") or {}).items():
            totals[key] = totals.get(key, 0) + int(value)
    return totals


def markdown_table(rows: list[dict], totals: dict) -> str:
    lines = [f"**{totals['partitions']} partition(s)**: {totals['changed']} changed, {totals['failed']} failed, "
             f"{totals['unchanged']} with nothing to do; {totals['segments']} segment(s), "
             f"{human_bytes(totals['bytes'])}, {totals['records']} record(s) reclaimed."
             + (f" Tiering: {totals['copied_segments']} segment(s) ({human_bytes(totals['copied_bytes'])}) copied "
                f"to the object store, {totals['remote_segments_deleted']} remote segment(s) "
                f"({human_bytes(totals['remote_bytes_deleted'])}) deleted, {totals['orphan_segments']} orphaned "
                f"segment(s) cleaned, {totals['lag_segments']} segment(s) ({human_bytes(totals['lag_bytes'])}) "
                "still to copy." if "copied_segments" in totals else ""), "",
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
