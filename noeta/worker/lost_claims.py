"""After a claim whose reply was lost, the jobs that claim started (ADR-0101): its
statement committed and wrote their ToolStarted, but this worker never saw them, so none
of their calls ran here. Adopted, they are run, not settled as calls a crash cut."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from noeta.core.errors import StoreError
from noeta.core.ports.store import Claim, LoadedTask, Store

log = logging.getLogger("noeta.worker")


async def adopted_load(
    store: Store, claim: Claim, snapshot_version: str, began: datetime | None
) -> LoadedTask | None:
    """The adopted task's log, marked started by its claim when its last event is the
    ToolStarted that claim wrote: at the claim's epoch, by this worker's name, after this
    worker process began (`began`, the store's clock then). A run of the same name before
    this one (killed, restarted at once) may have run a call it started: its ToolStarted
    is older, and is settled as any crash's. None: the run loads the task itself."""
    if began is None:
        return None
    try:
        loaded = await store.load(claim.task_id, snapshot_version)
    except StoreError as error:
        log.warning("task %s: adopting (%s); its run reads it again", claim.task_id, error)
        return None
    last = loaded.events[-1] if loaded.events else None
    if (
        last is not None
        and last.type == "ToolStarted"
        and last.epoch == claim.epoch
        and last.owner == claim.worker
        and last.created_at >= began
    ):
        return replace(loaded, started_by_claim=True)
    return loaded
