"""A burst of statements (`PostgresStore.holding`) runs on one pooled connection; a
connection that dies inside one surfaces as the store error it always did, and the burst's
next statement runs on a fresh connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import CommitUnknown, StoreUnavailable
from noeta.core.ports.store import NewEvent
from noeta.testing.store_contract import LEASE, created


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    await migrate_database(postgres_url)
    opened = await PostgresStore.open(postgres_url, max_connections=4)
    yield opened
    await opened.close()


def checkouts(store: PostgresStore) -> int:
    return int(store._pool.get_stats().get("requests_num", 0))


async def backend(store: PostgresStore) -> int:
    rows = await store._read("SELECT pg_backend_pid()", {})
    return int(rows[0][0])


async def test_a_burst_takes_one_connection_for_all_its_statements(store: PostgresStore) -> None:
    await store.create_task(created("a"))
    claim = await store.claim("w", ["default"], LEASE)
    assert claim is not None
    before = checkouts(store)
    async with store.holding():
        pids = {await backend(store) for _ in range(3)}
        await store.read_inbox("a")
        assert await store.append(claim, 1, [NewEvent("step", 1)]) == 2
    assert checkouts(store) == before + 1 and len(pids) == 1
    await store.read_log("a")
    await store.read_log("a")
    assert checkouts(store) == before + 3  # outside a burst: one checkout per statement


async def test_two_tasks_bursting_at_once_never_share_a_connection(store: PostgresStore) -> None:
    both_started = asyncio.Barrier(2)

    async def burst() -> set[int]:
        async with store.holding():
            first = await backend(store)
            await both_started.wait()  # each holds its connection while the other runs
            return {first, await backend(store)}

    one, other = await asyncio.gather(burst(), burst())
    assert len(one) == 1 and len(other) == 1 and one != other


async def test_a_task_spawned_inside_a_burst_takes_its_own_connection(
    store: PostgresStore,
) -> None:
    async with store.holding():
        mine = await backend(store)
        spawned = await asyncio.create_task(backend(store))  # inherits the context
        assert await backend(store) == mine
    assert spawned != mine


async def test_a_connection_killed_inside_a_burst_fails_as_before_and_the_next_runs(
    store: PostgresStore, postgres_url: str
) -> None:
    await store.create_task(created("a"))
    claim = await store.claim("w", ["default"], LEASE)
    assert claim is not None
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        async with store.holding():
            held = await backend(store)
            admin.execute("SELECT pg_terminate_backend(%s)", (held,))
            with pytest.raises(StoreUnavailable):
                await store.read_log("a")  # a read: unavailable, as without a burst
            fresh = await backend(store)
            assert fresh != held
            admin.execute("SELECT pg_terminate_backend(%s)", (fresh,))
            with pytest.raises(CommitUnknown):  # a write: its outcome unknown, as before
                await store.append(claim, 1, [NewEvent("step", 1)])
            assert [e.seq for e in await store.read_log("a")] in ([1], [1, 2])
