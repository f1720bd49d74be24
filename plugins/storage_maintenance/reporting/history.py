"""What the metadata DB knows about maintenance: runs, their reports and batch results, partition asset events,
and the damage and failures that runs found and no later run has found gone.

Read-only queries for the Storage view (run inside Airflow's api-server, which has the metadata DB). Values
come back as plain dicts; XCom values are deserialized as Airflow stores them.

**Only the latest try counts.** A task's XCom is cleared when the task runs again, not when its run is
cleared: a mapped task that a re-run expands to fewer items leaves its old items ``removed`` with their old
XComs, and a task that a re-run does not reach (``upstream_failed``, ``skipped``) keeps the XCom of the try
before. So every XCom read here is one of a task instance that ran in the run's latest try (state ``success``
or ``failed``), and a run's report is its ``run_report``'s only once that task has run again.

**Damage stays until a later run finds it gone** (:func:`open_problems`): for each per-partition check
(:data:`CHECKS`: ``log_verify``'s audit, the batches of retention, producer expiry, checkpoint, flush and
tiering: a remote object missing or damaged stays on the partition's page until a tiering run finds it sound), a
partition that a run found damaged or failed on is reported until a later run of the same check has
maintained it without a problem. Its log dir's own problems found by ``verify_log_dirs`` stay the same way
(:func:`open_dir_problems`).

**Several storage hosts**: each host's copy of a step has the id ``<host>.<step>`` (``storage-a.retention``, in the
host's task group); every query here reads a step under both forms, and keeps the task id with the map index
(map indexes repeat across the groups).
"""
from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ..maintenance_dags import MAINTENANCE_DAGS, PARTITION_URI_PREFIX, in_group, partition_uri, step_of

RAN = ("success", "failed")         # the states of a task instance that ran in its run's latest try
# The per-partition checks whose problems stay on the pages until a later run of the same check finds the
# partition sound: (DAG, mapped batch step). Their batches are the runs' ``plan_batches`` XCom (of the same host
# group).
CHECKS = (("log_verify", "verify"), ("log_retention", "retention"), ("log_retention", "expire_producers"),
          ("log_checkpoint", "checkpoint"), ("log_flush", "flush"), ("log_tiering", "tier"))
PLAN_TASK = "plan_batches"
DIR_CHECK = ("log_verify", "verify_log_dirs")
RUNS_LOOKED_AT = 50                 # how far back a check's runs are read for problems still open
_CACHE_MAX = 256
_cache: dict[tuple, Any] = {}
T = TypeVar("T")


def _cached(key: tuple, load: Callable[[], T]) -> T:
    """A value read from the XComs of task instances that finished: ``key`` holds their try numbers and end
    dates, so a re-run (new tries) reads them again."""
    value = _cache.get(key, _cache)
    if value is _cache:                 # not cached (the pages are served by several threads: no lock needed,
        value = load()                  # at worst two load the same value)
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = value
    return value


def _of_step(column: Any, step: str) -> ColumnElement[bool]:
    """The task ids of ``step``: ``step`` itself, and ``<host>.<step>`` in a storage host's task group."""
    return or_(column == step, column.endswith("." + step, autoescape=True))


def _ran_tis(session: Session, dag_id: str, run_ids: Collection[str], step: str, states: tuple | None = RAN) -> list:
    """(run_id, task_id, map_index, state, try_number, end_date) of the instances of ``step`` (in every host group)
    in these runs that ran (``states=None``: in any state)."""
    from airflow.models.taskinstance import TaskInstance as TI

    if not run_ids:
        return []
    query = select(TI.run_id, TI.task_id, TI.map_index, TI.state, TI.try_number, TI.end_date).where(
        TI.dag_id == dag_id, _of_step(TI.task_id, step), TI.run_id.in_(list(run_ids)))
    if states is not None:
        query = query.where(TI.state.in_(list(states)))
    return list(session.execute(query.order_by(TI.task_id, TI.map_index)).all())


