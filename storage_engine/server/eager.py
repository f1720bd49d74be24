"""A coroutine run up to its first wait at once, so that a caller arms a timer only for what has to wait.

The connection reads every request and writes every response under a timeout (``asyncio.timeout``: a timer
scheduled and cancelled each time). Most of those reads find their bytes already buffered and most writes find room
in the socket: they finish without waiting, and their timers were pure cost. :class:`Started` runs the coroutine
until it first waits; only then does the caller enter the timeout and await the rest.
"""
from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any


class Started:
    """A coroutine run up to its first wait, right away: ``done`` (and :meth:`result`) if it never had to wait,
    else awaitable for the rest, exactly as awaiting it would have gone on (the future it waits on is handed up to
    the task, what the task sends or throws, a cancellation included, is passed down). So the caller arms a timer
    only for what has to wait."""

    __slots__ = ("coro", "done", "_value", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, Any]):
        self.coro = coro
        self.done = False
        self._value: Any = None
        self._waiting: Any = None
        try:
            self._waiting = coro.send(None)
        except StopIteration as finished:
            self.done, self._value = True, finished.value

    def result(self) -> Any:
        return self._value

    def close(self) -> None:
        """Drop a coroutine that is waiting (it is not resumed)."""
        if not self.done:
            self.coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        if self.done:
            return self._value
        waiting = self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                self.coro.close()
                raise
            except BaseException as exc:      # noqa: BLE001 - a cancellation (or anything thrown) goes down
                try:
                    waiting = self.coro.throw(exc)
                except StopIteration as finished:
                    return finished.value
                continue
            try:
                waiting = self.coro.send(sent)
            except StopIteration as finished:
                return finished.value
