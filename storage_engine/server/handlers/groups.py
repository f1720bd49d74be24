"""FindCoordinator and the classic group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, answered by the broker's
:class:`~storage_engine.server.groups.coordinator.GroupCoordinator` (this node coordinates every group).

Authorization as Kafka's ``KafkaApis``: FindCoordinator needs DESCRIBE on the group or transactional id
(GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED and no node); JoinGroup, SyncGroup, Heartbeat,
LeaveGroup and OffsetCommit READ on the group (GROUP_AUTHORIZATION_FAILED for the whole request); OffsetCommit then
READ on each topic (TOPIC_AUTHORIZATION_FAILED), and a topic or partition that does not exist answers
UNKNOWN_TOPIC_OR_PARTITION only after that; OffsetFetch DESCRIBE on the group, then on each topic named (refused:
TOPIC_AUTHORIZATION_FAILED) or, for all of the group's topics, only those the principal may describe;
DescribeGroups DESCRIBE on each group (and its authorized operations when asked, v3+); ListGroups every group with
DESCRIBE on the cluster, else the groups the principal may describe; DeleteGroups DELETE on each group."""
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
from storage_engine.server.responses.groups import (Coordinator, DeletableGroupResult, DeleteGroupsResponse,
                                                    DescribedGroup, DescribeGroupsResponse, FindCoordinatorResponse,
                                                    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
                                                    ListGroupsResponse, MemberResponse, OffsetCommitResponse,
                                                    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
                                                    OffsetDeleteResponse, OffsetDeleteResponsePartition,
                                                    OffsetFetchResponse, OffsetFetchResponseTopic, SyncGroupResponse)

GROUP, TRANSACTION = 0, 1
MS = datetime.timedelta(milliseconds=1)
ALL_TOPICS = None
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # Integer.MIN_VALUE: not asked for


def _coordinator(ctx: Ctx) -> GroupCoordinator:
    return ctx.broker.groups


_KEY_RESOURCE = {GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
                 TRANSACTION: (ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed,
                               "Transactional Id authorization failed.")}


def _coordinator_refused(ctx: Ctx, key_type: int, key: str) -> tuple[ErrorCode, str] | None:
    """Kafka's ``getCoordinator``: DESCRIBE on the group or transactional id named by ``key``."""
    resource = _KEY_RESOURCE.get(key_type)
    if resource is None or access.allowed(ctx, Operation.DESCRIBE, resource[0], key):
        return None
    return resource[1], resource[2]


async def find_coordinator(ctx: Ctx, body: Any) -> FindCoordinatorResponse:
    node_id = ctx.broker.node_id
    key_type = int(getattr(body, "key_type", GROUP))      # this node coordinates every group and transactional id
    error = ErrorCode.none if key_type in (GROUP, TRANSACTION) else ErrorCode.invalid_request
    message = None if error == ErrorCode.none else f"unknown coordinator key type {key_type}"
    if has(body, "coordinator_keys"):
        coordinators: list[Coordinator] = []
        for key in body.coordinator_keys:
            refused = _coordinator_refused(ctx, key_type, key)
            if refused is not None:       # Kafka's Node.noNode(), no message from v4
                coordinators.append({"key": key, "node_id": -1, "host": "", "port": -1, "error_code": refused[0],
                                     "error_message": None})
            else:
                coordinators.append({"key": key, "node_id": node_id, "host": ctx.host, "port": ctx.port,
                                     "error_code": error, "error_message": message})
        return {"throttle_time": 0, "coordinators": tuple(coordinators)}
    refused = _coordinator_refused(ctx, key_type, body.key)
    if refused is not None:
        return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "node_id": -1, "host": "",
                "port": -1}
    return {"throttle_time": 0, "error_code": error, "error_message": message, "node_id": node_id, "host": ctx.host,
            "port": ctx.port}


def _group_refused(ctx: Ctx, group_id: str, operation: Operation = Operation.READ) -> bool:
    return not access.allowed(ctx, operation, ResourceType.GROUP, group_id)


T = TypeVar("T")


def _given(value: T | None, default: T) -> T:
    """A coordinator's value, or ``default`` where it gave none."""
    return default if value is None else value


