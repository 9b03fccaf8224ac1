"""A worker's journal of the appends its store acknowledged: one JSON line each, written
after the ack, for the cluster run to prove every acknowledged append is in the log.

    NOETA_APPEND_JOURNAL=/path/to/journal noeta worker ...

Off unless that variable is set. A thin wrapper around any `Store`, outside the stores:
it sees only what a caller sees, so it cannot vouch for what the store did not say.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import IO, Any, cast

from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    Continue,
    Delivery,
    NewEvent,
    NewTask,
    NextState,
    Store,
)
from noeta.core.ports.store_capabilities import StoreCapabilities

ENV = "NOETA_APPEND_JOURNAL"


def journaled(store: Store) -> Store:
    """`store`, journaling its acknowledged appends if NOETA_APPEND_JOURNAL names a file."""
    path = os.environ.get(ENV)
    if not path:
        return store
    return cast(Store, JournalingStore(store, open(path, "a", encoding="ascii")))


class JournalingStore:
    """Appends pass through; each one acknowledged is a line in the journal. Everything
    else (claims, reads, `wakeups`, …) is the inner store's."""

    def __init__(self, store: Store, journal: IO[str]) -> None:
        self.inner = store
        self._journal = journal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
    ) -> int:
        last_seq = await self.inner.append(
            claim,
            expected_seq,
            events,
            take=take,
            deliveries=deliveries,
            new_tasks=new_tasks,
            next_state=next_state,
        )
        self._journaled(claim, expected_seq, events)
        return last_seq

    def _journaled(self, claim: Claim, expected_seq: int, events: Sequence[NewEvent]) -> None:
        entry = {
            "task": claim.task_id,
            "epoch": claim.epoch,
            "worker": claim.worker,
            "first_seq": expected_seq + 1,
            "types": [event.type for event in events],
        }
        # A line per ack, handed to the OS at once: a SIGKILL after it loses nothing.
        self._journal.write(json.dumps(entry) + "\n")
        self._journal.flush()

    @property
    def capabilities(self) -> StoreCapabilities:
        """The inner store's, its joint append and claim journaled as `append` is."""
        inner = self.inner.capabilities
        return inner if inner.append_and_claim is None else replace(inner, append_and_claim=self)

    async def append_and_claim(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        deliveries: Sequence[Delivery] = (),
        next_state: NextState = Continue(),
        then: ClaimAfter,
    ) -> tuple[int, ClaimedTask | None]:
        joint = self.inner.capabilities.append_and_claim
        assert joint is not None  # `capabilities` offers this only then
        landed = await joint.append_and_claim(
            claim, expected_seq, events, deliveries=deliveries, next_state=next_state, then=then
        )
        self._journaled(claim, expected_seq, events)
        return landed

    async def close(self) -> None:
        self._journal.close()
        await self.inner.close()
