"""A fleet budget (ADR-0110) against the Anthropic fake at the wire, on both stores: the
call that would take the queue's period past its amount is not sent, the refusal names
the fleet budget in the log, the task fails or asks; the budget's spend is the replies'
real cost, not the estimates; raising it and answering lets the task go on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from decimal import Decimal

import pytest

from noeta.backends.stores import open_store
from noeta.client import messages
from noeta.core.ports.fleet_budgets import FleetBudget, current_spend
from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.prices import BUNDLED
from noeta.core.rules.texts import BUDGET_CALL
from noeta.core.task_loading import load_state, snapshot_version
from noeta.testing.fake_providers import FakeAnthropic, Reply
from tests.core.runner.test_task_budget import MODEL, create, echo_reply, run_task

DAY = "default --per-day"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def limiter(store: Store) -> ModelLimiter:
    assert isinstance(store, ModelLimiter)
    return store


async def budget_spent(store: Store) -> Decimal:
    (budget,) = await limiter(store).fleet_budgets()
    return current_spend(budget, await store.clock())


def billed(server: FakeAnthropic) -> list[Decimal]:
    """Each reply's cost, from the fake's own record of what it sent."""
    price = BUNDLED[MODEL]
    return [
        (reply.input_tokens * price.input + reply.output_tokens * price.output) / 1_000_000
        for _, reply in server.billed
    ]


async def test_a_fleet_budget_stops_the_task_and_counts_the_real_cost(
    store: Store, server: FakeAnthropic
) -> None:
    """$0.15 a call against $0.40 a day for the queue: three calls go (the third on its
    estimate), the fourth is not sent; the budget holds the replies' real cost exactly."""
    server.script(*(echo_reply(n, 100_000, 10_000) for n in range(6)))
    await create(store, "fleet")
    await limiter(store).set_fleet_budget(FleetBudget("default", "", "day", Decimal("0.40")))
    logged = await run_task(store, server, "fleet")

    assert len(server.requests) == 3
    costs = billed(server)
    spent = sum(costs, Decimal(0))
    assert await budget_spent(store) == spent == Decimal("0.45")
    assert Decimal(0) < spent - Decimal("0.40") <= costs[-1]  # the bound: one call's worth
    refused = [e for e in logged if isinstance(e, events.BudgetExceeded)]
    assert [(r.budget, r.fleet, r.spent, r.limit) for r in refused] == [
        ("fleet", DAY, "0.450000", "0.40")
    ]
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    assert finished.error.startswith(
        f"budget_exceeded: fleet budget {DAY} 0.40: $0.450000 spent this day"
    )


async def test_on_budget_ask_goes_on_once_the_budget_is_raised_and_allowed(
    store: Store, server: FakeAnthropic
) -> None:
    """The refusal asks; allowed without a raise, the call is refused again (the fleet's
    budget is the operator's, not one task's); raised and allowed, the task finishes."""
    server.script(echo_reply(1, 100_000, 10_000), Reply(text="done"))
    await create(store, "ask", on_budget="ask")
    budgets = limiter(store)
    await budgets.set_fleet_budget(FleetBudget("default", "", "day", Decimal("0.10")))
    logged = await run_task(store, server, "ask")
    assert len(server.requests) == 1
    assert isinstance(logged[-1], events.BudgetExceeded)  # and nothing after it: it waits
    state = await load_state(store, "ask", snapshot_version())
    assert state.waiting_call == BUDGET_CALL
    assert state.waiting_question.startswith(f"fleet budget {DAY} 0.10: $0.150000 spent this day")

    async def opened() -> Store:
        return store

    await messages.answer(opened, "ask", BUDGET_CALL, "allow", "")
    logged = await run_task(store, server, "ask")
    assert len(server.requests) == 1  # refused again: it asks again
    assert [type(e).__name__ for e in logged[-2:]] == ["ToolAnswered", "BudgetExceeded"]

    await budgets.set_fleet_budget(FleetBudget("default", "", "day", Decimal("1.00")))
    await messages.answer(opened, "ask", BUDGET_CALL, "allow", "")
    logged = await run_task(store, server, "ask")
    assert len(server.requests) == 2
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished)
    assert (finished.status, finished.answer) == ("done", "done")


async def test_a_model_with_no_price_is_refused_under_a_fleet_budget(
    store: Store, server: FakeAnthropic
) -> None:
    """Its cost is unknown, never 0: nothing is sent, and the error says why."""
    await limiter(store).set_fleet_budget(FleetBudget("default", "", "day", Decimal(100)))
    created = events.TaskCreated(model="anthropic:no-such-model", prompt="go")
    await store.create_task(NewTask("np2", [NewEvent(*events.encode(created))]))
    logged = await run_task(store, server, "np2")
    assert server.requests == []
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    assert "the next call's cost is unknown (the model has no price)" in finished.error