async def join_group(ctx: Ctx, body: Any) -> JoinGroupResponse:
    if _group_refused(ctx, body.group_id):       # JoinGroupRequest.getErrorResponse
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
                "protocol_type": None, "protocol_name": None if ctx.version >= 7 else "", "leader": "",
                "skip_assignment": False, "member_id": "", "members": ()}
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
    if _group_refused(ctx, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "protocol_type": None,
                "protocol_name": None, "assignment": b""}
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    result = await _coordinator(ctx).sync(body.group_id, int(body.generation_id), body.member_id, assignments,
                                          getattr(body, "group_instance_id", None))
    return {"throttle_time": 0, "error_code": result["error_code"], "protocol_type": result.get("protocol_type"),
            "protocol_name": result.get("protocol_name"), "assignment": result.get("assignment", b"")}


async def heartbeat(ctx: Ctx, body: Any) -> HeartbeatResponse:
    if _group_refused(ctx, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    code = _coordinator(ctx).heartbeat(body.group_id, int(body.generation_id), body.member_id,
                                       getattr(body, "group_instance_id", None))
    return {"throttle_time": 0, "error_code": code}


async def leave_group(ctx: Ctx, body: Any) -> LeaveGroupResponse:
    if _group_refused(ctx, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": ()}
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


async def precommit_codes(ctx: Ctx, entries: list[tuple[str, int, int, int, str | None]]
                          ) -> list[ErrorCode | None]:
    """Kafka's checks before an OffsetCommit or TxnOffsetCommit reaches the coordinator, per entry: READ on the
    topic (TOPIC_AUTHORIZATION_FAILED), then the topic and partition exist (UNKNOWN_TOPIC_OR_PARTITION); None for
    the entries that go on."""
    readable = access.allowed_names(ctx, Operation.READ, ResourceType.TOPIC, (e[0] for e in entries))
    catalog = await ctx.broker.call(ctx.broker.topics) if readable else {}
    out: list[ErrorCode | None] = []
    for topic, p, *_ in entries:
        if topic not in readable:
            out.append(ErrorCode.topic_authorization_failed)
        elif p not in catalog.get(topic, ()):
            out.append(ErrorCode.unknown_topic_or_partition)
        else:
            out.append(None)
    return out


def merged(early: list[ErrorCode | None], later: list[ErrorCode]) -> list[ErrorCode]:
    """The codes of :func:`precommit_codes` with the coordinator's for the entries that went on, in order."""
    rest = iter(later)
    return [code if code is not None else next(rest) for code in early]


async def offset_commit(ctx: Ctx, body: Any) -> OffsetCommitResponse:
    entries = offset_entries(body.topics)
    if _group_refused(ctx, body.group_id):       # OffsetCommitRequest.getErrorResponse: every partition
        return {"throttle_time": 0,
                "topics": offset_codes(entries, [ErrorCode.group_authorization_failed] * len(entries))}
    early = await precommit_codes(ctx, entries)
    going = [e for e, code in zip(entries, early) if code is None]
    codes: list[ErrorCode] = []
    if going:
        codes = await _coordinator(ctx).commit(body.group_id, int(body.generation_id_or_member_epoch),
                                               body.member_id, going, getattr(body, "group_instance_id", None))
    return {"throttle_time": 0, "topics": offset_codes(entries, merged(early, codes))}


def _fetched(ctx: Ctx, group_id: str, topics: Any, stable: bool) -> tuple[OffsetFetchResponseTopic, ...]:
    """``stable`` (require_stable, v7+): a partition with an offset commit in an open transaction answers
    UNSTABLE_OFFSET_COMMIT, and the client asks again (KIP-447). Topics the principal may not describe answer
    TOPIC_AUTHORIZATION_FAILED when named, and are left out of all of the group's topics (Kafka's
    ``fetchOffsetsForGroup`` / ``fetchAllOffsetsForGroup``)."""
    coordinator = _coordinator(ctx)
    wanted = None if topics is None else [(t.name, [int(p) for p in t.partition_indexes]) for t in topics]
    refused: list[OffsetFetchResponseTopic] = []
    if wanted is not None:
        describable = access.allowed_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in wanted))
        refused = [{"name": t, "partitions": tuple(
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": ErrorCode.topic_authorization_failed} for p in parts)}
            for t, parts in wanted if t not in describable]
        wanted = [(t, parts) for t, parts in wanted if t in describable]
    found = coordinator.fetch_offsets(group_id, wanted)
    if wanted is None:
        describable = access.allowed_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in found))
        found = [(t, parts) for t, parts in found if t in describable]
    out: list[OffsetFetchResponseTopic] = []
    for topic, parts in found:
        out.append({"name": topic, "partitions": tuple(
            {"partition_index": p, "committed_offset": v.offset if v else -1,
             "committed_leader_epoch": v.leader_epoch if v else -1, "metadata": v.metadata if v else "",
             "error_code": ErrorCode.unstable_offset_commit if stable and coordinator.pending_offset(group_id, topic, p)
             else ErrorCode.none} for p, v in parts)})
    return tuple(out + refused)


