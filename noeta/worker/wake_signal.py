"""The claim loop's wake-up: set by whatever may have made work claimable (a call heard, a
run that ended, a result delivered), waited for by the idle claim loop.

One future the claim loop awaits itself, settled by the call, the stop or the timer: the
loop resumes in the event loop's next turn after the call is heard. An `asyncio.Event`
awaited in a task of its own under `asyncio.wait` took three turns (the task's, the
wait's, the loop's), each a cold pass through the event loop on an idle worker's pickup
(ADR-0132)."""

from __future__ import annotations

import asyncio
from typing import Any


class WakeSignal:
    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self, seconds: float, stopping: asyncio.Future[Any]) -> bool:
        """Until set (now or later), `stopping` is done, or `seconds` pass; False
        only when the time ran out first."""
        if self._set or stopping.done():
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timed_out = False

        def expire() -> None:
            nonlocal timed_out
            if not waiter.done():
                timed_out = True
                waiter.set_result(None)

        def stopped(_: object) -> None:
            if not waiter.done():
                waiter.set_result(None)

        self._waiter = waiter
        timer = loop.call_later(seconds, expire)
        stopping.add_done_callback(stopped)
        try:
            await waiter
        finally:
            self._waiter = None
            timer.cancel()
            stopping.remove_done_callback(stopped)
        return not timed_out
