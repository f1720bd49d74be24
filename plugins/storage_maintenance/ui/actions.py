"""The console's actions on the store: what an operator may do from the Storage view, each through the engine's own
operation (the same the command line runs), each permitted by an Airflow permission and written to Airflow's
audit log.

=================  ========================================  ====================================================
action             engine operation (CLI command)             Airflow permission (``requires_access_dag``)
=================  ========================================  ====================================================
delete-records     ``Log.delete_records`` and the dir's       edit (PUT) the DAG ``log_retention``: it is what
                   checkpoints (``delete-records``)           moves log start offsets on schedule
delete-topic       ``storage_engine.delete_topic``            delete (DELETE) the DAG ``log_retention``
                   (``delete-topic``)
move-partition     ``storage_engine.move_partition``          edit (PUT) the DAG ``log_dir_balance``: it is what
                   (``move-partition``)                       moves partitions on schedule
=================  ========================================  ====================================================

A dry run of a maintenance DAG (permission to create runs of that DAG) and clearing a partition's uncleanable mark
(edit permission on ``log_compaction``) are the Storage view's ``/api/dry-runs`` and
``/api/partitions/<topic>/<partition>/clear-uncleanable``; they are audited the same way (events
``storage.dry-run`` and ``storage.clear-uncleanable``, refusals included).

Every action names its target twice: in the fields (``topic``, ``partition``) and in ``confirm``, which must be
the target's name (``events-0`` for a partition, ``events`` for a topic), so a request cannot act on something
other than what its page showed and confirmed. Each outcome, refused, failed or done, is one entry of Airflow's
audit log (event ``storage.<action>``, under the DAG whose permission it took; Browse > Audit Log) and one line of
the api-server's log.

The admin actions (produce a record, create a topic, change its configs, reset a group's offsets, delete a group)
are :mod:`.admin`'s, with their permissions in its table (on the Airflow connection that names the store).
Every action, these and those, runs through :func:`perform`: the permission check, the request's
check, the engine call, and one audit entry for whichever outcome it had.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from storage_engine import layout
from storage_engine.config import StorageConfig

if TYPE_CHECKING:
    from fastapi import Request
    from sqlalchemy.orm import Session

logger = logging.getLogger(__name__)
AUDIT_PREFIX = "storage."


T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Action:
    name: str
    method: Literal["GET", "POST", "PUT", "DELETE"]   # the Airflow permission's method on ``dag_id`` (or connection)
    dag_id: str | None
    permission: str        # in words, for pages and refusals
    dag_entity: str | None = None       # a DagAccessEntity name (``RUN``: the DAG's runs), None: the DAG itself
    connection: bool = False            # the permission is on the store's Airflow connection, not on a DAG


ACTIONS = {a.name: a for a in (
    Action("delete-records", "PUT", "log_retention", "edit permission on the DAG log_retention"),
    Action("delete-topic", "DELETE", "log_retention", "delete permission on the DAG log_retention"),
    Action("move-partition", "PUT", "log_dir_balance", "edit permission on the DAG log_dir_balance"),
)}


# The Storage view's two other actions, audited the same way (each outcome one entry, refusals too) but posted to
# their own endpoints: clearing a partition's uncleanable mark, and a dry run of a maintenance DAG.
CLEAR_UNCLEANABLE = Action("clear-uncleanable", "PUT", "log_compaction", "edit permission on the DAG log_compaction")


def dry_run_action(dag_id: str) -> Action:
    """A dry run of maintenance DAG ``dag_id`` as an audited action (the permission to create runs of the DAG)."""
    return Action("dry-run", "POST", dag_id, f"permission to trigger runs of the DAG {dag_id}", dag_entity="RUN")


def user_name(user: Any) -> str:
    """Who acts, as the audit log names them."""
    name = getattr(user, "get_name", None) if user is not None else None
    return (name() if name is not None else None) or "anonymous"


class ActionRequestError(ValueError):
    """A body that does not say what to do (a missing or wrong field, a confirmation that names another target)."""


def _field(body: dict, name: str, kind: type) -> Any:
    value = body.get(name)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ActionRequestError(f"{name} must be an integer, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise ActionRequestError(f"{name} must be a string, got {value!r}")
    return value


def target(action: str, body: dict) -> dict:
    """The checked target of ``action`` from a request ``body``: topic, partition and the action's own fields;
    ActionRequestError when a field is missing or wrong, or ``confirm`` does not name the target."""
    topic = _field(body, "topic", str)
    try:
        layout.validate_topic(topic)
    except ValueError as exc:
        raise ActionRequestError(str(exc)) from None
    out: dict[str, Any] = {"topic": topic}
    if action in ("delete-records", "move-partition"):
        out["partition"] = _field(body, "partition", int)
        if out["partition"] < 0:
            raise ActionRequestError(f"partition must be >= 0, got {out['partition']}")
        name = layout.partition_dir_name(topic, out["partition"])
    else:
        name = topic
    if action == "delete-records":
        out["offset"] = _field(body, "offset", int)
        if out["offset"] < 0:
            raise ActionRequestError(f"offset must be >= 0 (the new log start offset), got {out['offset']}")
    elif action == "move-partition":
        out["to_dir"] = _field(body, "to_dir", str)
    if body.get("confirm") != name:
        raise ActionRequestError(f"confirm must be {name!r}, the name of what the action changes; got "
                                 f"{body.get('confirm')!r}")
    return out


def run(config: StorageConfig, action: str, t: dict) -> dict:
    """Do ``action`` on target ``t`` (see :func:`target`) with the engine; its summary (engine errors propagate)."""
    if action == "delete-records":
        return delete_records(config, t["topic"], t["partition"], t["offset"])
    if action == "delete-topic":
        from storage_engine.jobs import lifecycle
        return lifecycle.delete_topic(config, t["topic"])
    if action == "move-partition":
        if t["to_dir"] not in config.log_dirs:
            raise ActionRequestError(f"to_dir must be one of the log dirs {list(config.log_dirs)}, got {t['to_dir']!r}")
        from storage_engine.jobs import lifecycle
        return lifecycle.move_partition(config, t["topic"], t["partition"], t["to_dir"])
    raise ActionRequestError(f"unknown action {action!r}")


def delete_records(config: StorageConfig, topic: str, partition: int, offset: int) -> dict:
    """Advance the partition's log start offset to ``offset`` (Kafka's DeleteRecords; segments wholly below it go)
    and write the dir's checkpoints, as ``python -m storage_engine delete-records`` does."""
    from storage_engine.clock import clock_at
    from storage_engine.jobs.partition import open_partition

    with open_partition(config, clock_at(None), topic, partition) as (mgr, log):
        before = log.log_start_offset
        after = log.delete_records(offset)
        mgr.checkpoint([log.log_dir])
    return {"topic": topic, "partition": partition, "log_start_offset_before": before, "log_start_offset": after}


