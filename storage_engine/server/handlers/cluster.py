"""The cluster APIs of a one-broker Kafka 4.x (a combined broker and controller that is the cluster's only node):
DescribeCluster, DescribeQuorum, ElectLeaders, Alter/ListPartitionReassignments and OffsetForLeaderEpoch.

This node is the only replica, the leader and the whole ISR of every partition, so:
- ElectLeaders: every existing partition already has its preferred leader (and a leader at all), so each named
  one is ELECTION_NOT_NEEDED, and an election over all partitions (null ``topic_partitions``) answers none, as
  Kafka's controller leaves out the partitions that need no election.
- AlterPartitionReassignments: a target of exactly this node is the current assignment, a no-op (NONE); any other
  broker is INVALID_REPLICA_ASSIGNMENT "no such broker is registered", a cancel is NO_REASSIGNMENT_IN_PROGRESS;
  ListPartitionReassignments is therefore always empty.
- DescribeQuorum: the metadata quorum (``__cluster_metadata-0``) is this node alone, leader and only voter, no
  observers. This store keeps no metadata log, so its epoch, high watermark and end offset are 0.
- OffsetForLeaderEpoch (KIP-320's truncation check, used by librdkafka and the Java consumer): answered from the
  partition's ``leader-epoch-checkpoint`` as Kafka's ``LeaderEpochFileCache.endOffsetFor``; a client's
  ``current_leader_epoch`` is checked against the leader epoch Metadata gives it (FENCED_LEADER_EPOCH below,
  UNKNOWN_LEADER_EPOCH above), as Kafka checks it against the partition's.

Authorization is Kafka's: ALTER on the cluster for ElectLeaders and AlterPartitionReassignments, DESCRIBE on the
cluster for ListPartitionReassignments and DescribeQuorum (a refusal is the whole request's
CLUSTER_AUTHORIZATION_FAILED, as the controller's ``authorizeClusterOperation`` throws), CLUSTER_ACTION on the
cluster or else DESCRIBE per topic for OffsetForLeaderEpoch; DescribeCluster answers everyone and computes the
cluster's authorized operations only when asked and DESCRIBE is allowed (0 otherwise), as Kafka's AuthHelper."""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.errors import PartitionNotFoundError
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode, error_code
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.handlers.metadata import LEADER_EPOCH
from storage_engine.server.identity import directory_id
from storage_engine.server.responses.cluster import (AlterPartitionReassignmentsResponse, DescribeClusterResponse,
                                                     DescribeQuorumResponse, ElectLeadersResponse, EpochEndOffset,
                                                     ListPartitionReassignmentsResponse,
                                                     OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
                                                     PartitionResult, ReassignablePartitionResponse,
                                                     ReassignableTopicResponse, ReplicaState,
                                                     ReplicaElectionResult)

logger = logging.getLogger(__name__)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # Integer.MIN_VALUE: not asked for
PREFERRED, UNCLEAN = 0, 1
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
METADATA_TOPIC = "__cluster_metadata"
NO_EPOCH, NO_OFFSET = -1, -1


def _cluster_allowed(ctx: Ctx, operation: Operation) -> bool:
    return access.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


# -- DescribeCluster ----------------------------------------------------------------------------------------------
async def describe_cluster(ctx: Ctx, body: Any) -> DescribeClusterResponse:
    broker = ctx.broker
    endpoint = int(getattr(body, "endpoint_type", BROKER_ENDPOINT))
    out: DescribeClusterResponse = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                    "endpoint_type": BROKER_ENDPOINT, "cluster_id": broker.cluster_id,
                                    "controller_id": -1, "brokers": (),
                                    "cluster_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS}
    if endpoint not in (BROKER_ENDPOINT, CONTROLLER_ENDPOINT):
        out.update({"error_code": ErrorCode.invalid_request if ctx.version == 0
                    else ErrorCode.unsupported_endpoint_type,
                    "error_message": f"Unsupported endpoint type {endpoint}"})
        return out
    if endpoint != BROKER_ENDPOINT:
        # Kafka answers a broker listener asked for controllers this way (the controllers have their own listener).
        out.update({"error_code": ErrorCode.invalid_request if ctx.version == 0
                    else ErrorCode.mismatched_endpoint_type,
                    "error_message": "The request was sent to an endpoint of type BROKER, but we wanted an "
                                     "endpoint of type CONTROLLER"})
        return out
    if body.include_cluster_authorized_operations:
        out["cluster_authorized_operations"] = (
            access.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if _cluster_allowed(ctx, Operation.DESCRIBE) else 0)
    rack = broker.config.server.get("broker.rack")
    out.update({"controller_id": broker.node_id,
                "brokers": ({"broker_id": broker.node_id, "host": ctx.host, "port": ctx.port,
                             "rack": rack or None, "is_fenced": False},)})
    return out


