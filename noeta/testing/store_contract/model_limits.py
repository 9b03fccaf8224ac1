"""The contract for shared model-call limits (ADR-0075): the budget is taken by the
fenced ModelCalled append; a refused call writes nothing and hands the task back, due
when the budget allows, with that slot held for it; a 429's pause holds every caller."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from noeta.core.errors import ConfigError, Conflict
from noeta.core.ports.model_limits import (
    ModelBudget,
    ModelBudgetHeld,
    ModelBudgetWait,
    ModelLimiter,
)
from noeta.core.ports.store import Claim, NewEvent, Store, TaskStatus
from noeta.testing.store_contract.fixtures import (
    LEASE,
    created,
    eventually_claim,
    until_store_time,
)

KEYS = ("fake/m1", "fake/*")
CALLED = [NewEvent("ModelCalled", {"request_hash": "h"})]


def _limiter(store: Store) -> ModelLimiter:
    assert isinstance(store, ModelLimiter), "every store keeps model limits"
    return store


async def _claimed(store: Store, task_id: str) -> Claim:
    await store.create_task(created(task_id))
    claim = await store.claim_task("w", task_id, LEASE)
    assert claim is not None
    return claim


class ModelLimitContract:
    async def test_without_a_limit_the_call_is_appended(self, store: Store) -> None:
        claim = await _claimed(store, "a")
        budget = ModelBudget(KEYS, 100)
        assert await _limiter(store).append_model_called(claim, 1, CALLED, budget) == 2
        assert [e.type for e in await store.read_log("a")] == ["created", "ModelCalled"]
        assert await _limiter(store).model_limits() == []

    async def test_the_append_says_whether_a_limit_applied_to_the_call(self, store: Store) -> None:
        limiter = _limiter(store)
        unlimited = ModelBudget(KEYS, 100)
        assert await limiter.append_model_called(await _claimed(store, "a"), 1, CALLED, unlimited)
        assert unlimited.taken.by_a_limit is False  # so no token correction is sent
        await limiter.set_model_limit("fake/m1", None, 1_000_000)
        limited = ModelBudget(KEYS, 100)
        assert await limiter.append_model_called(await _claimed(store, "b"), 1, CALLED, limited)
        assert limited.taken.by_a_limit is True

    async def test_over_budget_writes_nothing_and_hands_back_at_the_slot(
        self, store: Store
    ) -> None:
        limiter = _limiter(store)
        await limiter.set_model_limit("fake/*", 600, None)  # one call per 100 ms
        first, second, third = [await _claimed(store, name) for name in ("a", "b", "c")]
        budget = ModelBudget(KEYS, 10)
        assert await limiter.append_model_called(first, 1, CALLED, budget) == 2
        with pytest.raises(ModelBudgetWait) as waited:
            await limiter.append_model_called(second, 1, CALLED, budget)
        assert waited.value.limit == "fake/*"
        assert len(await store.read_log("b")) == 1  # no ModelCalled for a call never sent
        record = await store.get_task("b")
        assert record is not None and record.status == TaskStatus.READY
        assert record.ready_at == waited.value.until
        now = await store.clock()
        assert timedelta(0) < waited.value.until - now <= timedelta(milliseconds=100)
        with pytest.raises(ModelBudgetWait) as later:  # the next slot: b's is held for it
            await limiter.append_model_called(third, 1, CALLED, budget)
        assert later.value.until - waited.value.until == timedelta(milliseconds=100)
        # b comes back at its slot and takes it without a new check (c still waits).
        again = await eventually_claim(store, "w", ["default"])
        assert again.task_id == "b"
        assert await limiter.append_model_called(again, 1, CALLED, budget) == 2
        (limit,) = await limiter.model_limits()
        assert (limit.key, limit.rpm, limit.calls, limit.handbacks) == ("fake/*", 600, 2, 2)
        assert limit.waited_seconds > 0

    async def test_a_refusal_that_keeps_the_claim_holds_the_slot_for_it(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_model_limit("fake/*", 600, None)  # one call per 100 ms
        first, second = [await _claimed(store, name) for name in ("a", "b")]
        budget = ModelBudget(KEYS, 10)
        assert await limiter.append_model_called(first, 1, CALLED, budget) == 2
        keeping = dataclasses.replace(budget, keep_claim=True)
        with pytest.raises(ModelBudgetHeld) as held:
            await limiter.append_model_called(second, 1, CALLED, keeping)
        record = await store.get_task("b")  # still the claim's: its jobs live on
        assert record is not None and record.status == TaskStatus.RUNNING
        assert (record.owner_epoch, record.lease_until) == (second.epoch, second.lease_until)
        assert len(await store.read_log("b")) == 1
        # The same claim, at its slot, takes the slot held for it: one call, no new check.
        await until_store_time(store, held.value.until)
        assert await limiter.append_model_called(second, 1, CALLED, keeping) == 2
        (limit,) = await limiter.model_limits()
        assert (limit.calls, limit.handbacks) == (2, 1)

    async def test_a_stale_claim_is_fenced_before_the_budget(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_model_limit("fake/m1", 1, None)
        claim = await _claimed(store, "a")
        stale = dataclasses.replace(claim, epoch=claim.epoch - 1)
        with pytest.raises(Conflict):
            await limiter.append_model_called(stale, 1, CALLED, ModelBudget(KEYS, 1))
        record = await store.get_task("a")
        assert record is not None and record.status == TaskStatus.RUNNING
        (limit,) = await limiter.model_limits()
        assert (limit.calls, limit.handbacks) == (0, 0)

    async def test_a_429_pauses_the_limit_for_every_caller(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_model_limit("fake/m1", 600, None)
        await limiter.model_call_throttled(KEYS, 30.0)
        first, second = [await _claimed(store, name) for name in ("a", "b")]
        with pytest.raises(ModelBudgetWait) as waited:
            await limiter.append_model_called(first, 1, CALLED, ModelBudget(KEYS, 1))
        assert waited.value.limit == "fake/m1 (paused after a 429)"
        assert waited.value.until - await store.clock() > timedelta(seconds=29)
        (limit,) = await limiter.model_limits()
        assert limit.throttled == 1 and limit.paused_until == waited.value.until
        # The tasks held off get slots after the pause, spaced: not all at its end.
        with pytest.raises(ModelBudgetWait) as later:
            await limiter.append_model_called(second, 1, CALLED, ModelBudget(KEYS, 1))
        assert later.value.until - waited.value.until == timedelta(milliseconds=100)

    async def test_tokens_per_minute_count_the_reply_real_use(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_model_limit("fake/*", None, 60_000)  # 1,000 tokens a second
        first, second = [await _claimed(store, name) for name in ("a", "b")]
        budget = ModelBudget(KEYS, 30_000)  # estimated: half a minute's tokens
        assert await limiter.append_model_called(first, 1, CALLED, budget) == 2
        await limiter.model_call_used(budget, 0)  # the reply used none of them after all
        assert await limiter.append_model_called(second, 1, CALLED, budget) == 2

    async def test_settings_are_checked_and_cleared(self, store: Store) -> None:
        limiter = _limiter(store)
        await limiter.set_model_limit("anthropic", 50, 40_000)
        for key, rpm, tpm in [
            ("anthropic/*", 0, None),
            ("anthropic/*", -1, None),
            ("anthropic/*", None, None),
            ("Bad Provider/x", 5, None),
            ("anthropic/has space", 5, None),
        ]:
            with pytest.raises(ConfigError):
                await limiter.set_model_limit(key, rpm, tpm)
        (limit,) = await limiter.model_limits()
        assert (limit.key, limit.rpm, limit.tpm) == ("anthropic/*", 50, 40_000)
        assert await limiter.clear_model_limit("anthropic/*")
        assert not await limiter.clear_model_limit("anthropic/*")
        assert await limiter.model_limits() == []
