"""What the metadata DB knows about maintenance: runs, their reports and batch results, partition asset events.

Read-only queries for the Storage view (run inside Airflow's api-server, which has the metadata DB). Values
come back as plain dicts; XCom values are deserialized as Airflow stores them.
"""
from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .assets import PARTITION_URI_PREFIX, partition_uri
from .maintenance_dags import MAINTENANCE_DAGS


def _xcom(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int | None = -1,
          key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel

    query = select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                    XComModel.task_id == task_id, XComModel.key == key)
    if map_index is not None:
        query = query.where(XComModel.map_index == map_index)
    rows = session.scalars(query.order_by(XComModel.map_index)).all()
    values = [XComModel.deserialize_value(row) for row in rows]
    if map_index is not None:
        return values[0] if values else None
    return values


def recent_runs(session: Session, dag_ids=MAINTENANCE_DAGS, limit: int = 10) -> list[dict]:
    """The latest runs of each maintenance DAG, newest first, with their report's totals when there is one."""
    from airflow.models.dagrun import DagRun

    out = []
    for dag_id in dag_ids:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)
                               .order_by(DagRun.run_after.desc()).limit(limit)).all()
        for run in runs:
            report = _xcom(session, dag_id, run.run_id, "run_report")
            out.append({"dag_id": dag_id, "run_id": run.run_id, "state": str(run.state),
                        "run_type": str(run.run_type), "run_after": run.run_after,
                        "data_interval_end": run.data_interval_end,
                        "as_of": report.get("as_of") if isinstance(report, dict) else None,
                        "as_of_source": report.get("as_of_source") if isinstance(report, dict) else None,
                        "totals": report.get("totals") if isinstance(report, dict) else None})
    out.sort(key=lambda r: r["run_after"] or 0, reverse=True)
    return out


def run_report(session: Session, dag_id: str, run_id: str) -> dict | None:
    """The ``run_report`` task's summary of a run, or None (not a maintenance run, or not finished)."""
    value = _xcom(session, dag_id, run_id, "run_report")
    return value if isinstance(value, dict) else None


def run_state(session: Session, dag_id: str, run_id: str) -> dict | None:
    from airflow.models.dagrun import DagRun

    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is None:
        return None
    return {"dag_id": dag_id, "run_id": run_id, "state": str(run.state), "run_after": run.run_after,
            "data_interval_start": run.data_interval_start, "data_interval_end": run.data_interval_end}


def latest_run_with_report(session: Session, dag_id: str) -> str | None:
    from airflow.models.xcom import XComModel

    return session.scalar(select(XComModel.run_id).where(
        XComModel.dag_id == dag_id, XComModel.task_id == "run_report", XComModel.key == "return_value")
        .order_by(XComModel.timestamp.desc()).limit(1))


@functools.lru_cache(maxsize=16)
def _batch_results(dag_id: str, run_id: str, task_id: str) -> dict:
    """{(topic, partition): result or failure} of a finished run's batches (finished runs never change)."""
    from airflow.utils.session import create_session

    out: dict = {}
    with create_session() as session:
        for batch in _xcom(session, dag_id, run_id, task_id, map_index=None):
            if not isinstance(batch, dict):
                continue
            for r in batch.get("results", []):
                out[(r["topic"], r["partition"])] = dict(r, failed=False)
            for f in batch.get("failures", []):
                out[(f["topic"], f["partition"])] = dict(f, failed=True)
    return out


def last_results(session: Session, dag_id: str, task_id: str, partitions) -> tuple[str | None, dict]:
    """(run id, {(topic, partition): result}) of the latest finished run of ``dag_id`` for these partitions."""
    run_id = latest_run_with_report(session, dag_id)
    if run_id is None:
        return None, {}
    results = _batch_results(dag_id, run_id, task_id)
    return run_id, {tp: results[tp] for tp in partitions if tp in results}


def partition_events(session: Session, partitions, limit_per_partition: int = 200) -> dict:
    """{(topic, partition): [asset event, newest first]} of the partitions' ``kafka-log://`` assets."""
    from airflow.models.asset import AssetEvent, AssetModel

    uris = {partition_uri(t, p): (t, p) for t, p in partitions}
    out: dict = {tp: [] for tp in uris.values()}
    if not uris:
        return out
    rows = session.execute(select(AssetModel.uri, AssetEvent).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
                           .where(AssetModel.uri.in_(list(uris))).order_by(AssetEvent.timestamp.desc())).all()
    for uri, ev in rows:
        events = out[uris[uri]]
        if len(events) < limit_per_partition:
            events.append({"timestamp": ev.timestamp, "extra": dict(ev.extra or {}), "dag_id": ev.source_dag_id,
                           "run_id": ev.source_run_id, "task_id": ev.source_task_id,
                           "map_index": ev.source_map_index})
    return out


def retention_history(session: Session, topic: str, partition: int, runs: int = 24) -> list[dict]:
    """What the last ``runs`` retention runs did to one partition, newest first, in the shape of
    :func:`partition_events` (``extra.kind == "retention"``): only runs that deleted something. Read from the
    runs' XComs, loading per run the batch plan and the one batch that held the partition."""
    from airflow.models.xcom import XComModel

    plans = session.execute(select(XComModel.run_id, XComModel.timestamp).where(
        XComModel.dag_id == "log_retention", XComModel.task_id == "plan_batches",
        XComModel.key == "return_value").order_by(XComModel.timestamp.desc()).limit(runs)).all()
    out = []
    for run_id, timestamp in plans:
        plan = _xcom(session, "log_retention", run_id, "plan_batches")
        index = next((i for i, b in enumerate(plan or []) if [topic, partition] in b.get("partitions", [])), None)
        if index is None:
            continue
        batch = _xcom(session, "log_retention", run_id, "retention", map_index=index)
        result = next((r for r in (batch or {}).get("results", [])
                       if r["topic"] == topic and r["partition"] == partition), None)
        if result is None or not result.get("segments_deleted") or (batch or {}).get("dry_run"):
            continue
        out.append({"timestamp": timestamp, "dag_id": "log_retention", "run_id": run_id, "task_id": "retention",
                    "map_index": index,
                    "extra": {"kind": "retention", "as_of": batch.get("as_of"),
                              "bytes_reclaimed": result["bytes_reclaimed"],
                              "records_removed": result["records_removed"],
                              "size_bytes_after": result["size_bytes_after"],
                              "segments_deleted": result["segments_deleted"]}})
    return out


def asset_uri_prefix() -> str:
    return PARTITION_URI_PREFIX