# -- DescribeQuorum -----------------------------------------------------------------------------------------------
def _directory_id(ctx: Ctx) -> uuid.UUID:
    """The ``directory.id`` of the first log dir's ``meta.properties`` (the metadata log's dir in Kafka)."""
    try:
        dirs = ctx.broker.manager.online_dirs()
        found = directory_id(dirs[0]) if dirs else None
    except Exception:   # noqa: BLE001 - unreadable: as missing
        found = None
    return found or uuid.UUID(int=0)     # Kafka's unassigned directory id


async def describe_quorum(ctx: Ctx, body: Any) -> DescribeQuorumResponse:
    broker = ctx.broker
    out: DescribeQuorumResponse = {"error_code": ErrorCode.none, "error_message": None, "topics": (), "nodes": ()}
    if not _cluster_allowed(ctx, Operation.DESCRIBE):
        out.update({"error_code": ErrorCode.cluster_authorization_failed,
                    "error_message": "Cluster authorization failed."})
        return out
    valid = (len(body.topics) == 1 and body.topics[0].topic_name == METADATA_TOPIC
             and len(body.topics[0].partitions) == 1 and body.topics[0].partitions[0].partition_index == 0)
    if not valid:
        # KafkaRaftClient's answer to anything but exactly __cluster_metadata-0: per-partition UNKNOWN_TOPIC_OR_PARTITION
        out["topics"] = tuple({"topic_name": t.topic_name, "partitions": tuple(
            {"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
             "error_message": "This server does not host this topic-partition.", "leader_id": -1,
             "leader_epoch": -1, "high_watermark": -1, "current_voters": (), "observers": ()}
            for p in t.partitions)} for t in body.topics)
        return out
    node = broker.node_id
    directory = await broker.call(_directory_id, ctx)
    now = int(time.time() * 1000)
    voter: ReplicaState = {"replica_id": node, "replica_directory_id": directory, "log_end_offset": 0,
             "last_fetch_timestamp": -1, "last_caught_up_timestamp": now}   # the leader: -1 and now, per the schema
    out["topics"] = ({"topic_name": METADATA_TOPIC, "partitions": (
        {"partition_index": 0, "error_code": ErrorCode.none, "error_message": None, "leader_id": node,
         "leader_epoch": 0, "high_watermark": 0, "current_voters": (voter,), "observers": ()},)},)
    out["nodes"] = ({"node_id": node, "listeners": tuple(
        {"name": protocol, "host": host, "port": port} for protocol, host, port in broker.listeners)
        or ({"name": "PLAINTEXT", "host": ctx.host, "port": ctx.port},)},)
    return out


# -- ElectLeaders -------------------------------------------------------------------------------------------------
def _elect(catalog: dict[str, list[int]], topic: str, p: int) -> PartitionResult:
    if topic not in catalog:
        return {"partition_id": p, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"No such topic as {topic}"}
    if p not in catalog[topic]:
        return {"partition_id": p, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"No such partition as {topic}-{p}"}
    # This node is every partition's only replica: the preferred leader and a leader (no unclean election either).
    return {"partition_id": p, "error_code": ErrorCode.election_not_needed,
            "error_message": "Leader election not needed for topic partition."}


async def elect_leaders(ctx: Ctx, body: Any) -> ElectLeadersResponse:
    election = int(getattr(body, "election_type", PREFERRED))
    requested = body.topic_partitions
    error: tuple[ErrorCode, str] | None = None
    if not _cluster_allowed(ctx, Operation.ALTER):
        error = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    elif election not in (PREFERRED, UNCLEAN):
        error = (ErrorCode.invalid_request, f"Unknown election type {election}")
    if error is not None:       # ElectLeadersRequest.getErrorResponse: the error at the top and on each partition
        return {"throttle_time": 0, "error_code": error[0], "replica_election_results": tuple(
            {"topic": t.topic, "partition_result": tuple({"partition_id": p, "error_code": error[0],
                                                          "error_message": error[1]} for p in t.partitions)}
            for t in requested or ())}
    catalog = await ctx.broker.call(ctx.broker.topics, fresh=True)
    results: list[ReplicaElectionResult] = []
    if requested is None:
        # An election over every partition lists only the partitions that needed one: here none (each topic with an
        # empty list, as Kafka's controller answers).
        results = [{"topic": t, "partition_result": ()} for t in sorted(catalog)]
    else:
        for t in requested:
            results.append({"topic": t.topic, "partition_result": tuple(_elect(catalog, t.topic, int(p))
                                                                         for p in t.partitions)})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": tuple(results)}


