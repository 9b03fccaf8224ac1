"""A ModelCalled append under a model limit weighs its call at the moment it holds the
limit rows, not at its fence: a wait for another worker's append on those rows must not
bring the next slot closer than the limit's spacing (migration 0033)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.model_limits import ModelBudget, ModelBudgetWait, ModelLimiter
from noeta.core.ports.store import NewEvent
from noeta.testing.store_contract.fixtures import LEASE, created, until_store_time

from .test_postgres_model_limit_locks import waiting_on_a_lock

SPACING = timedelta(milliseconds=100)  # 600 a minute
CALLED = [NewEvent("ModelCalled", {"request_hash": "h"})]


async def test_a_call_that_waited_for_the_limit_rows_spaces_the_next_from_when_it_got_them(
    postgres_url: str,
) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        assert isinstance(store, ModelLimiter)
        await store.set_model_limit("fake/*", 600, None)
        claims = []
        for task_id in ("a", "b"):
            await store.create_task(created(task_id))
            claim = await store.claim_task("w", task_id, LEASE)
            assert claim is not None
            claims.append(claim)
        first, second = claims
        async with await psycopg.AsyncConnection.connect(postgres_url) as other:
            # Another worker's append holds the limit row (as until its commit).
            await other.execute("SELECT FROM model_limits WHERE key = 'fake/*' FOR UPDATE")
            budget = ModelBudget(("fake/m", "fake/*"), 10)
            appending = asyncio.create_task(store.append_model_called(first, 1, CALLED, budget))
            while not appending.done() and not await waiting_on_a_lock(  # noqa: ASYNC110
                postgres_url, "%noeta_append_model_called%"
            ):
                await asyncio.sleep(0.01)
            # The injected fault: the wait outlasts the limit's spacing.
            await until_store_time(store, await store.clock() + 2 * SPACING)
            await other.commit()
            assert await appending == 2
        (called,) = [e for e in await store.read_log("a") if e.type == "ModelCalled"]
        with pytest.raises(ModelBudgetWait) as waited:
            await store.append_model_called(second, 1, CALLED, ModelBudget(budget.keys, 10))
        # The first call is recorded at the moment it was weighed; the next slot is one
        # spacing after it. Weighed at its fence, the first would have left a slot already
        # past, and the second call would have gone at once.
        assert waited.value.until - called.created_at == SPACING
    finally:
        await store.close()
