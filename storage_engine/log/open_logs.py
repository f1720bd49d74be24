"""Descriptors bounded by work, not by partition count: at most ``max_open`` logs of a process hold open files.

A log with files open holds about six descriptors (its partition lock file, the active segment's ``.log``,
``.index`` and ``.timeindex``, the duplicates Python's memory maps keep) plus those of the sealed segments a read
opened. A broker-sized store (10,000 to 100,000 partitions) cannot hold that for every partition under a usual
``RLIMIT_NOFILE``, and most partitions are idle most of the time. So the manager keeps its logs in
least-recently-used order (:class:`OpenLogs`): a log is *used* when it takes its lock (appends, rolls,
retention, cleaning, flushes) or is read; when more than ``max_open`` logs have been used since they were last
parked, the least recently used one whose lock is not held is *parked* (:meth:`storage_engine.log.log.Log.park`):
every file closed, the lock file too. Its next use reopens them through the same reload that follows another
process's change of the segment set, so a parked log sees whatever happened meanwhile. The sealed segments a
read or a cleaning round opened are closed as soon as another log is used (a log holding 10,000 segments would
otherwise hold their files after one scan), so only the log in use has more than its active segment open.

The default bound comes from the soft ``RLIMIT_NOFILE``: a sixteenth of it in logs (about 6 descriptors each, so
under 40% of the limit), at least :data:`MIN_OPEN_LOGS`. Running out of descriptors anyway is a
:class:`~storage_engine.errors.StorageIOError` that names the limit and what to raise.
"""
from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol

MIN_OPEN_LOGS = 16
LOGS_PER_DESCRIPTOR_LIMIT = 16     # max_open = soft RLIMIT_NOFILE // 16


class ParkableLog(Protocol):
    name: str
    log_dir: str

    def park(self) -> bool: ...

    def release_sealed(self) -> None: ...


def default_max_open_logs() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(MIN_OPEN_LOGS, soft // LOGS_PER_DESCRIPTOR_LIMIT)


class OpenLogs:
    """The logs of one manager that hold open files, least recently used first. Thread-safe (logs are loaded by
    several threads); a log that another thread is using (its lock held, a read or a cleaning round under way) is
    not parked: :meth:`~storage_engine.log.local_log.LocalLog.park` refuses."""

    def __init__(self, max_open: int | None = None):
        if max_open is None:
            max_open = default_max_open_logs()
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise ValueError(f"max_open_logs must be an integer >= 1, got {max_open!r}")
        self.max_open = max_open
        # Keyed by the log object, not its folder: a log that follows its partition to another dir stays one entry.
        self._lru: OrderedDict[int, ParkableLog] = OrderedDict()
        self._mutex = threading.Lock()
        self._last: ParkableLog | None = None
        # Logs whose sealed segments used_now left open: released by the next used() (see used_now).
        self._owed: dict[int, ParkableLog] = {}
        self.parked_total = 0

    def __len__(self) -> int:
        return len(self._lru)

    def used(self, log: ParkableLog) -> None:
        """``log`` was just used (its files are, or are about to be, open): make it the most recent and park the
        least recently used beyond the bound."""
        key = id(log)
        with self._mutex:
            last, self._last = self._last, log
            owed = [other for other in self._owed.values() if other is not log and other is not last]
            self._owed.clear()
            if last is not None and last is not log:
                last.release_sealed()   # only the log in use keeps sealed segments open (reads, cleaning)
            for other in owed:
                other.release_sealed()
            self._lru[key] = log
            self._lru.move_to_end(key)
            if len(self._lru) <= self.max_open:
                return
            victims: list[tuple[int, ParkableLog]] = []
            for k, other in self._lru.items():
                if len(self._lru) - len(victims) <= self.max_open:
                    break
                if other is not log:
                    victims.append((k, other))
            for k, other in victims:
                if other.park():
                    del self._lru[k]
                    self.parked_total += 1

    def used_now(self, log: ParkableLog) -> bool:
        """:meth:`used` for a caller that must not wait nor touch a file (the broker's event loop): ``log``, already
        counted (so nothing need be parked), becomes the most recent; the sealed segments of the log used before it
        are released by the next :meth:`used` instead of now. False, having done nothing, when another thread holds
        the list or ``log`` is not in it (adding it could call for a park): the caller then goes the waiting way."""
        if not self._mutex.acquire(blocking=False):
            return False
        try:
            key = id(log)
            if key not in self._lru:
                return False
            last, self._last = self._last, log
            if last is not None and last is not log:
                self._owed[id(last)] = last
            self._owed.pop(key, None)
            self._lru.move_to_end(key)
            return True
        finally:
            self._mutex.release()

    def forget(self, log: ParkableLog) -> None:
        with self._mutex:
            self._lru.pop(id(log), None)
            self._owed.pop(id(log), None)
            if self._last is log:
                self._last = None