# -- Partition reassignments --------------------------------------------------------------------------------------
def _reassign(ctx: Ctx, catalog: dict[str, list[int]], topic: str, p: int,
              replicas: Any) -> ReassignablePartitionResponse:
    def answer(code: ErrorCode, text: str | None) -> ReassignablePartitionResponse:
        return {"partition_index": p, "error_code": code, "error_message": text}
    if topic not in catalog:
        return answer(ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}.")
    if p not in catalog[topic]:
        return answer(ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}:{p}.")
    if replicas is None:
        return answer(ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress.")
    check = replica_assignment_error(ctx, [int(r) for r in replicas])
    if check is not None:
        return answer(ErrorCode.invalid_replica_assignment, check)
    return answer(ErrorCode.none, None)     # the target is this node: the current assignment, nothing to move


def replica_assignment_error(ctx: Ctx, replicas: list[int], replication_factor: int | None = None) -> str | None:
    """Kafka's ``validateManualPartitionAssignment`` against a cluster of this one node: None when ``replicas`` is
    this node alone, else the controller's message (INVALID_REPLICA_ASSIGNMENT)."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != ctx.broker.node_id:
            return (f"The manual partition assignment includes broker {broker_id}, but no such broker is "
                    "registered.")
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {previous} more than once."
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        return (f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
                f"not consistent with previous partitions, which have {replication_factor} replica(s).")
    return None


async def alter_partition_reassignments(ctx: Ctx, body: Any) -> AlterPartitionReassignmentsResponse:
    if not _cluster_allowed(ctx, Operation.ALTER):
        text = "Cluster authorization failed."
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": text,
                "responses": tuple({"name": t.name, "partitions": tuple(
                    {"partition_index": p.partition_index, "error_code": ErrorCode.cluster_authorization_failed,
                     "error_message": text} for p in t.partitions)} for t in body.topics)}
    catalog = await ctx.broker.call(ctx.broker.topics, fresh=True)
    responses: tuple[ReassignableTopicResponse, ...] = tuple({"name": t.name, "partitions": tuple(
        _reassign(ctx, catalog, t.name, int(p.partition_index), p.replicas) for p in t.partitions)}
        for t in body.topics)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": responses}


async def list_partition_reassignments(ctx: Ctx, body: Any) -> ListPartitionReassignmentsResponse:
    if not _cluster_allowed(ctx, Operation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "Cluster authorization failed.",
                "topics": tuple({"name": t.name, "partitions": tuple({"partition_index": p}
                                                                     for p in t.partition_indexes)}
                                for t in body.topics or ())}
    # No reassignment is ever in progress; Kafka's controller lists only reassigning partitions and skips
    # unknown topics, so the answer is empty whatever is asked.
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": ()}


# -- OffsetForLeaderEpoch -----------------------------------------------------------------------------------------
def _end_offset(ctx: Ctx, topic: str, p: Any) -> EpochEndOffset:
    entry: EpochEndOffset = {"partition": int(p.partition), "error_code": ErrorCode.none,
                             "leader_epoch": NO_EPOCH, "end_offset": NO_OFFSET}
    try:
        log = ctx.broker.manager.get_log(topic, int(p.partition))
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{p.partition} does not exist")
        log.refresh()
        current = int(getattr(p, "current_leader_epoch", NO_EPOCH))
        leader_epoch = LEADER_EPOCH    # the epoch Metadata gives clients, which they send back as current
        if current != NO_EPOCH and current < leader_epoch:
            entry["error_code"] = ErrorCode.fenced_leader_epoch
            return entry
        if current != NO_EPOCH and current > leader_epoch:
            entry["error_code"] = ErrorCode.unknown_leader_epoch
            return entry
        epochs = log.leader_epochs.sync(log.view.generation)
        epoch, offset = epochs.end_offset_for(int(p.leader_epoch), log.log_end_offset)
        if offset != NO_OFFSET:        # UnifiedLog.endOffsetForEpoch: None (the -1s) when the offset is unknown
            entry["leader_epoch"], entry["end_offset"] = epoch, offset
    except Exception as exc:   # noqa: BLE001 - the partition's error code
        entry["error_code"] = error_code(exc)
    return entry


async def offset_for_leader_epoch(ctx: Ctx, body: Any) -> OffsetForLeaderEpochResponse:
    # KIP-320: consumers ask too, so DESCRIBE on the topic is enough when CLUSTER_ACTION (followers) is not allowed.
    cluster_action = access.allowed(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log=False)
    results: list[OffsetForLeaderTopicResult] = []
    for t in body.topics:
        if not cluster_action and not access.allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.topic):
            results.append({"topic": t.topic, "partitions": tuple(
                {"partition": int(p.partition), "error_code": ErrorCode.topic_authorization_failed,
                 "leader_epoch": NO_EPOCH, "end_offset": NO_OFFSET} for p in t.partitions)})
            continue
        parts = [await ctx.broker.call(_end_offset, ctx, t.topic, p) for p in t.partitions]
        results.append({"topic": t.topic, "partitions": tuple(parts)})
    return {"throttle_time": 0, "topics": tuple(results)}

