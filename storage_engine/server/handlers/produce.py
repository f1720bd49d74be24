"""Produce and InitProducerId: client batches appended through the engine's leader append (validated, offsets
assigned in place, producer sequence and epoch checked; a retried batch answers its first offsets and writes
nothing), answered per acks (0: no response, and the connection closed if any partition failed, as Kafka
tells such a client; 1 and all: after the append; on one node the high watermark moves
with the append).

Where the appends are done: on the event loop first (:func:`_append_now`, ``Log.try_append_batches``), when the
batch is small and nothing in the append can wait (no lock held elsewhere, no reload of the partition's view, no
roll, flush, leader epoch checkpoint or index growth: a ``pwrite`` and memory); else, having changed nothing, in
the engine's threads, as if the first attempt had not been made. A thread hand-off costs more than a small append.

Authorization as Kafka's ``KafkaApis.handleProduceRequest``: a request whose partitions hold a transactional batch
(the first batch of each partition is looked at) needs WRITE on its transactional id, else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (also when the request has no transactional id); then WRITE on each topic,
else its partitions answer TOPIC_AUTHORIZATION_FAILED before anyone learns whether the topic exists.
InitProducerId as ``handleInitProducerIdRequest``: WRITE on the transactional id, or without one IDEMPOTENT_WRITE
on the cluster or WRITE on some topic (``authorizeByResourceType``), else CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

import logging
from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.errors import PartitionNotFoundError
from storage_engine.log.appends import AppendInfo
from storage_engine.log.log import Log
from storage_engine.segment.slice_read import WouldBlock
from storage_engine.record import codecs
from storage_engine.record.record_batch import (ATTRIBUTES_OFFSET, BATCH_OVERHEAD, COMPRESSION_CODEC_MASK,
                                                ENTRY_HEADER, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2,
                                                MIN_ENTRY_SIZE_FIELD, RecordBatch)
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode, error_code, message
from storage_engine.server.handlers import produce_wire, transactions
from storage_engine.server.handlers.context import CloseConnection, Ctx, log_now
from storage_engine.server.protocol import Encoded
from storage_engine.server.responses.produce import (InitProducerIdResponse, PartitionProduceResponse,
                                                     ProduceResponse, TopicProduceResponse)

logger = logging.getLogger(__name__)
# A larger append is validated (CRCs, records, decompressed) in the engine's threads: on the event loop its CPU
# time would hold up every other connection. A compressed batch is decompressed to be checked (and recompressed
# when the topic's compression.type differs): a smaller one already costs that much.
INLINE_APPEND_BYTES = 256 * 1024
INLINE_COMPRESSED_BYTES = 16 * 1024
Buffer = bytes | bytearray | memoryview


def _batch_count(records: Buffer) -> int | str:
    """How many batches ``records`` holds, by their length fields (a torn last one counts); a length below
    :data:`~storage_engine.record.record_batch.MIN_ENTRY_SIZE_FIELD` (Kafka's ``RECORD_OVERHEAD_V0``: no batch is
    shorter) is the message Kafka's ``ByteBufferLogInputStream`` fails with (CORRUPT_MESSAGE)."""
    pos, count = 0, 0
    while pos + LOG_OVERHEAD <= len(records):
        size = ENTRY_HEADER.unpack_from(records, pos)[1]
        if size < MIN_ENTRY_SIZE_FIELD:
            return (f"Record size {size} at byte {pos} is less than the minimum record overhead "
                    f"({MIN_ENTRY_SIZE_FIELD})")
        pos += LOG_OVERHEAD + size
        count += 1
    return count


def _producer_of(records: Buffer) -> tuple[int, int, bool] | None:
    """(producer id, epoch, transactional) of the first batch's header; None when it is too short or not magic 2
    (the engine's validation then names what is wrong)."""
    if len(records) < BATCH_OVERHEAD or records[MAGIC_OFFSET] != MAGIC_V2:
        return None
    batch = RecordBatch(records)
    return batch.producer_id, batch.producer_epoch, batch.is_transactional


def _append(ctx: Ctx, topic: str, partition: int, records: Buffer) -> PartitionProduceResponse:
    """The partition's append, in the engine's threads (anything may wait)."""
    try:
        log = ctx.broker.manager.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} does not exist")
        info = log.append_batches(records, in_place=_in_place(records))
    except Exception as exc:   # noqa: BLE001 - every failure becomes the partition's error code (logged there)
        return _append_failed(ctx, topic, partition, exc)
    return _appended(ctx, log, partition, info)


