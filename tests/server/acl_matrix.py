"""The ACL matrix's table: for every API the broker serves, each resource it authorizes (Kafka's operation on
Kafka's resource), the error code Kafka answers when that check fails, the request that exercises it, and where in
the response the code is read. Read from Kafka's ``KafkaApis.scala`` (each row names its handler) and
``StandardAuthorizerData`` / ``Authorizer.authorizeByResourceType`` for the authorizer's rules, independently of
the broker's handlers.

A row's ``subject`` is the one check the matrix varies; ``grants`` are the other checks the request needs, always
granted to the test principal; ``blocks`` close another route to the same answer (an ACL for someone else, so
"no ACL found" does not apply there). ``ok`` is what the broker answers once every check passes (the request is
chosen so that this is a fixed code, e.g. UNKNOWN_TOPIC_OR_PARTITION for deleting a topic that does not exist:
Kafka authorizes before it looks)."""
from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation as Op, ResourceType as RT
from tests.server import wire

TOPIC = "matrix-topic"            # exists (1 partition); every topic row's subject
NEW_TOPIC = "matrix-new"          # never created (CreateTopics validate-only)
GONE_TOPIC = "matrix-gone"        # never created (DeleteTopics after authorization: UNKNOWN_TOPIC_OR_PARTITION)
GROUP = "matrix-group"            # has committed offsets (the admin commits at setup)
NO_GROUP = "matrix-nogroup"       # never has members or offsets (DeleteGroups)
OFFSETS_GROUP = "matrix-offsets"  # has committed offsets and never a member (OffsetDelete)
TXN = "matrix-txn"
UNKNOWN_PID = 987654321           # no producer has it: transactional calls get past authorization and fail after

# Kafka's error codes (org.apache.kafka.common.protocol.Errors)
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
# what the broker answers once authorized (the requests name unknown producers, members, groups, dirs)
PID_MAPPING, UNKNOWN_MEMBER, MEMBER_ID_REQUIRED, GROUP_ID_NOT_FOUND = 49, 25, 79, 69
LOG_DIR_NOT_FOUND, INVALID_REQUEST, UNKNOWN_TOPIC = 57, 42, 3
LISTED, HIDDEN = "listed", "hidden"   # the answer of rows whose refusal filters instead of failing


@dataclass(frozen=True)
class Need:
    rtype: RT
    name: str
    op: Op


@dataclass(frozen=True)
class Env:
    broker_id: int


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


SEC = datetime.timedelta(seconds=5)


# -- requests -------------------------------------------------------------------------------------------------------

def produce(txn: str | None) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        records = (wire.producer_batch([b"m"], UNKNOWN_PID, 0, 0) if txn else wire.batch([b"m"]))
        return {"transactional_id": txn, "acks": -1, "timeout": SEC,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}
    return build


def fetch(env: Env, replica_id: int = -1) -> dict[str, Any]:
    return {"replica_id": replica_id, "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}


def follower_fetch(env: Env) -> dict[str, Any]:
    return fetch(env, replica_id=env.broker_id)


def list_offsets(env: Env) -> dict[str, Any]:
    return {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                      "timestamp": -1}]}]}


def metadata(topics: list[str] | None) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        return {"topics": None if topics is None else [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics],
                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    return build


def offset_commit(env: Env) -> dict[str, Any]:
    return {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def offset_commit_to(group: str) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        return {**offset_commit(env), "group_id": group}
    return build


def offset_fetch(env: Env) -> dict[str, Any]:
    return {"group_id": GROUP, "require_stable": False,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}]}


def find_coordinator(key_type: int) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        return {"key": TXN if key_type else GROUP, "key_type": key_type}
    return build


def find_coordinator_v4(key_type: int) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        return {"key_type": key_type, "coordinator_keys": [TXN if key_type else GROUP]}
    return build


def join_group(env: Env) -> dict[str, Any]:
    return {"group_id": GROUP, "session_timeout": datetime.timedelta(seconds=10),
            "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": "", "group_instance_id": None,
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}


def heartbeat(env: Env) -> dict[str, Any]:
    return {"group_id": GROUP, "generation_id": 1, "member_id": "nobody", "group_instance_id": None}


def leave_group(env: Env) -> dict[str, Any]:
    return {"group_id": GROUP, "members": [{"member_id": "nobody", "group_instance_id": None}]}


