"""The console pages of the Storage view: topics, a message browser, the Kafka listener and its consumer groups,
and the actions an operator takes from them. Its router joins the Storage view's on one app (:mod:`.app`), so
every endpoint sits behind Airflow's login like the rest of ``/storage-maintenance``.

Pages:

* ``/topics`` every topic: partitions, total size, cleanup policy, overrides;
* ``/topics/<topic>`` its partitions with live figures (size, log end offset, append rate, refreshed without
  reloading), every config with its source (topic override, broker override, Kafka default) beside Kafka's
  default, the consumer groups reading it, the console actions taken on it, and the actions;
* ``/messages/<topic>/<partition>`` the message browser: from an offset, a timestamp, the newest, or by key;
  key, value and headers as text, JSON or hex; producer id, epoch and sequence; transaction markers and records
  of aborted or open transactions marked; paginated; every batch CRC-checked
  (:mod:`storage_engine.inspection.browse`); values masked by the storage config's ``console.masking`` rules
  for users without the unmasked-read permission (:mod:`.masking`);
* ``/broker`` the Kafka listener from its status file (state, listeners, connections, rates refreshed live),
  consumer groups, open transactions, and the broker configs with their source;
* ``/groups/<group_id>`` one consumer group: members and their assignment, the lag of every partition of the
  topics it reads (from the committed offset, or from the log start where nothing is committed) and the lag
  history as a chart.

Each page has its JSON under ``/storage-maintenance/api/...``. Reading never writes to the store (the engine's
read-only inspection). The actions (:mod:`.actions`: delete records, delete a topic, move a partition; and the
Storage view's dry runs) take a JSON body only, each needs its Airflow permission, each page asks for a
confirmation first, and each outcome is written to Airflow's audit log.
"""
from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Body, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep

from ..maintenance_dags import DRY_RUN_DAGS
from . import actions, admin
from .masking import UNMASKED_PERMISSION, Masker, masker_for
from .web import engine_errors, hook, instant_ms, jsonable, listener_shown, parse_key, render

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from storage_engine.config import StorageConfig

logger = logging.getLogger(__name__)
router = APIRouter()
LIVE_INTERVAL_MS = 2000
MAX_BYTES_SHOWN = 16 * 1024          # of a key or value in the message browser, unless asked for more (up to 1 MiB)


# -- engine calls -------------------------------------------------------------------------------------------------

def _config() -> StorageConfig:
    return hook().config


def _listener(config: StorageConfig) -> dict | None:
    from storage_engine.inspection import listener
    return listener_shown(listener.listener_status(config))


def _groups(config: StorageConfig, listener: dict | None) -> list[dict]:
    from storage_engine.inspection.listener import consumer_groups
    return engine_errors(consumer_groups, config, listener)


# -- data ---------------------------------------------------------------------------------------------------------

def topics_data() -> dict:
    from storage_engine.inspection import topics
    rows = engine_errors(topics.list_topics, _config())
    return {"topics": rows, "total_bytes": sum(r["size_bytes"] for r in rows),
            "total_partitions": sum(r["partitions"] for r in rows)}


def topic_data(session: Session, topic: str) -> dict:
    from storage_engine.inspection import topics
    config = _config()
    detail = engine_errors(topics.topic_detail, config, topic)
    readers = []
    for g in _groups(config, _listener(config)):
        mine = [p for p in g["partitions"] if p["topic"] == topic]
        assigned = [m for m in g["members"] if topic in (m.get("assignment") or {})]
        if mine or assigned:
            readers.append({"group_id": g["group_id"], "state": g["state"], "members": len(assigned),
                            "partitions": mine, "lag": sum(p["lag"] or 0 for p in mine)})
    return {"t": detail, "groups": readers, "log_dirs": list(config.log_dirs), "actions": actions.ACTIONS,
            "recent": actions.recent(session, topic=topic),
            "dry_run_dags": [d for d in ("log_retention", "log_compaction") if d in DRY_RUN_DAGS],
            "live_interval_ms": LIVE_INTERVAL_MS}


def live_data(topic: str) -> dict:
    from storage_engine.inspection import topics
    now = datetime.datetime.now(datetime.timezone.utc)
    rows = engine_errors(topics.partition_figures, _config(), topic)
    return {"topic": topic, "sampled_ms": int(now.timestamp() * 1000), "partitions": rows,
            "size_bytes": sum(r["size_bytes"] for r in rows),
            "log_end_offsets": sum(r["log_end_offset"] or 0 for r in rows)}


def _offset(value: str | None) -> int | None:
    """The ``offset`` query parameter: empty means none (a form's empty field)."""
    if value is None or not value.strip():
        return None
    try:
        offset = int(value)
    except ValueError:
        raise HTTPException(422, f"offset must be an integer, got {value!r}") from None
    if offset < 0:
        raise HTTPException(422, f"offset must be >= 0, got {offset}")
    return offset


