"""The Storage view: pages and a JSON API inside Airflow's api-server, under ``/storage-maintenance``.

Pages (HTML, shown inside the Airflow UI through the plugin's external views):

* ``/`` what an operator looks at first: each log dir's space (size, used, available, use% as ``df`` counts
  them), partitions, bytes, ``.deleted`` bytes awaiting purge and damage; every damaged partition; the dirtiest
  compacted partitions; the maintenance runs, paginated, by when they executed; the Kafka listener, consumer
  groups, open transactions, moves in progress, deleted and foreign entries;
* ``/partitions`` the partition table, filtered (topic, name), sorted by any column and paginated, with
  offsets, recovery point, dirty ratio, cleaner checkpoint, uncleanable reason, damage, and the last
  retention and compaction result of each partition linked to its run;
* ``/partitions/<topic>/<partition>`` its damage, segments (index sizes as the entries written), files
  awaiting purge, and a chart of its size and of the bytes reclaimed over time (compaction's asset events, the
  last retention runs' XComs);
* ``/plan`` what retention and compaction would do as of a chosen instant (read-only, the engine's rules);
* ``/tiered`` tiered storage: the object store's health, and per topic and partition the bytes, segments and
  offsets kept locally and remotely and how far tiering lags (:mod:`storage_engine.inspection.tiering`);
* ``/runs/<dag_id>/<run_id>`` a run's summary (the "Run summary" tab of every run page).

**Damage** shown on the first page, the partition table and the partition page is what the files show
(:mod:`storage_engine.inspection.status`: unreadable segment files, partitions whose folder is missing, lost
offsets, uncleanable marks) and what maintenance runs found that no later run of the same check has found
gone (:func:`..reporting.history.open_problems`: the audit of ``log_verify``, failed retention, checkpoint, flush and
producer-expiry batches), each linked to the run that found it.

The JSON API under ``/storage-maintenance/api`` backs them with the same data. Every endpoint requires
Airflow's login (``Authorization: Bearer`` or the UI's ``_token`` cookie; 401 without). Everything is
read-only except two deliberate actions, each checked against Airflow's own permissions and accepting only a
JSON body (so a cross-site form cannot post them): clearing a partition's uncleanable mark (edit permission
on ``log_compaction``) and triggering a dry-run DAG run (permission to create runs of that DAG); each outcome,
refusals included, is an entry of Airflow's audit log and of the console's list of actions (:mod:`.actions`).

Storage figures come from :mod:`storage_engine.inspection.status` through the hook (no lock, no write); the
maintenance history from the metadata DB (:mod:`..reporting.history`).
"""
from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import get_user

from storage_engine.units import human_bytes

from ..maintenance_dags import DRY_RUN_DAGS, MAINTENANCE_DAGS
from ..reporting import history
from ..tasks.hooks import epoch_ms, iso_ms
from . import actions
from .web import engine_errors, hook, instant_ms, jsonable, listener_shown, render

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

PAGE_SIZE = 100
router = APIRouter()


def _parse_as_of(value: str | None) -> int:
    """The ``as_of`` parameter (:func:`.web.instant_ms`) as epoch ms; None or empty: now."""
    if not value:
        return epoch_ms(datetime.datetime.now(datetime.timezone.utc))
    return instant_ms(value, "as_of")


# -- data -------------------------------------------------------------------------------------------------

RUNS_PAGE_SIZE = 20
TOP_DIRTIEST = 10
# The partition table's columns: (sort key, header, whether a first click sorts descending). The keys the
# engine does not know are added from the metadata DB (:func:`_history_fields`).
COLUMNS = (("name", "partition", False), ("log_dir", "log dir", False), ("size", "size", True),
           ("segments", "segments", True), ("log_start_offset", "log start", True),
           ("log_end_offset", "log end", True), ("recovery_point", "recovery point", True),
           ("dirty_ratio", "dirty ratio", True), ("cleaner_checkpoint", "cleaner checkpoint", True),
           ("uncleanable", "uncleanable", True), ("deleted", ".deleted", True), ("damage", "damage", True),
           ("last_retention", "last retention", True), ("last_compaction", "last compaction", True))
NUMERIC_COLUMNS = ("size", "segments", "log_start_offset", "log_end_offset", "recovery_point", "dirty_ratio",
                   "cleaner_checkpoint", "deleted")
HISTORY_SORTS = {"last_retention": "last_retention_bytes", "last_compaction": "last_compaction_ms"}


