"""The transactional APIs: InitProducerId with a ``transactional.id``, AddPartitionsToTxn (v0-3, the clients'
versions; v4+ is the brokers' verification form), AddOffsetsToTxn, EndTxn, answered by the broker's
:class:`~storage_engine.server.transactions.coordinator.TxnCoordinator`, and TxnOffsetCommit, which the group
coordinator writes as the producer's transactional batch once the transaction admits it."""
from __future__ import annotations

import datetime
from typing import Any

from storage_engine.server.errors import ErrorCode
from storage_engine.server.groups.coordinator import OFFSETS_TOPIC
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.handlers.groups import offset_codes, offset_entries
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


async def add_partitions_to_txn(ctx: Ctx, body: Any) -> AddPartitionsToTxnResponse:
    wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
    codes = await ctx.broker.transactions.add_partitions(
        body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
        int(body.v3_and_below_producer_epoch), wanted, ctx.version)
    topics: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, p), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": p, "partition_error_code": code})
    return {"throttle_time": 0, "results_by_topic_v3_and_below": tuple(
        {"name": t, "results_by_partition": tuple(ps)} for t, ps in topics.items())}


async def add_offsets_to_txn(ctx: Ctx, body: Any) -> AddOffsetsToTxnResponse:
    code = await ctx.broker.transactions.add_offsets(body.transactional_id, int(body.producer_id),
                                                     int(body.producer_epoch), body.group_id, ctx.version)
    return {"throttle_time": 0, "error_code": code}


async def end_txn(ctx: Ctx, body: Any) -> EndTxnResponse:
    code = await ctx.broker.transactions.end_txn(body.transactional_id, int(body.producer_id),
                                                 int(body.producer_epoch), bool(body.committed), ctx.version)
    return {"throttle_time": 0, "error_code": code}


async def txn_offset_commit(ctx: Ctx, body: Any) -> TxnOffsetCommitResponse:
    broker = ctx.broker
    txns, groups = broker.transactions, broker.groups
    entries = offset_entries(body.topics)
    pid, epoch = int(body.producer_id), int(body.producer_epoch)
    code = txns.begin_append(body.transactional_id, pid, epoch, OFFSETS_TOPIC, groups.partition_of(body.group_id))
    if code == ErrorCode.none:
        try:
            codes = await groups.txn_commit(body.group_id, pid, epoch, int(getattr(body, "generation_id", -1)),
                                            getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
                                            entries)
        finally:
            txns.end_append(body.transactional_id)
    else:
        if code == ErrorCode.invalid_producer_epoch:
            code = fenced("TxnOffsetCommit", ctx.version)
        codes = [code] * len(entries)
    return {"throttle_time": 0, "topics": offset_codes(entries, codes)}
