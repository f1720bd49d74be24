"""Storage on Airflow's home page: the panel the plugin registers as a ``react_apps`` entry with destination
``dashboard`` (Airflow 3.3's extension point for its dashboard).

How Airflow's UI loads it (``airflow/ui/dist``): it ``import()``s ``bundle_url`` (resolved against the page's
``<base>``) as a JavaScript module, then takes ``globalThis[<the entry's name>]``, else ``globalThis.AirflowPlugin``,
as a React function component, and renders it at the bottom of the home page inside its own router. Before any
plugin loads, the UI publishes its libraries as globals: ``React``, ``ReactDOM``, ``ReactJSXRuntime``,
``ReactRouterDOM``, ``ChakraUI``, ``EmotionReact``. So the bundle (``static/dashboard.js``) is a plain module, no
build step: it sets ``globalThis.AirflowPlugin`` to a component made with the host's ``React.createElement`` and
links with the host's router (``ReactRouterDOM.Link``), so following a row stays inside the UI.

The component reads ``/storage-maintenance/api/dashboard`` (this module), the same figures as the Storage view's
first page, cut to what fits a panel:

* **space**: each log dir's partitions, bytes, use% as ``df`` counts it, bytes free, online/offline, problems;
* **damage**: the damaged partitions (what the files show and what runs found that no later run found gone);
* **dirtiest**: the most dirty compacted partitions, as the cleaner ranks them now;
* **last failed run**: the maintenance run that failed most recently, with its failed tasks.

Every row carries ``route``: a route of Airflow's UI (relative to its base URL) showing that row's page: a
partition's page or the log dirs inside the Storage view (``/plugin/storage/<console path>``, which Airflow 3.3
opens in the Storage view's frame), a failed run's "Run summary" tab on Airflow's own run page.
"""
from __future__ import annotations

import os
import urllib.parse
from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import FileResponse, JSONResponse

from airflow.api_fastapi.common.db.common import SessionDep

from ..maintenance_dags import MAINTENANCE_DAGS
from .web import PREFIX, engine_errors, hook, jsonable

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# The plugin's ``react_apps`` entry. Its name is also the global the UI looks the component up by first: it must
# not name something the browser already has (``globalThis.Storage`` is the Web Storage interface).
REACT_APP = {"name": "Storage maintenance", "bundle_url": f"{PREFIX}/static/dashboard.js",
             "destination": "dashboard"}
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
TOP_DIRTIEST = 5
TOP_DAMAGE = 10
# The Storage view inside Airflow's UI: its nav entry's url_route (plugin.py); deeper pages are appended to it.
VIEW_ROUTE = "/plugin/storage"

router = APIRouter()


def console_route(path: str) -> str:
    """The UI route showing console page ``path`` (``/partitions/t/0``) in the Storage view's frame."""
    return f"{VIEW_ROUTE}{PREFIX}{path}"


def partition_route(topic: str, partition: int) -> str:
    return console_route(f"/partitions/{urllib.parse.quote(topic, safe='')}/{partition}")


def last_failed_run(session: Session, dag_ids: tuple[str, ...] = MAINTENANCE_DAGS) -> dict | None:
    """The maintenance run that failed most recently (by when it ended), with the tasks that failed in its latest
    try; None when no maintenance run has failed."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    run = session.scalar(select(DagRun).where(DagRun.dag_id.in_(dag_ids), DagRun.state == DagRunState.FAILED)
                         .order_by(DagRun.end_date.desc().nulls_last(), DagRun.id.desc()).limit(1))
    if run is None:
        return None
    failed = session.execute(select(TaskInstance.task_id, TaskInstance.map_index).where(
        TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id,
        TaskInstance.state == TaskInstanceState.FAILED)
        .order_by(TaskInstance.task_id, TaskInstance.map_index)).all()
    tasks = sorted({task_id if map_index < 0 else f"{task_id}[{map_index}]" for task_id, map_index in failed})
    quoted = urllib.parse.quote(run.run_id, safe="")
    return {"dag_id": run.dag_id, "run_id": run.run_id, "start_date": run.start_date, "end_date": run.end_date,
            "failed_tasks": tasks, "route": f"/dags/{run.dag_id}/runs/{quoted}/plugin/run-summary"}


def dashboard_data(session: Session) -> dict:
    """The panel's figures (see the module's docstring)."""
    from ..reporting import history

    problems = history.open_problems(session)
    facts = engine_errors(hook().overview, top=TOP_DIRTIEST,
                          extra={tp: {"damage": found} for tp, found in problems.items()})
    space = [{"path": d["path"], "online": d["online"], "partitions": d["partitions"], "size_bytes": d["size_bytes"],
              "used_percent": d["used_percent"], "free_bytes": d["free_bytes"],
              "problems": len(d["damaged"]) or (1 if d.get("error") else 0), "route": console_route("/")}
             for d in facts["log_dirs"]]
    damage = [{"topic": p["topic"], "partition": p["partition"], "kind": x.get("kind"), "message": x.get("message"),
               "route": partition_route(p["topic"], p["partition"])}
              for p in facts["damaged"] for x in p["damage"]]
    dirtiest = [{"topic": p["topic"], "partition": p["partition"], "dirty_ratio": p.get("dirty_ratio"),
                 "min_cleanable_dirty_ratio": p.get("min_cleanable_dirty_ratio"), "size_bytes": p.get("size_bytes"),
                 "route": partition_route(p["topic"], p["partition"])} for p in facts["dirtiest"]]
    return {"space": space, "damage": damage[:TOP_DAMAGE], "damage_total": len(damage),
            "damaged_partitions": len(facts["damaged"]), "dirtiest": dirtiest, "compacted": facts["compacted"],
            "partitions": facts["partitions"], "last_failed_run": last_failed_run(session),
            "routes": {"storage": console_route("/"),
                       "dirtiest": console_route("/partitions?sort=dirty_ratio&desc=true")}}


@router.get("/api/dashboard")
def api_dashboard(session: SessionDep) -> JSONResponse:
    return JSONResponse(jsonable(dashboard_data(session)))


@router.get("/static/dashboard.js")
def dashboard_bundle() -> FileResponse:
    """The panel's module (no build step). ``no-cache``: the browser revalidates it (ETag), so a new version of the
    plugin is picked up at the next page load."""
    return FileResponse(os.path.join(STATIC, "dashboard.js"), media_type="text/javascript",
                        headers={"Cache-Control": "no-cache"})
