"""Offline log dirs (Kafka's ``LogDirFailureChannel``): an I/O error in one log dir takes that dir offline.

Kafka runs one broker per log dir set; when an operation on a log hits an ``IOException``, the broker marks the
log dir offline and every partition in it becomes unavailable (``KafkaStorageException``), while partitions in
the other dirs keep serving. Here the channel belongs to a ``LogManager`` (one per process, usually): the first
failing operation raises its own error (which names the file and the OS error) and takes the dir offline; every
later operation on a log of that dir raises :class:`LogDirOfflineError` naming the dir and that first error. A
new ``LogManager`` probes the dir again when it opens.

What counts as a failure of the *dir* rather than of one file is decided by the OS error number: a device error
(``EIO``, ``ENXIO``, ``ENODEV``, ``ESTALE``), a dir that became unreadable or read-only (``EACCES``, ``EPERM``,
``EROFS``), a full disk or quota (``ENOSPC``, ``EDQUOT``, as Kafka), a path that stopped being a folder
(``ENOTDIR``, ``ELOOP``). A file in the way of a rename (``EISDIR``, ``EEXIST``, ``ENOTEMPTY``), a name that is
gone (``ENOENT``: deletions and moves are followed instead) or too many open files are not.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections.abc import Iterator
from typing import Protocol

from storage_engine.errors import LogDirOfflineError, StorageIOError

logger = logging.getLogger(__name__)

DIR_FAILURE_ERRNOS = frozenset({errno.EIO, errno.ENXIO, errno.ENODEV, errno.ESTALE, errno.EACCES, errno.EPERM,
                                errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.ELOOP})


def os_error_of(exc: BaseException) -> OSError | None:
    """The ``OSError`` at the root of ``exc`` (itself, or the cause of a :class:`StorageIOError`)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, OSError):
            return cur
        cur = cur.__cause__
        seen += 1
    return None


def is_dir_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the log dir itself failed (see the module docstring)."""
    if not isinstance(exc, (OSError, StorageIOError)):
        return False
    err = os_error_of(exc)
    return err is not None and err.errno in DIR_FAILURE_ERRNOS


class GuardedLog(Protocol):
    """What :meth:`LogDirFailureChannel.guard` reads of a log."""
    log_dir: str
    name: str


class LogDirFailureChannel:
    """The log dirs taken offline, with the error that did it. Thread-safe."""

    def __init__(self) -> None:
        self._offline: dict[str, str] = {}
        self._lock = threading.Lock()

    def is_offline(self, log_dir: str) -> str | None:
        """The reason ``log_dir`` is offline, or None."""
        return self._offline.get(log_dir)

    def offline_dirs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._offline)

    def mark_offline(self, log_dir: str, reason: str) -> None:
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline[log_dir] = reason
        logger.error("log dir %s is offline: %s; its partitions are unavailable", log_dir, reason)

    def check(self, log_dir: str, what: str) -> None:
        reason = self._offline.get(log_dir)
        if reason is not None:
            raise LogDirOfflineError(f"log dir {log_dir} is offline ({reason}); {what} is unavailable", log_dir)

    @contextlib.contextmanager
    def guard(self, log: GuardedLog) -> Iterator[None]:
        """Around an operation on ``log`` (anything with ``log_dir`` and ``name``): refuse it while the dir is
        offline; take the dir offline when the operation fails with a dir failure, and re-raise that error."""
        self.check(log.log_dir, f"partition {log.name}")
        try:
            yield
        except (StorageIOError, OSError) as exc:
            if is_dir_failure(exc):
                self.mark_offline(log.log_dir, f"{type(exc).__name__}: {exc}")
            raise
