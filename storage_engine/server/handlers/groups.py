"""FindCoordinator and the classic group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, answered by the broker's
:class:`~storage_engine.server.groups.coordinator.GroupCoordinator` (this node coordinates every group)."""
from __future__ import annotations

import datetime
from typing import Any, TypeVar

from storage_engine.acl.model import Operation, ResourceType
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode
from storage_engine.server.groups.coordinator import GroupCoordinator
from storage_engine.server.groups.offset_delete import delete_offsets
from storage_engine.server.groups.state import GroupState
from storage_engine.server.handlers.context import Ctx, has
from storage_engine.server.responses.groups import (DeletableGroupResult, DeleteGroupsResponse, DescribedGroup,
                                                    DescribeGroupsResponse, FindCoordinatorResponse, HeartbeatResponse,
                                                    JoinGroupResponse, LeaveGroupResponse, ListGroupsResponse,
                                                    MemberResponse, OffsetCommitResponse, OffsetCommitResponsePartition,
                                                    OffsetDeleteResponse, OffsetDeleteResponsePartition,
                                                    OffsetCommitResponseTopic, OffsetFetchResponse,
                                                    OffsetFetchResponseTopic, SyncGroupResponse)

GROUP, TRANSACTION = 0, 1
MS = datetime.timedelta(milliseconds=1)
ALL_TOPICS = None
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # Integer.MIN_VALUE: not asked for


def _coordinator(ctx: Ctx) -> GroupCoordinator:
    return ctx.broker.groups


async def find_coordinator(ctx: Ctx, body: Any) -> FindCoordinatorResponse:
    node_id = ctx.broker.node_id
    key_type = int(getattr(body, "key_type", GROUP))      # this node coordinates every group and transactional id
    error = ErrorCode.none if key_type in (GROUP, TRANSACTION) else ErrorCode.invalid_request
    message = None if error == ErrorCode.none else f"unknown coordinator key type {key_type}"
    if has(body, "coordinator_keys"):
        return {"throttle_time": 0, "coordinators": tuple(
            {"key": key, "node_id": node_id, "host": ctx.host, "port": ctx.port, "error_code": error,
             "error_message": message} for key in body.coordinator_keys)}
    return {"throttle_time": 0, "error_code": error, "error_message": message, "node_id": node_id, "host": ctx.host,
            "port": ctx.port}


T = TypeVar("T")


def _given(value: T | None, default: T) -> T:
    """A coordinator's value, or ``default`` where it gave none."""
    return default if value is None else value


async def join_group(ctx: Ctx, body: Any) -> JoinGroupResponse:
    rebalance_ms = body.rebalance_timeout // MS if has(body, "rebalance_timeout") \
        else body.session_timeout // MS
    result = await _coordinator(ctx).join(
        body.group_id, body.member_id, getattr(body, "group_instance_id", None), ctx.request.client_id,
        ctx.peer.rsplit(":", 1)[0], body.session_timeout // MS, rebalance_ms,
        body.protocol_type, [(p.name, bytes(p.metadata)) for p in body.protocols],
        require_known_member=ctx.version >= 4, skip_assignment_ok=ctx.version >= 9)
    name = result.get("protocol_name")
    return {"throttle_time": 0, "error_code": result["error_code"],
            "generation_id": _given(result.get("generation_id"), -1), "protocol_type": result.get("protocol_type"),
            "protocol_name": name if ctx.version >= 7 else name or "",    # nullable from v7
            "leader": _given(result.get("leader"), ""), "skip_assignment": result.get("skip_assignment", False),
            "member_id": _given(result.get("member_id"), body.member_id), "members": _given(result.get("members"), ())}


async def sync_group(ctx: Ctx, body: Any) -> SyncGroupResponse:
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    result = await _coordinator(ctx).sync(body.group_id, int(body.generation_id), body.member_id, assignments,
                                          getattr(body, "group_instance_id", None))
    return {"throttle_time": 0, "error_code": result["error_code"], "protocol_type": result.get("protocol_type"),
            "protocol_name": result.get("protocol_name"), "assignment": result.get("assignment", b"")}


async def heartbeat(ctx: Ctx, body: Any) -> HeartbeatResponse:
    code = _coordinator(ctx).heartbeat(body.group_id, int(body.generation_id), body.member_id,
                                       getattr(body, "group_instance_id", None))
    return {"throttle_time": 0, "error_code": code}


async def leave_group(ctx: Ctx, body: Any) -> LeaveGroupResponse:
    coordinator = _coordinator(ctx)
    if has(body, "members"):
        results: list[MemberResponse] = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                          "error_code": coordinator.leave(body.group_id, m.member_id,
                                                                          m.group_instance_id)}
                                         for m in body.members]
        return {"throttle_time": 0, "error_code": ErrorCode.none, "members": tuple(results)}
    return {"throttle_time": 0, "error_code": coordinator.leave(body.group_id, body.member_id, None)}


def offset_entries(topics: Any) -> list[tuple[str, int, int, int, str | None]]:
    """(topic, partition, offset, leader epoch, metadata) of each partition of an OffsetCommit or TxnOffsetCommit."""
    return [(t.name, int(p.partition_index), int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
             p.committed_metadata) for t in topics for p in t.partitions]


