"""Keeping claims alive: one renewal statement per round for every claim held.

A claim the store does not renew is reported lost at once. When the store cannot be
reached (or refuses: any StoreError), renewal keeps trying, sooner than a round (capped
backoff with jitter), until, by this process's own clock, the lease would have run out;
then every claim is reported lost (SPEC §3). Claims are held by their key (task id and
epoch): an answer about epoch N never touches epoch N+1 of the same task. A claim made
while a round is out is renewed at once in a round of its own, never a round late.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Container

from noeta.core.errors import StoreError
from noeta.core.ports.store import Claim, ClaimKey, Store
from noeta.core.retry import backoff_seconds
from noeta.health.liveness import Liveness

log = logging.getLogger(__name__)

RENEWER = "lease renewer"


class Renewer:
    def __init__(
        self,
        store: Store,
        lease_seconds: float,
        on_lost: Callable[[Claim], None],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        liveness: Liveness | None = None,
    ) -> None:
        self.store = store
        self.liveness = liveness or Liveness()
        self.lease_seconds = lease_seconds
        self.on_lost = on_lost
        self.monotonic = monotonic
        self._held: dict[ClaimKey, tuple[Claim, float]] = {}  # key -> (claim, renewed at)
        self._failures = 0  # failed rounds in a row
        self._rounds_out = 0  # rounds sent and not answered yet
        # Claims made while a round was out (it does not carry them), renewed at once.
        self._joining: dict[ClaimKey, Claim] = {}
        self._joins: set[asyncio.Task[None]] = set()
        # Claims whose run has sent its task's finish: a round that does not renew one
        # found the finish landed (or the claim gone, which the finish's refusal tells its
        # run); it is let go, not reported lost, and its run hears from its finish.
        self._finishing: set[ClaimKey] = set()

    def add(self, claim: Claim) -> None:
        self._held[claim.key] = (claim, self.monotonic())
        if self._rounds_out:
            # The next round starts only once the one out returns, however late that is:
            # this claim's lease, which runs from its claim, could lapse first (issue 26).
            # Claims added in the same step of the loop share one round.
            self._joining[claim.key] = claim
            if len(self._joining) == 1:
                asyncio.get_running_loop().call_soon(self._renew_joining)

    def add_once_durable(
        self, claim: Claim, durable: Awaitable[bool], running: Container[ClaimKey]
    ) -> None:
        """Hold a claim left open for its run's first write (ADR-0136) once its commit is
        acknowledged, if its run still runs. A round sent before would not find it: an
        UPDATE under READ COMMITTED passes over a row whose committed version does not
        match (the previous epoch) without waiting for the claim's lock, and the claim
        would be reported lost at once."""

        def committed(outcome: asyncio.Future[bool]) -> None:
            if outcome.cancelled() or outcome.exception() is not None:
                return
            if outcome.result() and claim.key in running:
                self.add(claim)

        asyncio.ensure_future(durable).add_done_callback(committed)

    def _renew_joining(self) -> None:
        joining = {key: self._held[key] for key in self._joining if key in self._held}
        self._joining.clear()
        if joining:
            join = asyncio.ensure_future(self._renew(joining))
            self._joins.add(join)
            join.add_done_callback(self._joins.discard)

    def remove(self, claim: Claim) -> None:
        self._held.pop(claim.key, None)
        self._finishing.discard(claim.key)

    def finishing(self, claim: Claim) -> None:
        """The claim's run has sent its task's finish (its last write): renewed while the
        finish is in flight, as ever, but a round that finds it not renewable lets it go
        quietly. Reported lost, its run was cancelled waiting for a finish that had
        landed, and the log said "claim lost (the task is done)" for a task done."""
        if claim.key in self._held:
            self._finishing.add(claim.key)

    def holds(self, claim: Claim) -> bool:
        return claim.key in self._held

    async def run(self) -> None:
        """Start a round every third of the lease, from the start of the last one (a round
        answered late is followed at once), forever (cancel to stop); after a failed
        round, the next comes sooner (0.5 s, 1 s, 2 s, ... jittered, never later than a
        round), so that a store back within the lease is seen in time."""
        next_round = self.monotonic() + self.lease_seconds / 3
        try:
            while True:
                wait = max(0.0, next_round - self.monotonic())
                if self._failures:
                    wait = min(wait, backoff_seconds(self._failures, None, random.random()))
                self.liveness.turned(RENEWER, wait)  # then one statement, bounded
                await asyncio.sleep(wait)
                next_round = self.monotonic() + self.lease_seconds / 3
                await self.renew_once()
        finally:
            self.liveness.forget(RENEWER)
            for join in list(self._joins):
                join.cancel()

    async def renew_once(self) -> None:
        await self._renew(dict(self._held))

    async def _renew(self, held: dict[ClaimKey, tuple[Claim, float]]) -> None:
        if not held:
            return
        # The lease runs from when the store executes the renewal: no earlier than now.
        sent_at = self.monotonic()
        self._rounds_out += 1
        try:
            answer = await self.store.renew(
                [claim for claim, _ in held.values()], self.lease_seconds
            )
        except StoreError as error:
            self._failures += 1
            now = self.monotonic()
            for key, (claim, _) in held.items():
                current = self._held.get(key)
                if current is not None and now - current[1] >= self.lease_seconds:
                    log.warning(
                        "task %s: could not renew for a whole lease (%s); giving it up",
                        claim.task_id,
                        error,
                    )
                    self._lose(claim)
            return
        finally:
            self._rounds_out -= 1
        self._failures = 0
        renewed = {claim.key: claim for claim in answer.values()}
        lost = []
        for key, (claim, _) in held.items():
            current = self._held.get(key)
            if current is None:
                continue  # let go while the round was out: the answer is not ours to apply
            if key in renewed:
                # Two rounds may be out at once: the later send time stands.
                self._held[key] = (renewed[key], max(sent_at, current[1]))
            elif key in self._finishing:
                self.remove(claim)  # its finish is in flight: that write tells its run
            else:
                lost.append(claim)
        for claim in lost:
            self._lose(claim)
        for claim in lost:
            log.warning(
                "task %s: claim lost (epoch %d: %s)",
                claim.task_id,
                claim.epoch,
                await self._why_lost(claim),
            )

    def _lose(self, claim: Claim) -> None:
        self._held.pop(claim.key, None)
        self.on_lost(claim)

    async def _why_lost(self, claim: Claim) -> str:
        """Say who has the task now; "taken over by another worker" only if one has."""
        try:
            record = await self.store.get_task(claim.task_id)
        except StoreError:
            return "not renewed"
        if record is None:
            return "the task is gone"
        if record.status.finished:
            return f"the task is {record.status.value}"
        if record.owner_epoch > claim.epoch and record.owner not in (None, claim.worker):
            return f"taken over by another worker, {record.owner}, at epoch {record.owner_epoch}"
        if record.owner_epoch > claim.epoch:
            return f"claimed again by this worker at epoch {record.owner_epoch}"
        return f"not renewed; the task is {record.status.value}"
