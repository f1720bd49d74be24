"""The per-partition tiering claim: one tiering run at a time per partition, across processes.

A run that copies, expires or cleans a partition's remote segments holds an exclusive ``flock`` on
``<log dir>/.engine+tiering+<topic>-<partition>`` for the whole of its work on that partition (uploads included).
It is *not* the partition lock: appends, rolls, reads and local retention go on meanwhile, and the tiering run
takes the partition lock only for the short steps that read or change the local log (choosing the segments,
checking a segment is still the one uploaded, deleting local segments). Two tiering runs on one partition would
publish the same segment twice or delete each other's objects: the second one sees the claim taken and skips the
partition (``try_acquire``), as a second cleaner skips a partition being cleaned.

``flock`` dies with its process: a tiering process killed with ``kill -9`` leaves nothing held, and the next run
finds its half-done copy in the metadata (``COPY_SEGMENT_STARTED`` without ``FINISHED``) and cleans it up
(:mod:`storage_engine.tiered.orphans`). The file's first byte says whether the next run owes the partition a
listing of its objects (``S``; :meth:`TieringClaim.owe_sweep`), read and written only while the claim is held. The file lives in the log dir root beside the engine's other lock files
(names starting ``.engine+``, which every scan of a log dir skips), never inside the partition folder.
"""
from __future__ import annotations

import fcntl
import os

from storage_engine import layout
from storage_engine.errors import LogLockedError, StorageIOError

TIERING_CLAIM_PREFIX = layout.ENGINE_PREFIX + "tiering+"


def claim_path(log_dir: str, partition_dir_name: str) -> str:
    return os.path.join(log_dir, TIERING_CLAIM_PREFIX + partition_dir_name)


class TieringClaim:
    """Exclusive, non-blocking claim on tiering one partition; released by :meth:`release` or process death."""

    def __init__(self, log_dir: str, partition_dir_name: str):
        self.path = claim_path(log_dir, partition_dir_name)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the claim without waiting; False if another process (or another claim object) holds it."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageIOError("cannot open tiering claim", self.path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    # -- a sweep owed to the partition (while the claim is held) --------------------------------------------------
    def sweep_pending(self) -> bool:
        """Whether an earlier run asked the next one to list the partition's objects (:meth:`owe_sweep`)."""
        assert self._fd is not None, "the claim must be held"
        return os.pread(self._fd, 1, 0) == b"S"

    def owe_sweep(self, owed: bool) -> None:
        """Ask the next run to list the partition's objects, or clear that. A run that closed a copy a dead process
        left unfinished sets it: an upload that process had in flight may still land after its objects were
        deleted, so the next run (later) lists the prefix again and deletes what landed."""
        assert self._fd is not None, "the claim must be held"
        if self.sweep_pending() == owed:
            return
        try:
            os.pwrite(self._fd, b"S" if owed else b"-", 0)
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageIOError("cannot write tiering claim", self.path, exc) from exc

    def acquire_or_raise(self) -> None:
        if not self.try_acquire():
            raise LogLockedError(f"another process is tiering this partition (claim {self.path})")

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TieringClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