def _xcom(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int | None = -1,
          key: str = "return_value") -> Any:
    """The XCom of a task instance that ran in the run's latest try (None when it did not run); with
    ``map_index=None`` the list of every such mapped instance's, in map-index order."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.xcom import XComModel

    query = (select(XComModel).join(TI, and_(TI.dag_id == XComModel.dag_id, TI.run_id == XComModel.run_id,
                                              TI.task_id == XComModel.task_id, TI.map_index == XComModel.map_index))
             .where(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id,
                    XComModel.key == key, TI.state.in_(list(RAN))))
    if map_index is not None:
        query = query.where(XComModel.map_index == map_index)
    rows = session.scalars(query.order_by(XComModel.map_index)).all()
    values = [XComModel.deserialize_value(row) for row in rows]
    if map_index is not None:
        return values[0] if values else None
    return values


# -- runs ---------------------------------------------------------------------------------------------------

def _execution_order() -> tuple[Any, ...]:
    """Runs by when they executed: running ones first, then by when they finished, newest first; runs that have
    not started yet (queued) last, newest first."""
    from airflow.models.dagrun import DagRun

    running = and_(DagRun.end_date.is_(None), DagRun.start_date.is_not(None))
    started = DagRun.start_date.is_not(None)
    return (case((running, 0), (started, 1), else_=2), DagRun.end_date.desc(), DagRun.start_date.desc(),
            DagRun.queued_at.desc(), DagRun.id.desc())


def run_list(session: Session, dag_ids: Iterable[str] = MAINTENANCE_DAGS, *, offset: int = 0, limit: int = 20) -> dict:
    """One page of the maintenance runs ordered by when they executed (see :func:`_execution_order`), each
    with its report's totals when the run's latest try has one: ``{"total", "offset", "limit", "runs"}``."""
    from airflow.models.dagrun import DagRun

    where = DagRun.dag_id.in_(list(dag_ids))
    total = session.scalar(select(func.count()).select_from(DagRun).where(where)) or 0
    runs = session.scalars(select(DagRun).where(where).order_by(*_execution_order())
                           .offset(offset).limit(limit)).all()
    out = []
    for run in runs:
        report = run_report(session, run.dag_id, run.run_id)
        out.append({"dag_id": run.dag_id, "run_id": run.run_id, "state": str(run.state),
                    "run_type": str(run.run_type), "run_after": run.run_after,
                    "start_date": run.start_date, "end_date": run.end_date, "queued_at": run.queued_at,
                    "data_interval_end": run.data_interval_end,
                    "as_of": report.get("as_of") if report else None,
                    "as_of_source": report.get("as_of_source") if report else None,
                    "totals": report.get("totals") if report else None})
    return {"total": total, "offset": offset, "limit": limit, "runs": out}


def recent_runs(session: Session, dag_ids: Iterable[str] = MAINTENANCE_DAGS, limit: int = 10) -> list[dict]:
    """The latest ``limit`` maintenance runs, by when they executed (the first page of :func:`run_list`)."""
    return run_list(session, dag_ids, limit=limit)["runs"]


def run_report(session: Session, dag_id: str, run_id: str) -> dict | None:
    """The ``run_report`` task's summary of the run's latest try, or None (not a maintenance run, or the report
    has not run since the run was last cleared)."""
    value = _xcom(session, dag_id, run_id, "run_report")
    return value if isinstance(value, dict) else None


def run_state(session: Session, dag_id: str, run_id: str) -> dict | None:
    from airflow.models.dagrun import DagRun

    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is None:
        return None
    return {"dag_id": dag_id, "run_id": run_id, "state": str(run.state), "run_after": run.run_after,
            "start_date": run.start_date, "end_date": run.end_date,
            "data_interval_start": run.data_interval_start, "data_interval_end": run.data_interval_end}


def latest_run_with_report(session: Session, dag_id: str) -> str | None:
    """The run whose report was written last (by its latest try)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.xcom import XComModel

    return session.scalar(select(XComModel.run_id).join(TI, and_(
        TI.dag_id == XComModel.dag_id, TI.run_id == XComModel.run_id, TI.task_id == XComModel.task_id,
        TI.map_index == XComModel.map_index)).where(
        XComModel.dag_id == dag_id, XComModel.task_id == "run_report", XComModel.key == "return_value",
        TI.state.in_(list(RAN))).order_by(XComModel.timestamp.desc()).limit(1))


