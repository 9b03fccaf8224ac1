"""The store's pool hands out the connection returned last (ADR-0127): a quiet process's
statements run on one warm session, where psycopg prepares them after its threshold,
instead of going round every connection the pool holds, each cold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from noeta.backends.stores.postgres import PostgresStore

CONNECTIONS = 4
HOT = "SELECT %(n)s::int + 1 AS pool_order_probe"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(
        postgres_url, migrate=True, max_connections=CONNECTIONS, min_connections=CONNECTIONS
    )
    try:
        yield opened
    finally:
        await opened.close()


async def backend_pid(store: PostgresStore) -> int:
    """The server process of the session a statement of `store` runs on."""
    rows = await store._read("SELECT pg_backend_pid()", {})
    return int(rows[0][0])


async def test_statements_in_turn_reuse_the_session_returned_last(store: PostgresStore) -> None:
    assert store._pool.get_stats()["pool_size"] == CONNECTIONS  # all open, all idle
    backends = {await backend_pid(store) for _ in range(3 * CONNECTIONS)}
    assert len(backends) == 1


async def test_a_statement_run_in_turn_is_prepared_on_its_session(store: PostgresStore) -> None:
    # psycopg prepares a statement on a connection after 5 runs there: in turn on 4
    # connections (FIFO) 6 runs prepare it nowhere; on the one returned last, they do.
    for n in range(6):
        await store._read(HOT, {"n": n})
    prepared = await store._read(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %(hot)s",
        {"hot": "%pool_order_probe%"},
    )
    assert prepared[0][0] == 1


async def test_bursts_at_once_still_take_connections_of_their_own(store: PostgresStore) -> None:
    ready = asyncio.Barrier(CONNECTIONS)

    async def burst() -> int:
        async with store.holding():
            backend = await backend_pid(store)
            await ready.wait()  # every burst holds its connection until all have one
            return backend

    backends = await asyncio.gather(*(burst() for _ in range(CONNECTIONS)))
    assert len(set(backends)) == CONNECTIONS
    assert len({await backend_pid(store) for _ in range(CONNECTIONS)}) == 1  # quiet again
