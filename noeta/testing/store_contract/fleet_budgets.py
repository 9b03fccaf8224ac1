"""The contract for fleet budgets (ADR-0110): the ModelCalled append takes the call's
estimated cost from the budgets of its task's queue and key, or refuses it writing
nothing (the claim kept, the limits untouched); the reply's cost corrects the estimate;
a budget may be set before its queue exists, changed keeping its spend, and cleared."""

from __future__ import annotations

from decimal import Decimal

import pytest

from noeta.core.errors import Conflict
from noeta.core.ports.fleet_budgets import FleetBudget, FleetBudgetExceeded, current_spend
from noeta.core.ports.model_limits import ModelBudget, ModelLimiter
from noeta.core.ports.store import Claim, NewEvent, Store, TaskStatus
from noeta.testing.store_contract.fixtures import LEASE, created

KEYS = ("fake/m1", "fake/*")
CALLED = [NewEvent("ModelCalled", {"request_hash": "h"})]


def _limiter(store: Store) -> ModelLimiter:
    assert isinstance(store, ModelLimiter), "every store keeps fleet budgets"
    return store


async def _claimed(store: Store, task_id: str, queue: str = "q", key: str | None = None) -> Claim:
    await store.create_task(created(task_id, queue, concurrency_key=key))
    claim = await store.claim_task("w", task_id, LEASE)
    assert claim is not None
    return claim


def _call(cost: str | None) -> ModelBudget:
    return ModelBudget(KEYS, 100, cost=None if cost is None else Decimal(cost))


async def _spent(store: Store) -> dict[str, Decimal]:
    budgets = await _limiter(store).fleet_budgets()
    now = await store.clock()
    return {each.name: current_spend(each, now) for each in budgets}


class FleetBudgetContract:
    async def test_a_budget_takes_each_call_until_the_next_would_pass_it(
        self, store: Store
    ) -> None:
        limiter = _limiter(store)
        # A queue no task or setting names yet may have one: the store says so.
        assert not await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal("9")))
        first, second = await _claimed(store, "a"), await _claimed(store, "b")
        assert await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal("1.00")))
        call = _call("0.60")
        assert await limiter.append_model_called(first, 1, CALLED, call) == 2
        assert call.taken.by_a_budget_at is not None
        assert (await _spent(store))["q --per-day 1.00"] == Decimal("0.60")
        with pytest.raises(FleetBudgetExceeded) as refused:
            await limiter.append_model_called(second, 1, CALLED, _call("0.41"))
        assert refused.value.budget.name == "q --per-day 1.00"
        assert refused.value.spent == Decimal("0.60")
        # Nothing written, the claim kept: the same claim appends once the budget allows.
        assert [e.type for e in await store.read_log("b")] == ["created"]
        row = await store.get_task("b")
        assert row is not None and row.status is TaskStatus.RUNNING
        assert await limiter.append_model_called(second, 1, CALLED, _call("0.40")) == 2
        listed = {each.name: each for each in await limiter.fleet_budgets()}
        assert (listed["q --per-day 1.00"].calls, listed["q --per-day 1.00"].refusals) == (2, 1)

    async def test_the_reply_corrects_the_estimate(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_fleet_budget(FleetBudget("q", "", "hour", Decimal("1.00")))
        claim = await _claimed(store, "a")
        call = _call("0.10")
        await limiter.append_model_called(claim, 1, CALLED, call)
        await limiter.fleet_budget_used("a", call, Decimal("0.35"))
        assert (await _spent(store))["q --per-hour 1.00"] == Decimal("0.35")

    async def test_a_keys_budget_holds_only_its_key_and_the_queues_holds_all(
        self, store: Store
    ) -> None:
        limiter = _limiter(store)
        await limiter.set_fleet_budget(FleetBudget("q", "acme", "day", Decimal("0.50")))
        await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal("2.00")))
        acme, other = await _claimed(store, "a", key="acme"), await _claimed(store, "b", key="x")
        await limiter.append_model_called(acme, 1, CALLED, _call("0.40"))
        with pytest.raises(FleetBudgetExceeded) as refused:
            again = await _claimed(store, "c", key="acme")
            await limiter.append_model_called(again, 1, CALLED, _call("0.20"))
        assert refused.value.budget.name == "q/acme --per-day 0.50"
        await limiter.append_model_called(other, 1, CALLED, _call("1.00"))
        assert await _spent(store) == {
            "q --per-day 2.00": Decimal("1.40"),
            "q/acme --per-day 0.50": Decimal("0.40"),
        }
        # Another queue's task is not held by either.
        elsewhere = _call("5.00")
        await limiter.append_model_called(await _claimed(store, "d", "r"), 1, CALLED, elsewhere)
        assert elsewhere.taken.by_a_budget_at is None

    async def test_a_call_of_unknown_cost_is_refused_only_under_a_budget(
        self, store: Store
    ) -> None:
        limiter = _limiter(store)
        unpriced = _call(None)
        assert await limiter.append_model_called(await _claimed(store, "a"), 1, CALLED, unpriced)
        await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal(100)))
        with pytest.raises(FleetBudgetExceeded) as refused:
            await limiter.append_model_called(await _claimed(store, "b"), 1, CALLED, _call(None))
        assert refused.value.spent is None

    async def test_a_stale_claim_changes_no_budget(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal(1)))
        claim = await _claimed(store, "a")
        await store.release(claim)
        with pytest.raises(Conflict):
            await limiter.append_model_called(claim, 1, CALLED, _call("0.50"))
        assert (await _spent(store))["q --per-day 1.00"] == 0

    async def test_changing_keeps_the_spend_and_clearing_takes_every_period(
        self, store: Store
    ) -> None:
        limiter = _limiter(store)
        await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal(1)))
        await limiter.set_fleet_budget(FleetBudget("q", "", "hour", Decimal(1)))
        await limiter.append_model_called(await _claimed(store, "a"), 1, CALLED, _call("0.90"))
        await limiter.set_fleet_budget(FleetBudget("q", "", "day", Decimal(3)))
        assert (await _spent(store))["q --per-day 3.00"] == Decimal("0.90")
        assert await limiter.clear_fleet_budget("q", "acme") == 0
        assert await limiter.clear_fleet_budget("q", "") == 2
        assert await limiter.fleet_budgets() == []
