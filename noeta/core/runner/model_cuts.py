"""Why an earlier claim's model call got no reply (ADR-0080): its worker was lost, or it
lived on and only the call was cut, or it never sent the request. Told apart here, with
the store's I/O, and recorded as `ModelCallCut`: the kernel weighs its caps on that. A
reply its worker kept (ADR-0082) is recorded instead: the call was not cut."""

from __future__ import annotations

import logging

from noeta.core.ports.store import Claim, LateResult, Store, StoredEvent
from noeta.core.retry import Sleep
from noeta.core.rules import events as ev
from noeta.core.runner import late_results, model_reply
from noeta.core.runner.liveness import lived_on
from noeta.core.runner.model_reply import ReplyContext

log = logging.getLogger(__name__)

# The word a worker keeps when the append of its ModelCalled had an unknown outcome: it
# sends nothing then, and says so beside the log (as a late result: insert-only, no claim
# needed). Keyed by the claim's epoch: that append ends the claim, so an open ModelCalled
# of that epoch is the one it wrote. No provider's tool call id holds a space, so the word
# never answers a tool call.
NOT_SENT_PREFIX = "noeta model call not sent, epoch "
NOT_SENT_WORD = (
    "[noeta] The append that recorded this model call had an unknown outcome, so its "
    "worker did not send the request (ADR-0080)."
)

_SAID = {
    "worker_lost": "its worker was lost",
    "call": "its worker lived on",
    "not_sent": "never sent",
}


def not_sent_call_id(epoch: int) -> str:
    return f"{NOT_SENT_PREFIX}{epoch}"


async def keep_word_not_sent(store: Store, sleep: Sleep, claim: Claim) -> None:
    """The claim's ModelCalled may have landed, but its request was not sent."""
    word = LateResult(
        claim.task_id,
        not_sent_call_id(claim.epoch),
        NOT_SENT_WORD,
        False,
        claim.epoch,
        claim.worker,
    )
    await late_results.keep_shielded(store, sleep, word)


async def record_why_cut(run: ReplyContext, seq: int) -> None:
    (called, *_) = await run.store.read_log(run.task_id, after_seq=seq - 1)
    assert called.seq == seq and called.type == "ModelCalled", called
    kept = await run.store.late_results(run.task_id)
    # The reply came but its worker could not record it: not a cut, and not sent again.
    replied = model_reply.kept_for(called, kept)
    if replied is not None:
        await model_reply.record_kept(run, replied, called.epoch)
        return
    cause = await why_cut(run.store, run.task_id, called, kept)
    log.warning(
        "task %s: the model call of epoch %d got no reply (%s)",
        run.task_id,
        called.epoch,
        _SAID[cause],
    )
    await run.append([ev.ModelCallCut(called.epoch, cause)])


async def why_cut(
    store: Store, task_id: str, called: StoredEvent, kept: list[LateResult] | None = None
) -> ev.CutCause:
    """Why: "not_sent" if its worker kept word so; "call" if its worker lived on through
    the cut; else "worker_lost". `kept`: the task's late results, if read already."""
    if kept is None:
        kept = await store.late_results(task_id)
    if (not_sent_call_id(called.epoch), called.epoch) in {(k.call_id, k.epoch) for k in kept}:
        return "not_sent"
    if called.owner is not None and await lived_on(store, task_id, called.owner, called.created_at):
        return "call"
    return "worker_lost"
