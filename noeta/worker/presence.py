"""This worker's row in the registry of workers (ADR-0092, ADR-0100): who it is, what it
serves and offers, its counts, refreshed every third of a lease, marked stopped when it
stops. One statement a round, never one a task; with `--unrunnable-after`, a second: the
tasks that waited too long."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from noeta.core.errors import ConfigError, StoreError
from noeta.core.ports.pin import Pin
from noeta.core.ports.worker_registry import (
    Heartbeat,
    WorkerEntry,
    WorkerRegistry,
    name_taken,
)

log = logging.getLogger("noeta.worker")


def offers_of(pins: tuple[Pin, ...] | None) -> tuple[str, ...] | None:
    """What a runner with these plugins can run: their names (a plugin at another version
    is pinned again, ADR-023); None where pins are not checked: it runs anything."""
    return None if pins is None else tuple(sorted({pin.name for pin in pins}))


def noeta_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("noeta")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


def exited_here(holder: WorkerEntry) -> bool:
    """Whether `holder` ran on this host and its process has exited (or is this one: a
    container restarted gives the new process the old one's pid)."""
    if holder.host != socket.gethostname() or holder.pid <= 0:
        return False
    if holder.pid == os.getpid():
        return True
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's process
    try:  # a killed process its parent has not reaped yet is a zombie: gone too
        with open(f"/proc/{holder.pid}/stat", "rb") as stat:
            state = stat.read(4096).rpartition(b")")[2].split()[:1]
    except OSError:
        return False  # no /proc: a process that takes a signal runs
    return state in ([b"Z"], [b"X"])


class Presence:
    """Kept where the store has a registry (`capabilities.workers`); else nothing."""

    def __init__(
        self,
        registry: WorkerRegistry | None,
        entry: tuple[str, Sequence[str], tuple[str, ...] | None, int],
        lease_seconds: float,
        unrunnable_after: float | None,
        give_up: Callable[[str], Awaitable[None]],
    ) -> None:
        """`entry`: the worker's name, its queues, what it offers (None: anything) and its
        concurrency."""
        name, queues, offers, concurrency = entry
        self.registry = registry
        self.entry = WorkerEntry(
            name,
            tuple(queues),
            offers,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=noeta_version(),
            concurrency=concurrency,
            instance=uuid.uuid4().hex,
        )
        self.lease_seconds = lease_seconds
        self.unrunnable_after = unrunnable_after
        self.give_up = give_up
        # Counted in memory as runs end; each round writes them with the row.
        self.processed = 0
        self.failed = 0
        self._registered = False

    def count(self, finished: str) -> None:
        """A run ended: `finished` is the task's end (done, failed, cancelled) or ""."""
        if finished:
            self.processed += 1
            self.failed += finished == "failed"

    async def register(self) -> None:
        """Record the row before the first claim; refuse a name another live worker holds
        (two runs under one name would adopt each other's claims). A store that cannot be
        reached now is the claim loop's to report; the rounds register later."""
        if self.registry is None:
            return
        try:
            found = await self._record()
        except StoreError as error:
            log.warning("registering this worker: %s; trying again each round", error)
            return
        self._registered = True
        holder = found.held_by
        if holder is not None and await asyncio.to_thread(exited_here, holder):
            # A restart under the same name (systemd, a container, a test harness): the
            # process that held it is gone, so its lease need not be waited out.
            log.warning(
                "worker name %r was held by pid %d on this host, which has exited: taking it",
                self.entry.id,
                holder.pid,
            )
            await self.registry.worker_stopped(holder)
            found = await self._record()
        if found.held_by is not None:
            raise ConfigError(self._refusal(found.held_by, found.clock))

    async def keep(self) -> None:
        """Record the row every third of a lease, after the registration (cancel to stop):
        it lives a lease, so a worker that dies stops offering within one."""
        if self.registry is None:
            return
        while True:
            try:
                if self._registered:
                    await asyncio.sleep(self.lease_seconds / 3)
                self._heard(await self._record())
                self._registered = True
                if self.unrunnable_after is not None:
                    queues, after = self.entry.queues, self.unrunnable_after
                    for task_id in await self.registry.overdue(queues, after):
                        await self.give_up(task_id)
            except StoreError as error:  # the claim loop reports the store's state
                log.debug("recording this worker: %s", error)
                self._registered = True  # wait a round before the next try

    async def leave(self) -> None:
        if self.registry is None:
            return
        with contextlib.suppress(StoreError):
            await self.registry.worker_stopped(self._now())

    def _now(self) -> WorkerEntry:
        return dataclasses.replace(self.entry, processed=self.processed, failed=self.failed)

    async def _record(self) -> Heartbeat:
        assert self.registry is not None
        return await self.registry.record_worker(self._now(), self.lease_seconds)

    def _heard(self, found: Heartbeat) -> None:
        """Say, once each time it happens, that this worker came back or lost its name."""
        if found.held_by is not None:
            log.error(
                "%s; this worker's row is not recorded", self._refusal(found.held_by, found.clock)
            )
        elif found.revived_from is not None:
            last = found.last_seen
            seen = "" if last is None else f" (last seen {last.astimezone(UTC):%H:%M:%S} UTC)"
            log.warning(
                "the registry had this worker %s%s: it is live again", found.revived_from, seen
            )

    def _refusal(self, holder: WorkerEntry, clock: datetime | None) -> str:
        seen = holder.last_seen
        ago = 0.0 if seen is None or clock is None else (clock - seen).total_seconds()
        return name_taken(self.entry.id, holder, ago)
