"""Waiting fetches keyed by partition, as Kafka's ``DelayedOperationPurgatory`` keeps ``DelayedFetch``es.

A fetch that must wait (``min_bytes`` not met, ``max_wait_ms`` not over) waits on the partitions it reads, and only
a change to one of them wakes it: :meth:`Purgatory.appended`, called by everything that appends through this broker
(Produce, the transaction markers of the coordinator and of WriteTxnMarkers, the group coordinator's records,
DeleteRecords), or an event of the :class:`~storage_engine.server.file_watch.FileWatcher` for a change another
process made. The woken fetch learns WHICH of its partitions changed, so it re-reads those alone
(:mod:`storage_engine.server.handlers.fetch`); an append to a partition nobody waits on wakes nobody.

No change is lost between a fetch's read and its wait (Kafka's ``tryCompleteElseWatch`` checks again after
watching): every change gets the next number of a sequence and is remembered per partition
(:attr:`Purgatory.seq`); a fetch notes the sequence before it reads and :meth:`Purgatory.wait` returns at once
with the partitions changed since. Everything here runs on the event loop, but for the file watcher's
``needs_refresh``, which read threads call.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from storage_engine.server.file_watch import POLL_S, TP, FileWatcher


class _Waiter:
    __slots__ = ("future", "changed")

    def __init__(self, future: asyncio.Future[None]):
        self.future = future
        self.changed: set[TP] = set()

    def wake(self, tp: TP) -> None:
        self.changed.add(tp)
        if not self.future.done():
            self.future.set_result(None)


class Purgatory:
    def __init__(self, *, use_inotify: bool = True):
        self._waiting: dict[TP, set[_Waiter]] = {}
        self._changed_at: dict[TP, int] = {}
        self.seq = 0
        self.files = FileWatcher(self._change, use_inotify=use_inotify)
        self.waits = 0         # fetches that waited
        self.wakeups = 0       # re-reads for a change to a fetch's partition (during its wait, or since its read)

    # -- changes ------------------------------------------------------------------------------------------------
    def appended(self, topic: str, partition: int) -> None:
        """Records were appended to (or the log start of) ``topic``-``partition`` moved, through this broker."""
        self._change((topic, partition))

    def appended_all(self, partitions: Iterable[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            self._change((topic, partition))

    def _change(self, tp: TP) -> None:
        self.seq += 1
        self._changed_at[tp] = self.seq
        waiters = self._waiting.get(tp)
        if waiters:
            for w in list(waiters):
                w.wake(tp)

    def changed_since(self, keys: Iterable[TP], since: int) -> set[TP]:
        changed_at = self._changed_at
        return {tp for tp in keys if changed_at.get(tp, 0) > since}

    # -- waiting ------------------------------------------------------------------------------------------------
    async def wait(self, keys: list[TP], since: int, timeout: float) -> set[TP]:
        """Wait up to ``timeout`` seconds for a change to one of ``keys`` after sequence number ``since``; the
        partitions that changed (empty: the time ran out)."""
        changed = self.changed_since(keys, since)
        if changed:
            self.wakeups += 1
        if changed or timeout <= 0:
            return changed
        self.waits += 1
        self.files.sweep()
        waiter = _Waiter(asyncio.get_running_loop().create_future())
        for tp in keys:
            self._waiting.setdefault(tp, set()).add(waiter)
        try:
            polled = self.files.polled(keys)
            deadline = time.monotonic() + timeout
            while not waiter.future.done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await asyncio.wait((waiter.future,), timeout=min(remaining, POLL_S) if polled else remaining)
                if polled and not waiter.future.done():
                    self.files.poll(keys)
        finally:
            for tp in keys:
                waiters = self._waiting.get(tp)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiting[tp]
        if waiter.changed:
            self.wakeups += 1
        return waiter.changed

    def waiting(self) -> int:
        """How many partitions have a fetch waiting on them."""
        return len(self._waiting)

    def close(self) -> None:
        self.files.close()
