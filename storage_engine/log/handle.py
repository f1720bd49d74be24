"""What the modules doing a log's operations (:mod:`.appends`, :mod:`.reads`, :mod:`.truncation`) use of the log:
its state (:class:`~storage_engine.log.view.ViewedLog`), its clock, and the steps :class:`~storage_engine.log.log.Log`
keeps for itself (taking the lock with a fresh view, publishing the shared state, rolling, flushing).

A protocol, so that those modules depend on this description and not on the ``Log`` class that calls them.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from storage_engine.clock import Clock
from storage_engine.log.view import ViewedLog
from storage_engine.segment.segment import LogSegment


class LogHandle(ViewedLog, Protocol):
    topic: str
    clock: Clock

    @property
    def active_segment(self) -> LogSegment: ...

    @property
    def segments(self) -> list[LogSegment]: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def locked(self) -> AbstractContextManager[Any]: ...

    def refresh(self) -> None: ...

    def _unpark_for_read(self) -> None: ...

    def _publish(self, *, bump: bool) -> None: ...

    def _max_segment_ms(self) -> int: ...

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> bool: ...

    def _roll_locked(self, now: int, base: int | None = None) -> LogSegment: ...

    def _flush_locked(self, offset: int, now: int, bump: bool = False) -> None: ...