def _batch_results(session: Session, dag_id: str, run_id: str, step: str) -> dict:
    """{(topic, partition): result or failure} of a run's batches of ``step`` (of every host group) that ran in its
    latest try."""
    tis = _ran_tis(session, dag_id, [run_id], step)

    def load() -> dict:
        out: dict = {}
        for task_id in sorted({t[1] for t in tis}):
            for batch in _xcom(session, dag_id, run_id, task_id, map_index=None):
                if not isinstance(batch, dict):
                    continue
                for r in batch.get("results", []):
                    out[(r["topic"], r["partition"])] = dict(r, failed=False)
                for f in batch.get("failures", []):
                    out[(f["topic"], f["partition"])] = dict(f, failed=True)
        return out

    return _cached(("batches", dag_id, run_id, step, tuple((t[1], t[2], t[4], t[5]) for t in tis)), load)


def last_results(session: Session, dag_id: str, step: str, partitions: Collection[tuple[str, int]] | None = None
                 ) -> tuple[str | None, dict]:
    """(run id, {(topic, partition): result}) of ``step``'s batches (``retention``; of every host group) in the
    latest reported run of ``dag_id``, for these partitions (None: every partition the run maintained)."""
    run_id = latest_run_with_report(session, dag_id)
    if run_id is None:
        return None, {}
    results = _batch_results(session, dag_id, run_id, step)
    if partitions is None:
        return run_id, dict(results)
    return run_id, {tp: results[tp] for tp in partitions if tp in results}


# -- problems still open ------------------------------------------------------------------------------------

def _outcomes(batch: Any, dag_id: str, task_id: str, run_id: str, when: datetime.datetime | None) -> dict:
    """{(topic, partition): problem dict, or None when the batch maintained it without one} of one batch's
    XCom; partitions it skipped (log dir offline) are left out: nothing was found about them."""
    out: dict = {}
    if not isinstance(batch, dict):
        return out
    as_of = batch.get("as_of")
    for r in batch.get("results", []):
        out[(r["topic"], r["partition"])] = None
    for f in batch.get("failures", []):
        damaged = f.get("error_type") == "DamageFound" or (dag_id == "log_verify")
        out[(f["topic"], f["partition"])] = {
            "kind": "damaged" if damaged else "failed", "source": dag_id, "task": task_id, "run_id": run_id,
            "as_of": as_of, "when": when,
            "message": (f"{'found by' if damaged else 'failed in'} {dag_id}: {f.get('error_type')}: "
                        f"{f.get('error')}")}
    return out


def _plan(session: Session, dag_id: str, run_id: str) -> dict:
    """{(topic, partition): (host group, map index)} of a run's batch plans: the partition's batch is the instance
    of that map index of the batch task in the same group (``""``: no group)."""
    tis = _ran_tis(session, dag_id, [run_id], PLAN_TASK)

    def load() -> dict:
        out = {}
        for task_id in sorted({t[1] for t in tis}):
            plan, group = _xcom(session, dag_id, run_id, task_id), step_of(task_id)[0]
            out.update({(t, p): (group, i) for i, b in enumerate(plan if isinstance(plan, list) else [])
                        if isinstance(b, dict) for t, p in b.get("partitions", [])})
        return out

    return _cached(("plan", dag_id, run_id, tuple((t[1], t[4], t[5]) for t in tis)), load)


def _batch_outcomes(session: Session, dag_id: str, ti: Sequence[Any]) -> dict:
    run_id, task_id, map_index, _state, try_number, end_date = ti
    return _cached(("outcomes", dag_id, run_id, task_id, map_index, try_number, end_date),
                   lambda: _outcomes(_xcom(session, dag_id, run_id, task_id, map_index), dag_id, task_id, run_id,
                                     end_date))


