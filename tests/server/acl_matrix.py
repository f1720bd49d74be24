"""The ACL matrix's table: for every API the broker serves, each resource it authorizes (Kafka's operation on
Kafka's resource), the error code Kafka answers when that check fails, the request that exercises it, and where in
the response the code is read (requests and readers in ``acl_matrix_requests.py``). Read from Kafka's
``KafkaApis.scala``, ``ControllerApis.scala`` for what a Kafka 4 broker forwards, and ``AclApis.scala`` (each row
names its handler), and ``StandardAuthorizerData`` / ``Authorizer.authorizeByResourceType`` for the authorizer's
rules, independently of the broker's handlers.

A row's ``subject`` is the one check the matrix varies; ``grants`` are the other checks the request needs, always
granted to the test principal; ``blocks`` close another route to the same answer (an ACL for someone else, so
"no ACL found" does not apply there). ``ok`` is what the broker answers once every check passes (the request is
chosen so that this is a fixed code, e.g. UNKNOWN_TOPIC_OR_PARTITION for deleting a topic that does not exist:
Kafka authorizes before it looks)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation as Op, ResourceType as RT
from tests.server.acl_matrix_requests import (
    CLUSTER_AUTH, Env, GONE_TOPIC, GROUP, GROUP_AUTH, GROUP_ID_NOT_FOUND, GROUP_RESOURCE, HIDDEN, INVALID_REQUEST,
    LISTED, LOG_DIR_NOT_FOUND, MEMBER_ID_REQUIRED, NEW_TOPIC, NO_GROUP, OFFSETS_GROUP, PID_MAPPING, TOPIC,
    TOPIC_AUTH, TXN, TXN_AUTH, UNKNOWN_MEMBER, UNKNOWN_TOPIC, add_offsets_to_txn, add_partitions_code,
    add_partitions_to_txn, alter_configs, alter_reassignments, alter_replica_log_dirs, coordinator_v4, create_acls,
    create_partitions, create_topics, create_topics_with_configs, delete_acls, delete_groups, delete_records,
    delete_topics, describe_acls, describe_configs, describe_groups, describe_log_dirs, describe_producers,
    describe_quorum, describe_topic_partitions, describe_transactions, elect_leaders, end_txn, epoch_code, fetch,
    fetch_code, filter_results0, find_coordinator, find_coordinator_v4, follower_fetch, group0, groups_listed,
    heartbeat, incremental_alter_configs, init_producer_id, join_group, leave_group, list_groups, list_offsets,
    list_reassignments, list_transactions, markers_code, metadata, metadata_code, metadata_listed, offset_commit,
    offset_delete, offset_fetch, offset_fetch_code, offset_for_leader_epoch, produce, produce_code,
    replica_dirs_code, responses0, results0, sync_group, top, topic0, topic_config_code, topics_partition,
    txn_offset_commit, txn_state0_raw, txns_listed, write_txn_markers)

@dataclass(frozen=True)
class Need:
    rtype: RT
    name: str
    op: Op



@dataclass(frozen=True)
class Row:
    id: str
    kafka: str                                    # KafkaApis handler whose rule this is
    key: int
    version: int
    subject: Need
    denied: int | str                             # Kafka's answer when the subject check fails
    ok: int | str                                 # the answer when every check passes
    build: Callable[[Env], dict[str, Any]]        # the request's fields (wire.build_request)
    code: Callable[[Any], int | str]              # the answer, read from the response
    grants: tuple[Need, ...] = ()
    blocks: tuple[Need, ...] = ()
    # InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster OR authorizeByResourceType(WRITE,
    # TOPIC), whose first step authorizes a topic named "hardcode": with allow.everyone.if.no.acl.found=true and no
    # ACL on that name, it is allowed whatever the cluster's ACLs say.
    everyone_allows: bool = False
    # The answer when the subject's operation is refused but DESCRIBE on it is allowed (KRaft's DeleteTopics looks a
    # describable name up first: a topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION before DELETE is asked).
    if_describable: int | None = None
    # Other operations on the subject's resource that allow the request as well (WriteTxnMarkers: ALTER, else
    # CLUSTER_ACTION): an ALLOW of ALL to everyone grants them, a DENY of the subject's operation alone does not
    # take them away.
    also_allowed_by: tuple[Op, ...] = ()
    # The answer read from the response frame's bytes, for responses kio cannot decode (a timestamp of -1)
    raw: Callable[[bytes], int | str] | None = None
    applies: Callable[[Any], bool] = field(default=lambda _served: True)


def on_topic(op: Op, name: str = TOPIC) -> Need:
    return Need(RT.TOPIC, name, op)


def on_group(op: Op, name: str = GROUP) -> Need:
    return Need(RT.GROUP, name, op)


def on_cluster(op: Op) -> Need:
    return Need(RT.CLUSTER, CLUSTER_NAME, op)


def on_txn(op: Op) -> Need:
    return Need(RT.TRANSACTIONAL_ID, TXN, op)


# -- the rows -------------------------------------------------------------------------------------------------------

R, W, D = Op.READ, Op.WRITE, Op.DESCRIBE

ROWS: list[Row] = [
    Row("produce/topic", "handleProduceRequest", 0, 9, on_topic(W), TOPIC_AUTH, 0, produce(None), produce_code),
    Row("produce/transactional-id", "handleProduceRequest", 0, 9, on_txn(W), TXN_AUTH, PID_MAPPING, produce(TXN),
        produce_code, grants=(on_topic(W),)),
    Row("fetch/topic", "handleFetchRequest", 1, 12, on_topic(R), TOPIC_AUTH, 0, fetch, fetch_code),
    Row("fetch-follower/cluster", "handleFetchRequest (a follower's fetch: CLUSTER_ACTION)", 1, 12,
        on_cluster(Op.CLUSTER_ACTION), TOPIC_AUTH, 0, follower_fetch, fetch_code),
    Row("list-offsets/topic", "handleListOffsetRequestV1AndAbove", 2, 7, on_topic(D), TOPIC_AUTH, 0, list_offsets,
        topics_partition),
    Row("metadata/topic", "handleTopicMetadataRequest", 3, 12, on_topic(D), TOPIC_AUTH, 0, metadata([TOPIC]),
        metadata_code),
    Row("metadata-all/topic", "handleTopicMetadataRequest (all topics: unauthorized ones left out)", 3, 12, on_topic(D),
        HIDDEN, LISTED, metadata(None), metadata_listed),
    Row("offset-commit/group", "handleOffsetCommitRequest", 8, 8, on_group(R), GROUP_AUTH, 0, offset_commit,
        topics_partition, grants=(on_topic(R),)),
    Row("offset-commit/topic", "handleOffsetCommitRequest", 8, 8, on_topic(R), TOPIC_AUTH, 0, offset_commit,
        topics_partition, grants=(on_group(R),)),
    Row("offset-fetch/group", "handleOffsetFetchRequestFromCoordinator", 9, 7, on_group(D), GROUP_AUTH, 0, offset_fetch,
        offset_fetch_code, grants=(on_topic(D),)),
    Row("offset-fetch/topic", "fetchOffsetsForGroup", 9, 7, on_topic(D), TOPIC_AUTH, 0, offset_fetch, offset_fetch_code,
        grants=(on_group(D),)),
    Row("find-coordinator/group", "getCoordinator", 10, 3, on_group(D), GROUP_AUTH, 0, find_coordinator(0), top),
    Row("find-coordinator/transactional-id", "getCoordinator", 10, 3, on_txn(D), TXN_AUTH, 0, find_coordinator(1),
        top),
    Row("find-coordinator-v4/group", "handleFindCoordinatorRequestV4AndAbove", 10, 4, on_group(D), GROUP_AUTH, 0,
        find_coordinator_v4(0), coordinator_v4),
    Row("find-coordinator-v4/transactional-id", "handleFindCoordinatorRequestV4AndAbove", 10, 4, on_txn(D), TXN_AUTH,
        0, find_coordinator_v4(1), coordinator_v4),
    Row("join-group/group", "handleJoinGroupRequest", 11, 5, on_group(R), GROUP_AUTH, MEMBER_ID_REQUIRED, join_group, top),
    Row("heartbeat/group", "handleHeartbeatRequest", 12, 4, on_group(R), GROUP_AUTH, UNKNOWN_MEMBER, heartbeat, top),
    Row("leave-group/group", "handleLeaveGroupRequest", 13, 4, on_group(R), GROUP_AUTH, 0, leave_group, top),
    Row("sync-group/group", "handleSyncGroupRequest", 14, 5, on_group(R), GROUP_AUTH, UNKNOWN_MEMBER, sync_group, top),
    Row("describe-groups/group", "handleDescribeGroupsRequest", 15, 5, on_group(D), GROUP_AUTH, 0, describe_groups,
        group0),
    Row("list-groups/cluster", "handleListGroupsRequest (DESCRIBE cluster, else each group's DESCRIBE)", 16, 4,
        on_cluster(D), HIDDEN, LISTED, list_groups, groups_listed, blocks=(on_group(D),)),
    Row("list-groups/group", "handleListGroupsRequest (DESCRIBE cluster, else each group's DESCRIBE)", 16, 4,
        on_group(D), HIDDEN, LISTED, list_groups, groups_listed, blocks=(on_cluster(D),)),
    Row("create-topics/cluster", "handleCreateTopicsRequest (CREATE cluster, else CREATE topic)", 19, 7,
        on_cluster(Op.CREATE), TOPIC_AUTH, 0, create_topics, lambda r: int(r.topics[0].error_code),
        blocks=(on_topic(Op.CREATE, NEW_TOPIC),)),
    Row("create-topics/topic", "handleCreateTopicsRequest (CREATE cluster, else CREATE topic)", 19, 7,
        on_topic(Op.CREATE, NEW_TOPIC), TOPIC_AUTH, 0, create_topics, lambda r: int(r.topics[0].error_code),
        blocks=(on_cluster(Op.CREATE),)),
    Row("create-topics-configs/topic", "handleCreateTopicsRequest (the configs in the answer need "
        "DESCRIBE_CONFIGS on the topic)", 19, 7, on_topic(Op.DESCRIBE_CONFIGS, NEW_TOPIC), TOPIC_AUTH, 0,
        create_topics_with_configs, topic_config_code, grants=(on_cluster(Op.CREATE),)),
    Row("delete-topics/topic", "ControllerApis.deleteTopics (DELETE on the cluster; else a name not DESCRIBE-able "
        "is refused, else unknown, else DELETE)", 20, 6, on_topic(Op.DELETE, GONE_TOPIC), TOPIC_AUTH, UNKNOWN_TOPIC,
        delete_topics, lambda r: int(r.responses[0].error_code), blocks=(on_cluster(Op.DELETE),),
        if_describable=UNKNOWN_TOPIC),
    Row("delete-topics/cluster", "ControllerApis.handleDeleteTopics (DELETE on the cluster allows every topic)", 20,
        6, on_cluster(Op.DELETE), TOPIC_AUTH, UNKNOWN_TOPIC, delete_topics, lambda r: int(r.responses[0].error_code),
        blocks=(on_topic(Op.DELETE, GONE_TOPIC),)),
    Row("delete-records/topic", "handleDeleteRecordsRequest", 21, 2, on_topic(Op.DELETE), TOPIC_AUTH, 0, delete_records,
        topics_partition),
    Row("init-producer-id/transactional-id", "handleInitProducerIdRequest", 22, 4, on_txn(W), TXN_AUTH, 0,
        init_producer_id(TXN), top),
    Row("init-producer-id/cluster", "handleInitProducerIdRequest (IDEMPOTENT_WRITE cluster, else WRITE on any "
        "topic by resource type)", 22, 4, on_cluster(Op.IDEMPOTENT_WRITE), CLUSTER_AUTH, 0, init_producer_id(None), top,
        everyone_allows=True),
    Row("add-partitions-to-txn/transactional-id", "handleAddPartitionsToTxnRequest (v3 and below)", 24, 3, on_txn(W),
        TXN_AUTH, PID_MAPPING, add_partitions_to_txn, add_partitions_code, grants=(on_topic(W),)),
    Row("add-partitions-to-txn/topic", "handleAddPartitionsToTxnRequest (v3 and below)", 24, 3, on_topic(W), TOPIC_AUTH,
        PID_MAPPING, add_partitions_to_txn, add_partitions_code, grants=(on_txn(W),)),
    Row("add-offsets-to-txn/transactional-id", "handleAddOffsetsToTxnRequest", 25, 3, on_txn(W), TXN_AUTH, PID_MAPPING,
        add_offsets_to_txn, top, grants=(on_group(R),)),
    Row("add-offsets-to-txn/group", "handleAddOffsetsToTxnRequest", 25, 3, on_group(R), GROUP_AUTH, PID_MAPPING,
        add_offsets_to_txn, top, grants=(on_txn(W),)),
    Row("end-txn/transactional-id", "handleEndTxnRequest", 26, 3, on_txn(W), TXN_AUTH, PID_MAPPING, end_txn, top),
    Row("txn-offset-commit/transactional-id", "handleTxnOffsetCommitRequest", 28, 3, on_txn(W), TXN_AUTH, PID_MAPPING,
        txn_offset_commit, topics_partition, grants=(on_group(R), on_topic(R))),
    Row("txn-offset-commit/group", "handleTxnOffsetCommitRequest", 28, 3, on_group(R), GROUP_AUTH, PID_MAPPING,
        txn_offset_commit, topics_partition, grants=(on_txn(W), on_topic(R))),
    Row("txn-offset-commit/topic", "handleTxnOffsetCommitRequest", 28, 3, on_topic(R), TOPIC_AUTH, PID_MAPPING,
        txn_offset_commit, topics_partition, grants=(on_txn(W), on_group(R))),
    Row("describe-acls/cluster", "AclApis.handleDescribeAcls", 29, 3, on_cluster(D), CLUSTER_AUTH, 0, describe_acls, top),
    Row("create-acls/cluster", "AclApis.handleCreateAcls", 30, 3, on_cluster(Op.ALTER), CLUSTER_AUTH, 0, create_acls,
        results0),
    Row("delete-acls/cluster", "AclApis.handleDeleteAcls", 31, 3, on_cluster(Op.ALTER), CLUSTER_AUTH, 0, delete_acls,
        filter_results0),
    Row("describe-configs/topic", "ConfigHelper.describeConfigs", 32, 4, on_topic(Op.DESCRIBE_CONFIGS), TOPIC_AUTH, 0,
        describe_configs(False), results0),
    Row("describe-configs/cluster", "ConfigHelper.describeConfigs (broker resource)", 32, 4,
        on_cluster(Op.DESCRIBE_CONFIGS), CLUSTER_AUTH, 0, describe_configs(True), results0),
    # group configs (KIP-848) are not kept by this broker: INVALID_REQUEST once authorized
    Row("describe-configs/group", "ConfigHelper.describeConfigs (group resource: DESCRIBE_CONFIGS on the group)",
        32, 4, on_group(Op.DESCRIBE_CONFIGS), GROUP_AUTH, INVALID_REQUEST, describe_configs(GROUP_RESOURCE), results0),
    Row("alter-replica-log-dirs/cluster", "handleAlterReplicaLogDirsRequest", 34, 2, on_cluster(Op.ALTER), CLUSTER_AUTH,
        LOG_DIR_NOT_FOUND, alter_replica_log_dirs, replica_dirs_code),
    Row("describe-log-dirs/cluster", "handleDescribeLogDirsRequest", 35, 4, on_cluster(D), CLUSTER_AUTH, 0,
        describe_log_dirs, top),
    Row("create-partitions/topic", "handleCreatePartitionsRequest", 37, 3, on_topic(Op.ALTER), TOPIC_AUTH, 0,
        create_partitions, results0),
    Row("delete-groups/group", "handleDeleteGroupsRequest", 42, 2, on_group(Op.DELETE, NO_GROUP), GROUP_AUTH, GROUP_ID_NOT_FOUND,
        delete_groups, results0),
    Row("incremental-alter-configs/topic", "handleIncrementalAlterConfigsRequest", 44, 1, on_topic(Op.ALTER_CONFIGS),
        TOPIC_AUTH, 0, incremental_alter_configs(False), responses0),
    Row("incremental-alter-configs/group", "handleIncrementalAlterConfigsRequest (group resource)", 44, 1,
        on_group(Op.ALTER_CONFIGS), GROUP_AUTH, INVALID_REQUEST, incremental_alter_configs(GROUP_RESOURCE), responses0),
    Row("incremental-alter-configs/cluster", "handleIncrementalAlterConfigsRequest (broker resource)", 44, 1,
        on_cluster(Op.ALTER_CONFIGS), CLUSTER_AUTH, INVALID_REQUEST, incremental_alter_configs(True), responses0),
]

# The cluster, producer and transaction admin APIs, each with Kafka's rule.
ROWS += [
    Row("offset-for-leader-epoch/topic", "handleOffsetForLeaderEpochRequest (CLUSTER_ACTION, else DESCRIBE topic)",
        23, 4, on_topic(D), TOPIC_AUTH, 0, offset_for_leader_epoch, epoch_code,
        blocks=(on_cluster(Op.CLUSTER_ACTION),)),
    Row("offset-for-leader-epoch/cluster", "handleOffsetForLeaderEpochRequest (CLUSTER_ACTION, else DESCRIBE "
        "topic)", 23, 4, on_cluster(Op.CLUSTER_ACTION), TOPIC_AUTH, 0, offset_for_leader_epoch, epoch_code,
        blocks=(on_topic(D),)),
    Row("write-txn-markers/cluster", "handleWriteTxnMarkersRequest (ALTER, else CLUSTER_ACTION on the cluster)", 27,
        1, on_cluster(Op.CLUSTER_ACTION), CLUSTER_AUTH, 0, write_txn_markers, markers_code,
        also_allowed_by=(Op.ALTER,)),
    Row("alter-configs/topic", "handleAlterConfigsRequest", 33, 2, on_topic(Op.ALTER_CONFIGS), TOPIC_AUTH, 0,
        alter_configs, responses0),
    Row("elect-leaders/cluster", "handleElectLeaders", 43, 2, on_cluster(Op.ALTER), CLUSTER_AUTH, 0, elect_leaders,
        top),
    Row("alter-partition-reassignments/cluster", "handleAlterPartitionReassignmentsRequest", 45, 0,
        on_cluster(Op.ALTER), CLUSTER_AUTH, 0, alter_reassignments, top),
    Row("list-partition-reassignments/cluster", "handleListPartitionReassignmentsRequest", 46, 0, on_cluster(D),
        CLUSTER_AUTH, 0, list_reassignments, top),
    Row("offset-delete/group", "handleOffsetDeleteRequest", 47, 0, on_group(Op.DELETE, OFFSETS_GROUP), GROUP_AUTH, 0,
        offset_delete, top, grants=(on_topic(R),)),
    Row("offset-delete/topic", "handleOffsetDeleteRequest", 47, 0, on_topic(R), TOPIC_AUTH, 0, offset_delete,
        epoch_code, grants=(on_group(Op.DELETE, OFFSETS_GROUP),)),
    Row("describe-quorum/cluster", "ControllerApis.handleDescribeQuorum", 55, 1, on_cluster(D), CLUSTER_AUTH, 0,
        describe_quorum, top),
    Row("describe-producers/topic", "handleDescribeProducersRequest", 61, 0, on_topic(R), TOPIC_AUTH, 0,
        describe_producers, epoch_code),
    Row("describe-transactions/transactional-id", "handleDescribeTransactionsRequest", 65, 0, on_txn(D), TXN_AUTH,
        0, describe_transactions, top, raw=txn_state0_raw),
    Row("list-transactions/transactional-id", "handleListTransactionsRequest (left out without DESCRIBE)", 66, 1,
        on_txn(D), HIDDEN, LISTED, list_transactions, txns_listed),
    Row("describe-topic-partitions/topic", "DescribeTopicPartitionsRequestHandler", 75, 0, on_topic(D), TOPIC_AUTH,
        0, describe_topic_partitions, topic0),
]


# -- an unauthorized client must not learn whether a topic exists ---------------------------------------------------

def _renamed(value: Any, old: str, new: str) -> Any:
    if value == old:
        return new
    if isinstance(value, dict):
        return {k: _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return value


def on_unknown_topic(row: Row) -> Row:
    """``row`` naming a topic that does not exist: Kafka checks the topic's operation before it looks the topic up,
    so the refusal is the same as for one that exists, and once allowed the answer is UNKNOWN_TOPIC_OR_PARTITION."""
    build = row.build
    return dataclasses.replace(row, id=row.id.replace("/topic", "/unknown-topic"),
                               subject=on_topic(row.subject.op, GONE_TOPIC), ok=UNKNOWN_TOPIC,
                               build=lambda env: _renamed(build(env), TOPIC, GONE_TOPIC))


ROWS += [on_unknown_topic(r) for r in ROWS if r.id in (
    "produce/topic", "fetch/topic", "list-offsets/topic", "delete-records/topic", "describe-configs/topic",
    "create-partitions/topic", "incremental-alter-configs/topic")]