def _history_fields(session: Session, problems: dict | None = None) -> tuple[dict, str | None, dict]:
    """({(topic, partition): fields}, the last retention run, its results): what the metadata DB knows of every
    partition, for the engine to merge into its rows: damage runs found (``damage``), the bytes the last
    retention run reclaimed (-1 when it failed on the partition) and when it was last compacted (sort keys)."""
    extra: dict = {}
    for tp, found in (problems if problems is not None else history.open_problems(session)).items():
        extra.setdefault(tp, {})["damage"] = found
    retention_run, retention = history.last_results(session, "log_retention", "retention")
    for tp, r in retention.items():
        extra.setdefault(tp, {})["last_retention_bytes"] = -1 if r.get("failed") else r.get("bytes_reclaimed", 0)
    for tp, (when, _reclaimed) in history.last_compactions(session).items():
        extra.setdefault(tp, {})["last_compaction_ms"] = epoch_ms(when) if when is not None else None
    return extra, retention_run, retention


def _dir_problems(log_dirs: list, session: Session) -> None:
    """Add to each log dir the problems in its own files that the latest audit found and the files no longer
    show the same way (a checkpoint file the engine reads as damaged is reported once)."""
    for p in history.open_dir_problems(session):
        path = str(p.get("file") or "")
        for d in log_dirs:
            if path == d["path"] or path.startswith(d["path"].rstrip("/") + "/"):
                if not any(path in m for m in d["damaged"]):
                    d["damaged"].append(f"{p['message']} ({path}; found by log_verify run {p['run_id']})")
                    d["error"] = d["error"] or d["damaged"][0]
                break


def overview_data(session: Session, runs_page: int = 1, runs_limit: int = RUNS_PAGE_SIZE) -> dict:
    h = hook()
    extra, _run, _results = _history_fields(session)
    facts = engine_errors(h.overview, top=TOP_DIRTIEST,
                          extra={tp: {"damage": f["damage"]} for tp, f in extra.items() if "damage" in f})
    _dir_problems(facts["log_dirs"], session)
    facts["listener"] = listener_shown(facts.get("listener"))
    runs = history.run_list(session, offset=(runs_page - 1) * runs_limit, limit=runs_limit)
    runs.update(page=runs_page, pages=max(1, math.ceil(runs["total"] / runs_limit)))
    return {"config": h.config_path, **facts, "runs": runs["runs"], "run_page": runs}


def partitions_data(session: Session, topic: list[str] | None, q: str | None, sort: str, desc: bool, page: int,
                    limit: int) -> dict:
    h = hook()
    if sort not in {c[0] for c in COLUMNS}:
        raise HTTPException(422, f"sort must be one of {[c[0] for c in COLUMNS]}, got {sort!r}")
    extra, retention_run, retention = _history_fields(session)
    data = engine_errors(h.partition_page, topics=topic or None, search=q or None, sort=HISTORY_SORTS.get(sort, sort),
                         descending=desc, offset=(page - 1) * limit, limit=limit, extra=extra,
                         extra_sorts=tuple(HISTORY_SORTS.values()))
    tps = [(p["topic"], p["partition"]) for p in data["partitions"]]
    events = history.partition_events(session, tps, limit_per_partition=20)
    for p in data["partitions"]:
        tp = (p["topic"], p["partition"])
        p["last_retention"] = dict(retention[tp], run_id=retention_run) if tp in retention else None
        p["last_compaction"] = next((e for e in events[tp] if e["extra"].get("kind") == "compaction"), None)
    data.update(page=page, pages=max(1, math.ceil(data["total"] / limit)), desc=desc, q=q or "", sort=sort,
                topics=topic or [], retention_run=retention_run, columns=COLUMNS,
                sort_label=next(label for key, label, _ in COLUMNS if key == sort), numeric=NUMERIC_COLUMNS)
    return data


def partition_data(session: Session, topic: str, partition: int) -> dict:
    detail = engine_errors(hook().partition_detail, topic, partition)
    detail["damage"] = list(detail.get("damage") or []) + history.open_problems(session).get((topic, partition), [])
    events = (history.partition_events(session, [(topic, partition)])[(topic, partition)]
              + history.retention_history(session, topic, partition))
    events.sort(key=lambda e: e["timestamp"], reverse=True)
    detail["events"] = events
    detail["chart"] = history_chart(events, detail.get("size_bytes", 0))
    return detail


def plan_data(as_of: str | None, topic: list[str] | None, page: int, limit: int) -> dict:
    now_ms = _parse_as_of(as_of)
    h = hook()
    data = engine_errors(h.plan, now_ms, topics=topic or None, offset=(page - 1) * limit, limit=limit)
    groups = engine_errors(h.consumer_groups, h.listener_status())
    data["groups_at_risk"] = h.groups_losing_unread(groups, data["retention"]["partitions"])
    data.update(as_of=iso_ms(now_ms), page=page, topics=topic or [],
                pages=max(1, math.ceil(data["retention"]["total"] / limit)))
    return data


def tiered_data(topic: list[str] | None) -> dict:
    """Tiered storage's figures (the remote log metadata and the files, read-only) and the object store's health."""
    from storage_engine.inspection.tiering import tiering_status

    data = engine_errors(tiering_status, hook().config, topics=topic or None)
    return {**data, "topic_filter": topic or []}


