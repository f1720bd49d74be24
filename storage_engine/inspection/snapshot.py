"""A read-only snapshot of one partition: its offsets as the files show them, and the parts of a
:class:`~storage_engine.log.log.Log` that the engine's retention and cleaner rules read.

Nothing here takes a lock, opens a file for writing, creates a file or repairs anything: the log start offset and
recovery point come from the dir's checkpoint files and the partition's shared state (the first bytes of its lock
file, read without taking the lock), the log end offset from the active segment's tail. :class:`LogSnapshot` lets
:func:`storage_engine.maintenance.retention.plan` and :func:`storage_engine.maintenance.cleaner_manager.log_to_clean`
run on the files as they are, so the Storage view, ``status`` and the maintenance jobs cannot disagree about what a
run would do.
"""
from __future__ import annotations

import os
import struct
from typing import Self

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import StorageError
from storage_engine.log import health
from storage_engine.log.locks import UNKNOWN
from storage_engine.log.read_only import effective_segments
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.segment import LogSegment

_STATE = struct.Struct(">qqqq")          # see storage_engine.log.locks: generation, log start, recovery point, flush
                                         # (a status follows them; unread here)


def uncleanable_marks(log_dir: str) -> dict:
    """The cleaner's uncleanable marks of a log dir: ``{partition folder: {"reason": ...}}``, keyed
    ``"<unreadable>"`` when the marks themselves cannot be read."""
    from storage_engine.maintenance.cleaner_manager import read_uncleanable
    return read_uncleanable(log_dir)


def peek_state(log_dir: str, name: str) -> tuple[int, int] | None:
    """(log start offset, recovery point) a process published in the partition's lock file (-1 = unknown),
    or None when there is no such file. Read without the lock and without creating the file."""
    try:
        fd = os.open(layout.partition_state_file(log_dir, name), os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.pread(fd, _STATE.size, 0)
    finally:
        os.close(fd)
    if len(data) < 24:
        return None
    _generation, log_start, recovery_point = struct.unpack(">qqq", data[:24])
    return log_start, recovery_point


class LogSnapshot:
    """The parts of a :class:`~storage_engine.log.log.Log` that the retention and cleaner rules read, from the
    files as they are (segments opened lazily and read-only). Close it to release the files it read."""

    def __init__(self, config: StorageConfig, log_dir: str, topic: str, partition: int, *,
                 checkpoints: dict | None = None):
        self.topic, self.partition, self.log_dir = topic, partition, log_dir
        self.name = layout.partition_dir_name(topic, partition)
        self.dir = os.path.join(log_dir, self.name)
        self.config = config.log_config(topic)
        health.check_partition(self)        # a segment file that is no regular file: not read, as maintenance
        # The segments as the next writable open will name them (a swap a dead cleaner left half done resolved
        # on the names only), each read from the file that will bear its name; nothing is renamed.
        self.segments: list[LogSegment] = list(effective_segments(log_dir, self.name, self.config, []))
        if not self.segments:
            raise StorageError(f"partition {self.name} has no segments in {self.dir}")
        bases = [s.base_offset for s in self.segments]
        cps = checkpoints if checkpoints is not None else read_checkpoints(log_dir)
        tp = (topic, partition)
        start = cps[layout.LOG_START_OFFSET_CHECKPOINT].get(tp, 0)
        recovery = cps[layout.RECOVERY_POINT_CHECKPOINT].get(tp, 0)
        state = peek_state(log_dir, self.name)
        if state is not None:
            if state[0] != UNKNOWN:
                start = max(start, state[0])
            if state[1] != UNKNOWN:
                recovery = state[1]
        # As the loader: raised to the first segment, except for a tiered topic (below it, remote storage).
        self.log_start_offset = start if self.config.remote_storage_enable else max(start, bases[0])
        self.local_log_start_offset = max(start, bases[0])
        self.log_end_offset = self.segments[-1].read_next_offset()
        self.high_watermark = self.log_end_offset
        self.recovery_point = min(recovery, self.log_end_offset)
        self.cleaner_checkpoint = cps[layout.CLEANER_OFFSET_CHECKPOINT].get(tp)
        self._lso: int | None = None

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def last_stable_offset(self) -> int:
        """The LSO, from the producer snapshots and a replay of the batches after the newest (read-only)."""
        if self._lso is None:
            from storage_engine.log.producer_state_manager import rebuild
            from storage_engine.log.producer_state_manager import ProducerStateManager
            psm = ProducerStateManager(self.dir, self.name)
            rebuild(psm, self.segments, self.log_start_offset, self.log_end_offset, exclusive=False)
            first = psm.first_unstable_offset()
            self._lso = self.high_watermark if first is None else min(first, self.high_watermark)
        return self._lso

    def close(self) -> None:
        for s in self.segments:
            s.close(trim=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_checkpoints(log_dir: str) -> dict:
    """The three offset checkpoint files of a log dir, {file name: {(topic, partition): offset}}; a file that
    does not parse reads as empty (:func:`log_dir_status` reports it)."""
    return {name: OffsetCheckpointFile(os.path.join(log_dir, name)).read_or_empty()[0]
            for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                         layout.CLEANER_OFFSET_CHECKPOINT)}
