"""A worker or scheduler that starts while PostgreSQL cannot be reached waits for it
(ADR-0157), as Celery's worker waits for its broker: a container platform restarts a
process that exits with ever longer pauses (Kubernetes' CrashLoopBackOff, up to 5 minutes),
so a fleet started during an outage came back minutes after the database did.

Only for `StoreUnreachable`: nothing answered, or the server cannot take a connection
yet. A server that answered and refused (a password, a database that does not exist),
a schema that is not this code's, or a bad URL still stops the process at once with its
one line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from noeta.core.errors import StoreUnreachable
from noeta.core.retry import backoff_seconds

if TYPE_CHECKING:
    from noeta.health.process import ProcessHealth

log = logging.getLogger("noeta.store")

# The longest wait between attempts: as the pool's between its reconnects (ADR-0156).
MOST_SECONDS = 5.0

Opened = TypeVar("Opened")


async def when_reachable(
    opening: Callable[[], Awaitable[Opened]], stop: asyncio.Event
) -> Opened | None:
    """What `opening` opens, once the store can be reached; None if `stop` is set first.
    A line when it cannot be (and when the reason changes), one when it can again."""
    began: float | None = None
    attempt = 0
    said = ""
    while True:
        try:
            opened = await opening()
        except StoreUnreachable as error:
            attempt += 1
            began = began or time.monotonic()
            if str(error) != said:  # the first reason, and each new one
                said = str(error)
                log.warning("%s; waiting for it (SIGTERM stops)", error)
            wait = backoff_seconds(attempt, None, random.random(), cap=MOST_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return None
            continue
        if began is not None:
            log.warning("connected to PostgreSQL after waiting %.1f s", time.monotonic() - began)
        return opened


async def served_when_reachable(
    opening: Callable[[], Awaitable[Opened]], stop: asyncio.Event, health: ProcessHealth
) -> Opened | None:
    """`when_reachable`, the process's health server answering meanwhile: alive, and not
    ready until the store is open (a platform's liveness probe must not restart a process
    for waiting). The server is closed again if the process stops or cannot start."""
    health.readiness.starting(True)
    health.start()
    try:
        opened = await when_reachable(opening, stop)
    except BaseException:  # a refusal waiting will not mend: the process ends with its line
        await health.close()
        raise
    if opened is None:
        await health.close()
    health.readiness.starting(False)
    return opened
