"""Whether an earlier claim's worker lived on (ADR-0080, ADR-0083): it still holds a live
claim on another task that it had, and wrote under, by a given moment. No worker registry
exists: the claims table and the logs are all a claimer knows of another worker."""

from __future__ import annotations

from datetime import datetime

from noeta.core.ports.store import Store

# How many of a worker's other live claims are read (their logs up to the moment) to see
# whether it lived on: one is enough, a few cover claims made moments before.
LIVED_ON_CLAIMS_READ = 3


async def lived_on(store: Store, task_id: str, worker: str, by: datetime) -> bool:
    """Whether `worker` holds a live claim on a task other than `task_id` that it had, and
    wrote under, by `by`: a worker restarted under the same name (a fixed --name, a pod's)
    holds only claims made after. A claim with nothing written by then is not counted."""
    now = await store.clock()
    live = [
        claim
        for claim in await store.owned_by(worker)
        if claim.task_id != task_id and claim.lease_until > now
    ]
    for claim in live[:LIVED_ON_CLAIMS_READ]:
        for event in await store.read_log(claim.task_id):
            if event.created_at > by:
                break
            if event.epoch == claim.epoch and event.owner == worker:
                return True
    return False
