"""The APIs this broker serves, each with the version range it implements (within kio's), and ApiVersions,
which advertises exactly these. Every other key or version closes the connection (Kafka's rule).

A handler answers with its response's values in one shape for every version, error codes as ``ErrorCode``
members (:mod:`storage_engine.server.errors`), typed by its API's ``TypedDict`` in
:mod:`storage_engine.server.responses` (generated from kio's schemas over the versions below), so mypy checks every
key and value; :func:`storage_engine.server.protocol.build` then checks them against the version asked for (a key no
version has, or a required field missing, is a handler bug that closes the connection with one line naming it) and
builds kio's response class of that version."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_engine.server.errors import ErrorCode
from storage_engine.server.protocol import Encoded
from storage_engine.server.handlers import (acls, admin, alter_configs, cluster, configs, fetch, groups,
                                            list_transactions, metadata, produce, producers, scram,
                                            topic_partitions, transactions)
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.responses.versions import ApiVersionsResponse

# A TypedDict of responses/, or the body already encoded (Metadata: handlers/metadata_wire.py)
Handler = Callable[[Ctx, Any], Awaitable[Mapping[str, object] | Encoded | None]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler | None       # None: handled by the connection itself (SASL)


SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18


async def api_versions(ctx: Ctx, body: Any) -> ApiVersionsResponse:
    if body is None:     # a version above ours: v0 format, UNSUPPORTED_VERSION, only our ApiVersions range
        api = APIS[API_VERSIONS]
        return {"error_code": ErrorCode.unsupported_version,
                "api_keys": ({"api_key": API_VERSIONS, "min_version": api.min_version,
                                                 "max_version": api.max_version},), "throttle_time": 0}
    name = getattr(body, "client_software_name", None)
    version = getattr(body, "client_software_version", None)
    import re
    valid = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
    if name is not None and not (valid.fullmatch(name) and valid.fullmatch(version or "")):
        return {"error_code": ErrorCode.invalid_request, "api_keys": (), "throttle_time": 0}
    return {"error_code": ErrorCode.none, "throttle_time": 0,
            "api_keys": tuple({"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                              for a in sorted(APIS.values(), key=lambda a: a.key))}


APIS: dict[int, Api] = {a.key: a for a in (
    Api(0, "Produce", 3, 11, produce.produce),
    Api(1, "Fetch", 4, 16, fetch.fetch),
    Api(2, "ListOffsets", 1, 9, fetch.list_offsets),
    Api(3, "Metadata", 0, 12, metadata.metadata),
    Api(8, "OffsetCommit", 2, 9, groups.offset_commit),
    Api(9, "OffsetFetch", 1, 9, groups.offset_fetch),
    Api(10, "FindCoordinator", 0, 6, groups.find_coordinator),
    Api(11, "JoinGroup", 0, 9, groups.join_group),
    Api(12, "Heartbeat", 0, 4, groups.heartbeat),
    Api(13, "LeaveGroup", 0, 5, groups.leave_group),
    Api(14, "SyncGroup", 0, 5, groups.sync_group),
    Api(15, "DescribeGroups", 0, 5, groups.describe_groups),
    Api(16, "ListGroups", 0, 5, groups.list_groups),
    Api(SASL_HANDSHAKE, "SaslHandshake", 0, 1, None),
    Api(API_VERSIONS, "ApiVersions", 0, 4, api_versions),
    Api(19, "CreateTopics", 2, 7, admin.create_topics),
    Api(20, "DeleteTopics", 1, 6, admin.delete_topics),
    Api(21, "DeleteRecords", 0, 2, admin.delete_records),
    Api(22, "InitProducerId", 0, 5, produce.init_producer_id),
    Api(24, "AddPartitionsToTxn", 0, 3, transactions.add_partitions_to_txn),
    Api(25, "AddOffsetsToTxn", 0, 4, transactions.add_offsets_to_txn),
    Api(26, "EndTxn", 0, 4, transactions.end_txn),
    Api(28, "TxnOffsetCommit", 0, 4, transactions.txn_offset_commit),
    Api(29, "DescribeAcls", 1, 3, acls.describe_acls),
    Api(30, "CreateAcls", 1, 3, acls.create_acls),
    Api(31, "DeleteAcls", 1, 3, acls.delete_acls),
    Api(32, "DescribeConfigs", 1, 4, configs.describe_configs),
    Api(34, "AlterReplicaLogDirs", 1, 2, configs.alter_replica_log_dirs),
    Api(35, "DescribeLogDirs", 1, 4, configs.describe_log_dirs),
    Api(SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2, None),
    Api(37, "CreatePartitions", 0, 3, admin.create_partitions),
    Api(42, "DeleteGroups", 0, 2, groups.delete_groups),
    Api(44, "IncrementalAlterConfigs", 0, 1, configs.incremental_alter_configs),
    # The cluster and topic APIs of a one-broker Kafka 4.x (Kafka's versions, within kio's).
    Api(23, "OffsetForLeaderEpoch", 2, 4, cluster.offset_for_leader_epoch),
    Api(33, "AlterConfigs", 0, 2, alter_configs.alter_configs),
    Api(43, "ElectLeaders", 0, 2, cluster.elect_leaders),
    Api(45, "AlterPartitionReassignments", 0, 0, cluster.alter_partition_reassignments),
    Api(46, "ListPartitionReassignments", 0, 0, cluster.list_partition_reassignments),
    Api(55, "DescribeQuorum", 0, 2, cluster.describe_quorum),
    Api(60, "DescribeCluster", 0, 2, cluster.describe_cluster),
    Api(74, "ListConfigResources", 0, 1, topic_partitions.list_config_resources),
    Api(75, "DescribeTopicPartitions", 0, 0, topic_partitions.describe_topic_partitions),
    # producer, transaction and group admin APIs
    Api(27, "WriteTxnMarkers", 1, 1, producers.write_txn_markers),
    Api(47, "OffsetDelete", 0, 0, groups.offset_delete),
    Api(50, "DescribeUserScramCredentials", 0, 0, scram.describe_user_scram_credentials),
    Api(61, "DescribeProducers", 0, 0, producers.describe_producers),
    Api(65, "DescribeTransactions", 0, 0, producers.describe_transactions),
    Api(66, "ListTransactions", 0, 1, list_transactions.list_transactions),
)}

SUPPORTED: dict[int, tuple[int, int]] = {a.key: (a.min_version, a.max_version) for a in APIS.values()}
