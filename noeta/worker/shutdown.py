"""Warm shutdown: running steps (a job's function, a tool call, a model call) may end
within the grace before their tasks are handed back (a second signal ends it early); then
the writes nobody waits for, which stop at the first that finds PostgreSQL unreachable."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from noeta.core.errors import StoreError, StoreUnreachable
from noeta.core.ports.store import Claim, Store

log = logging.getLogger("noeta.worker")


async def drain(
    runs: Sequence[asyncio.Future[Any]], grace: float, hand_back: asyncio.Event | None
) -> None:
    """Wait for `runs` to end, at most `grace` seconds; `hand_back` being set ends it."""
    if not runs or grace <= 0:
        return
    log.info("stopping: %d running task(s) may finish their step within %g s", len(runs), grace)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    told = asyncio.ensure_future((hand_back or asyncio.Event()).wait())
    pending: set[asyncio.Future[Any]] = set(runs)
    try:
        while pending and not told.done() and loop.time() < deadline:
            _, pending = await asyncio.wait(
                pending | {told}, timeout=deadline - loop.time(), return_when="FIRST_COMPLETED"
            )
            pending.discard(told)
    finally:
        told.cancel()
    if pending:
        why = "asked to hand back" if told.done() and not told.cancelled() else "the grace ended"
        log.warning("stopping: %s; cutting off %d running step(s)", why, len(pending))


class Housekeeping:
    """The writes a worker owes nobody: handing a task back, and as it stops, leaving the
    idle registry and marking itself stopped. Each lapses unwritten (the task's lease,
    the registry's row and the worker's row expire). Once a connection could not be opened
    (`StoreUnreachable`, met by one of them or by the last claim) the rest are not tried:
    through an outage each waited out the store's deadline, 10 s a task (ADR-0156)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.unreachable = False
        self._lapsing: list[str] = []  # the tasks not handed back for it

    def met(self, error: StoreError | None) -> None:
        """What the last write or claim met (None: it was written)."""
        self.unreachable = isinstance(error, StoreUnreachable)

    async def release(self, claim: Claim, why: str) -> None:
        """Hand the claim's task back to ready (nothing if it is no longer ours)."""
        if self.unreachable:
            self._lapsing.append(claim.task_id)
            return
        try:
            if await self._store.release(claim):
                log.info("handed back task %s (%s)", claim.task_id, why)
        except StoreError as error:
            self.met(error)
            log.warning(
                "could not release task %s (%s); its lease will lapse", claim.task_id, error
            )

    def report(self) -> None:
        if self._lapsing:
            log.warning(
                "stopping: PostgreSQL is unreachable: %d more task(s) not handed back (%s);"
                " each is claimed again once its lease lapses",
                len(self._lapsing),
                ", ".join(self._lapsing),
            )
