"""One model call: `ModelCalled` is durable before the request leaves; then the reply, or
the failure after the provider retries, is recorded (ending the turn in the same append
when the reply ends it); a reply this claim cannot record is kept for the next claimer."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

from noeta.core import failpoints
from noeta.core.errors import CommitUnknown, NoetaError, StoreError, StoreUnavailable
from noeta.core.ports.fleet_budgets import FleetBudgetExceeded
from noeta.core.ports.model import ModelRequest, Provider, ProviderError
from noeta.core.ports.model_limits import (
    ModelBudget,
    ModelBudgetHeld,
    ModelBudgetWait,
    estimate_tokens,
)
from noeta.core.ports.tool import Tool, spec_of
from noeta.core.retry import ModelCallFailed, send_with_retries
from noeta.core.rules import events as ev
from noeta.core.rules.next_action import EndTurn, FinishTask
from noeta.core.rules.request import build_request
from noeta.core.runner import model_budget, model_cuts, model_reply, task_budget
from noeta.core.runner.reply_streams import ReplyStream, StreamWriter
from noeta.observability import metrics, tracing


class Providers(Protocol):
    async def provider_for(self, spec: str) -> tuple[Provider, str]:
        """The provider and model name for a model spec; raises ConfigError if unusable
        (anything it opens, it opens off the event loop)."""
        ...


class ModelCallContext(model_reply.ReplyContext, Protocol):
    """What a model call needs of the task's run (the loop in task.py is the one)."""

    @property
    def providers(self) -> Providers: ...

    @property
    def tools(self) -> Mapping[str, Tool]: ...

    @property
    def streams(self) -> StreamWriter | None:
        """Where replies stream for their readers; None: this store keeps no stream."""
        ...


async def call_model(run: ModelCallContext, *, keep_claim: bool = False) -> None:
    """`keep_claim`: the task's background jobs run under this claim, so a call the budget
    does not allow yet waits for it here rather than handing the task back."""
    config = run.state.config
    assert config is not None
    try:
        provider, model_name = await run.providers.provider_for(config.model)
    except NoetaError as error:
        await run.settle([], EndTurn("failed", error=f"llm_error: {error}"))
        return
    names = config.tool_names(run.tools)
    tool_specs = tuple(spec_of(run.tools[name]) for name in names if name in run.tools)
    request = build_request(run.state, model_name, tool_specs)
    body = as_first_sent(provider, request, run.state.first_request)
    estimate = estimate_tokens(body)
    refused = task_budget.refusal(run.state, estimate)
    if refused is not None:  # not sent: the refusal, and the end or the question
        await _refuse(run, refused, provider.name, model_name)
        return
    # Within the shared limits and fleet budgets, the append that records the call takes
    # them, or hands the task back (ModelBudgetWait ends the claim), or is refused by a
    # fleet budget (the claim kept), and records nothing.
    cost = task_budget.input_cost(config.model, estimate)
    budget = model_budget.budget_for(
        run.store, provider.name, model_name, body, keep_claim, cost=cost
    )
    try:
        await _call(run, provider, model_name, request, body, estimate, budget)
    except FleetBudgetExceeded as exceeded:  # not sent, as for the task's own budget
        await _refuse(run, task_budget.fleet_refusal(exceeded, estimate), provider.name, model_name)


async def _refuse(
    run: ModelCallContext, refused: ev.BudgetExceeded, provider: str, model: str
) -> None:
    """The refusal recorded, with the task's end or, for `on_budget: ask`, its question;
    counted once it is in the log."""
    config = run.state.config
    assert config is not None
    if config.on_budget == "ask":
        await run.append([refused])  # the loop then waits for the answer
    else:
        failed = FinishTask("failed", error=task_budget.error_of(refused))
        await run.settle([refused], failed)
    metrics.model_budget_refused(provider, model, refused.budget, refused.fleet)