def run_data(session: Session, dag_id: str, run_id: str) -> dict:
    state = history.run_state(session, dag_id, run_id)
    if state is None:
        raise HTTPException(404, f"no run {run_id!r} of DAG {dag_id!r}")
    report = history.run_report(session, dag_id, run_id)
    return {"run": state, "report": report, "maintenance": dag_id in MAINTENANCE_DAGS}


def history_chart(events: list[dict], size_now: int, width: int = 720, height: int = 220) -> dict:
    """An SVG chart (size after each change: line; bytes reclaimed: bars) of a partition's asset events."""
    points = sorted(((e["timestamp"], e["extra"]) for e in events if e["extra"].get("size_bytes_after") is not None
                     or e["extra"].get("bytes_reclaimed") is not None), key=lambda x: x[0])
    if not points:
        return {"svg": None, "points": 0}
    xs = [p[0].timestamp() for p in points]
    sizes = [p[1].get("size_bytes_after") for p in points]
    reclaimed = [p[1].get("bytes_reclaimed") or 0 for p in points]
    top = max([s for s in sizes if s is not None] + reclaimed + [size_now, 1])
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    pad_l, pad_r, pad_t, pad_b = 70, 20, 14, 36

    def x(v: float) -> float:
        return pad_l + (v - x0) / span * (width - pad_l - pad_r) if x1 > x0 else (pad_l + width - pad_r) / 2

    def y(v: float) -> float:
        return pad_t + (1 - v / top) * (height - pad_t - pad_b)

    bar = max(3.0, min(24.0, (width - pad_l - pad_r) / (2 * len(points))))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="size and bytes reclaimed over time">',
             f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#999"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#999"/>',
             f'<text x="4" y="{pad_t + 10}" font-size="11">{human_bytes(top)}</text>',
             f'<text x="4" y="{height - pad_b}" font-size="11">0 B</text>']
    for xv, r in zip(xs, reclaimed):
        if r:
            parts.append(f'<rect class="reclaimed" x="{x(xv) - bar / 2:.1f}" y="{y(r):.1f}" width="{bar:.1f}" '
                         f'height="{height - pad_b - y(r):.1f}" fill="#e9a23b"><title>reclaimed {human_bytes(r)}'
                         f'</title></rect>')
    line = [(x(xv), y(s)) for xv, s in zip(xs, sizes) if s is not None]
    if line:
        parts.append('<polyline class="size" fill="none" stroke="#2b6cb0" stroke-width="2" points="'
                     + " ".join(f"{a:.1f},{b:.1f}" for a, b in line) + '"/>')
        parts.extend(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="#2b6cb0"/>' for a, b in line)
    first = datetime.datetime.fromtimestamp(x0, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    last = datetime.datetime.fromtimestamp(x1, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    parts.append(f'<text x="{pad_l}" y="{height - 12}" font-size="11">{first} UTC</text>')
    parts.append(f'<text x="{width - pad_r}" y="{height - 12}" font-size="11" text-anchor="end">{last} UTC</text>')
    parts.append("</svg>")
    return {"svg": "".join(parts), "points": len(points)}


# -- pages --------------------------------------------------------------------------------------------------

RunsPage = Annotated[int, Query(ge=1)]
RunsLimit = Annotated[int, Query(ge=1, le=200)]


@router.get("/", response_class=HTMLResponse)
def overview_page(session: SessionDep, runs_page: RunsPage = 1, runs_limit: RunsLimit = RUNS_PAGE_SIZE) -> HTMLResponse:
    return render("overview.html", nav="/", **overview_data(session, runs_page, runs_limit))


@router.get("/partitions", response_class=HTMLResponse)
def partitions_page(session: SessionDep, topic: Annotated[list[str] | None, Query()] = None, q: str | None = None,
                    sort: str = "name", desc: bool = False, page: Annotated[int, Query(ge=1)] = 1) -> HTMLResponse:
    return render("partitions.html", nav="/partitions",
                  **partitions_data(session, topic, q, sort, desc, page, PAGE_SIZE))


@router.get("/partitions/{topic}/{partition}", response_class=HTMLResponse)
def partition_page(session: SessionDep, topic: str, partition: int) -> HTMLResponse:
    return render("partition.html", nav="/partitions", p=partition_data(session, topic, partition))


@router.get("/plan", response_class=HTMLResponse)
def plan_page(as_of: str | None = None, topic: Annotated[list[str] | None, Query()] = None,
              page: Annotated[int, Query(ge=1)] = 1) -> HTMLResponse:
    return render("plan.html", nav="/plan", **plan_data(as_of, topic, page, PAGE_SIZE))


@router.get("/tiered", response_class=HTMLResponse)
def tiered_page(topic: Annotated[list[str] | None, Query()] = None) -> HTMLResponse:
    return render("tiered.html", nav="/tiered", **tiered_data(topic))


@router.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
def run_page(session: SessionDep, dag_id: str, run_id: str) -> HTMLResponse:
    return render("run.html", **run_data(session, dag_id, run_id))


# -- JSON API -----------------------------------------------------------------------------------------------

@router.get("/api/log-dirs")
def api_log_dirs(session: SessionDep, runs_page: RunsPage = 1, runs_limit: RunsLimit = RUNS_PAGE_SIZE) -> JSONResponse:
    return JSONResponse(jsonable(overview_data(session, runs_page, runs_limit)))


@router.get("/api/partitions")
def api_partitions(session: SessionDep, topic: Annotated[list[str] | None, Query()] = None, q: str | None = None,
                   sort: str = "name", desc: bool = False, page: Annotated[int, Query(ge=1)] = 1,
                   limit: Annotated[int, Query(ge=1, le=1000)] = PAGE_SIZE) -> JSONResponse:
    return JSONResponse(jsonable(partitions_data(session, topic, q, sort, desc, page, limit)))


@router.get("/api/partitions/{topic}/{partition}")
def api_partition(session: SessionDep, topic: str, partition: int) -> JSONResponse:
    data = partition_data(session, topic, partition)
    data.pop("chart")
    return JSONResponse(jsonable(data))


@router.get("/api/plan")
def api_plan(as_of: str | None = None, topic: Annotated[list[str] | None, Query()] = None,
             page: Annotated[int, Query(ge=1)] = 1, limit: Annotated[int, Query(ge=1, le=1000)] = PAGE_SIZE
             ) -> JSONResponse:
    return JSONResponse(jsonable(plan_data(as_of, topic, page, limit)))


@router.get("/api/tiered")
def api_tiered(topic: Annotated[list[str] | None, Query()] = None) -> JSONResponse:
    return JSONResponse(jsonable(tiered_data(topic)))


@router.get("/api/runs/{dag_id}/{run_id}")
def api_run(session: SessionDep, dag_id: str, run_id: str) -> JSONResponse:
    return JSONResponse(jsonable(run_data(session, dag_id, run_id)))


@router.post("/api/partitions/{topic}/{partition}/clear-uncleanable")
def api_clear_uncleanable(request: Request, session: SessionDep, topic: str, partition: int,
                          body: Annotated[dict, Body()], user: Any = Depends(get_user)) -> JSONResponse:
    """Forget that cleaning this partition failed, so the next compaction run considers it again. The body
    must be JSON (``{}``): the check that keeps a cross-site form from posting here. Refused, failed or done, the
    outcome is an entry of Airflow's audit log (``storage.clear-uncleanable``)."""
    target = {"topic": topic, "partition": partition}
    _, result = actions.perform(request, session, user, actions.CLEAR_UNCLEANABLE, target, lambda: target,
                                lambda t: engine_errors(hook().clear_uncleanable, topic, partition), jsonable)
    return JSONResponse(jsonable({"topic": topic, "partition": partition, **result}))


@router.post("/api/dry-runs")
def api_dry_run(request: Request, session: SessionDep, body: Annotated[dict, Body()],
                user: Any = Depends(get_user)) -> JSONResponse:
    """Trigger a dry-run DAG run (``{"dag_id": ..., "topics": [...]}``) acting as of its trigger time. Refused,
    failed or done, the outcome is an entry of Airflow's audit log (``storage.dry-run``)."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType

    dag_id = body.get("dag_id")
    if dag_id not in DRY_RUN_DAGS:
        raise HTTPException(422, f"dag_id must be a maintenance DAG that has a dry run, got {dag_id!r}")
    topics = body.get("topics") or None
    if topics is not None and (not isinstance(topics, list) or not all(isinstance(t, str) for t in topics)):
        raise HTTPException(422, f"topics must be a list of topic names, got {topics!r}")
    name = actions.user_name(user)
    target: dict[str, Any] = {"dag_id": dag_id, "topics": topics}
    conf: dict[str, Any] = {"dry_run": True, "topics": topics}

    def trigger(_t: dict) -> str | None:
        try:
            run = trigger_dag(dag_id, triggered_by=DagRunTriggeredByType.UI, conf=conf, logical_date=None,
                              triggering_user_name=name)
        except Exception as exc:     # an unknown or paused-forever DAG, a param the schema rejects
            raise HTTPException(422, f"{type(exc).__name__}: {exc}") from exc
        return run.run_id if run is not None else None

    _, run_id = actions.perform(request, session, user, actions.dry_run_action(dag_id), target, lambda: target,
                                trigger, lambda r: f"run {r}")
    return JSONResponse({"dag_id": dag_id, "run_id": run_id, "conf": conf})
