"""After a claim whose reply was lost, the jobs that claim started (ADR-0101): its
statement committed and wrote their ToolStarted, but this worker never saw them, so none
of their calls ran here. Adopted, they are run, not settled as calls a crash cut. A claim
this process did run, whose run ended with its claim's fate unknown (its finish's commit
lost), is not one of those: its call ran here, and is settled as a crash's (its result,
kept for the next claimer, is recorded; the job is not called again)."""

from __future__ import annotations

import logging
from collections.abc import Container
from dataclasses import replace
from datetime import datetime

from noeta.core.errors import StoreError
from noeta.core.ports.store import Claim, ClaimKey, LoadedTask, Store

log = logging.getLogger("noeta.worker")


async def adopted_load(
    store: Store,
    claim: Claim,
    snapshot_version: str,
    began: datetime | None,
    ran_here: Container[ClaimKey],
) -> LoadedTask | None:
    """The adopted task's log, marked started by its claim when its last event is the
    ToolStarted that claim wrote: at the claim's epoch, by this worker's name, after this
    worker process began (`began`, the store's clock then). A run of the same name before
    this one (killed, restarted at once) may have run a call it started: its ToolStarted
    is older, and is settled as any crash's; so is one whose claim this process ran
    (`ran_here`). None: the run loads the task itself."""
    if began is None or claim.key in ran_here:
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
