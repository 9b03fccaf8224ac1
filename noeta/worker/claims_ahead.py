"""A busy worker's next tasks, claimed while its runs are in flight (ADR-0158).

A worker whose claims come back full and whose runs are short claims its next batch as soon
as every slot is busy, not once a slot frees: the claim's round trip and commit overlap the
runs' work, and each slot that frees starts a task at once. Without it one process of a
drain keeps one core busy, the worker's Python and the server's rounds taking turns.

Only while it pays and cannot hoard: the last claim filled every free slot (a backlog),
the runs lately took no longer than SHORT_RUN_SECONDS on average (an agent task waiting on
a real model takes seconds: nothing to gain there), and the claim was the plain one (a
claim that starts jobs starts them, ADR-0124). A task claimed ahead that no slot took
within AHEAD_WAIT_SECONDS is handed back to whoever claims next. The claim skips the
queues with settings, whose limits would count a waiting task as running.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from noeta.core.ports.store import MAX_CLAIM_BATCH, Claim, ClaimedTask, ClaimKey

# Runs this short on average make the claim's round trip a large part of a slot's cycle.
SHORT_RUN_SECONDS = 0.1
# How long a task claimed ahead may wait for a slot before it is handed back.
AHEAD_WAIT_SECONDS = 1.0
# The weight of the latest run in the runs' moving average.
_LATEST = 0.25


class ClaimsAhead:
    """The tasks claimed ahead, waiting for a slot, and whether to claim more."""

    def __init__(self, concurrency: int) -> None:
        self.size = min(concurrency, MAX_CLAIM_BATCH)
        self.waiting: deque[ClaimedTask] = deque()
        self._backlog = False  # the last claim filled every slot it was sent for
        self._run_seconds: float | None = None  # the runs' moving average
        self._until = 0.0  # the waiting tasks are handed back at this loop time

    def claimed(self, backlog: bool) -> None:
        """What the claim loop's own claim found: `backlog` if it was a plain claim that
        filled every free slot."""
        self._backlog = backlog

    def timing(self, run: asyncio.Future[Any]) -> None:
        """Time `run`, just started, to its end."""
        began = time.monotonic()
        run.add_done_callback(lambda _: self.ran(time.monotonic() - began))

    def ran(self, seconds: float) -> None:
        """A run ended after `seconds`."""
        average = self._run_seconds
        self._run_seconds = seconds if average is None else average + _LATEST * (seconds - average)

    @property
    def wanted(self) -> bool:
        """Whether to claim ahead now (asked with every slot busy)."""
        short = self._run_seconds is not None and self._run_seconds <= SHORT_RUN_SECONDS
        return self._backlog and short and not self.waiting

    def took(self, claimed: list[ClaimedTask], now: float) -> None:
        """A claim ahead came back with `claimed` (at loop time `now`); one that did not
        come back full says the backlog is gone."""
        self.waiting.extend(claimed)
        self._until = now + AHEAD_WAIT_SECONDS
        self._backlog = len(claimed) == self.size

    def wait_seconds(self, now: float) -> float | None:
        """How long the claim loop may wait for a slot before the waiting tasks are handed
        back; None: none waits."""
        return max(0.0, self._until - now) if self.waiting else None

    def next(self) -> ClaimedTask | None:
        """The task to start in the slot just taken; None: claim instead."""
        return self.waiting.popleft() if self.waiting else None

    def drop(self, key: ClaimKey) -> bool:
        """Forget the waiting task of `key` (its claim was lost); whether one waited."""
        for each in self.waiting:
            if each.claim.key == key:
                self.waiting.remove(each)
                return True
        return False

    def task_ids(self) -> set[str]:
        return {each.claim.task_id for each in self.waiting}

    def keys(self) -> set[ClaimKey]:
        return {each.claim.key for each in self.waiting}

    def take_all(self) -> list[Claim]:
        """Every waiting claim, to hand back; none is claimed ahead until a full claim."""
        claims = [each.claim for each in self.waiting]
        self.waiting.clear()
        self._backlog = False
        return claims
