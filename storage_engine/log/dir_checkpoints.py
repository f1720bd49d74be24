"""A log dir's checkpoint files as a :class:`~storage_engine.log.manager.LogManager` writes them:
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` (Kafka's ``checkpointLogRecoveryOffsets``
and ``checkpointLogStartOffsets``).

While the dir is in use (:func:`checkpoint_dir`) the values come from each partition's shared state, merged under
the dir's checkpoint lock with the entries of partitions other processes own; entries of partitions no longer in
the dir are dropped, except those of a partition whose folder vanished or became a file while the engine keeps it
live there (:mod:`.health`: the evidence stays until an operator acts). The last process to leave a dir (:func:`write_checkpoints_after_close`) writes the values of
the logs it has just flushed. A log start offset is written only when it is above the first segment's base, or
when the topic is tiered (Kafka's rule: its log start offset lies below the first local segment, and must stay).
"""
from __future__ import annotations

import os

from storage_engine import crashpoints, layout
from storage_engine.errors import PartitionDeletedError, PartitionNotFoundError
from storage_engine.log import health
from storage_engine.log.locks import LIVE, UNKNOWN, FileLock
from storage_engine.log.log import Log
from storage_engine.segment.checkpoint import OffsetCheckpointFile

TopicPartition = tuple[str, int]


def checkpoint_dir(log_dir: str, candidates: list[tuple[TopicPartition, Log]]) -> dict:
    """Write both checkpoints of ``log_dir`` while it is in use: ``candidates`` are the process's logs in that dir
    (-future copies first, so a partition's current log wins); returns the entries written."""
    # Views are brought up to date before the checkpoint lock is taken: a deletion holds a partition lock
    # while it edits the checkpoint files, so the lock order is partition lock -> checkpoint lock.
    values: dict[TopicPartition, tuple[Log, int]] = {}
    for tp, log in candidates:
        try:
            log.refresh()
        except (PartitionDeletedError, PartitionNotFoundError):
            continue
        if log.log_dir == log_dir:   # (a log may have followed its partition into another dir)
            values[tp] = (log, log.segments[0].base_offset)
    rp_file = OffsetCheckpointFile(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT))
    lso_file = OffsetCheckpointFile(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT))
    with FileLock(os.path.join(log_dir, layout.CHECKPOINT_LOCK_FILE)):
        listing = layout.scan_log_dir(log_dir)
        present = {tp for _, tp in listing.partitions} | {tp for _, tp in listing.futures}
        rp, _ = rp_file.read_or_empty()
        lso, _ = lso_file.read_or_empty()
        # A partition whose folder vanished or became a file keeps its entries: the evidence (health.py).
        kept = {tp for tp in set(rp) | set(lso) if tp not in present and health.keeps_entries(log_dir, tp)}
        rp = {tp: v for tp, v in rp.items() if (tp in present and tp not in values) or tp in kept}
        lso = {tp: v for tp, v in lso.items() if (tp in present and tp not in values) or tp in kept}
        for tp, (log, first_base) in values.items():
            state = log.lock.read_state()
            if state.status != LIVE or tp not in present:
                continue
            rp[tp] = state.recovery_point if state.recovery_point != UNKNOWN else log.recovery_point
            start = state.log_start_offset if state.log_start_offset != UNKNOWN else log.log_start_offset
            if start > first_base or log.remote_log_enabled:
                lso[tp] = start
        rp_file.write(rp)
        crashpoints.reached("checkpoint.between-files")
        lso_file.write(lso)
    return {"recovery_points": {f"{t}-{p}": v for (t, p), v in sorted(rp.items())},
            "log_start_offsets": {f"{t}-{p}": v for (t, p), v in sorted(lso.items())}}


def write_checkpoints_after_close(log_dir: str, logs: list[Log]) -> None:
    """Write both checkpoints of ``log_dir`` from ``logs``, just flushed by the last process to leave the dir."""
    listing = layout.scan_log_dir(log_dir)
    present = {tp for _, tp in listing.partitions} | {tp for _, tp in listing.futures}
    existing = {log.folder for log in logs if os.path.isdir(log.dir)}
    rp_file = OffsetCheckpointFile(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT))
    lso_file = OffsetCheckpointFile(os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT))
    rp, _ = rp_file.read_or_empty()
    lso, _ = lso_file.read_or_empty()
    kept = {tp for tp in set(rp) | set(lso) if tp not in present and health.keeps_entries(log_dir, tp)}
    rp = {tp: v for tp, v in rp.items() if tp in present or tp in kept}
    lso = {tp: v for tp, v in lso.items() if tp in present or tp in kept}
    for log in logs:
        if log.folder not in existing:
            continue     # deleted or moved away meanwhile
        tp = (log.topic, log.partition)
        rp[tp] = log.recovery_point
        lso.pop(tp, None)
        if log.log_start_offset > log.segments[0].base_offset or log.remote_log_enabled:
            lso[tp] = log.log_start_offset
    rp_file.write(rp)
    lso_file.write(lso)