def check_access(request: Request, user: Any, spec: Action, conn_id: str | None = None) -> None:
    """Airflow's permission for ``spec`` (403 without it): on its DAG (or that DAG's runs), or on the Airflow
    connection ``conn_id`` that names the store (:class:`..tasks.hooks.StorageEngineHook`'s)."""
    from fastapi import HTTPException

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails, DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    if not spec.connection:
        entity = DagAccessEntity[spec.dag_entity] if spec.dag_entity else None
        requires_access_dag(spec.method, entity, param_dag_id=spec.dag_id)(request, user)
        return
    if user is None or not get_auth_manager().is_authorized_connection(
            method=spec.method, details=ConnectionDetails(conn_id=conn_id), user=user):
        raise HTTPException(403, "Forbidden")


def perform(request: Request, session: Session, user: Any, spec: Action, attempted: dict,
            check: Callable[[], dict], work: Callable[[dict], T], summary: Callable[[T], Any],
            conn_id: str | None = None) -> tuple[dict, T]:
    """One action, the same way for every action of the console: Airflow's permission for ``spec`` (refused: an
    audit entry ``refused`` naming the permission, and 403), then ``check()`` (the target from the request;
    :class:`ActionRequestError` is a 422, not audited: nothing was attempted), then ``work(target)`` (an
    HTTPException from it: an audit entry ``failed`` with its detail, and the same answer), then an audit entry
    ``done`` with ``summary(result)``. Returns (target, result)."""
    from fastapi import HTTPException

    name = user_name(user)
    try:
        check_access(request, user, spec, conn_id)
    except HTTPException as exc:
        audit(session, name, spec, attempted, "refused", f"needs {spec.permission}")
        raise HTTPException(exc.status_code, f"{exc.detail}: {spec.name} needs {spec.permission}") from None
    try:
        t = check()
    except ActionRequestError as exc:
        raise HTTPException(422, str(exc)) from None
    try:
        result = work(t)
    except HTTPException as exc:
        audit(session, name, spec, t, "failed", exc.detail)
        raise
    audit(session, name, spec, t, "done", summary(result))
    return t, result


def audit(session: Session, user_name: str, action: Action, t: dict, outcome: str, detail: Any = None) -> None:
    """One entry of Airflow's audit log (and a line of the api-server's log) for an action's outcome: ``refused``,
    ``failed`` or ``done``."""
    from airflow.models.log import Log

    extra = {"outcome": outcome, **t}
    if detail is not None:
        extra["detail"] = detail
    session.add(Log(event=AUDIT_PREFIX + action.name, owner=user_name, owner_display_name=user_name,
                    extra=json.dumps(extra, default=str), dag_id=action.dag_id))
    session.commit()
    logger.info("storage console: %s %s by %s: %s", action.name, json.dumps(t, default=str), user_name, outcome)


def recent(session: Session, topic: str | None = None, limit: int = 20) -> list[dict]:
    """The latest console actions from Airflow's audit log, newest first (only those on ``topic`` when given)."""
    from sqlalchemy import select

    from airflow.models.log import Log

    query = select(Log).where(Log.event.startswith(AUDIT_PREFIX)).order_by(Log.dttm.desc(), Log.id.desc())
    if topic is not None:
        # an action on the topic names it as "topic"; a dry run among its "topics" (checked below on the JSON)
        query = query.where(Log.extra.contains(json.dumps(topic), autoescape=True))
    else:
        query = query.limit(limit)
    out: list[dict] = []
    for row in session.scalars(query):
        if len(out) == limit:
            break
        try:
            extra = json.loads(row.extra or "{}")
        except ValueError:
            extra = {}
        if topic is not None and extra.get("topic") != topic and topic not in (extra.get("topics") or []):
            continue
        out.append({"when": row.dttm, "action": row.event.removeprefix(AUDIT_PREFIX), "user": row.owner,
                    "outcome": extra.pop("outcome", None), "detail": extra.pop("detail", None), "target": extra})
    return out
