"""Why an earlier claim's model call got no reply (ADR-0079): its worker was lost, or it
lived on and only the call was cut. Told apart here, with the store's I/O, and recorded
as `ModelCallCut`: the kernel weighs its caps on that."""

from __future__ import annotations

import logging

from noeta.core import events as ev
from noeta.core.runner.context import RunContext
from noeta.core.store import Store, StoredEvent

log = logging.getLogger(__name__)

_SAID = {
    "worker_lost": "its worker was lost",
    "call": "its worker lived on",
    "not_sent": "never sent",
}


async def record_why_cut(run: RunContext, seq: int) -> None:
    (called, *_) = await run.store.read_log(run.task_id, after_seq=seq - 1)
    assert called.seq == seq and called.type == "ModelCalled", called
    cause = await why_cut(run.store, run.task_id, called)
    log.warning(
        "task %s: the model call of epoch %d got no reply (%s)",
        run.task_id,
        called.epoch,
        _SAID[cause],
    )
    await run.append([ev.ModelCallCut(called.epoch, cause)])


async def why_cut(store: Store, task_id: str, called: StoredEvent) -> ev.CutCause:
    """ "call" if its worker holds a live claim on another task now (it lived on; only
    this call was cut); else "worker_lost". ("not_sent" is the kernel's, for a worker
    that keeps word it sent nothing: no worker writes that word yet.)"""
    if called.owner is None:
        return "worker_lost"
    now = await store.clock()
    others = await store.owned_by(called.owner)
    if any(claim.task_id != task_id and claim.lease_until > now for claim in others):
        return "call"
    return "worker_lost"