def _append_now(ctx: Ctx, topic: str, partition: int, records: Buffer) -> PartitionProduceResponse | None:
    """The partition's append on the event loop, when nothing in it can wait (``Log.try_append_batches``); None
    when it gave up, having changed nothing (the engine's threads then append, as if this had not been tried)."""
    try:
        log, _ = log_now(ctx, topic, partition)
        info = log.try_append_batches(records, in_place=_in_place(records))
    except WouldBlock:
        return None
    except Exception as exc:   # noqa: BLE001 - answered as the engine's threads answer the same failure
        return _append_failed(ctx, topic, partition, exc)
    return _appended(ctx, log, partition, info)


def _in_place(records: Buffer) -> bool:
    # records decoded by produce_wire are a writable view of this request's frame, which nothing reads after
    # the append: offsets are assigned in it and it is written from there (no copy); kio's are bytes (copied)
    return isinstance(records, memoryview) and not records.readonly


def _append_failed(ctx: Ctx, topic: str, partition: int, exc: Exception) -> PartitionProduceResponse:
    code = error_code(exc)
    if code == ErrorCode.unknown_server_error:
        logger.error("produce to %s-%d failed", topic, partition, exc_info=exc)
    ctx.broker.stats.errors += 1
    return {**_failed(partition, code, message(exc)), "log_start_offset": -1}


def _appended(ctx: Ctx, log: Log, partition: int, info: AppendInfo) -> PartitionProduceResponse:
    broker = ctx.broker
    if not info.duplicate:
        broker.stats.produce_records += info.count
        broker.stats.produce_bytes += info.bytes
    append_time = -1
    if log.config.message_timestamp_type == "LogAppendTime":
        append_time = info.max_timestamp if info.max_timestamp >= 0 else broker.clock.milliseconds()
    return {"index": partition, "error_code": ErrorCode.none, "base_offset": info.first_offset,
            "log_append_time": append_time, "log_start_offset": log.log_start_offset, "record_errors": ()}


async def _append_here_or_pooled(ctx: Ctx, topic: str, partition: int, records: Buffer) -> PartitionProduceResponse:
    """The append on the event loop if it is small (:func:`_small`) and need not wait (a thread hand-off costs more
    than a small append), else in the engine's threads; counted in ``produce_appends_inline`` /
    ``produce_appends_pooled``."""
    stats = ctx.broker.stats
    answer = _append_now(ctx, topic, partition, records) if _small(records) else None
    if answer is not None:
        stats.produce_appends_inline += 1
        return answer
    stats.produce_appends_pooled += 1
    return await ctx.broker.call(_append, ctx, topic, partition, records)


def _small(records: Buffer) -> bool:
    """Whether the partition's batch is cheap enough to check on the event loop: at most
    :data:`INLINE_APPEND_BYTES`, or :data:`INLINE_COMPRESSED_BYTES` when compressed (one batch per partition
    since Produce v3: a request with more is refused before this)."""
    if len(records) > INLINE_APPEND_BYTES:
        return False
    return (len(records) <= INLINE_COMPRESSED_BYTES or len(records) < BATCH_OVERHEAD
            or records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_CODEC_MASK == codecs.NONE)


def _failed(partition: int, code: ErrorCode, text: str) -> PartitionProduceResponse:
    """A partition's answer when nothing was appended."""
    return {"index": partition, "error_code": code, "base_offset": -1, "error_message": text, "record_errors": ()}


def _missing(ctx: Ctx, topic: str, partition: int) -> PartitionProduceResponse | None:
    """The partition's error when it does not exist (or its dir is offline), else None."""
    try:
        if ctx.broker.manager.get_log(topic, partition) is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} does not exist")
    except Exception as exc:   # noqa: BLE001 - the partition's error code
        return _failed(partition, error_code(exc), message(exc))
    return None


async def _produce_partition(ctx: Ctx, txn_id: str | None, topic: str, partition: int,
                             records: Buffer) -> PartitionProduceResponse:
    """Append one partition's batches. Transactional batches need the request's transactional id, and its
    transaction must have the partition added, from the same producer id and epoch; EndTxn waits for the append."""
    count = _batch_count(records)
    if isinstance(count, str) or count > 1:
        # Kafka answers an unknown partition before it looks at the records (KafkaApis.handleProduceRequest)
        missing = await ctx.broker.call(_missing, ctx, topic, partition)
        if missing is not None:
            return missing
    if isinstance(count, str):
        return _failed(partition, ErrorCode.corrupt_message, count)
    if count > 1:     # Kafka's rule since Produce v3: one producer's state change per partition
        return _failed(partition, ErrorCode.invalid_record,
                       "Produce v3 and above takes exactly one record batch per partition")
    producer = _producer_of(records)
    if txn_id is None:     # a transactional batch without the id was refused in produce()
        return await _append_here_or_pooled(ctx, topic, partition, records)
    if producer is None or producer[0] < 0:    # no producer id: not part of the transaction, appended as Kafka does
        return await _append_here_or_pooled(ctx, topic, partition, records)
    txns = ctx.broker.transactions
    code = txns.begin_append(txn_id, producer[0], producer[1], topic, partition)
    if code != ErrorCode.none:
        ctx.broker.stats.errors += 1
        return _failed(partition, ErrorCode(code),
                       f"transactional id {txn_id!r} has no open transaction with {topic}-{partition} "
                       f"for producer {producer[0]} epoch {producer[1]}")
    try:
        return await _append_here_or_pooled(ctx, topic, partition, records)
    finally:
        txns.end_append(txn_id)


