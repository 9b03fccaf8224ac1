"""The client's calls in flight, so that closing it under load says so in one line and
cancels them, instead of each failing on the closed pool (a traceback per task when
`asyncio.run` shuts down, thousands of them after a `gather` of enqueues)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

log = logging.getLogger("noeta.client")

P = ParamSpec("P")
T = TypeVar("T")

# How long close() waits for the calls it cancelled: they end at their next await.
CANCELLED_CALLS_WAIT_SECONDS = 10.0


class CallsInFlight:
    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], int] = {}  # a task's calls (nested: >1)

    def started(self) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks[task] = self._tasks.get(task, 0) + 1
        return task

    def ended(self, task: asyncio.Task[Any] | None) -> None:
        if task is None:
            return
        left = self._tasks.pop(task, 1) - 1
        if left:
            self._tasks[task] = left

    async def cancel_the_rest(self) -> None:
        """Cancel the calls other tasks still have in flight and wait for them to end,
        saying how many in one line."""
        current = asyncio.current_task()
        stranded = [task for task in self._tasks if task is not current and not task.done()]
        if not stranded:
            return
        log.warning(
            "noeta client closed with %d call(s) in flight: cancelled them (await your "
            "calls before closing the client; for many jobs, enqueue_many)",
            len(stranded),
        )
        for task in stranded:
            task.cancel()
        await asyncio.wait(stranded, timeout=CANCELLED_CALLS_WAIT_SECONDS)


class Tracked(Protocol):
    _calls: CallsInFlight


S = TypeVar("S", bound=Tracked)


def tracked(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """`method`, counted in flight while it runs."""

    @functools.wraps(method)
    async def counted(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        task = self._calls.started()
        try:
            return await method(self, *args, **kwargs)
        finally:
            self._calls.ended(task)

    return counted
