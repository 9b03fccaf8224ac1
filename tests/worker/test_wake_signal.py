"""The claim loop's wake-up (ADR-0132): a set before the wait is not lost, a set, a stop
or the timeout ends it, and only the timeout says so."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from noeta.worker.wake_signal import WakeSignal

LONG = 600.0  # a wait no test sits out: only a set or a stop ends it


async def test_a_set_before_the_wait_ends_it_at_once() -> None:
    signal, stopping = WakeSignal(), asyncio.get_running_loop().create_future()
    signal.set()
    assert await signal.wait(LONG, stopping)
    assert signal.is_set()  # the wait does not clear it: the claim does
    signal.clear()
    assert not signal.is_set()


async def test_a_set_during_the_wait_ends_it() -> None:
    signal, stopping = WakeSignal(), asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(signal.set)
    assert await signal.wait(LONG, stopping)


async def test_the_stop_ends_the_wait() -> None:
    loop = asyncio.get_running_loop()
    signal, stopping = WakeSignal(), loop.create_future()
    loop.call_soon(stopping.set_result, True)
    assert await signal.wait(LONG, stopping)
    assert not signal.is_set()
    assert await signal.wait(LONG, stopping)  # stopped already: at once


async def test_the_timeout_ends_the_wait_and_says_so() -> None:
    signal, stopping = WakeSignal(), asyncio.get_running_loop().create_future()
    assert not await signal.wait(0.0, stopping)
    signal.set()  # a set after the wait ended is kept for the next
    assert await signal.wait(LONG, stopping)


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    loop = asyncio.get_running_loop()
    signal, stopping = WakeSignal(), loop.create_future()
    waiting = asyncio.create_task(signal.wait(LONG, stopping))
    await asyncio.sleep(0)  # one turn of the loop: the task begins its wait
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    signal.set()  # no waiter left to settle
    stopping.set_result(True)  # nor a callback
    assert await signal.wait(LONG, stopping)


class _CountedStop(asyncio.Future[bool]):
    """The worker's stop, counting the callbacks put on it and taken off it."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks = 0

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        self.callbacks += 1
        super().add_done_callback(fn, context=context)

    def remove_done_callback(self, fn: Any) -> int:
        removed = super().remove_done_callback(fn)
        self.callbacks -= removed
        return removed


async def test_a_long_idle_life_leaves_no_callback_on_the_stop() -> None:
    # An idle worker waits thousands of times on the same stop: each wait takes its
    # callback off again, whether the time ran out, a call came or it was cancelled.
    loop = asyncio.get_running_loop()
    signal, stopping = WakeSignal(), _CountedStop()
    for _ in range(50):
        assert not await signal.wait(0.0, stopping)
    loop.call_soon(signal.set)
    assert await signal.wait(LONG, stopping)
    signal.clear()
    waiting = asyncio.create_task(signal.wait(LONG, stopping))
    await asyncio.sleep(0)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert stopping.callbacks == 0
