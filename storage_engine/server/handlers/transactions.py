"""The transactional APIs: InitProducerId with a ``transactional.id``, AddPartitionsToTxn (v0-3, the clients'
versions; v4+ is the brokers' verification form), AddOffsetsToTxn, EndTxn, answered by the broker's
:class:`~storage_engine.server.transactions.coordinator.TxnCoordinator`, and TxnOffsetCommit, which the group
coordinator writes as the producer's transactional batch once the transaction admits it.

Authorization as Kafka's ``KafkaApis``: each needs WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED: for every partition of AddPartitionsToTxn and TxnOffsetCommit); then
AddPartitionsToTxn WRITE on each topic (an internal topic is never authorized; any refused or unknown partition
fails the whole request, the others OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and TxnOffsetCommit READ on the group
(GROUP_AUTHORIZATION_FAILED); TxnOffsetCommit READ on each topic as OffsetCommit."""
from __future__ import annotations

import datetime
from typing import Any

from storage_engine.acl.model import Operation, ResourceType
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode
from storage_engine.server.groups.coordinator import OFFSETS_TOPIC
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.handlers.groups import merged, offset_codes, offset_entries, precommit_codes
from storage_engine.server.responses.produce import InitProducerIdResponse
from storage_engine.server.responses.transactions import (AddOffsetsToTxnResponse, AddPartitionsToTxnPartitionResult,
                                                          AddPartitionsToTxnResponse, EndTxnResponse,
                                                          TxnOffsetCommitResponse)
from storage_engine.server.transactions.coordinator import fenced


async def init_transactional(ctx: Ctx, body: Any) -> InitProducerIdResponse:
    code, pid, epoch = await ctx.broker.transactions.init_producer_id(
        body.transactional_id, body.transaction_timeout // datetime.timedelta(milliseconds=1),
        int(getattr(body, "producer_id", -1)), int(getattr(body, "producer_epoch", -1)), ctx.version)
    return {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")     # Kafka's Topic.isInternal


def _txn_refused(ctx: Ctx, txn_id: str) -> bool:
    return not access.allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)


def _group_refused(ctx: Ctx, group_id: str) -> bool:
    return not access.allowed(ctx, Operation.READ, ResourceType.GROUP, group_id)


async def _add_refused(ctx: Ctx, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode] | None:
    """Kafka's topic checks of AddPartitionsToTxn v0-3 before the coordinator: WRITE on each topic (internal ones
    never pass), then the partition exists; any failure answers every partition (OPERATION_NOT_ATTEMPTED for those
    that passed). None when all pass."""
    writable = access.allowed_names(ctx, Operation.WRITE, ResourceType.TOPIC,
                                    (t for t, _ in wanted if t not in INTERNAL_TOPICS))
    if all(t in writable for t, _ in wanted):
        return None
    catalog = await ctx.broker.call(ctx.broker.topics)
    return {(t, p): ErrorCode.topic_authorization_failed if t not in writable
            else ErrorCode.unknown_topic_or_partition if p not in catalog.get(t, ())
            else ErrorCode.operation_not_attempted for t, p in wanted}


async def add_partitions_to_txn(ctx: Ctx, body: Any) -> AddPartitionsToTxnResponse:
    wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
    txn_id = body.v3_and_below_transactional_id
    codes = {tp: ErrorCode.transactional_id_authorization_failed for tp in wanted} if _txn_refused(ctx, txn_id) \
        else await _add_refused(ctx, wanted)
    if codes is None:
        codes = await ctx.broker.transactions.add_partitions(
            txn_id, int(body.v3_and_below_producer_id), int(body.v3_and_below_producer_epoch), wanted, ctx.version)
    topics: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, p), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": p, "partition_error_code": code})
    return {"throttle_time": 0, "results_by_topic_v3_and_below": tuple(
        {"name": t, "results_by_partition": tuple(ps)} for t, ps in topics.items())}


async def add_offsets_to_txn(ctx: Ctx, body: Any) -> AddOffsetsToTxnResponse:
    if _txn_refused(ctx, body.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if _group_refused(ctx, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    code = await ctx.broker.transactions.add_offsets(body.transactional_id, int(body.producer_id),
                                                     int(body.producer_epoch), body.group_id, ctx.version)
    return {"throttle_time": 0, "error_code": code}


async def end_txn(ctx: Ctx, body: Any) -> EndTxnResponse:
    if _txn_refused(ctx, body.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    code = await ctx.broker.transactions.end_txn(body.transactional_id, int(body.producer_id),
                                                 int(body.producer_epoch), bool(body.committed), ctx.version)
    return {"throttle_time": 0, "error_code": code}


async def txn_offset_commit(ctx: Ctx, body: Any) -> TxnOffsetCommitResponse:
    broker = ctx.broker
    txns, groups = broker.transactions, broker.groups
    entries = offset_entries(body.topics)
    refused = (ErrorCode.transactional_id_authorization_failed if _txn_refused(ctx, body.transactional_id)
               else ErrorCode.group_authorization_failed if _group_refused(ctx, body.group_id) else None)
    if refused is not None:        # TxnOffsetCommitRequest.getErrorResponse: every partition
        return {"throttle_time": 0, "topics": offset_codes(entries, [refused] * len(entries))}
    early = await precommit_codes(ctx, entries)
    going = [e for e, c in zip(entries, early) if c is None]
    if not going:
        return {"throttle_time": 0, "topics": offset_codes(entries, merged(early, []))}
    pid, epoch = int(body.producer_id), int(body.producer_epoch)
    code = txns.begin_append(body.transactional_id, pid, epoch, OFFSETS_TOPIC, groups.partition_of(body.group_id))
    if code == ErrorCode.none:
        try:
            codes = await groups.txn_commit(body.group_id, pid, epoch, int(getattr(body, "generation_id", -1)),
                                            getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
                                            going)
        finally:
            txns.end_append(body.transactional_id)
    else:
        if code == ErrorCode.invalid_producer_epoch:
            code = fenced("TxnOffsetCommit", ctx.version)
        codes = [code] * len(going)
    return {"throttle_time": 0, "topics": offset_codes(entries, merged(early, codes))}
