"""LISTEN noeta_finished: the append that finishes a task announces its id (what the
client's `result` waits on); other appends, and a refused finish, say nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import Conflict
from noeta.core.ports.store import Finish, NewEvent, TaskStatus
from noeta.testing.store_contract import created


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(postgres_url, migrate=True)
    yield store
    await store.close()


async def test_a_finishing_append_announces_the_task(store: PostgresStore) -> None:
    notices = store.finishes()
    try:
        assert await asyncio.wait_for(anext(notices), 10) == "*"  # listening from here
        await store.create_task(created("a"))
        await store.create_task(created("b"))
        first = await store.claim_task("w", "a", 30)
        other = await store.claim_task("w", "b", 30)
        assert first is not None and other is not None
        await store.append(first, 1, [NewEvent("turn", {})])  # not a finish: silent
        with pytest.raises(Conflict):  # a refused finish (stale seq) is not announced
            await store.append(other, 7, [], next_state=Finish(TaskStatus.DONE))
        await store.append(first, 2, [NewEvent("end", {})], next_state=Finish(TaskStatus.DONE))
        assert await asyncio.wait_for(anext(notices), 10) == "a"
        await store.append(other, 1, [], next_state=Finish(TaskStatus.FAILED))
        assert await asyncio.wait_for(anext(notices), 10) == "b"
    finally:
        await notices.aclose()  # type: ignore[attr-defined]