async def _call(
    run: ModelCallContext,
    provider: Provider,
    model_name: str,
    request: ModelRequest,
    body: bytes,
    estimate: int,
    budget: ModelBudget | None,
) -> None:
    # The span ends once the call's outcome is in the log; cut short, the next claimer
    # emits it from the record written with ModelCalled (ADR-0024).
    with run.trace.chat(provider.name, model_name, run.state) as step:
        step.input_messages(request.messages)
        called = ev.ModelCalled(hashlib.sha256(body).hexdigest(), step.record, estimate)
        while True:
            try:
                await run.append([called], budget=budget)
                break
            except (CommitUnknown, StoreUnavailable):
                # Nothing is sent. Said beside the log, or the next claimer counts the
                # call as cut by this worker's loss (ADR-0080).
                await model_cuts.keep_word_not_sent(run.store, run.sleep, run.claim)
                raise
            except ModelBudgetWait as wait:
                seconds = max(0.0, (wait.until - datetime.now(UTC)).total_seconds())
                metrics.model_budget_wait(provider.name, model_name, wait.limit, seconds)
                raise
            except ModelBudgetHeld as held:
                seconds = await model_budget.wait_in_claim(run.store, run.sleep, run.task_id, held)
                metrics.model_budget_wait(provider.name, model_name, held.limit, seconds)
        await failpoints.hit("model.after_called")
        await _send(run, provider, model_name, body, step, budget, called.request_sha256)


def as_first_sent(provider: Provider, request: ModelRequest, first_request: str) -> bytes:
    """The request's body; re-sending a call, the bytes its first ModelCalled recorded
    (SPEC §4). A worker of a release before streaming sent the request in the form that
    asks for the reply whole: its successor sends that form, not today's. A request the
    log no longer assembles the same way (a late result told since) is sent as it is now.
    """
    body = provider.encode_request(request)
    if not first_request or hashlib.sha256(body).hexdigest() == first_request:
        return body
    whole = provider.encode_request(request, stream=False)
    return whole if hashlib.sha256(whole).hexdigest() == first_request else body


async def _send(
    run: ModelCallContext,
    provider: Provider,
    model_name: str,
    body: bytes,
    step: tracing.Step,
    budget: ModelBudget | None,
    request_sha256: str,
) -> None:
    async def throttled(retry_after: float | None) -> None:
        await model_budget.throttled(run.store, provider.name, model_name, retry_after)

    stream = run.streams.open(run.task_id, run.state.model_call_open) if run.streams else None
    try:
        await _send_streamed(run, provider, body, step, budget, request_sha256, throttled, stream)
    finally:
        if stream is not None:
            stream.abandon()  # a no-op once it ended: then only the claim's loss is left


async def _send_streamed(
    run: ModelCallContext,
    provider: Provider,
    body: bytes,
    step: tracing.Step,
    budget: ModelBudget | None,
    request_sha256: str,
    throttled: Callable[[float | None], Awaitable[None]],
    stream: ReplyStream | None,
) -> None:
    on_delta = stream.delta if stream is not None else None
    try:
        reply = await send_with_retries(
            provider, body, run.sleep, task_id=run.task_id, on_throttled=throttled,
            on_delta=on_delta,
        )  # fmt: skip
    except ModelCallFailed as failed:
        step.failed(_error_type(failed.error), str(failed.error))
        closed = ev.ModelFailed(str(failed.error), failed.attempts)
        await run.settle([closed], EndTurn("failed", error=f"llm_error: {failed.error}"))
        if stream is not None:
            stream.failed()
        return
    step.replied(reply)
    replied = ev.ModelReplied(
        reply.content,
        reply.stop_reason,
        reply.usage,
        reply.provider_stop_reason,
        reply.response_id,
    )
    replied_seq = run.state.last_seq + 1  # the first of the append that records it
    try:
        model = run.state.config.model if run.state.config else ""
        await model_budget.replied(run.store, run.task_id, budget, reply.usage, model)
        await failpoints.hit("model.after_reply")
        await model_reply.record(run, replied)
    except (StoreError, asyncio.CancelledError):
        # The reply came, but this claim cannot record it (or was cancelled for its
        # loss meanwhile): kept for the next claimer, which records it rather than
        # sending the request again (ADR-0082).
        await model_reply.keep(run, request_sha256, replied)
        raise
    if stream is not None:
        stream.landed(replied_seq)


def _error_type(error: ProviderError) -> str:
    """A low-cardinality error type for spans and metrics: the HTTP status, or the kind."""
    return str(error.status) if error.status else type(error).__name__
