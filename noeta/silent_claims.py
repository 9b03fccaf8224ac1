"""A task's latest claim as `noeta.log_steps` words it when the log holds nothing of it:
the task row (its holder, epoch, lease) and what the workers registry says of the worker,
read for the web timeline and `noeta show` alike."""

from __future__ import annotations

from noeta.core.ports.store import Store, TaskRecord
from noeta.log_steps import LatestClaim, claim_that_wrote_nothing


async def silent_claim_words(store: Store, record: TaskRecord, logged_epoch: int) -> str:
    """The words for `record`'s claim if no event of its epoch is logged ("" otherwise)."""
    if record.owner is None or record.owner_epoch <= logged_epoch:
        return ""
    state, seen = None, None
    registry = store.capabilities.workers
    if registry is not None:
        for worker in await registry.listed_workers(departed=True):
            if worker.id == record.owner:
                state, seen = worker.state, worker.last_seen
    claim = LatestClaim(
        record.status.value,
        record.owner,
        record.owner_epoch,
        record.lease_until,
        record.updated_at,
        state,
        seen,
    )
    return claim_that_wrote_nothing(claim, logged_epoch, await store.clock())
