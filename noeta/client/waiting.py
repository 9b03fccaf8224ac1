"""Waiting for a task to finish: woken by the store's finish notices (PostgreSQL LISTEN
noeta_finished) where it has them, with a poll as the safety net (and sqlite's only way)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from noeta.core.errors import ResultTimeout, UnknownTask
from noeta.core.store import Store, TaskRecord

# Without notices a poll is all there is; with them it only covers a lost notice.
POLL_SECONDS = 0.2
POLL_SECONDS_WITH_NOTICES = 2.0
ANY_TASK = "*"  # a (re)started listener: anything before it was not announced


async def wait_finished(store: Store, task_id: str, within: float | None) -> TaskRecord:
    """The task's row once it has finished; ResultTimeout after `within` seconds."""
    notices: Callable[[], AsyncIterator[str]] | None = getattr(store, "finishes", None)
    if notices is None:
        return await _poll(store, task_id, within, asyncio.Event(), POLL_SECONDS)
    heard = asyncio.Event()
    listening = asyncio.Event()

    async def listen() -> None:
        assert notices is not None
        async for task in notices():
            if task == ANY_TASK:
                listening.set()
            if task in (task_id, ANY_TASK):
                heard.set()

    listener = asyncio.create_task(listen())
    try:
        # Looking before the LISTEN took effect could miss a finish in between.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listening.wait(), POLL_SECONDS_WITH_NOTICES)
        return await _poll(store, task_id, within, heard, POLL_SECONDS_WITH_NOTICES)
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener


async def _poll(
    store: Store, task_id: str, within: float | None, heard: asyncio.Event, every: float
) -> TaskRecord:
    deadline = None if within is None else time.monotonic() + within
    while True:
        heard.clear()
        record = await store.get_task(task_id)
        if record is None:
            raise UnknownTask(task_id)
        if record.status.finished:
            return record
        wait = every
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(task_id, within or 0.0)
            wait = min(wait, left)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(heard.wait(), wait)
