"""A model call under the shared limits (ADR-0075) and fleet budgets (ADR-0110): what it
takes with its `ModelCalled` append, the reply's real tokens and cost, and a 429 told to
every worker."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from decimal import Decimal
from typing import Protocol

from noeta.core.errors import StoreError
from noeta.core.ports.model import Usage
from noeta.core.ports.model_limits import (
    ModelBudget,
    ModelBudgetHeld,
    estimate_tokens,
    limit_keys,
)
from noeta.core.ports.store import Claim, Continue, Delivery, NewEvent, NewTask, NextState, Store
from noeta.core.ports.store_values import Finish
from noeta.core.retry import Sleep
from noeta.core.runner import task_budget
from noeta.observability import metrics

log = logging.getLogger(__name__)


class Append(Protocol):
    """`Store.append`'s shape: what `_Run.append` writes with."""

    async def __call__(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
    ) -> int: ...


def budget_for(
    store: Store,
    provider: str,
    model: str,
    body: bytes,
    keep_claim: bool = False,
    *,
    cost: Decimal | None = Decimal(0),
) -> ModelBudget | None:
    """The budget a call of `body` takes; None where the store keeps no limits.
    `keep_claim`: a refusal keeps the claim (its background jobs need it). `cost`: the
    request's estimated cost, for a fleet budget (None: unknown, the model has no price)."""
    if store.capabilities.model_limits is None:
        return None
    return ModelBudget(limit_keys(provider, model), estimate_tokens(body), keep_claim, cost)


async def wait_in_claim(store: Store, sleep: Sleep, task_id: str, held: ModelBudgetHeld) -> float:
    """Wait, still holding the claim (the worker renews it), for the slot the refusal
    reserved: measured on the store's clock, the one the budget is kept on. Returns the
    seconds waited."""
    seconds = max(0.0, (held.until - await store.clock()).total_seconds())
    log.info(
        "task %s: waiting for model budget %s until %s, keeping its claim for its jobs",
        task_id,
        held.limit,
        held.until.isoformat(),
    )
    await sleep(seconds)
    return seconds


def writer(store: Store, budget: ModelBudget | None) -> Append:
    """The append that records a model call: with its budget taken where there is one.

    A plugin's `before_append` that sends deliveries with the call makes an append the
    budgeted one cannot carry: that one goes unbudgeted (and is logged)."""
    limiter = store.capabilities.model_limits
    if budget is None or limiter is None:
        return store.append

    async def append_within_budget(
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
    ) -> int:
        if take or deliveries or new_tasks or isinstance(next_state, Finish):
            log.warning("task %s: model call recorded outside its limits", claim.task_id)
            return await store.append(
                claim,
                expected_seq,
                events,
                take=take,
                deliveries=deliveries,
                new_tasks=new_tasks,
                next_state=next_state,
            )
        return await limiter.append_model_called(claim, expected_seq, events, budget)

    return append_within_budget


async def replied(
    store: Store, task_id: str, budget: ModelBudget | None, usage: Usage | None, model: str
) -> None:
    """Move the tokens and cost taken at the call (estimates) to the reply's real use.
    Advice to the limits and budgets, not the task's record: a store error here is
    logged, not raised. Where the append found no limit (no budget) on the call, or the
    reply says no usage (the estimate stands), there is nothing to correct: no statement
    is sent."""
    limiter = store.capabilities.model_limits
    if usage is None or budget is None or limiter is None:
        return
    try:
        if budget.taken.by_a_limit:
            await limiter.model_call_used(budget, usage.input_tokens + usage.output_tokens)
        if budget.taken.by_a_budget_at is not None:
            cost = task_budget.usage_cost(model, usage)
            if cost is not None:
                await limiter.fleet_budget_used(task_id, budget, cost)
    except StoreError as error:
        log.warning("task %s: the reply's use not counted by its limits (%s)", task_id, error)


async def throttled(store: Store, provider: str, model: str, retry_after: float | None) -> None:
    """A 429: counted, and with a Retry-After every worker holds off until then (a store
    error here is logged: the call's own retry goes on)."""
    metrics.model_throttled(provider, model)
    limiter = store.capabilities.model_limits
    if limiter is not None:
        try:
            await limiter.model_call_throttled(limit_keys(provider, model), retry_after)
        except StoreError as error:
            log.warning("model limits %s/%s: the 429 not shared (%s)", provider, model, error)
