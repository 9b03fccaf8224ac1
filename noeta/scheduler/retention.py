"""Retention run by the scheduler (`noeta scheduler --retain DURATION`): every so often it
prunes the tasks that finished longer ago than DURATION, as `noeta db prune` would.

Beside any number of schedulers, one prune runs at a time: the others find the store's
prune lock taken and look again later. A store error is logged, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta

from noeta.core.errors import StoreError
from noeta.core.ports.retention import PruneRunning, Pruning

log = logging.getLogger("noeta.scheduler")

# How often a scheduler looks for finished tasks to prune: retention is measured in hours
# and days, so a quarter of an hour late is nothing, and an idle store is asked little.
RETENTION_EVERY_SECONDS = 900.0


@dataclass
class Retention:
    store: Pruning
    older_than: timedelta
    every_seconds: float = RETENTION_EVERY_SECONDS

    async def run(self, stop: asyncio.Event) -> None:
        """Prune, then wait `every_seconds`; until `stop`, which also ends a running prune
        where it is (each batch is one statement in its own transaction: none is half
        done), so a stopping scheduler never waits for a long prune."""
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                pruning = asyncio.ensure_future(self.prune_once())
                await asyncio.wait({pruning, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not pruning.done():
                    pruning.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pruning
                    return
                await asyncio.wait({stopped}, timeout=self.every_seconds)
        finally:
            stopped.cancel()

    async def prune_once(self) -> None:
        try:
            counts = await self.store.prune_finished(self.older_than)
        except PruneRunning:
            log.info("retention: another prune is running; looking again later")
            return
        except StoreError as error:
            log.warning("retention: %s; looking again later", error)
            return
        if counts.tasks:
            log.info(
                "retention: pruned %d finished tasks (%d events) older than %s",
                counts.tasks,
                counts.events,
                self.older_than,
            )
