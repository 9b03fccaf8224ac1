"""LISTEN noeta_late_result (migration 0017, ADR-0083): a kept late result announces its
task's id, so a claimer waiting out its grace wakes when the row lands, not when its
grace ends; a keep that adds nothing (the call kept before) says nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.store import LateResult
from noeta.testing.store_contract import created

# The grace a test's waiter is given: far longer than the test, so only the announcement
# can end its wait before the bound below fails the test (a hang, not a timing check).
LONG_GRACE = 600.0


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(postgres_url, migrate=True)
    yield store
    await store.close()


def late(call_id: str, content: str = "done") -> LateResult:
    return LateResult("a", call_id, content, False, 1, "w1")


async def test_a_kept_late_result_announces_its_task(
    store: PostgresStore, postgres_url: str
) -> None:
    await store.create_task(created("a"))
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as listener:
        await listener.execute("LISTEN noeta_late_result")
        assert await store.keep_late_result(late("c1"))
        assert not await store.keep_late_result(late("c1", "second"))  # first wins: silent
        assert await store.keep_late_result(late("c2"))
        heard = [n.payload async for n in listener.notifies(timeout=10, stop_after=2)]
    assert heard == ["a", "a"]


async def grace_connection_waits(postgres_url: str) -> bool:
    """Whether the waiter's own connection is listening and idle after its first look."""
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        row = await (
            await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'noeta-grace'"
                " AND state = 'idle' AND query LIKE '%%FROM late_results%%'"
            )
        ).fetchone()
    return row is not None and row[0] == 1


async def test_a_waiter_wakes_when_the_result_is_kept(
    store: PostgresStore, postgres_url: str
) -> None:
    await store.create_task(created("a"))
    waiting = asyncio.ensure_future(store.wait_for_late_result("a", "c1", LONG_GRACE))
    while not await grace_connection_waits(postgres_url):
        assert not waiting.done(), waiting
        await asyncio.sleep(0.05)
    assert await store.keep_late_result(late("c2"))  # another call's: it waits on
    assert await store.keep_late_result(late("c1", "the result"))
    found = await asyncio.wait_for(waiting, 60)
    assert found is not None and (found.call_id, found.content) == ("c1", "the result")
