"""Produce and InitProducerId: client batches appended through the engine's leader append (validated, offsets
assigned in place, producer sequence and epoch checked; a retried batch answers its first offsets and writes
nothing), answered per acks (0: no response; 1 and all: after the append; on one node the high watermark moves
with the append)."""
from __future__ import annotations

import logging
import time
from typing import Any

from storage_engine.errors import PartitionNotFoundError
from storage_engine.server.errors import error_code, message
from storage_engine.server.handlers.context import Ctx

logger = logging.getLogger(__name__)
TXN_UNSUPPORTED = ("transactions need a transaction coordinator, which this broker does not run yet; "
                   "produce without transactional.id")


def _append(ctx: Ctx, topic: str, partition: int, records: bytes) -> dict[str, Any]:
    broker = ctx.broker
    try:
        log = broker.manager.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} does not exist")
        info = log.append_batches(records)
    except Exception as exc:   # noqa: BLE001 - every failure becomes the partition's error code
        code = error_code(exc)
        if code == -1:
            logger.exception("produce to %s-%d failed", topic, partition)
        broker.stats.errors += 1
        return {"index": partition, "error_code": code, "base_offset": -1, "log_start_offset": -1,
                "error_message": message(exc)}
    if not info.duplicate:
        broker.stats.produce_records += info.count
        broker.stats.produce_bytes += info.bytes
    append_time = -1
    if log.config.message_timestamp_type == "LogAppendTime":
        append_time = info.max_timestamp if info.max_timestamp >= 0 else int(time.time() * 1000)
    return {"index": partition, "error_code": 0, "base_offset": info.first_offset, "log_append_time": append_time,
            "log_start_offset": log.log_start_offset}


async def produce(ctx: Ctx, body: Any) -> dict[str, Any] | None:
    broker = ctx.broker
    broker.stats.produce_requests += 1
    acks = int(body.acks)
    responses = []
    appended = False
    for topic_data in body.topic_data:
        parts = []
        for pd in topic_data.partition_data:
            if body.transactional_id is not None:
                parts.append({"index": pd.index, "error_code": 53, "base_offset": -1, "error_message": TXN_UNSUPPORTED})
            elif acks not in (-1, 0, 1):
                parts.append({"index": pd.index, "error_code": 21, "base_offset": -1,
                              "error_message": f"acks must be -1, 0 or 1, got {acks}"})
            elif not pd.records:
                parts.append({"index": pd.index, "error_code": 87, "base_offset": -1,
                              "error_message": "no records in the request"})
            else:
                result = await broker.call(_append, ctx, topic_data.name, int(pd.index), bytes(pd.records))
                appended = appended or result["error_code"] == 0
                parts.append(result)
        responses.append({"name": topic_data.name, "partition_responses": tuple(parts)})
    if appended:
        broker.notify_append()
    if acks == 0:
        return None
    return {"responses": tuple(responses), "throttle_time": 0}


MAX_EPOCH = 32767


async def init_producer_id(ctx: Ctx, body: Any) -> dict[str, Any]:
    """A new producer id with epoch 0; a known (id, epoch) gets the next epoch (KIP-360), a new id once the epoch
    would overflow."""
    if body.transactional_id is not None:
        return {"throttle_time": 0, "error_code": 53, "producer_id": -1, "producer_epoch": -1}
    pid = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    new = await ctx.broker.call(ctx.broker.producer_ids.allocate)
    return {"throttle_time": 0, "error_code": 0, "producer_id": new, "producer_epoch": 0}
