"""What maintenance cannot read: a partition whose folder became a file or vanished, a segment file that is no file.

A maintenance job must not stay green over a partition it could not look at (ARCHITECTURE.md section 6). Two checks:

* :func:`missing_partitions`: the partitions a log dir's checkpoint files (``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``) list, or whose partition lock the engine keeps, while no folder of theirs is
  there: the path is a file (or anything but a folder), or nothing. A partition the engine deleted or moved away
  is not one of them (its lock is retired, then removed, and its entries leave the files first). The checkpoint
  writes keep the entries of these partitions (:func:`keeps_entries`): the evidence stays, and the partition is
  reported by every run, until an operator restores the folder or deletes the partition through the engine
  (``delete-topic``, which forgets it: :func:`storage_engine.log.deletion.forget_vanished`).
* :func:`unreadable_files`: the segment files of a partition folder (``.log``, indexes, snapshots) that are not
  regular files (a directory in place of a ``.log``, a broken link): one ``scandir`` of the folder, no ``stat``
  per file. :func:`check_partition` raises :class:`PartitionUnreadableError` naming them.

Both only read. The jobs of :mod:`storage_engine.jobs` report what they find as failures of the partition.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from typing import Protocol, TypedDict

from storage_engine import layout
from storage_engine.durable import file_kind
from storage_engine.errors import PartitionUnreadableError, StorageIOError
from storage_engine.log.locks import LIVE, lock_path, peek_state
from storage_engine.segment.checkpoint import OffsetCheckpointFile

TopicPartition = tuple[str, int]
_LISTING_CHECKPOINTS = (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT)
_SEGMENT_FILES = layout.SEGMENT_SUFFIXES + (layout.SNAPSHOT_SUFFIX,)


class MissingPartition(TypedDict):
    topic: str
    partition: int
    log_dir: str
    path: str
    reason: str


def _kind(path: str) -> str | None:
    """None when ``path`` is a folder; else what it is ("nothing" when there is nothing)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "nothing" if not os.path.lexists(path) else "a symbolic link to nothing"
    except OSError as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"
    return None if stat.S_ISDIR(st.st_mode) else file_kind(st.st_mode)


def _known(log_dir: str, name: str) -> bool:
    """Whether the engine keeps a live lock of partition folder ``name`` in ``log_dir`` (it loaded it once)."""
    try:
        state = peek_state(lock_path(log_dir, name))
    except StorageIOError:
        return True
    return state is not None and state.status == LIVE and state.generation > 0


def missing_partitions(log_dir: str) -> list[MissingPartition]:
    """The partitions of ``log_dir`` whose folder is not there (see the module docstring), sorted. Read-only; a
    dir that cannot be listed raises ``OSError``."""
    listing = layout.scan_log_dir(log_dir)
    present = {tp for _n, tp in listing.partitions}
    # A move into this dir writes the partition's lock (live) before its -future folder takes the final name: a
    # partition with a -future folder here is being moved in (or the move is finished by the next load), not lost.
    moving_in = {tp for _n, tp in listing.futures}
    listed: dict[TopicPartition, list[str]] = {}
    for name in _LISTING_CHECKPOINTS:
        try:
            entries, _err = OffsetCheckpointFile(os.path.join(log_dir, name)).read_or_empty()
        except StorageIOError:
            continue
        for tp in entries:
            listed.setdefault(tp, []).append(name)
    for name in listing.foreign_files:       # a file where a folder of a partition the engine knows was
        try:
            tp = layout.parse_partition_dir(name)
            layout.validate_topic(tp[0])
        except ValueError:
            continue
        if name == layout.partition_dir_name(*tp) and _known(log_dir, name):
            listed.setdefault(tp, [])
    out: list[MissingPartition] = []
    for tp, files in sorted(listed.items()):
        if tp in present or tp in moving_in:
            continue
        name = layout.partition_dir_name(*tp)
        path = os.path.join(log_dir, name)
        kind = _kind(path)
        if kind is None:
            continue                        # a folder now (created meanwhile)
        if kind == "nothing":
            if not _known(log_dir, name):
                continue                    # deleted or moved by the engine (its lock retired or gone)
            where = " and ".join(files) if files else "the engine's partition lock"
            reason = (f"partition {name} vanished from {log_dir}: {where} list(s) it, but its folder is gone; "
                      f"restore the folder, or forget the partition with delete-topic --topic {tp[0]} "
                      f"--partition {tp[1]}")
        else:
            reason = (f"partition {name} cannot be read in {log_dir}: {path} is {kind}, not a folder; restore the "
                      f"folder, or move the file away and delete the partition with delete-topic --topic {tp[0]} "
                      f"--partition {tp[1]}")
        out.append({"topic": tp[0], "partition": tp[1], "log_dir": log_dir, "path": path, "reason": reason})
    return out


def why_missing(log_dirs: Iterable[str], tp: TopicPartition) -> PartitionUnreadableError | None:
    """The error saying why ``tp`` is missing from ``log_dirs`` (None when no dir lists it)."""
    for d in log_dirs:
        try:
            found = missing_partitions(d)
        except OSError:
            continue
        for m in found:
            if (m["topic"], m["partition"]) == tp:
                return PartitionUnreadableError(m["reason"])
    return None


def keeps_entries(log_dir: str, tp: TopicPartition) -> bool:
    """Whether a checkpoint write keeps the entries of ``tp``, whose folder is not in ``log_dir``: the engine still
    keeps it live there (it vanished), or something else stands where its folder was."""
    name = layout.partition_dir_name(*tp)
    kind = _kind(os.path.join(log_dir, name))
    if kind is None:
        return True
    return kind != "nothing" or _known(log_dir, name)


class _Folder(Protocol):
    dir: str
    name: str


def unreadable_files(dir_path: str) -> list[str]:
    """``"<path> (<what it is>)"`` for each segment file of the folder that is not a regular file."""
    out = []
    try:
        entries = list(os.scandir(dir_path))
    except OSError as exc:
        return [f"{dir_path} ({type(exc).__name__}: {exc})"]
    for entry in entries:
        if layout.named_offset(entry.name) is None or not entry.name.endswith(_SEGMENT_FILES):
            continue
        try:
            if entry.is_file():
                continue
            kind = file_kind(entry.stat(follow_symlinks=False).st_mode)
        except OSError as exc:
            kind = f"unreadable: {type(exc).__name__}: {exc}"
        out.append(f"{entry.path} ({kind})")
    return sorted(out)


def check_partition(log: _Folder) -> None:
    """Raise :class:`PartitionUnreadableError` when a segment file of ``log`` is no regular file."""
    bad = unreadable_files(log.dir)
    if bad:
        raise PartitionUnreadableError(f"partition {log.name} has {len(bad)} unreadable segment file(s), not "
                                       f"maintained: {'; '.join(bad[:5])}" + ("; ..." if len(bad) > 5 else ""))