def sync_group(env: Env) -> dict[str, Any]:
    return {"group_id": GROUP, "generation_id": 1, "member_id": "nobody", "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range", "assignments": []}


def describe_groups(env: Env) -> dict[str, Any]:
    return {"groups": [GROUP], "include_authorized_operations": False}


def list_groups(env: Env) -> dict[str, Any]:
    return {"states_filter": []}


def delete_groups(env: Env) -> dict[str, Any]:
    return {"groups_names": [NO_GROUP]}


def create_topics(env: Env) -> dict[str, Any]:
    return {"topics": [{"name": NEW_TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout": SEC, "validate_only": True}


def delete_topics(env: Env) -> dict[str, Any]:
    return {"topics": [{"name": GONE_TOPIC, "topic_id": uuid.UUID(int=0)}], "timeout": SEC}


def delete_records(env: Env) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout": SEC}


def init_producer_id(txn: str | None) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        return {"transactional_id": txn, "transaction_timeout": datetime.timedelta(seconds=60), "producer_id": -1,
                "producer_epoch": -1}
    return build


def add_partitions_to_txn(env: Env) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": UNKNOWN_PID,
            "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}


def add_offsets_to_txn(env: Env) -> dict[str, Any]:
    return {"transactional_id": TXN, "producer_id": UNKNOWN_PID, "producer_epoch": 0, "group_id": GROUP}


def end_txn(env: Env) -> dict[str, Any]:
    return {"transactional_id": TXN, "producer_id": UNKNOWN_PID, "producer_epoch": 0, "committed": False}


def txn_offset_commit(env: Env) -> dict[str, Any]:
    return {"transactional_id": TXN, "group_id": GROUP, "producer_id": UNKNOWN_PID, "producer_epoch": 0,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


BROKER_RESOURCE, GROUP_RESOURCE = "broker", "group"


def _config_resource(env: Env, kind: str | bool) -> tuple[int, str]:
    """ConfigResource.Type and name: TOPIC 2, BROKER 4, GROUP 32."""
    if kind is True or kind == BROKER_RESOURCE:
        return 4, str(env.broker_id)
    if kind == GROUP_RESOURCE:
        return 32, GROUP
    return 2, TOPIC


def describe_configs(broker: bool | str) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        resource = _config_resource(env, broker)
        return {"resources": [{"resource_type": resource[0], "resource_name": resource[1],
                               "configuration_keys": None}], "include_synonyms": False,
                "include_documentation": False}
    return build


def incremental_alter_configs(broker: bool | str) -> Callable[[Env], dict[str, Any]]:
    def build(env: Env) -> dict[str, Any]:
        resource = _config_resource(env, broker)
        name, value = ("consumer.session.timeout.ms", "45000") if broker == GROUP_RESOURCE else ("retention.ms",
                                                                                                  "86400000")
        return {"resources": [{"resource_type": resource[0], "resource_name": resource[1],
                               "configs": [{"name": name, "config_operation": 0, "value": value}]}],
                "validate_only": True}
    return build


def alter_replica_log_dirs(env: Env) -> dict[str, Any]:
    return {"dirs": [{"path": "/nonexistent/matrix-dir", "topics": [{"name": TOPIC, "partitions": [0]}]}]}


def describe_log_dirs(env: Env) -> dict[str, Any]:
    return {"topics": None}


def create_partitions(env: Env) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC, "count": 2, "assignments": None}], "timeout": SEC, "validate_only": True}


ACL_FILTER = {"resource_type_filter": int(RT.TOPIC), "resource_name_filter": "matrix-nothing",
              "pattern_type_filter": 3, "principal_filter": None, "host_filter": None, "operation": int(Op.ANY),
              "permission_type": 1}


def describe_acls(env: Env) -> dict[str, Any]:
    return dict(ACL_FILTER)


def create_acls(env: Env) -> dict[str, Any]:
    return {"creations": [{"resource_type": int(RT.TOPIC), "resource_name": "matrix-created",
                           "resource_pattern_type": 3, "principal": "User:nobody", "host": "*",
                           "operation": int(Op.READ), "permission_type": 3}]}


def delete_acls(env: Env) -> dict[str, Any]:
    return {"filters": [dict(ACL_FILTER)]}


def create_topics_with_configs(env: Env) -> dict[str, Any]:
    return {**create_topics(env), "topics": [{"name": NEW_TOPIC, "num_partitions": 1, "replication_factor": 1,
                                              "assignments": [], "configs": [{"name": "retention.ms",
                                                                              "value": "86400000"}]}]}


def offset_for_leader_epoch(env: Env) -> dict[str, Any]:
    return {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                        "leader_epoch": 0}]}]}