def _recent_run_ids(session: Session, dag_id: str, runs: int) -> list[str]:
    from airflow.models.dagrun import DagRun

    return list(session.scalars(select(DagRun.run_id).where(DagRun.dag_id == dag_id, DagRun.start_date.is_not(None))
                                .order_by(*_execution_order()).limit(runs)).all())


def _open_problems_of(session: Session, dag_id: str, step: str, runs: int) -> dict:
    order = _recent_run_ids(session, dag_id, runs)             # newest first
    failed = _ran_tis(session, dag_id, order, step, states=("failed",))
    if not failed:
        return {}
    position = {run_id: i for i, run_id in enumerate(order)}
    # The problems, each at the newest run that found it; and what the failed batches found sound.
    found: dict = {}
    sound: dict = {}
    for ti in sorted(failed, key=lambda t: position[t[0]]):
        outcomes = _batch_outcomes(session, dag_id, ti)
        if not outcomes:                 # the batch failed before it reported: every partition of it failed
            plan, batch = _plan(session, dag_id, ti[0]), (step_of(ti[1])[0], ti[2])
            outcomes = {tp: {"kind": "failed", "source": dag_id, "task": ti[1], "run_id": ti[0], "as_of": None,
                             "when": ti[5], "message": f"failed in {dag_id}: the {ti[1]} task failed before it "
                                                       "reported (see its log)"}
                        for tp, at in plan.items() if at == batch}
        for tp, problem in outcomes.items():
            if problem is None:
                sound.setdefault(tp, position[ti[0]])
            elif tp not in found:
                found[tp] = (position[ti[0]], problem)
    out = {}
    for tp, (pos, problem) in found.items():
        if sound.get(tp, pos) < pos or _sound_in_a_later_run(session, dag_id, step, tp, order[:pos]):
            continue
        out[tp] = problem
    return out


def _sound_in_a_later_run(session: Session, dag_id: str, step: str, tp: tuple[str, int], later: list[str]) -> bool:
    """Whether a batch that succeeded in one of the ``later`` runs maintained ``tp`` (a failed one that did is
    known already)."""
    for run_id in later:
        at = _plan(session, dag_id, run_id).get(tp)
        if at is None:
            continue
        task_id, index = in_group(at[0], step), at[1]
        tis = [t for t in _ran_tis(session, dag_id, [run_id], step, states=("success",))
               if (t[1], t[2]) == (task_id, index)]
        if tis and tp in _batch_outcomes(session, dag_id, tis[0]):
            return True
    return False


def open_problems(session: Session, runs: int = RUNS_LOOKED_AT) -> dict:
    """{(topic, partition): [problem]} of every check in :data:`CHECKS`: what the newest run of the check that
    looked at the partition found wrong (damage found by the audit, or the error maintenance failed with), among
    the last ``runs`` runs of its DAG. A problem is ``{"kind": "damaged"|"failed", "source": DAG, "task",
    "run_id", "as_of", "when", "message"}``."""
    out: dict = {}
    for dag_id, step in CHECKS:
        for tp, problem in _open_problems_of(session, dag_id, step, runs).items():
            out.setdefault(tp, []).append(problem)
    return out


def open_dir_problems(session: Session) -> list[dict]:
    """The problems in the log dirs' own files (checkpoint files, folders) that the latest ``verify_log_dirs``
    which ran found, of each host group the DAG has now (those of its newest run): ``[{"file", "message",
    "run_id", "as_of", "when"}]`` (empty once a later audit finds none)."""
    dag_id, step = DIR_CHECK
    order = _recent_run_ids(session, dag_id, RUNS_LOOKED_AT)
    groups = {t[1] for t in _ran_tis(session, dag_id, order[:1], step, states=None)}
    latest: dict = {}                   # the newest audit of each group
    for ti in sorted(_ran_tis(session, dag_id, order, step), key=lambda t: order.index(t[0])):
        if ti[1] in groups:
            latest.setdefault(ti[1], ti)
    out = []
    for run_id, task_id, _map_index, _state, _try, end_date in latest.values():
        value = _xcom(session, dag_id, run_id, task_id)
        if isinstance(value, dict) and value.get("damaged"):
            out += [{"file": p.get("file"), "message": p.get("message"), "run_id": run_id,
                     "as_of": value.get("as_of"), "when": end_date} for p in value.get("problems", [])]
    return out