def messages_data(topic: str, partition: int, *, offset: int | None, timestamp: str | None, key: str | None,
                  key_format: str, latest: bool, fmt: str, isolation: str, limit: int,
                  max_bytes: int = MAX_BYTES_SHOWN, user: object | None = None) -> dict:
    """One page of the message browser for ``user``: values masked by the storage config's rules unless the user
    may read them in clear (:mod:`.masking`)."""
    from storage_engine.inspection import browse

    if fmt not in browse.FORMATS:
        raise HTTPException(422, f"format must be one of {browse.FORMATS}, got {fmt!r}")
    timestamp_ms = instant_ms(timestamp, "timestamp") if timestamp else None
    key_bytes = parse_key(key, key_format)
    config = _config()
    page = engine_errors(browse.browse, config, topic, partition, offset=offset, timestamp_ms=timestamp_ms,
                         key=key_bytes, latest=latest, limit=limit, isolation=isolation)
    mask: Masker = masker_for(config, user)
    rows = []
    for r in map(lambda record: mask(topic, record), page["records"]):
        rows.append({**r, "key_shown": browse.render_bytes(r["key"], fmt, max_bytes),
                     "value_shown": browse.render_bytes(r["value"], fmt, max_bytes),
                     "headers_shown": [(k, browse.render_bytes(v, "auto" if fmt == "json" else fmt, 4096))
                                       for k, v in r["headers"]]})
    page["records"] = rows
    prev_offset = None
    if page["seek"] in ("offset", "timestamp", "latest", "start") and page["start_offset"] > page["log_start_offset"]:
        prev_offset = max(page["log_start_offset"], page["start_offset"] - limit)
    return {"page": page, "format": fmt, "formats": browse.FORMATS, "isolation": isolation, "limit": limit,
            "key": key or "", "key_format": key_format, "timestamp": timestamp or "", "offset": offset,
            "latest": latest, "prev_offset": prev_offset, "action": actions.ACTIONS["delete-records"],
            "max_bytes": max_bytes, "default_max_bytes": MAX_BYTES_SHOWN,
            "live_interval_ms": LIVE_INTERVAL_MS,
            "masked": any(r.get("masked") for r in rows), "unmasked_permission": UNMASKED_PERMISSION}


def broker_data() -> dict:
    from storage_engine.inspection import topics
    h = hook()
    listener = _listener(h.config)
    return {"listener": listener, "groups": _groups(h.config, listener),
            "transactions": (listener or {}).get("transactions") or {},
            "configs": engine_errors(topics.broker_configs, h.config), "config_path": h.config_path,
            "live_interval_ms": LIVE_INTERVAL_MS}


def group_data(group_id: str) -> dict:
    """One consumer group: its members, the lag of every partition of every topic it reads (committed ones from
    the committed offset, the others from the log start) and its lag history (the listener's samples) as a chart."""
    from storage_engine.inspection.listener import lag_history

    from .lag_chart import lag_chart

    config = _config()
    listener = _listener(config)
    found = [g for g in _groups(config, listener) if g["group_id"] == group_id]
    if not found:
        raise HTTPException(404, f"no consumer group {group_id!r} in the Kafka listener's last status"
                                 + ("" if listener else " (no listener has run on these log dirs)"))
    g = found[0]
    assigned: dict[tuple[str, int], str] = {}
    for m in g["members"]:
        for t, ps in (m.get("assignment") or {}).items():
            for p in ps:
                assigned[(t, int(p))] = m.get("client_id") or m["member_id"]
    for p in g["partitions"] + g["uncommitted"]:
        p["member"] = assigned.get((p["topic"], p["partition"]))
    history = engine_errors(lag_history, config, group_id)
    return {"g": g, "listener": listener, "history": history, "chart": lag_chart(history)}


# -- pages --------------------------------------------------------------------------------------------------------

@router.get("/topics", response_class=HTMLResponse)
def topics_page() -> HTMLResponse:
    return render("topics.html", nav="/topics", admin_actions=admin.admin_actions(), **topics_data())


@router.get("/topics/{topic}", response_class=HTMLResponse)
def topic_page(session: SessionDep, topic: str) -> HTMLResponse:
    return render("topic.html", nav="/topics", admin_actions=admin.admin_actions(), **topic_data(session, topic))


@router.get("/messages/{topic}/{partition}", response_class=HTMLResponse)
def messages_page(user: GetUserDep, topic: str, partition: int, offset: str | None = None,
                  timestamp: str | None = None,
                  key: str | None = None, key_format: str = "text", latest: bool = False, format: str = "auto",  # noqa: A002 - the query parameter
                  isolation: str = "read_uncommitted", limit: Annotated[int, Query(ge=1, le=500)] = 50,
                  max_bytes: Annotated[int, Query(ge=16, le=1 << 20)] = MAX_BYTES_SHOWN) -> HTMLResponse:
    data = messages_data(topic, partition, offset=_offset(offset), timestamp=timestamp, key=key,
                         key_format=key_format, latest=latest, fmt=format, isolation=isolation, limit=limit,
                         max_bytes=max_bytes, user=user)
    return render("messages.html", nav="/topics", **data)


