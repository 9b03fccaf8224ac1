"""A claim's log line, `claimed task …` or `took over task …`, said only of a durable
claim: an idle pickup's after its run's first write (ADR-0131), a claim held open for that
write once their one commit is acknowledged (ADR-0136)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from noeta.core.ports.store import Claim

log = logging.getLogger("noeta.worker")  # the worker's, as before the lines moved here


def log_when_durable(claim: Claim, durable: Awaitable[bool]) -> None:
    """A held claim's line (ADR-0136), once its commit is acknowledged; none if it was
    undone: the task was never this worker's."""

    def said(future: asyncio.Future[bool]) -> None:
        if not future.cancelled() and future.exception() is None and future.result():
            log_claim(claim)

    asyncio.ensure_future(durable).add_done_callback(said)


def log_claim(claim: Claim) -> None:
    verb = "took over" if claim.taken_over else "claimed"
    log.info("%s task %s (epoch %d)", verb, claim.task_id, claim.epoch)