def offset_codes(entries: list[tuple[str, int, int, int, str | None]],
                 codes: list[ErrorCode]) -> tuple[OffsetCommitResponseTopic, ...]:
    """The topics of an OffsetCommit or TxnOffsetCommit response (the two have the same entries): one error code
    per partition, by topic."""
    topics: dict[str, list[OffsetCommitResponsePartition]] = {}
    for (topic, p, *_), code in zip(entries, codes):
        topics.setdefault(topic, []).append({"partition_index": p, "error_code": code})
    return tuple({"name": t, "partitions": tuple(ps)} for t, ps in topics.items())


async def offset_commit(ctx: Ctx, body: Any) -> OffsetCommitResponse:
    entries = offset_entries(body.topics)
    codes = await _coordinator(ctx).commit(body.group_id, int(body.generation_id_or_member_epoch), body.member_id,
                                           entries, getattr(body, "group_instance_id", None))
    return {"throttle_time": 0, "topics": offset_codes(entries, codes)}


def _fetched(coordinator: GroupCoordinator, group_id: str, topics: Any,
             stable: bool) -> tuple[OffsetFetchResponseTopic, ...]:
    """``stable`` (require_stable, v7+): a partition with an offset commit in an open transaction answers
    UNSTABLE_OFFSET_COMMIT, and the client asks again (KIP-447)."""
    wanted = None if topics is None else [(t.name, [int(p) for p in t.partition_indexes]) for t in topics]
    out: list[OffsetFetchResponseTopic] = []
    for topic, parts in coordinator.fetch_offsets(group_id, wanted):
        out.append({"name": topic, "partitions": tuple(
            {"partition_index": p, "committed_offset": v.offset if v else -1,
             "committed_leader_epoch": v.leader_epoch if v else -1, "metadata": v.metadata if v else "",
             "error_code": ErrorCode.unstable_offset_commit if stable and coordinator.pending_offset(group_id, topic, p)
             else ErrorCode.none} for p, v in parts)})
    return tuple(out)


async def offset_fetch(ctx: Ctx, body: Any) -> OffsetFetchResponse:
    coordinator = _coordinator(ctx)
    stable = bool(getattr(body, "require_stable", False))
    if has(body, "groups"):
        return {"throttle_time": 0, "groups": tuple(
            {"group_id": g.group_id, "topics": _fetched(coordinator, g.group_id, g.topics, stable),
             "error_code": ErrorCode.none} for g in body.groups)}
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "topics": _fetched(coordinator, body.group_id, body.topics, stable)}


async def list_groups(ctx: Ctx, body: Any) -> ListGroupsResponse:
    states = {s.lower() for s in (getattr(body, "states_filter", ()) or ())}
    types = {t.lower() for t in (getattr(body, "types_filter", ()) or ())}     # v5+: every group here is classic
    groups = [g for g in _coordinator(ctx).groups.values() if g.state != GroupState.DEAD
              and (not states or g.state.value.lower() in states) and (not types or "classic" in types)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": tuple(
        {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value,
         "group_type": "classic"} for g in groups)}


async def describe_groups(ctx: Ctx, body: Any) -> DescribeGroupsResponse:
    coordinator = _coordinator(ctx)
    out: list[DescribedGroup] = []
    for group_id in body.groups:
        g = coordinator.group(group_id)
        if g is None:
            out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": GroupState.DEAD.value,
                        "protocol_type": "", "protocol_data": "", "members": (),
                        "authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS})
            continue
        out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": g.state.value,
                    "protocol_type": g.protocol_type or "", "protocol_data": g.protocol or "",
                    "authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS, "members": tuple(
                        {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                         "client_host": m.client_host, "member_metadata": m.metadata(g.protocol),
                         "member_assignment": m.assignment} for m in g.members.values())})
    return {"throttle_time": 0, "groups": tuple(out)}


async def delete_groups(ctx: Ctx, body: Any) -> DeleteGroupsResponse:
    coordinator = _coordinator(ctx)
    results: list[DeletableGroupResult] = []
    for group_id in body.groups_names:
        code = await coordinator.delete(group_id) if group_id in coordinator.groups else ErrorCode.group_id_not_found
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": tuple(results)}


async def offset_delete(ctx: Ctx, body: Any) -> OffsetDeleteResponse:
    """Kafka's ``handleOffsetDeleteRequest``: DELETE on the group (else GROUP_AUTHORIZATION_FAILED for the whole
    request), READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions), a topic or partition that
    does not exist UNKNOWN_TOPIC_OR_PARTITION; the rest go to the coordinator."""
    if not access.allowed(ctx, Operation.DELETE, ResourceType.GROUP, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "topics": ()}
    catalog = await ctx.broker.call(ctx.broker.topics)
    codes: dict[tuple[str, int], ErrorCode] = {}
    valid: list[tuple[str, int]] = []
    for t in body.topics:
        topic_code = None
        if not access.allowed(ctx, Operation.READ, ResourceType.TOPIC, t.name):
            topic_code = ErrorCode.topic_authorization_failed
        elif t.name not in catalog:
            topic_code = ErrorCode.unknown_topic_or_partition
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            if topic_code is not None:
                codes[tp] = topic_code
            elif tp[1] not in catalog[t.name]:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                valid.append(tp)
    error, deleted = await delete_offsets(_coordinator(ctx), body.group_id, valid)
    if error != ErrorCode.none:
        return {"throttle_time": 0, "error_code": error, "topics": ()}
    codes.update(deleted)
    by_topic: dict[str, list[OffsetDeleteResponsePartition]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "error_code": code})
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "topics": tuple({"name": t, "partitions": tuple(ps)} for t, ps in by_topic.items())}
