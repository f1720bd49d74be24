"""Deleting a partition (Kafka's ``LogManager.asyncDelete``) and removing ``-delete`` folders (``deleteLogs``).

Deleting renames the partition folder ``<topic>-<partition>`` to ``<topic>-<partition>.<32 hex>-delete`` at once,
so the name is free for a new partition immediately, and the folder itself goes after ``file.delete.delay.ms``
(readers of other processes holding its files open finish first). In order, under the partition's cleaning
claim (a cleaning round in progress finishes first) and then its lock:

1. the lock is retired as *deleted* (written and fsynced: from here on the deletion is decided, and any process
   taking the lock sees it, before anything is renamed);
2. the partition's entries leave the log dir's recovery-point, log-start-offset and cleaner checkpoints;
3. the folder is renamed ``-delete`` and its modification time set to the deletion time (the purge counts
   ``file.delete.delay.ms`` from it); the log dir is fsynced;
4. a pending swap record left by a cleaner that died (:mod:`storage_engine.log.intent`), the lock file and the
   cleaning claim are unlinked, so a partition created under the same name starts fresh.

A process that meets a retired lock whose folder still has its plain name (the deleting process died between 1
and 3) completes 2-4 (:func:`finish_deletion`). Loading never loads a ``-delete`` folder as a partition; the first
process to open a log dir removes those that are due, and :func:`purge_delete_dirs` (the retention DAG's purge
step) removes them while the dir is in use.
"""
from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable
from types import TracebackType

from storage_engine import layout
from storage_engine.durable import durable_rename, fsync_dir
from storage_engine.errors import PartitionMovedError, PartitionNotFoundError, StorageIOError
from storage_engine.log import intent, losses, manifest
from storage_engine.log.locks import DELETED, LIVE, MOVED, CleaningClaim, FileLock, PartitionLock, lock_path
from storage_engine.segment.checkpoint import OffsetCheckpointFile

logger = logging.getLogger(__name__)

CLAIM_TIMEOUT_S = 600.0

_CHECKPOINT_LOCKS = {
    layout.RECOVERY_POINT_CHECKPOINT: layout.CHECKPOINT_LOCK_FILE,
    layout.LOG_START_OFFSET_CHECKPOINT: layout.CHECKPOINT_LOCK_FILE,
    layout.CLEANER_OFFSET_CHECKPOINT: layout.CLEANER_CHECKPOINT_LOCK_FILE,
}


def edit_checkpoint(log_dir: str, name: str, edit: Callable[[dict], None]) -> None:
    """Read one of the log dir's offset checkpoints, ``edit`` its entries in place, write it back atomically,
    under the lock every writer of that file takes. An unreadable file is rewritten from its readable entries
    (none), as a checkpoint writer does."""
    with FileLock(os.path.join(log_dir, _CHECKPOINT_LOCKS[name])):
        f = OffsetCheckpointFile(os.path.join(log_dir, name))
        entries, _err = f.read_or_empty()
        before = dict(entries)
        edit(entries)
        if entries != before:
            f.write(entries)


def forget_partition(log_dir: str, tp: tuple[str, int]) -> None:
    """Remove ``tp``'s entries from the three offset checkpoints of ``log_dir``."""
    for name in _CHECKPOINT_LOCKS:
        edit_checkpoint(log_dir, name, lambda entries: entries.pop(tp, None))


def delete_partition(log_dir: str, topic: str, partition: int, now_ms: int, *,
                     claim_timeout_s: float = CLAIM_TIMEOUT_S) -> str | None:
    """Delete the partition ``<log_dir>/<topic>-<partition>`` (steps 1-4 of the module docstring); returns the
    name of its ``-delete`` folder (None when a deletion left half done had renamed it already). Raises :class:`PartitionNotFoundError` when it is not there and
    :class:`PartitionMovedError` when it moved to another log dir meanwhile."""
    name = layout.partition_dir_name(topic, partition)
    claim = CleaningClaim(log_dir, name)
    claim.acquire(claim_timeout_s)
    try:
        lock = PartitionLock(lock_path(log_dir, name))
        try:
            with lock:
                status = lock.read_state().status
                if status == MOVED:
                    raise PartitionMovedError(f"partition {name} moved away from {log_dir}")
                if status == LIVE:
                    if not os.path.isdir(os.path.join(log_dir, name)):
                        raise PartitionNotFoundError(f"partition {name} does not exist in {log_dir}")
                    lock.retire(DELETED)
                return _finish(log_dir, topic, partition, lock, claim, now_ms)
        finally:
            lock.close()
    finally:
        claim.release()