def _refused(partition: int, code: ErrorCode) -> PartitionProduceResponse:
    """A partition's answer when the request or its topic is not authorized (Kafka's ``PartitionResponse(error)``:
    no message)."""
    return {"index": partition, "error_code": code, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1,
            "error_message": None, "record_errors": ()}


def _has_transactional(body: Any) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: the first batch of some partition is transactional."""
    for topic_data in body.topic_data:
        for pd in topic_data.partition_data:
            producer = _producer_of(pd.records) if pd.records else None
            if producer is not None and producer[2]:
                return True
    return False


async def produce(ctx: Ctx, body: Any) -> ProduceResponse | Encoded | None:
    """Append each partition's batches (:func:`_produce_partition`); the answer is encoded here
    (:mod:`.produce_wire`) unless it carries a tagged field, then by kio."""
    response = await _produce(ctx, body)
    if response is None or not produce_wire.encodable(response):
        return response
    return produce_wire.encode_response(ctx.request.api_version, response)


async def _produce(ctx: Ctx, body: Any) -> ProduceResponse | None:
    broker = ctx.broker
    broker.stats.produce_requests += 1
    acks = int(body.acks)
    responses: list[TopicProduceResponse] = []
    if _has_transactional(body) and (body.transactional_id is None or not access.allowed(
            ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)):
        if acks == 0:
            raise CloseConnection("a Produce with acks=0 refused: TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        return {"throttle_time": 0, "responses": tuple(
            {"name": t.name, "partition_responses": tuple(
                _refused(int(pd.index), ErrorCode.transactional_id_authorization_failed) for pd in t.partition_data)}
            for t in body.topic_data)}
    writable = access.allowed_names(ctx, Operation.WRITE, ResourceType.TOPIC, (t.name for t in body.topic_data))
    appended = False
    for topic_data in body.topic_data:
        parts: list[PartitionProduceResponse] = []
        for pd in topic_data.partition_data:
            if topic_data.name not in writable:
                parts.append(_refused(int(pd.index), ErrorCode.topic_authorization_failed))
            elif acks not in (-1, 0, 1):
                parts.append(_failed(pd.index, ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, got {acks}"))
            elif not pd.records:
                parts.append(_failed(pd.index, ErrorCode.invalid_record, "no records in the request"))
            else:
                # the records as decoded (a view of the request frame): the engine copies them once, to assign
                # their offsets
                result = await _produce_partition(ctx, body.transactional_id, topic_data.name, int(pd.index),
                                                  pd.records)
                appended = appended or result["error_code"] == ErrorCode.none
                parts.append(result)
        responses.append({"name": topic_data.name, "partition_responses": tuple(parts)})
    if appended:
        broker.purgatory.appended_all((t["name"], p["index"]) for t in responses for p in t["partition_responses"])
    if acks == 0:
        failed = sorted({ErrorCode(p["error_code"]).name.upper() for t in responses for p in t["partition_responses"]}
                        - {"NONE"})
        if failed:    # the client expects no answer: closing the connection is how it learns (KafkaApis)
            raise CloseConnection(f"a Produce with acks=0 failed: {', '.join(failed)}")
        return None
    return {"responses": tuple(responses), "throttle_time": 0}


MAX_EPOCH = 32767


async def init_producer_id(ctx: Ctx, body: Any) -> InitProducerIdResponse:
    """Without a transactional id: a new producer id with epoch 0; a known (id, epoch) gets the next epoch
    (KIP-360), a new id once the epoch would overflow. With one: the transaction coordinator answers."""
    if body.transactional_id is not None:
        if not access.allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            return _no_producer_id(ErrorCode.transactional_id_authorization_failed)
        return await transactions.init_transactional(ctx, body)
    # WRITE on any topic does instead of IDEMPOTENT_WRITE, so the first refusal is logged only if both fail
    if not (access.allowed_cluster(ctx, Operation.IDEMPOTENT_WRITE, log=False)
            or access.allowed_any(ctx, Operation.WRITE, ResourceType.TOPIC, log=False)):
        access.log_refusal(ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        return _no_producer_id(ErrorCode.cluster_authorization_failed)
    pid = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": epoch + 1}
    new = await ctx.broker.call(ctx.broker.producer_ids.allocate)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": new, "producer_epoch": 0}


def _no_producer_id(code: ErrorCode) -> InitProducerIdResponse:
    """InitProducerIdRequest.getErrorResponse: no producer id, no epoch."""
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
