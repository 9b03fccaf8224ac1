"""A model reply reaches the log (ADR-0082): recorded with what follows it, by the claim
that sent the request, or, when that claim was gone before it landed, kept beside the log
and recorded by the next claimer instead of sending the request again."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Protocol

from noeta.core.ports.model_limits import ModelBudget
from noeta.core.ports.store import Claim, LateResult, Store, StoredEvent
from noeta.core.ports.store_values import KEPT_REPLY_PREFIX
from noeta.core.retry import Sleep
from noeta.core.rules import events as ev
from noeta.core.rules.next_action import EndTurn, FinishTask, next_action
from noeta.core.rules.task_state import TaskState
from noeta.core.runner import late_results
from noeta.observability import tracing

log = logging.getLogger(__name__)


class ReplyContext(Protocol):
    """What recording a reply needs of the task's run (the loop in task.py is the one)."""

    @property
    def task_id(self) -> str: ...

    @property
    def state(self) -> TaskState: ...

    def folded(self, new_events: Sequence[ev.Event]) -> TaskState: ...

    @property
    def trace(self) -> tracing.Attempt: ...

    @property
    def sleep(self) -> Sleep: ...

    @property
    def store(self) -> Store: ...

    @property
    def claim(self) -> Claim: ...

    async def append(
        self, new_events: Sequence[ev.Event], *, budget: ModelBudget | None = None
    ) -> None: ...

    async def settle(self, prefix: list[ev.Event], action: EndTurn | FinishTask) -> None: ...


def kept_reply_call_id(epoch: int) -> str:
    return f"{KEPT_REPLY_PREFIX}{epoch}"


async def record(run: ReplyContext, replied: ev.ModelReplied) -> None:
    """Append the reply; one that ends the turn ends it in the same append (and a one-shot
    task with it): nothing happens outside between them, so nothing is lost by joining them."""
    following = next_action(run.folded([replied]))
    if isinstance(following, EndTurn):
        await run.settle([replied], following)
    else:
        await run.append([replied])


async def keep(run: ReplyContext, request_sha256: str, replied: ev.ModelReplied) -> None:
    """Keep the reply for the next claimer: this claim could not record it. Shielded and
    retried as a late tool result is; never raises a store error."""
    if not run.state.model_call_open:
        return  # the reply did land (a later step of the append failed): nothing is late
    claim = run.claim
    _, data = ev.encode(replied)
    content = json.dumps({"request_sha256": request_sha256, "reply": data}, ensure_ascii=False)
    kept = LateResult(
        claim.task_id, kept_reply_call_id(claim.epoch), content, False, claim.epoch, claim.worker
    )
    await late_results.keep_shielded(run.store, run.sleep, kept)


def kept_for(called: StoredEvent, kept: Sequence[LateResult]) -> ev.ModelReplied | None:
    """The reply kept for this open ModelCalled: by the claim that wrote it (its epoch) and
    to the very request it recorded (its sha256); None if there is none that fits."""
    wanted = kept_reply_call_id(called.epoch)
    result = next((r for r in kept if r.call_id == wanted and r.epoch == called.epoch), None)
    if result is None:
        return None
    request_sha256 = called.data.get("request_sha256") if isinstance(called.data, dict) else None
    try:
        stored = json.loads(result.content)
        decoded = ev.decode("ModelReplied", stored["reply"])
        matches = stored["request_sha256"] == request_sha256
    except (ValueError, TypeError, KeyError) as error:
        log.warning("task %s: the kept reply of epoch %d is unreadable (%s); not used",
                    result.task_id, result.epoch, error)  # fmt: skip
        return None
    if not matches:
        log.warning("task %s: the kept reply of epoch %d answers another request; not used",
                    result.task_id, result.epoch)  # fmt: skip
        return None
    return decoded if isinstance(decoded, ev.ModelReplied) else None


async def record_kept(run: ReplyContext, replied: ev.ModelReplied, epoch: int) -> None:
    """Record a reply epoch `epoch`'s worker kept, through this claim's fence, as that
    worker would have: the request is not sent again, and its tokens were charged by the
    worker that received it (`model_budget.replied`), so nothing is charged here."""
    log.warning(
        "task %s: the reply to epoch %d's model call was kept by its worker; recorded from"
        " it, the request not sent again",
        run.task_id,
        epoch,
    )
    # The call's own span was emitted cut short by this claim's attempt (ADR-0024); this
    # one closes the step as a late tool result's does. Its tokens are on the reply in
    # the log, counted in the metrics by the worker that received it.
    provider, _, model = run.state.config.model.partition(":") if run.state.config else ("", "", "")
    with run.trace.chat(provider, model, run.state):
        await record(run, replied)
