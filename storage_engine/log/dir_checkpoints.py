"""A log dir's checkpoint files as a :class:`~storage_engine.log.manager.LogManager` writes them:
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` (Kafka's ``checkpointLogRecoveryOffsets``
and ``checkpointLogStartOffsets``).

While the dir is in use (:func:`checkpoint_dir`) the values come from each partition's shared state, merged under
the dir's checkpoint lock with the entries of partitions other processes own; entries of partitions no longer in
the dir are dropped, except those of a partition whose folder vanished or became a file while the engine keeps it
live there (:mod:`.health`: the evidence stays until an operator acts). The last process to leave a dir (:func:`write_checkpoints_after_close`) writes the values of
the logs it has just flushed. A log start offset is written only when it is above the first segment's base, or
when the topic is tiered (Kafka's rule: its log start offset lies below the first local segment, and must stay).

Both files hold an entry per partition of the dir, so reading and writing them costs the whole dir, whichever
partitions a manager has: a manager reads them through its :class:`CheckpointCache`, which parses a file again
only when its bytes changed (the first read of a dir's files at open serves every partition adopted later, and the
close of a dir that nothing changed), and a file whose entries would not change is not written again (the same
entries, the same meaning: only the fsyncs are saved).
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from types import MappingProxyType

from storage_engine import crashpoints, layout
from storage_engine.durable import atomic_write
from storage_engine.errors import CorruptCheckpointError, PartitionDeletedError, PartitionNotFoundError
from storage_engine.log import health
from storage_engine.log.locks import LIVE, UNKNOWN, FileLock
from storage_engine.log.log import Log
from storage_engine.segment.checkpoint import (format_offset_checkpoint, parse_offset_checkpoint,
                                               read_checkpoint_bytes)

logger = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
Entries = Mapping[TopicPartition, int]


class CheckpointCache:
    """A manager's reads of its dirs' offset checkpoint files: each read reads the file's bytes, and parses them
    only when they differ from the bytes last parsed from that path (or written there through this cache), so equal
    bytes give the entries parsed before. Entries come back read-only. Thread-safe.

    A file that is corrupt reads as empty with the reason, as :meth:`OffsetCheckpointFile.read_or_empty` reads it
    (with the warning once per content); OS errors raise ``StorageIOError``. :attr:`parses` counts the parses."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[bytes | None, Entries, str | None]] = {}
        self._mutex = threading.Lock()
        self.parses = 0

    def read(self, path: str) -> tuple[Entries, str | None]:
        """``(entries, None)``, or ``({}, reason)`` when the file is corrupt; a missing file has no entries."""
        try:
            data = read_checkpoint_bytes(path)
        except CorruptCheckpointError as exc:       # not a regular file, or too large: never cached
            logger.warning("Ignoring corrupt checkpoint file %s, treating it as empty: %s", path, exc)
            return MappingProxyType({}), str(exc)
        with self._mutex:
            cached = self._files.get(path)
        if cached is not None and cached[0] == data:
            return cached[1], cached[2]
        error = None
        try:
            entries: Entries = MappingProxyType(parse_offset_checkpoint(data, path) if data is not None else {})
        except CorruptCheckpointError as exc:
            logger.warning("Ignoring corrupt checkpoint file %s, treating it as empty: %s", path, exc)
            entries, error = MappingProxyType({}), str(exc)
        with self._mutex:
            self.parses += 1
            self._files[path] = (data, entries, error)
        return entries, error

    def write(self, path: str, entries: Entries, current: tuple[Entries, str | None]) -> bool:
        """Replace the file with ``entries`` (atomically, durably) unless ``current``, the file as just read
        through :meth:`read` under the same exclusion, already holds exactly them; returns whether it wrote."""
        old, error = current
        if error is None and dict(entries) == old and self._has_file(path):
            return False
        data = format_offset_checkpoint(entries)
        atomic_write(path, data)
        with self._mutex:
            self._files[path] = (data, MappingProxyType(dict(entries)), None)
        return True

    def _has_file(self, path: str) -> bool:
        with self._mutex:
            cached = self._files.get(path)
        return cached is not None and cached[0] is not None


def checkpoint_dir(log_dir: str, candidates: list[tuple[TopicPartition, Log]],
                   cache: CheckpointCache | None = None) -> dict:
    """Write both checkpoints of ``log_dir`` while it is in use: ``candidates`` are the process's logs in that dir
    (-future copies first, so a partition's current log wins); returns the entries written (a file whose entries
    are unchanged is left as it is)."""
    cache = cache if cache is not None else CheckpointCache()
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
    rp_path = os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT)
    lso_path = os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT)
    with FileLock(os.path.join(log_dir, layout.CHECKPOINT_LOCK_FILE)):
        listing = layout.scan_log_dir(log_dir)
        present = {tp for _, tp in listing.partitions} | {tp for _, tp in listing.futures}
        rp_read, lso_read = cache.read(rp_path), cache.read(lso_path)
        rp_old, lso_old = rp_read[0], lso_read[0]
        # A partition whose folder vanished or became a file keeps its entries: the evidence (health.py).
        kept = {tp for tp in set(rp_old) | set(lso_old) if tp not in present and health.keeps_entries(log_dir, tp)}
        rp = {tp: v for tp, v in rp_old.items() if (tp in present and tp not in values) or tp in kept}
        lso = {tp: v for tp, v in lso_old.items() if (tp in present and tp not in values) or tp in kept}
        for tp, (log, first_base) in values.items():
            state = log.lock.read_state()
            if state.status != LIVE or tp not in present:
                continue
            rp[tp] = state.recovery_point if state.recovery_point != UNKNOWN else log.recovery_point
            start = state.log_start_offset if state.log_start_offset != UNKNOWN else log.log_start_offset
            if start > first_base or log.remote_log_enabled:
                lso[tp] = start
        cache.write(rp_path, rp, rp_read)
        crashpoints.reached("checkpoint.between-files")
        cache.write(lso_path, lso, lso_read)
    return {"recovery_points": {f"{t}-{p}": v for (t, p), v in sorted(rp.items())},
            "log_start_offsets": {f"{t}-{p}": v for (t, p), v in sorted(lso.items())}}


def write_checkpoints_after_close(log_dir: str, logs: list[Log], cache: CheckpointCache | None = None) -> None:
    """Write both checkpoints of ``log_dir`` from ``logs``, just flushed by the last process to leave the dir (a
    file whose entries are unchanged is left as it is)."""
    cache = cache if cache is not None else CheckpointCache()
    listing = layout.scan_log_dir(log_dir)
    present = {tp for _, tp in listing.partitions} | {tp for _, tp in listing.futures}
    existing = {log.folder for log in logs if os.path.isdir(log.dir)}
    rp_path = os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT)
    lso_path = os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT)
    rp_read, lso_read = cache.read(rp_path), cache.read(lso_path)
    rp_old, lso_old = rp_read[0], lso_read[0]
    kept = {tp for tp in set(rp_old) | set(lso_old) if tp not in present and health.keeps_entries(log_dir, tp)}
    rp = {tp: v for tp, v in rp_old.items() if tp in present or tp in kept}
    lso = {tp: v for tp, v in lso_old.items() if tp in present or tp in kept}
    for log in logs:
        if log.folder not in existing:
            continue     # deleted or moved away meanwhile
        tp = (log.topic, log.partition)
        rp[tp] = log.recovery_point
        lso.pop(tp, None)
        if log.log_start_offset > log.segments[0].base_offset or log.remote_log_enabled:
            lso[tp] = log.log_start_offset
    cache.write(rp_path, rp, rp_read)
    cache.write(lso_path, lso, lso_read)
