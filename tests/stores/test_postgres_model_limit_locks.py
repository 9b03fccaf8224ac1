"""PostgreSQL's model-limit rows are locked in key order by every statement that writes
several, whatever plan it gets, so two of them never wait for each other in a circle."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.model_limits import ModelLimiter

WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %(like)s
"""


async def waiting_on_a_lock(url: str, like: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        row = await (await connection.execute(WAITING_ON_A_LOCK, {"like": like})).fetchone()
        return bool(row and row[0])


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT noeta_model_tokens_used(ARRAY['p/m', 'p/*'], 10)",
        "SELECT noeta_model_throttled(ARRAY['p/m', 'p/*'], 5)",
    ],
)
async def test_a_limit_update_locks_its_rows_in_key_order(
    postgres_url: str, statement: str
) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        assert isinstance(store, ModelLimiter)
        await store.set_model_limit("p/m", 60, 6000)  # first in the heap, last in key order
        await store.set_model_limit("p/*", 60, 6000)
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as setup:
        # As after a call: a token count to correct.
        await setup.execute("UPDATE model_limits SET tokens_at = clock_timestamp()")
    async with (
        await psycopg.AsyncConnection.connect(postgres_url) as first,
        await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as second,
        await psycopg.AsyncConnection.connect(postgres_url) as third,
    ):
        # The first holds the lowest key, as the ModelCalled append does first.
        await first.execute("SELECT FROM model_limits WHERE key = 'p/*' FOR UPDATE")
        # The second walks the table in heap order, whatever the planner would pick.
        await second.execute("SET enable_indexscan = off")
        await second.execute("SET enable_bitmapscan = off")
        updating = asyncio.create_task(second.execute(statement))
        while not updating.done() and not await waiting_on_a_lock(  # noqa: ASYNC110
            postgres_url, "%noeta_model_%"
        ):
            await asyncio.sleep(0.01)
        try:
            # Waiting for p/*, it must hold nothing after it: a third (an append that
            # holds p/* no longer, say) can take p/m without waiting.
            await third.execute("SELECT FROM model_limits WHERE key = 'p/m' FOR UPDATE NOWAIT")
            await third.rollback()
        finally:
            await first.commit()
            await updating