# -- asset events -------------------------------------------------------------------------------------------

def partition_events(session: Session, partitions: Iterable[tuple[str, int]], limit_per_partition: int = 200) -> dict:
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


def last_compactions(session: Session) -> dict:
    """{(topic, partition): (when, bytes reclaimed)} of the latest compaction asset event of every partition that
    has one: one query, for sorting the partition table by it."""
    from airflow.models.asset import AssetEvent, AssetModel

    latest = (select(AssetEvent.asset_id, func.max(AssetEvent.id).label("id"))
              .group_by(AssetEvent.asset_id).subquery())
    rows = session.execute(select(AssetModel.uri, AssetEvent.timestamp, AssetEvent.extra)
                           .join(latest, latest.c.asset_id == AssetModel.id)
                           .join(AssetEvent, AssetEvent.id == latest.c.id)
                           .where(AssetModel.uri.startswith(PARTITION_URI_PREFIX))).all()
    out = {}
    for uri, when, extra in rows:
        tp = _partition_of(uri)
        if tp is not None:
            out[tp] = (when, (extra or {}).get("bytes_reclaimed"))
    return out


@functools.lru_cache(maxsize=4096)
def _partition_of(uri: str) -> tuple[str, int] | None:
    rest = uri[len(PARTITION_URI_PREFIX):]
    topic, _, partition = rest.rpartition("/")
    return (topic, int(partition)) if topic and partition.isdigit() else None


def retention_history(session: Session, topic: str, partition: int, runs: int = 24) -> list[dict]:
    """What the last ``runs`` retention runs did to one partition, newest first, in the shape of
    :func:`partition_events` (``extra.kind == "retention"``): only runs that deleted something. Read from the
    runs' XComs (of their latest tries), loading per run the batch plan and the one batch that held the
    partition."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.xcom import XComModel

    newest = func.max(XComModel.timestamp)
    plans = session.execute(select(XComModel.run_id, newest).join(TI, and_(
        TI.dag_id == XComModel.dag_id, TI.run_id == XComModel.run_id, TI.task_id == XComModel.task_id,
        TI.map_index == XComModel.map_index)).where(
        XComModel.dag_id == "log_retention", _of_step(XComModel.task_id, PLAN_TASK), XComModel.key == "return_value",
        TI.state.in_(list(RAN))).group_by(XComModel.run_id).order_by(newest.desc()).limit(runs)).all()
    out = []
    for run_id, timestamp in plans:
        at = _plan(session, "log_retention", run_id).get((topic, partition))
        if at is None:
            continue
        task_id, index = in_group(at[0], "retention"), at[1]
        batch = _xcom(session, "log_retention", run_id, task_id, map_index=index)
        result = next((r for r in (batch or {}).get("results", [])
                       if r["topic"] == topic and r["partition"] == partition), None)
        if result is None or not result.get("segments_deleted") or (batch or {}).get("dry_run"):
            continue
        out.append({"timestamp": timestamp, "dag_id": "log_retention", "run_id": run_id, "task_id": task_id,
                    "map_index": index,
                    "extra": {"kind": "retention", "as_of": batch.get("as_of"),
                              "bytes_reclaimed": result["bytes_reclaimed"],
                              "records_removed": result["records_removed"],
                              "size_bytes_after": result["size_bytes_after"],
                              "segments_deleted": result["segments_deleted"]}})
    return out


def asset_uri_prefix() -> str:
    return PARTITION_URI_PREFIX
