"""The segment manifest: which segments a partition must hold, so that a segment lost from the middle is seen.

In a compacted topic a gap between segments is normal: cleaning a group of segments leaves one segment at the
group's base whose last records may be gone, and a group whose records all went leaves nothing. So the files
alone cannot tell a segment deleted by hand (or lost by the disk) from a cleaned one. The manifest says what
they must be: ``layout.segment_manifest_file`` (``.engine+segments+<topic>-<partition>`` in the log dir root,
outside the partition folder, which stays pure Kafka layout), a small JSON document::

    {"version": 1, "folder": "<topic>-<partition>", "folder_inode": <st_ino of the partition folder>,
     "bases": [<base offset of each segment>, ...]}

written whole and durably (temp file, fsync, rename, fsync of the log dir), always under the partition lock, by
whoever changes the set of segments. The crash protocol orders each write against the file changes so that a
crash between them never makes a false loss and never hides a real one:

* a segment **leaves** (retention, ``delete-records``' retention pass, ``accept-loss``, truncation, a
  cleaner's swap, a load cutting a log after corruption): the manifest without it is written *before* the first
  rename. A crash in between leaves a segment the manifest does not name, which the next load adopts (files
  present are never a loss), and a swap rolled back keeps its old segments the same way;
* a segment **arrives** (a roll, a full truncation's new segment, a split): the manifest naming it is written
  *after* its files are durable. A crash in between leaves a segment not named yet: adopted too.

Rolls are rare (one per ``segment.bytes``); appends never write the manifest. A full load
(:mod:`storage_engine.log.loader`) compares the manifest with the segments present: a named base that is gone
while a segment above it is present is a lost range, [that base, the next segment present) (clipped to the
recorded log start offset), recorded in the loss record (:mod:`storage_engine.log.losses`) before anything is
repaired; then the load writes the manifest of what it holds (the loss record keeps the evidence). Bases above
the last segment present are not judged: a load's recovery cuts a log's tail after corruption, as Kafka does.

No manifest, or one written for another folder (its ``folder_inode`` differs: a dir restored from a copy, a
partition deleted and created again), proves nothing: the load falls back to the evidence rules of
:mod:`storage_engine.log.losses` and starts the manifest from the files found. So a log dir written by a Kafka
broker, or by an earlier version of the engine, raises no false alarm. A partition deleted takes its manifest
with it; one moved to another log dir takes it along (the ``-future`` copy keeps its own, renamed with the folder
at the commit: a rename keeps the inode).
"""
from __future__ import annotations

import bisect
import json
import os
from collections.abc import Iterable, Sequence
from typing import Protocol

from storage_engine import layout
from storage_engine.durable import atomic_write, durable_remove, durable_rename, read_regular_file
from storage_engine.errors import StorageIOError, UnsafeFileError
from storage_engine.segment.segment import LogSegment

VERSION = 1
# 10 million segments of 20 digits: far more than any log holds.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


class ManifestLog(Protocol):
    """What the manifest reads of a log (a ``LocalLog``), under its partition lock."""
    log_dir: str
    folder: str
    dir: str

    @property
    def segments(self) -> list[LogSegment]: ...


def path_of(log_dir: str, folder: str) -> str:
    return layout.segment_manifest_file(log_dir, folder)


def _folder_inode(dir_path: str) -> int | None:
    try:
        return os.stat(dir_path).st_ino
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageIOError("cannot stat the partition folder", dir_path, exc) from exc


def read(log_dir: str, folder: str) -> tuple[list[int] | None, str | None]:
    """The bases the manifest names, sorted: ``(bases, None)``; ``(None, why)`` when it proves nothing (missing,
    unreadable, or written for another folder of this name). Read-only."""
    path = path_of(log_dir, folder)
    try:
        raw = read_regular_file(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None, "no segment manifest"
    except UnsafeFileError as exc:
        return None, f"{path}: unreadable segment manifest ({exc.reason})"
    except OSError as exc:
        raise StorageIOError("cannot read the segment manifest", path, exc) from exc
    try:
        doc = json.loads(raw.decode("utf-8"))
        bases = sorted({int(b) for b in doc["bases"]})
        inode = doc.get("folder_inode")
        inode = None if inode is None else int(inode)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return None, f"{path}: unreadable segment manifest ({type(exc).__name__}: {exc})"
    actual = _folder_inode(os.path.join(log_dir, folder))
    if inode is None or actual != inode:
        return None, f"{path}: written for another folder named {folder} (inode {inode}, now {actual})"
    return bases, None


def write(log_dir: str, folder: str, bases: Iterable[int]) -> None:
    """Replace the manifest with ``bases`` (durably; caller holds the partition lock)."""
    inode = _folder_inode(os.path.join(log_dir, folder))
    if inode is None:
        return      # the folder is gone (deleted or moved meanwhile): nothing to describe
    doc = {"version": VERSION, "folder": folder, "folder_inode": inode, "bases": sorted(set(bases))}
    atomic_write(path_of(log_dir, folder), json.dumps(doc, separators=(",", ":")).encode())


def keep(log: ManifestLog, leaving: Iterable[LogSegment]) -> None:
    """Before segments leave ``log``: the manifest names the segments that stay (see the module docstring)."""
    gone = {id(s) for s in leaving}
    write(log.log_dir, log.folder, (s.base_offset for s in log.segments if id(s) not in gone))


def grown(log: ManifestLog) -> None:
    """After a segment arrived in ``log`` (its files durable): the manifest names every segment."""
    write(log.log_dir, log.folder, (s.base_offset for s in log.segments))


def clear(log_dir: str, folder: str) -> bool:
    """Remove the manifest durably (the partition is deleted, or left this dir); returns whether there was one."""
    return durable_remove(path_of(log_dir, folder), "the segment manifest")


def rename(log_dir: str, folder: str, new_folder: str) -> None:
    """The manifest follows its folder renamed in ``log_dir`` (a move's ``-future`` copy becoming the partition)."""
    durable_rename(path_of(log_dir, folder), path_of(log_dir, new_folder), missing_ok=True)


def missing(bases: Sequence[int] | None, present: Sequence[int], log_start: int | None) -> list[tuple[int, int]]:
    """Ranges [first missing base, next segment present) of the bases the manifest names that are gone below the
    last segment present, consecutive ones merged, clipped to ``log_start`` (ranges wholly below it are none)."""
    if not bases or not present:
        return []
    have = sorted(present)
    have_set = set(have)
    out: list[tuple[int, int]] = []
    for b in bases:
        if b in have_set or b >= have[-1]:
            continue
        nxt = have[bisect.bisect_right(have, b)]
        start = b if log_start is None else max(b, log_start)
        if start >= nxt:
            continue
        if out and out[-1][1] == nxt:
            out[-1] = (min(out[-1][0], start), nxt)
        else:
            out.append((start, nxt))
    return out
