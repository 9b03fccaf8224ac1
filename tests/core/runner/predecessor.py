"""What a test worker process does first: hand back the claims its killed predecessor (the
same worker name, run before it by the test) still holds.

The test starts one such process at a time and waits for it to exit, so whatever its name
holds belongs to a dead process. Freeing it orders the restart by the kill, not by a
lease lapsing: the lease is long enough never to lapse on a loaded machine while a live
process works towards its failpoint (issue 25, item 27).
"""

from __future__ import annotations

from noeta.core.ports.store import Store

LEASE = 600.0  # never lapses during a test; the next process frees it instead


async def free_the_dead_predecessors_claims(store: Store, worker: str) -> None:
    for claim in await store.owned_by(worker):
        if not await store.release(claim):
            raise SystemExit(f"{worker}: could not free {claim.task_id} (epoch {claim.epoch})")
