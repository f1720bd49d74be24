"""The broker's part of ``replication-offset-checkpoint`` (:mod:`storage_engine.log.hw_checkpoint` has the file and
why): the file created empty in each online log dir and read back as the logs open, then written every
``replica.high.watermark.checkpoint.interval.ms`` from the first moment on (Kafka's ``highwatermark-checkpoint``
task has no initial delay), and once more at a clean stop, before the logs close."""
from __future__ import annotations

import asyncio
import logging

from storage_engine.log import hw_checkpoint
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager

logger = logging.getLogger(__name__)


def online_logs(manager: LogManager) -> list[Log]:
    """The logs and ``-future`` copies of the manager's online dirs."""
    online = set(manager.online_dirs())
    with manager.mutex:
        logs = list(manager.logs.values()) + list(manager.future_logs.values())
    return [log for log in logs if log.log_dir in online]


def at_start(manager: LogManager) -> None:
    hw_checkpoint.create_empty(manager.online_dirs())
    hw_checkpoint.read_back(online_logs(manager))


def checkpoint(manager: LogManager) -> list[str]:
    """Write the file of every online dir that holds partitions; returns the dirs written."""
    return hw_checkpoint.write_high_watermarks(hw_checkpoint.high_watermarks(online_logs(manager)))


async def run(manager: LogManager, interval_ms: int, stopping: asyncio.Event) -> None:
    """Checkpoint now and every ``interval_ms`` until ``stopping`` is set (the final write is the stop's)."""
    loop = asyncio.get_running_loop()
    while not stopping.is_set():
        try:
            await loop.run_in_executor(None, checkpoint, manager)
        except Exception as exc:   # noqa: BLE001 - a checkpoint that fails is retried at the next interval
            logger.error("cannot checkpoint the high watermarks: %s", exc)
        try:
            await asyncio.wait_for(stopping.wait(), interval_ms / 1000)
        except asyncio.TimeoutError:
            pass
