"""Waiting for tasks to finish: one `FinishWatcher` per client shares a single listener
(PostgreSQL LISTEN noeta_finished) among every waiting call, fanning its notices out;
a poll is the safety net (and sqlite's only way)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from noeta.core.errors import ResultTimeout, UnknownTask
from noeta.core.ports.store import Store, TaskRecord

# Without notices a poll is all there is; with them it only covers a lost notice.
POLL_SECONDS = 0.2
POLL_SECONDS_WITH_NOTICES = 2.0
ANY_TASK = "*"  # a (re)started listener: anything before it was not announced
# Rows read for waiting calls at once: 300 calls waiting take one pool connection, not
# the whole pool (what a client holds stays its pool and one listener).
READS_AT_ONCE = 1


class FinishWatcher:
    """The waiting calls of one client. The listener starts with the first call that has
    to wait and stops (its connection closed) when the last one leaves; each call reads
    its row before waiting, once the listener hears, so no finish falls between."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._notices = store.capabilities.finishes
        # Where a finish is announced only once awaited (PostgreSQL, ADR-0087).
        self._await_finish = store.capabilities.await_finish
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self.reads = asyncio.Semaphore(READS_AT_ONCE)  # also for what `result` reads after

    @property
    def waiting(self) -> int:
        """How many calls wait (their row read, not finished)."""
        return sum(len(events) for events in self._waiters.values())

    async def wait_finished(self, task_id: str, within: float | None) -> TaskRecord:
        """The task's row once it has finished; ResultTimeout after `within` seconds,
        UnknownTask if no task has the id."""
        deadline = None if within is None else time.monotonic() + within
        record = await self._read(task_id)  # finished already: no listener needed
        if record.status.finished:
            return record
        heard = asyncio.Event()
        self._add(task_id, heard)
        try:
            every = POLL_SECONDS
            if self._notices is not None:
                every = POLL_SECONDS_WITH_NOTICES
                # Looking before the LISTEN took effect could miss a finish in between.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._listening.wait(), _bounded(every, deadline))
            return await self._poll(task_id, within, deadline, heard, every)
        finally:
            await self._remove(task_id, heard)

    async def close(self) -> None:
        """Stop listening (the client closes; its calls still waiting are cancelled)."""
        self._waiters.clear()
        await self._stop_listening()

    async def _poll(
        self,
        task_id: str,
        within: float | None,
        deadline: float | None,
        heard: asyncio.Event,
        every: float,
    ) -> TaskRecord:
        marked = self._await_finish is None
        while True:
            heard.clear()
            if not marked and self._listening.is_set():
                # Once listening: from the mark on, this task's finish is announced.
                marked = True
                if await self._mark(task_id):
                    return await self._read(task_id)  # it finished before the mark
            else:
                record = await self._read(task_id)
                if record.status.finished:
                    return record
            if deadline is not None and deadline - time.monotonic() <= 0:
                raise ResultTimeout(task_id, within or 0.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.wait(), _bounded(every, deadline))

    async def _mark(self, task_id: str) -> bool:
        """Mark the task awaited, once listening: its finish from now on is announced.
        Whether it has finished already."""
        if self._await_finish is None:
            return False
        async with self.reads:
            finished = await self._await_finish(task_id)
        if finished is None:
            raise UnknownTask(task_id)
        return finished

    async def _read(self, task_id: str) -> TaskRecord:
        async with self.reads:
            record = await self._store.get_task(task_id)
        if record is None:
            raise UnknownTask(task_id)
        return record

    def _add(self, task_id: str, heard: asyncio.Event) -> None:
        self._waiters.setdefault(task_id, set()).add(heard)
        if self._notices is not None and self._listener is None:
            self._listening.clear()
            self._listener = asyncio.create_task(self._listen(self._notices()))

    async def _remove(self, task_id: str, heard: asyncio.Event) -> None:
        events = self._waiters.get(task_id)
        if events is not None:
            events.discard(heard)
            if not events:
                del self._waiters[task_id]
        if not self._waiters:
            await self._stop_listening()

    async def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        self._listening.clear()
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener  # its connection is closed when this returns

    async def _listen(self, notices: AsyncIterator[str]) -> None:
        async for task_id in notices:
            if task_id == ANY_TASK:
                # (Re)connected: a finish before it was not announced; every call looks.
                self._listening.set()
                for events in self._waiters.values():
                    for heard in events:
                        heard.set()
            for heard in self._waiters.get(task_id, ()):
                heard.set()


def _bounded(wait: float, deadline: float | None) -> float:
    """`wait`, cut to what is left before `deadline` (not below 0)."""
    if deadline is None:
        return wait
    return max(0.0, min(wait, deadline - time.monotonic()))
