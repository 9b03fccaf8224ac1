"""An append and the claim of the task it makes claimable, in one commit where the store
can (ADR-0121): a canvas member's finish, with its canvas claimed for the member's worker
to run next, one round trip fewer a chain's link."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from noeta.core.ports.store_values import (
    Claim,
    ClaimedTask,
    Continue,
    Delivery,
    JobStarts,
    KnownLog,
    NewEvent,
    NextState,
)


@dataclass(frozen=True, slots=True)
class ClaimAfter:
    """The claim to make once an append lands: `Store.claim_and_load` of `task_id` alone
    (`only`), with these arguments, as the worker's continuing claim makes it."""

    task_id: str
    worker: str
    queues: tuple[str, ...]
    lease_seconds: float
    snapshot_version: str
    excluding: frozenset[str] = frozenset()
    offers: tuple[str, ...] | None = None
    job_starts: JobStarts | None = None
    # The task's log as the worker holds it (its kept state, ADR-0120): the claim then
    # reads only what came after it, where that is the truth (ADR-0122).
    known: KnownLog | None = None


class AppendAndClaim(Protocol):
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
        """`Store.append`, then `then`'s claim: the claim only if the append landed, never
        the other way round, and in the append's own commit where the store can. The
        appended seq, and the task claimed and read (None: it was not claimable then, or
        the claim could not be made: it is left claimable, as any task). The append's
        errors are `append`'s."""
        ...
