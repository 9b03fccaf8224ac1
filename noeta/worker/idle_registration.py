"""An idle worker's registration where the store wakes one worker per task (ADR-0087):
its own channel, whether its LISTEN is in force, when to register again, and when the
next timer or lapsing lease falls due (nobody announces those)."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence

from noeta.core.errors import StoreError
from noeta.core.ports.idle_workers import IdleWorkers

log = logging.getLogger("noeta.worker")


class IdleRegistration:
    def __init__(
        self,
        idle_workers: IdleWorkers,
        queues: Sequence[str],
        lease_seconds: float,
        wake: Callable[[], None],
    ) -> None:
        self._store = idle_workers
        self._queues = queues
        self._lease = lease_seconds
        self._wake = wake
        self.channel = f"noeta_wake_{secrets.token_hex(8)}"
        self._listening = False
        # Monotonic; 0: not registered, or woken (the waking took the registration).
        self._registered_until = 0.0
        self._due_at: float | None = None  # monotonic
        self._calls = 0  # heard so far: one during a registration may have taken it

    async def listen(self) -> None:
        """Wake the claim loop for each call on this worker's channel."""
        async for heard in self._store.calls(self.channel):
            if heard == "*" and not self._listening:
                log.info("listening for wake-ups")
            # "*": (re)started, a call before it was lost. A queue name: the store took
            # our registration to wake us. Either way: claim, and register again if idle.
            self._listening = self._listening or heard == "*"
            self._registered_until = 0.0
            self._calls += 1
            self._wake()

    @property
    def registered(self) -> bool:
        """Whether this worker's row may still be in the registry."""
        return self._registered_until > 0

    @property
    def needed(self) -> bool:
        """Whether this worker, idle, must register (again) before it waits: only once its
        LISTEN is in force (a call before it would be lost)."""
        return self._listening and time.monotonic() >= self._registered_until

    async def register(self, poll_seconds: float) -> bool:
        """Register; whether to claim before waiting (a task is claimable now: one whose
        creator committed between the worker's last claim and this registration)."""
        calls = self._calls
        try:
            due = await self._store.wait_idle(self.channel, self._queues, self._lease)
        except StoreError as error:
            log.warning("could not register as idle (%s); polling meanwhile", error)
            self._registered_until = time.monotonic() + poll_seconds
            return True
        self._due_at = None if due is None else time.monotonic() + due
        if calls != self._calls:
            # A call came while registering (its notice can outrun the statement's
            # answer): the row it took is gone, so this registration is not in force.
            return True
        # Refreshed at half a lease: never expired while this worker is alive and idle.
        self._registered_until = time.monotonic() + self._lease / 2
        return due == 0

    def wait_seconds(self, poll_seconds: float) -> float:
        """How long to wait for a call: the poll, or less if something falls due first
        (once: a due time that passed leaves the poll to look again)."""
        if self._due_at is None:
            return poll_seconds
        until = self._due_at - time.monotonic() + 0.005
        if until <= 0:
            self._due_at = None
        return max(0.0, min(poll_seconds, until))

    async def leave(self) -> None:
        """Leave the registry (the worker stops, or is busy); else its row expires."""
        if self._registered_until:
            self._registered_until = 0.0
            try:
                await self._store.stop_waiting(self.channel)
            except StoreError as error:
                log.info("could not leave the idle registry (%s): it expires", error)
