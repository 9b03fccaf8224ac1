"""An idle worker's registration where the store wakes one worker per task (ADR-0087):
its own channel, whether its LISTEN is in force, whether to claim or register when a slot
frees, and when the next timer or lapsing lease falls due (nobody announces those)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence

from noeta.core.errors import StoreError
from noeta.core.ports.idle_workers import IdleWorkers

log = logging.getLogger("noeta.worker")
# After a failed registration (most often a connection a database restart broke; the
# restart also emptied the unlogged registry, ADR-0133): look and register again this
# soon, not a whole poll later, while nobody can call this worker.
RETRY_SECONDS = 1.0


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
        self._retry_at = 0.0  # monotonic: after a failed registration, polling until then
        self._due_at: float | None = None  # monotonic
        self._calls = 0  # heard so far: one during a registration may have taken it
        self._called = 0  # of those, calls for a task (not a LISTEN (re)started)
        self._answered = 0  # the calls for a task heard before the last claim began
        self._answering = 0  # of them, the ones the last claim answered
        # Whether the next look for work is a claim. Else it is a registration, whose
        # report says whether to claim: a claim that found nothing, or just the task a
        # call announced, showed no more work, and an idle worker must register anyway.
        self.claim_next = True

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
            self._called += heard != "*"
            self.claim_next = True
            self._wake()
            # The claim loop first: it resumes in the loop's next turn, and this listener's
            # way back to its next notification (the driver's read armed again) would run
            # ahead of it if this loop went on now.
            await asyncio.sleep(0)

    @property
    def registered(self) -> bool:
        """Whether this worker's row may still be in the registry."""
        return self._registered_until > 0

    @property
    def needed(self) -> bool:
        """Whether this worker, idle, must register (again) before it waits: only once its
        LISTEN is in force (a call before it would be lost)."""
        now = time.monotonic()
        return self._listening and now >= self._registered_until and now >= self._retry_at

    @property
    def skips_the_claim(self) -> bool:
        """Whether to look for work without claiming: its last claim found no more work and
        no call or poll came since, and it is registered (every task made claimable since
        then called a worker) or registers now (its report tells what it missed)."""
        in_force = time.monotonic() < self._registered_until
        return not self.claim_next and (in_force or self.needed)

    async def register(self, poll_seconds: float) -> bool:
        """Register; whether to claim before waiting (a task is claimable now: one whose
        creator committed between the worker's last claim and this registration)."""
        calls = self._calls
        try:
            due = await self._store.wait_idle(self.channel, self._queues, self._lease)
        except StoreError as error:
            log.warning("could not register as idle (%s); trying again shortly", error)
            self._retry_at = time.monotonic() + min(poll_seconds, RETRY_SECONDS)
            self.claim_next = True
            return True
        self._due_at = None if due is None else time.monotonic() + due
        if calls != self._calls:
            # A call came while registering (its notice can outrun the statement's
            # answer): the row it took is gone, so this registration is not in force.
            return True  # (the call set claim_next)
        # Refreshed at half a lease: never expired while this worker is alive and idle.
        self._registered_until = time.monotonic() + self._lease / 2
        self.claim_next = self.claim_next or due == 0
        return due == 0

    def claiming(self) -> None:
        """A claim begins: it answers the calls heard so far (a call heard while it runs
        may be for a task committed too late for it to see: claim again then)."""
        self._answering = self._called - self._answered
        self._answered = self._called
        self.claim_next = False

    def claimed(self, started: int, *, failed: bool = False) -> None:
        """After a claim: claim again when a slot frees if it failed or found tasks, as
        a busy worker always did, unless all it found was the one task a call announced
        (no sign of more). It found nothing, or just that: the next look is a
        registration (ADR-0087: no lost wake-up, its report tells)."""
        self.claim_next = self.claim_next or failed or started > min(self._answering, 1)

    def waited_out(self) -> None:
        """The wait ended on the poll or a due time, not a call: claim."""
        self.claim_next = True

    def wait_seconds(self, poll_seconds: float) -> float:
        """How long to wait for a call: the poll, or less if something falls due first
        (once: a due time that passed leaves the poll to look again), or a failed
        registration may be tried again."""
        now = time.monotonic()
        wait = poll_seconds
        if self._retry_at > now:
            wait = min(wait, self._retry_at - now + 0.005)
        if self._due_at is not None:
            until = self._due_at - now + 0.005
            if until <= 0:
                self._due_at = None
            wait = min(wait, until)
        return max(0.0, wait)

    async def leave(self) -> StoreError | None:
        """Leave the registry (the worker stops, or is busy); else its row expires. The
        error that kept it, if one did (logged here)."""
        if self._registered_until:
            self._registered_until = 0.0
            try:
                await self._store.stop_waiting(self.channel)
            except StoreError as error:
                log.info("could not leave the idle registry (%s): it expires", error)
                return error
        return None
