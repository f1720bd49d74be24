"""Time, passed in (Kafka's ``Time``): every ``LogManager`` and ``Log`` gets a clock at construction and reads
"now" from it, never from a global.

* :data:`SYSTEM_CLOCK` - the wall clock, for applications appending and reading.
* :class:`ManualClock` - an instant that moves only when told (``set``/``advance``), for maintenance jobs that
  act as of a given ``now_ms`` (a DAG run's data interval end, the CLI's ``--now-ms``) and for tests.
"""
from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Epoch milliseconds."""


class SystemClock:
    """The wall clock."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock standing at ``now_ms`` until moved."""

    def __init__(self, now_ms: int):
        self._now_ms = int(now_ms)

    def milliseconds(self) -> int:
        return self._now_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = int(now_ms)

    def advance(self, delta_ms: int) -> None:
        self._now_ms += int(delta_ms)

    def __repr__(self) -> str:
        return f"ManualClock({self._now_ms})"


SYSTEM_CLOCK = SystemClock()


def clock_at(now_ms: int | None) -> Clock:
    """A clock standing at ``now_ms``, or at the wall clock's current instant when it is None: a maintenance job
    reads "now" once and acts as of that instant throughout."""
    return ManualClock(SYSTEM_CLOCK.milliseconds() if now_ms is None else now_ms)
