"""Keeping claims alive: one renewal statement per round for every claim held.

A claim the store does not renew was taken over: it is reported lost at once. When the
store cannot be reached (or refuses: any StoreError), renewal keeps trying, sooner than
a round (capped backoff with jitter), until, by this process's own clock, the lease would
have run out; then every claim is reported lost (SPEC §3).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from noeta.core.errors import StoreError
from noeta.core.retry import backoff_seconds
from noeta.core.store import Claim, Store

log = logging.getLogger(__name__)


class Renewer:
    def __init__(
        self,
        store: Store,
        lease_seconds: float,
        on_lost: Callable[[Claim], None],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.on_lost = on_lost
        self.monotonic = monotonic
        self._held: dict[str, tuple[Claim, float]] = {}  # task id -> (claim, renewed at)
        self._failures = 0  # failed rounds in a row

    def add(self, claim: Claim) -> None:
        self._held[claim.task_id] = (claim, self.monotonic())

    def remove(self, task_id: str) -> None:
        self._held.pop(task_id, None)

    async def run(self) -> None:
        """Renew every third of the lease, forever (cancel to stop); after a failed round,
        the next comes sooner (0.5 s, 1 s, 2 s, ... jittered, never later than a round),
        so that a store back within the lease is seen in time."""
        while True:
            wait = self.lease_seconds / 3
            if self._failures:
                wait = min(wait, backoff_seconds(self._failures, None, random.random()))
            await asyncio.sleep(wait)
            await self.renew_once()

    async def renew_once(self) -> None:
        held = dict(self._held)
        if not held:
            return
        # The lease runs from when the store executes the renewal: no earlier than now.
        sent_at = self.monotonic()
        try:
            renewed = await self.store.renew(
                [claim for claim, _ in held.values()], self.lease_seconds
            )
        except StoreError as error:
            self._failures += 1
            now = self.monotonic()
            for task_id, (claim, renewed_at) in held.items():
                if now - renewed_at >= self.lease_seconds:
                    log.warning(
                        "task %s: could not renew for a whole lease (%s); giving it up",
                        task_id,
                        error,
                    )
                    self._lose(claim)
            return
        self._failures = 0
        for task_id, (claim, _) in held.items():
            if task_id in renewed and task_id in self._held:
                self._held[task_id] = (renewed[task_id], sent_at)
            elif task_id not in renewed:
                log.warning("task %s: claim lost (taken over by another worker)", task_id)
                self._lose(claim)

    def _lose(self, claim: Claim) -> None:
        self._held.pop(claim.task_id, None)
        self.on_lost(claim)
