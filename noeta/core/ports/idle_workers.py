"""Waiting idle where a store wakes one worker per task (PostgreSQL, ADR-0087): a worker
whose claim found nothing registers, listens on its own channel, and is woken alone."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Protocol

# Marks a task awaited, so its finish is announced: True if it has finished already,
# None if no task has the id (PostgreSQL: `finishes` hears only awaited tasks).
AwaitFinish = Callable[[str], Awaitable[bool | None]]


class IdleWorkers(Protocol):
    def calls(self, channel: str) -> AsyncGenerator[str, None]:
        """The queue names sent to this worker's own channel (one task each), and "*"
        each time listening (re)starts: anything before it was not heard."""
        ...

    async def wait_idle(
        self, channel: str, queues: Sequence[str], lease_seconds: float
    ) -> float | None:
        """Register as idle for `lease_seconds` (committed on return): a task made
        claimable from now on wakes one registered worker. Returns 0 if a task of
        `queues` is claimable now (one made before the registration: claim before
        waiting), else the seconds until one falls due or a lease of theirs lapses
        (nobody announces those), None if none will."""
        ...

    async def stop_waiting(self, channel: str) -> None:
        """Leave the registry (the worker stops)."""
        ...
