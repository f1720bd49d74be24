"""The producer and transaction admin APIs, as Kafka's ``KafkaApis`` answers them on a one-broker cluster:

* **DescribeProducers** (61): each partition's active producers from the engine's producer state (read under the
  partition lock, so appends of other processes are seen): producer id and epoch, last sequence and timestamp,
  the coordinator epoch of its last marker and the first offset of its open transaction (-1: none). READ on the
  topic, else TOPIC_AUTHORIZATION_FAILED; an invalid name INVALID_TOPIC_EXCEPTION; a topic or partition that does
  not exist UNKNOWN_TOPIC_OR_PARTITION.
* **DescribeTransactions** (65): a transactional id's state from the transaction coordinator (producer id and
  epoch, state name, timeout, start time (-1 when no transaction is open), partitions). DESCRIBE on the
  transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the partitions of topics the principal may not
  DESCRIBE are left out; an id the coordinator does not know TRANSACTIONAL_ID_NOT_FOUND, an empty one
  INVALID_REQUEST (ListTransactions: :mod:`.list_transactions`).
* **WriteTxnMarkers** (27, v1): a COMMIT or ABORT marker per partition of each entry, through the engine's
  end-txn path (the producer's epoch and the coordinator epoch checked as Kafka checks them;
  ``__consumer_offsets`` partitions through the group coordinator, so offsets of the transaction count or are
  dropped). ``Admin.abortTransaction`` uses it for a hanging transaction. ALTER on the cluster, else
  CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED for every partition. A coordinator epoch of -1 (what admin
  clients send when they know none) is written as 0, the engine keeping only non-negative epochs: refused with
  TRANSACTION_COORDINATOR_FENCED when the partition already has a marker of the producer with a higher epoch, as
  Kafka refuses -1 then.
"""
from __future__ import annotations

import logging
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.errors import InvalidTopicError, PartitionNotFoundError
from storage_engine.layout import validate_topic
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode, error_code, message
from storage_engine.server.groups.coordinator import OFFSETS_TOPIC
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.responses.producers import (DescribeProducersResponse, DescribeTransactionsResponse,
                                                       PartitionResponse, ProducerState,
                                                       TopicData, TopicResponse, TransactionState, WritableTxnMarkerPartitionResult,
                                                       WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
                                                       WriteTxnMarkersResponse)
from storage_engine.server.transactions.state import DEAD

logger = logging.getLogger(__name__)


