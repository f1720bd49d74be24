"""storage_engine.server.eager.Started: a coroutine run to its first wait at once behaves, awaited for the rest, as
the coroutine awaited whole: its result, its errors, values sent back into it, and a timeout's cancellation, which
reaches the coroutine (its cleanup runs) and leaves nothing consumed from a stream."""
from __future__ import annotations

import asyncio

import pytest

from storage_engine.server.eager import Started

pytestmark = pytest.mark.unit


def test_a_coroutine_that_never_waits_is_done_at_once():
    async def quick() -> int:
        return 7

    started = Started(quick())
    assert started.done and started.result() == 7


def test_an_error_before_the_first_wait_is_raised_at_once():
    async def broken() -> None:
        raise ValueError("bad frame")

    with pytest.raises(ValueError, match="bad frame"):
        Started(broken())


def test_the_rest_is_awaited_as_the_coroutine_would_be():
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        seen: list[object] = []

        async def waits() -> str:
            seen.append(await first)
            await asyncio.sleep(0)                 # a bare yield to the loop
            seen.append(await second)
            return "done"

        started = Started(waits())
        assert not started.done
        loop.call_soon(first.set_result, 1)
        loop.call_later(0.01, second.set_result, 2)
        seen.append(await started)
        return seen

    assert asyncio.run(main()) == [1, 2, "done"]


def test_a_timeout_cancels_the_coroutine_and_a_stream_read_consumes_nothing():
    async def main() -> tuple[list[str], bytes]:
        cleanup: list[str] = []
        reader = asyncio.StreamReader()

        async def read_two() -> bytes:
            try:
                return await reader.readexactly(2)
            except asyncio.CancelledError:
                cleanup.append("cancelled")
                raise

        started = Started(read_two())
        reader.feed_data(b"x")                     # one byte of two: it waits
        assert not started.done
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await started
        reader.feed_data(b"y")
        return cleanup, await reader.readexactly(2)

    cleanup, left = asyncio.run(main())
    assert cleanup == ["cancelled"] and left == b"xy"
