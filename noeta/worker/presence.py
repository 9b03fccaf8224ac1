"""This worker's row in the live-worker registry (ADR-0092): what it serves and offers,
refreshed every third of a lease, deleted when it stops. One statement a round, never
one a task; with `--unrunnable-after`, a second: the tasks that waited too long."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from noeta.core.errors import StoreError
from noeta.core.ports.pin import Pin
from noeta.core.ports.worker_registry import WorkerEntry, WorkerRegistry

log = logging.getLogger("noeta.worker")


def offers_of(pins: tuple[Pin, ...] | None) -> tuple[str, ...] | None:
    """What a runner with these plugins can run: their names (a plugin at another version
    is pinned again, ADR-023); None where pins are not checked: it runs anything."""
    return None if pins is None else tuple(sorted({pin.name for pin in pins}))


class Presence:
    """Kept where the store has a registry (`capabilities.workers`); else nothing."""

    def __init__(
        self,
        registry: WorkerRegistry | None,
        entry: tuple[str, Sequence[str], tuple[str, ...] | None],
        lease_seconds: float,
        unrunnable_after: float | None,
        give_up: Callable[[str], Awaitable[None]],
    ) -> None:
        """`entry`: the worker's name, its queues and what it offers (None: anything)."""
        name, queues, offers = entry
        self.registry = registry
        self.entry = WorkerEntry(name, tuple(queues), offers)
        self.lease_seconds = lease_seconds
        self.unrunnable_after = unrunnable_after
        self.give_up = give_up

    async def keep(self) -> None:
        """Record the row now and every third of a lease (cancel to stop): it lives a
        lease, so a worker that dies stops offering within one."""
        if self.registry is None:
            return
        while True:
            try:
                await self.registry.record_worker(self.entry, self.lease_seconds)
                if self.unrunnable_after is not None:
                    queues, after = self.entry.queues, self.unrunnable_after
                    for task_id in await self.registry.overdue(queues, after):
                        await self.give_up(task_id)
            except StoreError as error:  # the claim loop reports the store's state
                log.debug("recording this worker: %s", error)
            await asyncio.sleep(self.lease_seconds / 3)

    async def leave(self) -> None:
        if self.registry is None:
            return
        with contextlib.suppress(StoreError):
            await self.registry.remove_worker(self.entry.id)