# -- DescribeProducers -----------------------------------------------------------------------------------------
def _active_producers(ctx: Ctx, topic: str, partition: int) -> PartitionResponse:
    """Kafka's ``UnifiedLog.activeProducers`` of one partition (blocking)."""
    log = ctx.broker.manager.get_log(topic, partition)
    if log is None:
        return {"partition_index": partition, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": None, "active_producers": ()}
    with log.locked():
        entries = sorted(log.producer_state.producers.values(), key=lambda e: e.producer_id)
        states: tuple[ProducerState, ...] = tuple(
            {"producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
             "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
             "current_txn_start_offset": -1 if e.current_txn_first_offset is None else e.current_txn_first_offset}
            for e in entries)
    return {"partition_index": partition, "error_code": ErrorCode.none, "error_message": None,
            "active_producers": states}


async def describe_producers(ctx: Ctx, body: Any) -> DescribeProducersResponse:
    catalog = await ctx.broker.call(ctx.broker.topics)
    topics: list[TopicResponse] = []
    for t in body.topics:
        error: tuple[ErrorCode, str | None] | None = None
        try:
            validate_topic(t.name)
        except InvalidTopicError as exc:
            error = (ErrorCode.invalid_topic_exception, message(exc))
        if error is None and not access.allowed(ctx, Operation.READ, ResourceType.TOPIC, t.name):
            error = (ErrorCode.topic_authorization_failed, None)
        if error is None and t.name not in catalog:
            error = (ErrorCode.unknown_topic_or_partition, None)
        parts: list[PartitionResponse] = []
        for p in t.partition_indexes:
            if error is not None:
                parts.append({"partition_index": int(p), "error_code": error[0], "error_message": error[1],
                              "active_producers": ()})
                continue
            try:
                parts.append(await ctx.broker.call(_active_producers, ctx, t.name, int(p)))
            except Exception as exc:   # noqa: BLE001 - a storage failure of this partition: its code, the rest go on
                logger.warning("DescribeProducers of %s-%d: %s", t.name, p, exc)
                parts.append({"partition_index": int(p), "error_code": error_code(exc), "error_message": message(exc),
                              "active_producers": ()})
        topics.append({"name": t.name, "partitions": tuple(parts)})
    return {"throttle_time": 0, "topics": tuple(topics)}


# -- DescribeTransactions ---------------------------------------------------------------------------------
async def describe_transactions(ctx: Ctx, body: Any) -> DescribeTransactionsResponse:
    coordinator = ctx.broker.transactions
    out: list[TransactionState] = []
    for txn_id in body.transactional_ids:
        # an error's entry has the schema's defaults (0, ""), as Kafka's; -1 start time only for an id with no
        # open transaction
        state: TransactionState = {"error_code": ErrorCode.none, "transactional_id": txn_id, "transaction_state": "",
                                   "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                                   "producer_epoch": 0, "topics": ()}
        t = coordinator.txns.get(txn_id)
        if not access.allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            state["error_code"] = ErrorCode.transactional_id_authorization_failed
        elif not txn_id:
            state["error_code"] = ErrorCode.invalid_request
        elif t is None or t.state == DEAD:
            state["error_code"] = ErrorCode.transactional_id_not_found
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(t.partitions):
                by_topic.setdefault(topic, []).append(p)
            # only the partitions of topics the principal may describe (Kafka's rule)
            topics: tuple[TopicData, ...] = tuple(
                {"topic": topic, "partitions": tuple(ps)} for topic, ps in by_topic.items()
                if access.allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic, log=False))
            state.update({"transaction_state": t.state.display, "transaction_timeout": t.timeout_ms,
                          "transaction_start_time": t.start_ms, "producer_id": t.producer_id,
                          "producer_epoch": t.epoch, "topics": topics})
        out.append(state)
    return {"throttle_time": 0, "transaction_states": tuple(out)}


# -- WriteTxnMarkers -------------------------------------------------------------------------------------------
def _write_marker(ctx: Ctx, topic: str, partition: int, producer_id: int, epoch: int, commit: bool,
                  coordinator_epoch: int) -> ErrorCode:
    """One marker through the engine (blocking); its error code."""
    log = ctx.broker.manager.get_log(topic, partition)
    if log is None:
        return ErrorCode.unknown_topic_or_partition
    if coordinator_epoch < 0:
        with log.locked():
            entry = log.producer_state.producers.get(producer_id)
            if entry is not None and entry.coordinator_epoch > coordinator_epoch:
                return ErrorCode.transaction_coordinator_fenced
            log.append_end_txn(producer_id, epoch, commit=commit, coordinator_epoch=0)
        return ErrorCode.none
    log.append_end_txn(producer_id, epoch, commit=commit, coordinator_epoch=coordinator_epoch)
    return ErrorCode.none


async def _marker(ctx: Ctx, topic: str, partition: int, producer_id: int, epoch: int, commit: bool,
                  coordinator_epoch: int) -> ErrorCode:
    broker = ctx.broker
    try:
        if topic == OFFSETS_TOPIC:
            if partition not in (await broker.call(broker.topics)).get(OFFSETS_TOPIC, []):
                return ErrorCode.unknown_topic_or_partition
            await broker.groups.write_marker(partition, producer_id, epoch, commit)
            return ErrorCode.none
        return await broker.call(_write_marker, ctx, topic, partition, producer_id, epoch, commit, coordinator_epoch)
    except PartitionNotFoundError:
        return ErrorCode.unknown_topic_or_partition
    except Exception as exc:   # noqa: BLE001 - the producer's or the storage's error, for this partition only
        code = error_code(exc)
        logger.info("WriteTxnMarkers: %s marker of producer %d (epoch %d) on %s-%d refused: %s (%s)",
                    "COMMIT" if commit else "ABORT", producer_id, epoch, topic, partition, code.name, exc)
        return code


async def write_txn_markers(ctx: Ctx, body: Any) -> WriteTxnMarkersResponse:
    allowed = access.allowed(ctx, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log=False) or \
        access.allowed(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    results: list[WritableTxnMarkerResult] = []
    for marker in body.markers:
        pid, epoch, commit = int(marker.producer_id), int(marker.producer_epoch), bool(marker.transaction_result)
        topics: list[WritableTxnMarkerTopicResult] = []
        for t in marker.topics:
            parts: list[WritableTxnMarkerPartitionResult] = []
            for p in t.partition_indexes:
                code = ErrorCode.cluster_authorization_failed if not allowed else await _marker(
                    ctx, t.name, int(p), pid, epoch, commit, int(marker.coordinator_epoch))
                parts.append({"partition_index": int(p), "error_code": code})
            topics.append({"name": t.name, "partitions": tuple(parts)})
        results.append({"producer_id": pid, "topics": tuple(topics)})
    if allowed:
        ctx.broker.purgatory.appended_all((t.name, int(p)) for m in body.markers for t in m.topics
                                          for p in t.partition_indexes)
    return {"markers": tuple(results)}