def forget_vanished(log_dirs: Iterable[str], topic: str, partition: int, now_ms: int) -> str | None:
    """Delete a partition whose folder vanished or became a file (:mod:`storage_engine.log.health`): its lock is
    retired, its checkpoint entries and engine files go, as for any deletion (a file standing where the folder was
    is left alone). Returns the log dir it was in, None when no dir has such a partition."""
    from storage_engine.log import health
    name = layout.partition_dir_name(topic, partition)
    for d in log_dirs:
        try:
            missing = {(m["topic"], m["partition"]) for m in health.missing_partitions(d)}
        except OSError:
            continue
        if (topic, partition) not in missing:
            continue
        claim = CleaningClaim(d, name)
        claim.acquire(CLAIM_TIMEOUT_S)
        try:
            lock = PartitionLock(lock_path(d, name))
            try:
                with lock:
                    if lock.read_state().status == LIVE and not os.path.isdir(os.path.join(d, name)):
                        lock.retire(DELETED)
                        logger.warning("forgetting %s in %s, whose folder is gone", name, d)
                        _finish(d, topic, partition, lock, claim, now_ms)
                        return d
            finally:
                lock.close()
        finally:
            claim.release()
    return None


def finish_deletion(log_dir: str, topic: str, partition: int, now_ms: int) -> str | None:
    """Complete a deletion a process left half done (the lock says deleted, the folder may still have its name);
    returns the ``-delete`` folder's name if the folder was renamed now. Nothing happens if the lock is live."""
    name = layout.partition_dir_name(topic, partition)
    path = lock_path(log_dir, name)
    if not os.path.exists(path):
        return None
    claim = CleaningClaim(log_dir, name)
    claim.acquire(CLAIM_TIMEOUT_S)
    try:
        lock = PartitionLock(path)
        try:
            with lock:
                if lock.read_state().status != DELETED:
                    return None
                logger.warning("completing the deletion of %s in %s, left half done", name, log_dir)
                return _finish(log_dir, topic, partition, lock, claim, now_ms)
        finally:
            lock.close()
    finally:
        claim.release()


def _finish(log_dir: str, topic: str, partition: int, lock: PartitionLock, claim: CleaningClaim,
            now_ms: int) -> str | None:
    name = layout.partition_dir_name(topic, partition)
    forget_partition(log_dir, (topic, partition))
    renamed = None
    src = os.path.join(log_dir, name)
    if os.path.isdir(src):
        renamed = layout.delete_dir_name(topic, partition)
        dst = os.path.join(log_dir, renamed)
        durable_rename(src, dst, sync=False)
        _stamp(dst, now_ms)
        fsync_dir(log_dir)
    # A swap record a dead cleaner left concerns files now in the -delete folder: it goes with the lock, as does
    # the record of offsets the partition lost.
    intent.clear(log_dir, name)
    losses.clear(log_dir, name)
    manifest.clear(log_dir, name)
    lock.unlink()
    claim.unlink()
    return renamed


def _stamp(path: str, now_ms: int) -> None:
    try:
        os.utime(path, (now_ms / 1000.0, now_ms / 1000.0))
    except OSError as exc:
        raise StorageIOError("cannot set the deletion time of", path, exc) from exc


def delete_dir_scheduled_ms(path: str) -> int:
    """When a ``-delete`` folder was deleted (its modification time, set by the deletion)."""
    return int(os.stat(path).st_mtime * 1000)


def purge_delete_dirs(log_dirs: Iterable[str], now_ms: int, delay_ms_for: Callable[[str], int], *,
                      dry_run: bool = False) -> dict:
    """Remove the ``-delete`` folders whose ``file.delete.delay.ms`` (of the topic their name starts with) has
    passed since their deletion. A folder removed halfway (a crash) is still ``-delete`` and goes next time.
    Returns ``{"removed": [...], "waiting": [...], "bytes_freed": n, "dry_run": ...}`` (paths)."""
    removed: list[str] = []
    waiting: list[dict] = []
    freed = 0
    for d in log_dirs:
        try:
            deleting = layout.scan_log_dir(d).deleting
        except OSError as exc:
            raise StorageIOError("cannot list log dir", d, exc) from exc
        for name in deleting:
            path = os.path.join(d, name)
            try:
                scheduled = delete_dir_scheduled_ms(path)
            except FileNotFoundError:
                continue
            try:
                topic, _ = layout.parse_partition_dir(name)
            except ValueError:
                topic = ""
            delay = delay_ms_for(topic)
            if now_ms - scheduled < delay:
                waiting.append({"path": path, "due_ms": scheduled + delay})
                continue
            size = _tree_size(path)
            if not dry_run:
                remove_tree(path)
            removed.append(path)
            freed += size
    return {"removed": removed, "waiting": waiting, "bytes_freed": freed, "dry_run": dry_run}


def remove_tree(path: str) -> None:
    """Remove a folder and everything in it (a missing one is fine)."""
    def onerror(_func: Callable[..., object], p: str,
                exc_info: tuple[type[BaseException], BaseException, TracebackType]) -> None:
        exc = exc_info[1]
        if isinstance(exc, FileNotFoundError):
            return
        raise StorageIOError("cannot remove", p, exc) from exc
    shutil.rmtree(path, onerror=onerror)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def _tree_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total
