"""The one crash-safety protocol of the engine: write temp -> fsync -> rename -> fsync dir.

Checkpoint files, the clean-shutdown marker, segment replacement after cleaning and asynchronous
deletion all go through these helpers, so "durable" means the same thing everywhere:

* :func:`atomic_write` - readers see the old content or the new content of a file, never a mix,
  and after it returns the new content survives a power cut.
* :func:`durable_rename` - a rename that survives a power cut (the directory entry is fsynced).
* :func:`fsync_dir` - persist directory entries (creations, renames, deletions).
"""
from __future__ import annotations

import os

from storage_engine import crashpoints
from storage_engine.errors import StorageIOError
from storage_engine.layout import TMP_SUFFIX


def fsync_dir(dir_path: str) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    try:
        fd = os.open(dir_path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise StorageIOError("cannot open directory to fsync", dir_path, exc) from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StorageIOError("cannot fsync directory", dir_path, exc) from exc
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise StorageIOError("cannot open file to fsync", path, exc) from exc
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: write ``<path>.tmp``, fsync it, rename, fsync the dir."""
    tmp = path + TMP_SUFFIX
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        crashpoints.reached("atomic.tmp-written")
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageIOError("cannot write file atomically", path, exc) from exc
    crashpoints.reached("atomic.renamed")
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def durable_rename(src: str, dst: str, *, sync: bool = True, missing_ok: bool = False) -> bool:
    """Rename ``src`` to ``dst`` (same directory) and fsync the directory. Every rename of the crash protocol
    (``.cleaned`` -> ``.swap`` -> final name, ``.deleted``) goes through here; a step renaming several files passes
    ``sync=False`` and fsyncs the directory once after the last. ``missing_ok``: a missing ``src`` (a lazily
    created index) is not an error; returns whether a file was renamed."""
    try:
        os.replace(src, dst)
    except FileNotFoundError as exc:
        if not missing_ok:
            raise StorageIOError(f"cannot rename to {dst}", src, exc) from exc
        return False
    except OSError as exc:
        raise StorageIOError(f"cannot rename to {dst}", src, exc) from exc
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(dst)))
    return True
