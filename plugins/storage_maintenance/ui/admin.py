"""The console's admin actions: produce a record, create a topic, change a topic's configs, reset a consumer group's
offsets (previewed first) and delete a group. Each is a JSON-only POST under ``/storage-maintenance/api/admin/``,
each page asks for a confirmation first, and each goes through :func:`.actions.perform`: Airflow's permission,
the request checked, the change made, and one entry of Airflow's audit log whatever the outcome (refusals too).
What each does and why the broker's changes go through the broker: :mod:`.admin_ops`.

=================  =====================================  ===================================================
action             how                                    Airflow permission (on the connection that names
                                                          the store, ``storage_engine_default``)
=================  =====================================  ===================================================
produce            the engine's append (``produce``)      create (POST)
create-topic       CreateTopics to the running broker     create (POST)
alter-configs      IncrementalAlterConfigs to the broker  edit (PUT)
reset-offsets      OffsetCommit to the broker (previewed  edit (PUT)
                   with ListOffsets and OffsetFetch)
delete-group       DeleteGroups to the broker             delete (DELETE)
=================  =====================================  ===================================================

The connection is what points Airflow at the store, so who may change it may change the store: Airflow's Admin
and Op roles may, User and Viewer may not (a viewer reads everything and changes nothing). The preview of a reset
changes nothing and needs only the login, like every page.

Each action names its target twice: in the fields and in ``confirm`` (``events-0`` for a record's partition, the
topic's name for a topic, the group's id for a group).
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import JSONResponse

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep

from storage_engine import layout

from . import actions, admin_ops
from .web import engine_errors, hook, jsonable

router = APIRouter()
MAX_PARTITIONS = 10_000
MAX_TEXT = 1 << 20          # of a key, a value, a header's value typed into the form


def _conn(name: str, method: Any, permission: str) -> actions.Action:
    return actions.Action(name, method, None, f"{permission} permission on the Airflow connection "
                                               f"{hook().storage_engine_conn_id}", connection=True)


def admin_action(name: str) -> actions.Action:
    """The audited action ``name`` with its permission (the table above)."""
    method, word = {"produce": ("POST", "create"), "create-topic": ("POST", "create"),
                    "alter-configs": ("PUT", "edit"), "reset-offsets": ("PUT", "edit"),
                    "delete-group": ("DELETE", "delete")}[name]
    return _conn(name, method, word)


ADMIN_ACTIONS = ("produce", "create-topic", "alter-configs", "reset-offsets", "delete-group")


def admin_actions() -> dict[str, actions.Action]:
    """Every admin action with its permission, for the pages."""
    return {name: admin_action(name) for name in ADMIN_ACTIONS}


# -- request fields --------------------------------------------------------------------------------------------

def _str(body: dict, name: str, *, optional: bool = False) -> Any:
    value = body.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise actions.ActionRequestError(f"{name} must be a string, got {value!r}")
    if len(value) > MAX_TEXT:
        raise actions.ActionRequestError(f"{name} is longer than {MAX_TEXT} characters")
    return value


def _int(body: dict, name: str, low: int = 0, high: int | None = None) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise actions.ActionRequestError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        raise actions.ActionRequestError(f"{name} must be between {low} and {high}, got {value}" if high is not None
                                         else f"{name} must be >= {low}, got {value}")
    return value


def _topic(body: dict) -> str:
    topic = _str(body, "topic")
    try:
        layout.validate_topic(topic)
    except ValueError as exc:
        raise actions.ActionRequestError(str(exc)) from None
    return topic


def _group(group_id: str) -> str:
    if not group_id or len(group_id) > 255:
        raise actions.ActionRequestError(f"group id must be 1 to 255 characters, got {group_id!r}")
    return group_id


def _confirmed(body: dict, name: str) -> None:
    if body.get("confirm") != name:
        raise actions.ActionRequestError(f"confirm must be {name!r}, the name of what the action changes; got "
                                         f"{body.get('confirm')!r}")


def _configs(body: dict, name: str) -> dict[str, str]:
    value = body.get(name) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise actions.ActionRequestError(f"{name} must map config keys to string values, got {value!r}")
    return dict(value)


def produce_target(body: dict) -> dict:
    topic, partition = _topic(body), _int(body, "partition")
    headers = body.get("headers") or []
    if not isinstance(headers, list) or not all(
            isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) and isinstance(h[1], str) for h in headers):
        raise actions.ActionRequestError(f"headers must be a list of [name, value] strings, got {headers!r}")
    _confirmed(body, layout.partition_dir_name(topic, partition))
    return {"topic": topic, "partition": partition, "key": _str(body, "key", optional=True),
            "value": _str(body, "value", optional=True), "headers": headers}


def create_target(body: dict) -> dict:
    topic = _topic(body)
    _confirmed(body, topic)
    return {"topic": topic, "partitions": _int(body, "partitions", 1, MAX_PARTITIONS),
            "configs": _configs(body, "configs")}


def alter_target(body: dict, topic: str) -> dict:
    layout.validate_topic(topic)
    delete = body.get("delete") or []
    if not isinstance(delete, list) or not all(isinstance(k, str) for k in delete):
        raise actions.ActionRequestError(f"delete must be a list of config keys, got {delete!r}")
    _confirmed(body, topic)
    return {"topic": topic, "set": _configs(body, "set"), "delete": delete}


def reset_target(body: dict, group_id: str) -> dict:
    _group(group_id)
    topic = _topic(body)
    offsets = body.get("offsets")
    if not isinstance(offsets, dict) or not offsets:
        raise actions.ActionRequestError(f"offsets must map partitions to the previewed offsets, got {offsets!r}")
    parsed: dict[int, int] = {}
    for p, o in offsets.items():
        if not str(p).isdigit() or isinstance(o, bool) or not isinstance(o, int) or o < 0:
            raise actions.ActionRequestError(f"offsets must map partitions to offsets >= 0, got {p!r}: {o!r}")
        parsed[int(p)] = o
    _confirmed(body, group_id)
    return {"group_id": group_id, "topic": topic, "to": body.get("to"), "offsets": parsed}


# -- endpoints -------------------------------------------------------------------------------------------------

def _ops(call: Any, *args: Any) -> Any:
    """An :mod:`.admin_ops` call with its refusals as HTTP answers (engine errors: :func:`.web.engine_errors`)."""
    try:
        return engine_errors(call, *args)
    except admin_ops.AdminError as exc:
        raise HTTPException(exc.status, exc.reason) from None


def _do(request: Request, session: Any, user: Any, name: str, body: dict, attempted: dict, check: Any,
        work: Any, summary: Any) -> JSONResponse:
    spec = admin_action(name)
    target, result = actions.perform(request, session, user, spec, attempted, check, work, summary,
                                     conn_id=hook().storage_engine_conn_id)
    return JSONResponse(jsonable({"action": name, "target": target, "summary": summary(result), "result": result}))


def _attempted(body: dict, *keys: str) -> dict:
    return {k: body.get(k) for k in keys if k in body}


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8")


@router.post("/api/admin/produce")
def api_produce(request: Request, session: SessionDep, user: GetUserDep,
                body: Annotated[dict, Body()]) -> JSONResponse:
    """Append one record (``{"topic", "partition", "key", "value", "headers": [[name, value]], "confirm":
    "<topic>-<partition>"}``, text as UTF-8; a null key or value is none) through the engine."""
    def work(t: dict) -> dict:
        return _ops(admin_ops.produce, hook().config, t["topic"], t["partition"], _utf8(t["key"]), _utf8(t["value"]),
                    [(k, v.encode("utf-8")) for k, v in t["headers"]])
    return _do(request, session, user, "produce", body, _attempted(body, "topic", "partition", "key"),
               lambda: produce_target(body), work,
               lambda r: f"record appended to {r['topic']}-{r['partition']} at offset {r['offset']}")


@router.post("/api/admin/topics")
def api_create_topic(request: Request, session: SessionDep, user: GetUserDep,
                     body: Annotated[dict, Body()]) -> JSONResponse:
    """Create a topic (``{"topic", "partitions", "configs": {key: value}, "confirm": <topic>}``) on the broker."""
    return _do(request, session, user, "create-topic", body, _attempted(body, "topic", "partitions", "configs"),
               lambda: create_target(body),
               lambda t: _ops(admin_ops.create_topic, hook().config, t["topic"], t["partitions"], t["configs"]),
               lambda r: f"topic {r['topic']} created with {r['partitions']} partition(s)"
                         + (f" and {r['configs']}" if r["configs"] else ""))


@router.post("/api/admin/topics/{topic}/configs")
def api_alter_configs(request: Request, session: SessionDep, user: GetUserDep, topic: str,
                      body: Annotated[dict, Body()]) -> JSONResponse:
    """Set and remove topic overrides (``{"set": {key: value}, "delete": [key], "confirm": <topic>}``)."""
    return _do(request, session, user, "alter-configs", body,
               {"topic": topic, **_attempted(body, "set", "delete")}, lambda: alter_target(body, topic),
               lambda t: _ops(admin_ops.alter_topic_configs, hook().config, topic, t["set"], t["delete"]),
               lambda r: f"configs of {r['topic']}: set {r['set']}" + (f", removed {r['deleted']}" if r["deleted"]
                                                                      else ""))


@router.post("/api/admin/groups/{group_id}/reset-preview")
def api_reset_preview(group_id: str, body: Annotated[dict, Body()]) -> JSONResponse:
    """What a reset would commit (``{"topic", "partitions": [..] or null, "to": earliest|latest|timestamp|offset,
    "value"}``); changes nothing."""
    try:
        topic = _topic(body)
        partitions = body.get("partitions") or None
        if partitions is not None and (not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions)):
            raise actions.ActionRequestError(f"partitions must be a list of partition numbers, got {partitions!r}")
        _group(group_id)
    except actions.ActionRequestError as exc:
        raise HTTPException(422, str(exc)) from None
    value = body.get("value")
    if isinstance(value, str) and body.get("to") == "timestamp" and value.strip():
        from .web import instant_ms
        value = instant_ms(value, "value")
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return JSONResponse(jsonable(_ops(admin_ops.reset_preview, hook().config, group_id, topic, partitions,
                                      body.get("to"), value)))


@router.post("/api/admin/groups/{group_id}/reset-offsets")
def api_reset_offsets(request: Request, session: SessionDep, user: GetUserDep, group_id: str,
                      body: Annotated[dict, Body()]) -> JSONResponse:
    """Commit the previewed offsets (``{"topic", "to", "offsets": {partition: offset}, "confirm": <group>}``) for
    an empty group; a group with members is refused (409) with the reason."""
    return _do(request, session, user, "reset-offsets", body,
               {"group_id": group_id, **_attempted(body, "topic", "to", "offsets")},
               lambda: reset_target(body, group_id),
               lambda t: _ops(admin_ops.reset_offsets, hook().config, group_id, t["topic"], t["offsets"]),
               lambda r: f"offsets of group {r['group_id']} on {r['topic']} reset to {r['offsets']} "
                         f"(were {r['before']})")


@router.post("/api/admin/groups/{group_id}/delete")
def api_delete_group(request: Request, session: SessionDep, user: GetUserDep, group_id: str,
                     body: Annotated[dict, Body()]) -> JSONResponse:
    """Delete an empty group and its committed offsets (``{"confirm": <group>}``)."""
    def check() -> dict:
        _group(group_id)
        _confirmed(body, group_id)
        return {"group_id": group_id}
    return _do(request, session, user, "delete-group", body, {"group_id": group_id}, check,
               lambda t: _ops(admin_ops.delete_group, hook().config, group_id),
               lambda r: f"group {r['group_id']} deleted with its committed offsets")