async def offset_fetch(ctx: Ctx, body: Any) -> OffsetFetchResponse:
    stable = bool(getattr(body, "require_stable", False))
    if has(body, "groups"):
        return {"throttle_time": 0, "groups": tuple(
            {"group_id": g.group_id, "topics": (), "error_code": ErrorCode.group_authorization_failed}
            if _group_refused(ctx, g.group_id, Operation.DESCRIBE) else
            {"group_id": g.group_id, "topics": _fetched(ctx, g.group_id, g.topics, stable),
             "error_code": ErrorCode.none} for g in body.groups)}
    if _group_refused(ctx, body.group_id, Operation.DESCRIBE):
        # Kafka's v1 has no top-level error code and the refused group no topics: the answer is empty
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "topics": ()}
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "topics": _fetched(ctx, body.group_id, body.topics, stable)}


async def list_groups(ctx: Ctx, body: Any) -> ListGroupsResponse:
    states = {s.lower() for s in (getattr(body, "states_filter", ()) or ())}
    types = {t.lower() for t in (getattr(body, "types_filter", ()) or ())}     # v5+: every group here is classic
    groups = [g for g in _coordinator(ctx).groups.values() if g.state != GroupState.DEAD
              and (not states or g.state.value.lower() in states) and (not types or "classic" in types)]
    if not access.allowed_cluster(ctx, Operation.DESCRIBE, log=False):     # a filter: Kafka logs no refusal
        groups = [g for g in groups if access.allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g.group_id,
                                                      log=False)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": tuple(
        {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value,
         "group_type": "classic"} for g in groups)}


async def describe_groups(ctx: Ctx, body: Any) -> DescribeGroupsResponse:
    coordinator = _coordinator(ctx)
    asked = ctx.version >= 3 and bool(getattr(body, "include_authorized_operations", False))
    out: list[DescribedGroup] = []
    for group_id in body.groups:
        if _group_refused(ctx, group_id, Operation.DESCRIBE):     # DescribeGroupsResponse.groupError
            out.append({"error_code": ErrorCode.group_authorization_failed, "group_id": group_id, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": (),
                        "authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS})
            continue
        # asked for: the group's bit field (also for a group that does not exist: Kafka answers it Dead, no error)
        ops = access.authorized_operations(ctx, ResourceType.GROUP, group_id) if asked \
            else UNKNOWN_AUTHORIZED_OPERATIONS
        g = coordinator.group(group_id)
        if g is None:
            out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": GroupState.DEAD.value,
                        "protocol_type": "", "protocol_data": "", "members": (), "authorized_operations": ops})
            continue
        out.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": g.state.value,
                    "protocol_type": g.protocol_type or "", "protocol_data": g.protocol or "",
                    "authorized_operations": ops, "members": tuple(
                        {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                         "client_host": m.client_host, "member_metadata": m.metadata(g.protocol),
                         "member_assignment": m.assignment} for m in g.members.values())})
    return {"throttle_time": 0, "groups": tuple(out)}


async def delete_groups(ctx: Ctx, body: Any) -> DeleteGroupsResponse:
    coordinator = _coordinator(ctx)
    results: list[DeletableGroupResult] = []
    for group_id in body.groups_names:
        if _group_refused(ctx, group_id, Operation.DELETE):
            results.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed})
            continue
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
