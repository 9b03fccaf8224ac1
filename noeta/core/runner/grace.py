"""The grace and the correction (ADR-0083): before settling a half-done call "outcome
unknown", a claimer waits a short, bounded grace for its result when the call's worker is
known alive; a result that comes after the settle is recorded as a correction, and the
model is told of it with its next request. The settled result is never rewritten."""

from __future__ import annotations

import logging

from noeta.core import failpoints
from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import LateResult, StoredEvent
from noeta.core.rules.events import ToolResultCorrected
from noeta.core.runner.context import RunContext
from noeta.core.runner.liveness import lived_on

log = logging.getLogger(__name__)

# How long a claimer waits for the result of a half-done call whose worker lives on. A
# thawed or reconnected worker's keep landed 0.76-1.47 s after the settle in the chaos
# runs of issue 26; a few seconds cover that on a loaded machine, and bound what a
# takeover costs when the result never comes (the call ran in a worker that lives on but
# will not keep it: a result it kept before, or a keep that gave up).
GRACE_SECONDS = 5.0

# The ToolStarted of a half-done call is near the log's end (calls run one by one); the
# tail read covers it, the whole log only if not.
STARTED_TAIL_EVENTS = 32


async def wait_for_result(run: RunContext, call: ToolCall) -> LateResult | None:
    """The call's result, if its worker is known alive and keeps it within the grace."""
    started = await _started(run, call.id)
    worker = started.owner if started is not None else None
    if started is None or worker is None or worker == run.claim.worker:
        return None
    if not await lived_on(run.store, run.task_id, worker, started.created_at):
        return None  # dead, frozen or cut off from the store: nothing to wait for
    log.warning(
        "task %s: %s's worker %s lives on; waiting up to %g s for its result",
        run.task_id,
        call.id,
        worker,
        GRACE_SECONDS,
    )
    await failpoints.hit("tool.grace_wait")
    late = await run.store.wait_for_late_result(run.task_id, call.id, GRACE_SECONDS)
    if late is None:
        log.warning("task %s: no result for %s within the grace", run.task_id, call.id)
    return late


async def _started(run: RunContext, call_id: str) -> StoredEvent | None:
    tail_from = max(0, run.state.last_seq - STARTED_TAIL_EVENTS)
    for after_seq in dict.fromkeys((tail_from, 0)):
        for event in reversed(await run.store.read_log(run.task_id, after_seq=after_seq)):
            if event.type == "ToolStarted" and _call_id(event) == call_id:
                return event
    return None


def _call_id(event: StoredEvent) -> object:
    return event.data.get("call_id") if isinstance(event.data, dict) else None


async def record_corrections(run: RunContext) -> None:
    """Record the late results kept for calls settled "outcome unknown", before the next
    model call: the model hears what those calls really did. A store read only while such
    a call is uncorrected (`state.settled_unknown`); none on any other step."""
    if not run.state.settled_unknown:
        return
    kept = {result.call_id: result for result in await run.store.late_results(run.task_id)}
    corrections = [
        ToolResultCorrected(call_id, late.content, late.is_error, late.epoch)
        for call_id in run.state.settled_unknown
        if (late := kept.get(call_id)) is not None
    ]
    if not corrections:
        return
    for correction in corrections:
        log.warning(
            "task %s: %s, settled as outcome unknown, did finish (epoch %d's result came"
            " late); the model is told",
            run.task_id,
            correction.call_id,
            correction.from_epoch,
        )
    await run.append(corrections)