def write_txn_markers(env: Env) -> dict[str, Any]:
    return {"markers": [{"producer_id": UNKNOWN_PID, "producer_epoch": 0, "transaction_result": False,
                         "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 0}]}


def alter_configs(env: Env) -> dict[str, Any]:
    return {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                           "configs": [{"name": "retention.ms", "value": "86400000"}]}], "validate_only": True}


def elect_leaders(env: Env) -> dict[str, Any]:
    return {"election_type": 0, "topic_partitions": [{"topic": TOPIC, "partitions": [0]}], "timeout": SEC}


def alter_reassignments(env: Env) -> dict[str, Any]:
    return {"timeout": SEC, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0,
                                                                       "replicas": [env.broker_id]}]}]}


def list_reassignments(env: Env) -> dict[str, Any]:
    return {"timeout": SEC, "topics": None}


def offset_delete(env: Env) -> dict[str, Any]:
    return {"group_id": OFFSETS_GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]}


def describe_quorum(env: Env) -> dict[str, Any]:
    return {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}


def describe_producers(env: Env) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}


def describe_transactions(env: Env) -> dict[str, Any]:
    return {"transactional_ids": [TXN]}


def list_transactions(env: Env) -> dict[str, Any]:
    return {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}


def describe_topic_partitions(env: Env) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC}], "response_partition_limit": 100, "cursor": None}


# -- answers --------------------------------------------------------------------------------------------------------

def top(r: Any) -> int:
    return int(r.error_code)


def produce_code(r: Any) -> int:
    return int(r.responses[0].partition_responses[0].error_code)


def fetch_code(r: Any) -> int:
    return int(r.responses[0].partitions[0].error_code)


def topics_partition(r: Any) -> int:
    return int(r.topics[0].partitions[0].error_code)


def metadata_code(r: Any) -> int:
    return int(r.topics[0].error_code)


def metadata_listed(r: Any) -> str:
    return LISTED if any(t.name == TOPIC for t in r.topics) else HIDDEN


def offset_fetch_code(r: Any) -> int:
    """The group's refusal is the top-level error; a topic's is its partition's error (KafkaApis
    fetchOffsetsForGroup)."""
    if int(r.error_code):
        return int(r.error_code)
    return int(r.topics[0].partitions[0].error_code)


def coordinator_v4(r: Any) -> int:
    return int(r.coordinators[0].error_code)


def group0(r: Any) -> int:
    return int(r.groups[0].error_code)


def groups_listed(r: Any) -> str:
    if int(r.error_code):
        return int(r.error_code)  # type: ignore[return-value]
    return LISTED if any(g.group_id == GROUP for g in r.groups) else HIDDEN


def results0(r: Any) -> int:
    return int(r.results[0].error_code)


def responses0(r: Any) -> int:
    return int(r.responses[0].error_code)


def add_partitions_code(r: Any) -> int:
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def replica_dirs_code(r: Any) -> int:
    return int(r.results[0].partitions[0].error_code)


def topic_config_code(r: Any) -> int:
    return int(r.topics[0].topic_config_error_code)


def epoch_code(r: Any) -> int:
    return int(r.topics[0].partitions[0].error_code)


def markers_code(r: Any) -> int:
    return int(r.markers[0].topics[0].partitions[0].error_code)


def txn_state0_raw(frame: bytes) -> int:
    """DescribeTransactions v0 (flexible): correlation id, header tags (0), throttle time, the states' compact
    array length (one byte for one entry), then the first state's error code. kio refuses the frame whole when a
    transaction's start time is -1 (no transaction open), which Kafka sends."""
    assert frame[4] == 0 and frame[9] == 2, frame[:12].hex()     # no header tags; one state
    return int.from_bytes(frame[10:12], "big", signed=True)


def txns_listed(r: Any) -> int | str:
    if int(r.error_code):
        return int(r.error_code)
    return LISTED if any(t.transactional_id == TXN for t in r.transaction_states) else HIDDEN


def topic0(r: Any) -> int:
    return int(r.topics[0].error_code)


def filter_results0(r: Any) -> int:
    return int(r.filter_results[0].error_code)


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

# The APIs added by issue 40 (served once their handlers land), each with Kafka's rule.
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
