"""Noticing what OTHER processes do to the partitions fetches read: the CLI's ``produce`` and ``end-txn``, the
maintenance tasks' retention, compaction and ``delete-records``, a second broker. This broker's own appends wake
fetches directly (:meth:`storage_engine.server.purgatory.Purgatory.appended`); a change made elsewhere reaches
this process only through the files.

A partition is *watched* from the first read of it by a fetch until it has not been read for
:data:`LINGER_S`: an inotify watch on its folder (every byte written to a segment, a file made, renamed or
removed: appends, truncation, rolls, the cleaner's swap, retention; the folder itself deleted or moved) and one on
its log dir's root, where its shared-state file lives (the log start offset and the segment generation another
process publishes: ``delete-records``, retention, a deletion). An event marks the partition *dirty* and wakes
the fetches waiting on it (:data:`on_change`). A read of a partition refreshes its view of the files
(``Log.refresh``) only when it is dirty or not watched (:meth:`FileWatcher.needs_refresh`); a watched clean
partition's view is current, because every change since its last refresh would have marked it dirty. A new watch
counts as dirty: whatever happened before it began is caught by the refresh of the read that starts it.

Where inotify is unavailable (not Linux, no instance left) or a watch is refused (``max_user_watches`` used up),
the partition is *polled*: always refreshed when read, and while a fetch waits on it, its folder, active segment and
state file are stat-ed every :data:`POLL_S` and a change (size, mtime, inode) counts as an event.
``events`` and ``polls`` count both kinds, for the listener's status.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from storage_engine import layout
from storage_engine.server import inotify

logger = logging.getLogger(__name__)

TP = tuple[str, int]
LINGER_S = 120.0      # a partition no fetch has read for this long is no longer watched
SWEEP_S = 30.0
POLL_S = 0.1          # the fallback's stat interval (the old broker re-read every log at this interval)


class _Watched:
    __slots__ = ("log", "dir", "log_dir", "wd", "used", "signature")

    def __init__(self, log: Any, wd: int | None, now: float):
        self.log = log
        self.dir: str = log.dir
        self.log_dir: str = log.log_dir
        self.wd = wd
        self.used = now
        self.signature: tuple[int, ...] | None = None


def _signature(w: _Watched) -> tuple[int, ...]:
    """What a poll compares: the folder, the active segment and the shared-state file, each (ino, size, mtime)."""
    out: list[int] = []
    paths = [w.dir, layout.partition_state_file(w.log_dir, os.path.basename(w.dir))]
    try:
        paths.append(w.log.active_segment.path)
    except Exception:    # noqa: BLE001 - a log closed meanwhile: the folder's stat tells the rest
        pass
    for path in paths:
        try:
            st = os.stat(path)
            out += [st.st_ino, st.st_size, st.st_mtime_ns]
        except OSError:
            out += [-1, -1, -1]
    return tuple(out)


class FileWatcher:
    """The watched partitions of one broker. ``needs_refresh`` is called from the read threads, ``is_current`` from
    either; everything else on the event loop."""

    def __init__(self, on_change: Callable[[TP], None], *, use_inotify: bool = True):
        self.on_change = on_change
        self._mutex = threading.Lock()
        self._use_inotify = use_inotify
        self._ino: inotify.Inotify | None = None    # opened by attach(): a broker that never serves has none
        self.inotify = False     # whether events come from inotify (else stat polling)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched: dict[TP, _Watched] = {}
        self._targets: dict[int, TP | str] = {}          # wd -> a partition, or a log dir root
        self._roots: dict[str, int] = {}                  # log dir -> wd
        self._in_root: dict[tuple[str, str], TP] = {}    # (log dir, entry name) -> partition
        self.dirty: set[TP] = set()
        self.events = 0
        self.polls = 0
        self._swept = time.monotonic()

    def attach(self) -> None:
        """Open inotify and read its events on the running loop (once; the first fetch calls it)."""
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        if not self._use_inotify:
            return
        ino = inotify.open_inotify()
        if ino is None:
            logger.info("inotify is unavailable: partitions other processes change are polled every %.0f ms while "
                        "a fetch waits on them", POLL_S * 1000)
            return
        with self._mutex:
            self._ino, self.inotify = ino, True
        self._loop.add_reader(ino.fd, self._on_readable)

    # -- read threads -------------------------------------------------------------------------------------------
    def needs_refresh(self, tp: TP, log: Any) -> bool:
        """Whether a read of ``tp`` must refresh ``log``'s view first (and start watching it if it is not)."""
        now = time.monotonic()
        with self._mutex:
            w = self._watched.get(tp)
            if w is not None and w.log is log and w.dir == log.dir:
                w.used = now
                if w.wd is None:
                    return True
                if tp in self.dirty:
                    self.dirty.discard(tp)
                    return True
                return False
            if w is not None:
                self._forget(tp)
            self._watch(tp, log, now)
            self.dirty.discard(tp)
            return True

    def is_current(self, tp: TP, log: Any) -> bool:
        """Whether ``log``'s view of ``tp`` may be read as it is: :meth:`needs_refresh` answering False, without
        its effects (a change seen stays to be taken, a partition not watched is not watched yet). The event loop's
        reads ask this; on False they leave the read, refresh included, to the read threads."""
        with self._mutex:
            w = self._watched.get(tp)
            if w is None or w.log is not log or w.dir != log.dir or w.wd is None or tp in self.dirty:
                return False
            w.used = time.monotonic()
            return True

    def _watch(self, tp: TP, log: Any, now: float) -> None:
        wd: int | None = None
        if self._ino is not None:
            try:
                if log.log_dir not in self._roots:
                    root = self._ino.add(log.log_dir)
                    self._roots[log.log_dir] = root
                    self._targets[root] = log.log_dir
                wd = self._ino.add(log.dir)
            except OSError as exc:
                logger.info("cannot watch %s (%s): polled instead while fetches wait on it", log.dir, exc)
                wd = None
        w = _Watched(log, wd, now)
        if wd is not None:
            self._targets[wd] = tp
            folder = os.path.basename(log.dir)
            self._in_root[(log.log_dir, folder)] = tp
            self._in_root[(log.log_dir, os.path.basename(layout.partition_state_file(log.log_dir, folder)))] = tp
        else:
            w.signature = _signature(w)
        self._watched[tp] = w

    def _forget(self, tp: TP) -> None:
        w = self._watched.pop(tp, None)
        if w is None:
            return
        folder = os.path.basename(w.dir)
        self._in_root.pop((w.log_dir, folder), None)
        self._in_root.pop((w.log_dir, os.path.basename(layout.partition_state_file(w.log_dir, folder))), None)
        if w.wd is not None and self._targets.get(w.wd) == tp:
            del self._targets[w.wd]
            if self._ino is not None:
                try:
                    self._ino.remove(w.wd)
                except OSError as exc:
                    logger.debug("inotify_rm_watch of %s: %s", w.dir, exc)

    # -- event loop ---------------------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        assert self._ino is not None
        changed: set[TP] = set()
        with self._mutex:
            for wd, mask, name in self._ino.read():
                self.events += 1
                if mask & inotify.IN_Q_OVERFLOW:     # events were lost: every watched partition may have changed
                    changed.update(self._watched)
                    continue
                target = self._targets.get(wd)
                if target is None:
                    continue
                tp = self._in_root.get((target, name)) if isinstance(target, str) else target
                if mask & inotify.IN_IGNORED:       # the folder is gone (deleted, moved): its next read re-watches
                    self._targets.pop(wd, None)
                    if isinstance(target, str):
                        self._roots.pop(target, None)
                    elif tp is not None and tp in self._watched:
                        self._watched[tp].wd = None
                if tp is not None:
                    changed.add(tp)
            self.dirty.update(changed)
        for tp in changed:
            self.on_change(tp)

    def poll(self, waited: Iterable[TP]) -> None:
        """Stat the polled partitions among ``waited``; a changed one counts as an event."""
        changed = []
        with self._mutex:
            for tp in waited:
                w = self._watched.get(tp)
                if w is None or w.wd is not None:
                    continue
                self.polls += 1
                sig = _signature(w)
                if sig != w.signature:
                    w.signature = sig
                    self.events += 1
                    changed.append(tp)
        for tp in changed:
            self.on_change(tp)

    def polled(self, keys: Iterable[TP]) -> bool:
        """Whether any of ``keys`` is watched by polling (its waiters must poll)."""
        watched = self._watched
        return any(tp in watched and watched[tp].wd is None for tp in keys)

    def sweep(self) -> None:
        """Stop watching the partitions no read has touched for :data:`LINGER_S`."""
        now = time.monotonic()
        if now - self._swept < SWEEP_S:
            return
        self._swept = now
        with self._mutex:
            for tp in [tp for tp, w in self._watched.items() if now - w.used > LINGER_S]:
                self._forget(tp)

    def watched(self) -> int:
        return len(self._watched)

    def close(self) -> None:
        if self._ino is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._ino.fd)
            self._ino.close()
            self._ino = None
