"""The one crash-safety protocol of the engine: write temp -> fsync -> rename -> fsync dir.

Checkpoint files, the clean-shutdown marker, segment replacement after cleaning and asynchronous
deletion all go through these helpers, so "durable" means the same thing everywhere:

* :func:`atomic_write` - readers see the old content or the new content of a file, never a mix,
  and after it returns the new content survives a power cut.
* :func:`durable_rename` - a rename that survives a power cut (the directory entry is fsynced).
* :func:`fsync_dir` - persist directory entries (creations, renames, deletions).

Files read whole (configs, checkpoints, state records) go through :func:`read_regular_file`: a regular file
only, read with a byte limit.
"""
from __future__ import annotations

import errno
import os
import stat

from storage_engine import crashpoints
from storage_engine.errors import StorageIOError, UnsafeFileError
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


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a directory", "a character device", ...)."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "not a regular file"


def read_regular_file(path: str, limit: int) -> bytes:
    """The whole content of the regular file at ``path``, read with a bound of ``limit`` bytes.

    For every file the engine reads whole (a config, a checkpoint, a state record): opened without blocking (a
    FIFO cannot stall the open), checked with ``fstat`` after the open (a name swapped after a ``stat`` cannot
    slip a device in), and read at most ``limit + 1`` bytes (``/dev/zero`` or a file still growing cannot exhaust
    memory). Raises :class:`UnsafeFileError` ("not a regular file (a FIFO)", "too large (N bytes, limit M)");
    errors opening or reading the file are raised as the ``OSError`` they are, and a directory as the
    ``IsADirectoryError`` ``open()`` would raise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):     # as open() for reading says it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(path, f"not a regular file ({file_kind(st.st_mode)})")
        if st.st_size > limit:
            raise UnsafeFileError(path, f"too large ({st.st_size} bytes, limit {limit})")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise UnsafeFileError(path, f"too large (more than {limit} bytes, limit {limit})")
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, sync: bool = True, steps: str = "atomic", what: str = "file") -> None:
    """Replace ``path`` with ``data`` atomically: write ``<path>.tmp``, fsync it, rename, fsync the dir. ``steps``
    names the crash points (``<steps>.tmp-written``, ``<steps>.renamed``, and ``<steps>.synced`` for a caller with
    its own), ``what`` the file in an error."""
    tmp = path + TMP_SUFFIX
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        crashpoints.reached(f"{steps}.tmp-written")
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageIOError(f"cannot write {what} atomically", path, exc) from exc
    crashpoints.reached(f"{steps}.renamed")
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    if steps != "atomic":
        crashpoints.reached(f"{steps}.synced")


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


def durable_remove(path: str, what: str) -> bool:
    """Remove ``path`` and fsync its dir, so the removal survives a crash; returns whether there was a file.
    ``what`` names the file in the :class:`StorageIOError` raised when it cannot be removed."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageIOError(f"cannot remove {what}", path, exc) from exc
    fsync_dir(os.path.dirname(path) or ".")
    return True
