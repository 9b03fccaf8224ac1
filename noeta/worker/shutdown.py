"""Warm shutdown's wait: running steps (a job's function, a tool call, a model call) may
end within the grace before their tasks are handed back; a second signal ends it early."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

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
