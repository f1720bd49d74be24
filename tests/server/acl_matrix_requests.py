"""The requests of the ACL matrix (tests/server/acl_matrix.py) and where their answers are read: for each API a
request that gets past authorization to a fixed answer (it names an unknown producer, member, group or log dir, or
validates only), the names it uses, and Kafka's error codes."""
from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage_engine.acl.model import Operation as Op, ResourceType as RT
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
class Env:
    broker_id: int



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
