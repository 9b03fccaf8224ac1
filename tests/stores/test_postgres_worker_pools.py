"""A worker's store (ADR-0139): its group commit's rounds run on connections of their own,
so a run holding the pool's last connection in a burst still gets the write it awaits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import ConfigError
from noeta.core.ports.store import NewEvent
from noeta.testing.store_contract import LEASE, created

ONE_COMMIT = "SELECT count(DISTINCT xmin::text) FROM events WHERE task_id = ANY(%s) AND seq > 1"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    await migrate_database(postgres_url)
    # The least a worker may have: two connections for the rounds, one for the rest.
    opened = await PostgresStore.open(
        postgres_url, max_connections=3, min_connections=3, for_worker=True
    )
    yield opened
    await opened.close()


async def test_a_burst_holding_the_pools_last_connection_gets_its_batched_write(
    store: PostgresStore, postgres_url: str
) -> None:
    for task_id in ("bursting", "plain"):
        await store.create_task(created(task_id))
    claims = {}
    for _ in range(2):
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        claims[claim.task_id] = claim
    holding = store.capabilities.holding
    assert holding is not None
    read = asyncio.Event()

    async def bursting() -> int:
        async with holding():
            await store.get_task("bursting")  # the burst now holds the pool's one connection
            read.set()
            # Joined by the other run's write in this turn: the two go as one round, which
            # must not wait for the connection this burst holds until it is done.
            return await store.append(claims["bursting"], 1, [NewEvent("step", 1)])

    async def plain() -> int:
        await read.wait()
        return await store.append(claims["plain"], 1, [NewEvent("step", 2)])

    assert await asyncio.gather(bursting(), plain()) == [2, 2]
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        row = await (await admin.execute(ONE_COMMIT, (["bursting", "plain"],))).fetchone()
    assert row == (1,)  # the two writes went as one round, not each alone


async def test_a_worker_store_needs_a_connection_beside_its_rounds(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="a worker needs at least 3 connections, not 2"):
        await PostgresStore.open(postgres_url, max_connections=2, for_worker=True)
