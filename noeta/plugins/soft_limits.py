"""`soft_time_limit`: `SoftTimeLimitExceeded` raised inside a `@noeta.tool` function, so
it can clean up before the hard `time_limit` stops it (issue 29 item 3). An async function
gets it in its task, where it awaits; a sync one in its own process, from SIGALRM."""

from __future__ import annotations

import asyncio
import signal
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from noeta.core.errors import SoftTimeLimitExceeded

T = TypeVar("T")


def exceeded(soft_limit: float) -> SoftTimeLimitExceeded:
    return SoftTimeLimitExceeded(f"ran past its soft time limit of {soft_limit}s")


async def within_soft_limit(coroutine: Coroutine[Any, Any, T], soft_limit: float) -> T:
    """Await `coroutine` in this task; at `soft_limit` seconds it gets the exception where
    it awaits. The timer cancels the task, and the cancellation (that one only: not one
    asked as well, by a cancel or the hard limit) is taken back and swapped for the
    exception, as `asyncio.timeout` swaps its own for TimeoutError."""
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    def swap(error: BaseException) -> BaseException:
        nonlocal fired
        if fired and isinstance(error, asyncio.CancelledError) and task.cancelling() == 1:
            fired = False  # delivered once; a later cancellation is a real one
            task.uncancel()
            return exceeded(soft_limit)
        return error

    timer = asyncio.get_running_loop().call_later(soft_limit, fire)
    try:
        result: T = await _delivering(coroutine, swap)
        return result
    finally:
        timer.cancel()


@types.coroutine
def _delivering(
    coroutine: Coroutine[Any, Any, T], swap: Callable[[BaseException], BaseException]
) -> Generator[Any, Any, T]:
    """`yield from coroutine`, written out so that what the task throws in (a
    cancellation) passes through `swap` on its way into the coroutine."""
    sending: Any = None
    throwing: BaseException | None = None
    while True:
        try:
            yielded = coroutine.send(sending) if throwing is None else coroutine.throw(throwing)
        except StopIteration as done:
            result: T = done.value
            return result
        sending, throwing = None, None
        try:
            sending = yield yielded
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as error:
            throwing = swap(error)


def arm_in_this_process(soft_limit: float) -> None:
    """In a sync function's own process, before the call: SIGALRM at `soft_limit`
    raises the exception in the main thread, where the function runs."""

    def raise_exceeded(_number: int, _frame: types.FrameType | None) -> None:
        raise exceeded(soft_limit)

    signal.signal(signal.SIGALRM, raise_exceeded)
    signal.setitimer(signal.ITIMER_REAL, soft_limit)


def disarm_in_this_process() -> None:
    """After the call: no alarm may interrupt the writing of its reply."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