@router.get("/broker", response_class=HTMLResponse)
def broker_page() -> HTMLResponse:
    return render("broker.html", nav="/broker", **broker_data())


@router.get("/groups/{group_id}", response_class=HTMLResponse)
def group_page(group_id: str) -> HTMLResponse:
    return render("group.html", nav="/broker", admin_actions=admin.admin_actions(), **group_data(group_id))


# -- JSON API -----------------------------------------------------------------------------------------------------

@router.get("/api/topics")
def api_topics() -> JSONResponse:
    return JSONResponse(jsonable(topics_data()))


@router.get("/api/topics/{topic}")
def api_topic(session: SessionDep, topic: str) -> JSONResponse:
    data = topic_data(session, topic)
    data["actions"] = {name: {"permission": a.permission, "dag_id": a.dag_id, "method": a.method}
                       for name, a in actions.ACTIONS.items()}
    return JSONResponse(jsonable(data))


@router.get("/api/topics/{topic}/live")
def api_topic_live(topic: str) -> JSONResponse:
    return JSONResponse(jsonable(live_data(topic)))


@router.get("/api/messages/{topic}/{partition}")
def api_messages(user: GetUserDep, topic: str, partition: int, offset: str | None = None,
                 timestamp: str | None = None,
                 key: str | None = None, key_format: str = "text", latest: bool = False, format: str = "auto",  # noqa: A002 - the query parameter
                 isolation: str = "read_uncommitted", limit: Annotated[int, Query(ge=1, le=500)] = 50,
                 max_bytes: Annotated[int, Query(ge=16, le=1 << 20)] = MAX_BYTES_SHOWN) -> JSONResponse:
    """One page of the message browser; keys and values rendered (``key_shown``, ``value_shown``: at most
    ``max_bytes`` of each) and raw (UTF-8 text, or ``{"hex": ...}``)."""
    data = messages_data(topic, partition, offset=_offset(offset), timestamp=timestamp, key=key,
                         key_format=key_format, latest=latest, fmt=format, isolation=isolation, limit=limit,
                         max_bytes=max_bytes, user=user)
    data.pop("action")
    return JSONResponse(jsonable(data))


@router.get("/api/broker")
def api_broker() -> JSONResponse:
    return JSONResponse(jsonable(broker_data()))


@router.get("/api/broker/live")
def api_broker_live() -> JSONResponse:
    """The listener's figures only (what the broker page refreshes)."""
    return JSONResponse(jsonable({"listener": _listener(_config())}))


@router.get("/api/groups/{group_id}")
def api_group(group_id: str) -> JSONResponse:
    """One consumer group: ``g`` (members; ``partitions`` with a committed offset, ``uncommitted`` the other
    partitions of the topics it reads, lag from the log start) and ``history`` (the lag samples, oldest first)."""
    data = group_data(group_id)
    data.pop("chart")
    data["history"] = [{"t": s["t"], "lag": s["lag"],
                        "partitions": [{"topic": t, "partition": p, "lag": lag}
                                       for (t, p), lag in sorted(s["partitions"].items())]}
                       for s in data["history"]]
    return JSONResponse(jsonable(data))


@router.get("/api/actions")
def api_actions(session: SessionDep, topic: str | None = None,
                limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> JSONResponse:
    """The console actions in Airflow's audit log, newest first."""
    return JSONResponse(jsonable({"actions": actions.recent(session, topic=topic, limit=limit)}))


@router.post("/api/actions/{action}")
def api_action(request: Request, session: SessionDep, user: GetUserDep, action: str,
               body: Annotated[dict, Body()]) -> JSONResponse:
    """Do one action (:mod:`.actions`) after Airflow's permission check; JSON body only (``{"topic", "partition",
    ..., "confirm": <target name>}``), so a cross-site form cannot post here."""
    spec = actions.ACTIONS.get(action)
    if spec is None:
        raise HTTPException(404, f"no action {action!r}; the actions are {sorted(actions.ACTIONS)}")
    attempted = {k: body.get(k) for k in ("topic", "partition", "offset", "to_dir") if k in body}
    target, result = actions.perform(request, session, user, spec, attempted, lambda: actions.target(action, body),
                                     lambda t: engine_errors(actions.run, _config(), action, t),
                                     lambda r: _summary(action, r))
    return JSONResponse(jsonable({"action": action, "target": target, "summary": _summary(action, result),
                                   "result": result}))


def _summary(action: str, result: dict) -> str:
    if action == "delete-records":
        return (f"log start offset of {result['topic']}-{result['partition']} moved from "
                f"{result['log_start_offset_before']} to {result['log_start_offset']}")
    if action == "delete-topic":
        return f"deleted {len(result['deleted'])} partition(s) of {result['topic']}: {result['partitions']}"
    if action == "move-partition":
        if not result.get("committed"):
            return f"{result['topic']}-{result['partition']} is already in {result['target_dir']}: nothing to move"
        return (f"moved {result['topic']}-{result['partition']} from {result['source_dir']} to {result['target_dir']} "
                f"({result['size_bytes']} bytes, log end offset {result['log_end_offset']})")
    return action
