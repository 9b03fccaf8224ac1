"""Every PostgreSQL error reaches the caller as one of the store's errors, from real
causes: a read-only database, a statement or lock timeout, sessions ended by an admin,
the server stopped and started. (A full disk is not simulated: it needs a tiny mounted
filesystem; its SQLSTATE class 53 is mapped beside the out-of-memory and too-many-
connections cases.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import EmbeddedPostgres
from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import CommitUnknown, Conflict, StoreError, StoreUnavailable
from noeta.core.ports.store import NewEvent
from noeta.testing.store_contract import LEASE, created
from tests.worker.conftest import private_server

if TYPE_CHECKING:  # imported only for types: pytest would try to collect a Test* class
    from noeta.testing.postgres import TestPostgres

__all__ = ["private_server"]  # the fixture


@pytest.fixture
async def migrated(database_url: str) -> str:
    await migrate_database(database_url)
    return database_url


async def test_a_read_only_database_refuses_writes_as_unavailable(
    migrated: str, postgres_server: TestPostgres
) -> None:
    postgres_server.set_read_only(migrated, True)
    store = await PostgresStore.open(migrated)  # reading the schema needs no write
    try:
        assert await store.get_task("a") is None
        with pytest.raises(StoreUnavailable, match="read-only") as raised:
            await store.create_task(created("a"))
        assert "25006" in str(raised.value)
        with pytest.raises(StoreUnavailable):
            await store.claim("w", ["default"], LEASE)
        postgres_server.set_read_only(migrated, False)  # ends the store's sessions too
        await _until_answered(store)
        assert await store.create_task(created("a"))
    finally:
        await store.close()


def _with_options(dsn: str, options: str) -> str:
    own = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(dsn, options=f"{own} {options}".strip())


@pytest.mark.parametrize(
    ("setting", "state"), [("statement_timeout", "57014"), ("lock_timeout", "55P03")]
)
async def test_a_server_timeout_is_a_store_error_not_a_lost_claim(
    migrated: str, setting: str, state: str
) -> None:
    store = await PostgresStore.open(_with_options(migrated, f"-c {setting}=200"))
    holding = threading.Event()
    release = threading.Event()

    def other_session() -> None:  # holds the task's row, as a stuck client would
        with psycopg.connect(migrated) as connection:
            connection.execute("SELECT 1 FROM tasks WHERE id = 'a' FOR UPDATE")
            holding.set()
            release.wait(timeout=30)

    try:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        thread = threading.Thread(target=other_session)
        thread.start()
        await asyncio.to_thread(holding.wait, 30)
        with pytest.raises(StoreError) as raised:
            await store.append(claim, 1, [NewEvent("late", {})])
        assert not isinstance(raised.value, (Conflict, CommitUnknown, StoreUnavailable))
        assert state in str(raised.value)
        release.set()
        await asyncio.to_thread(thread.join, 30)
        assert await store.append(claim, 1, [NewEvent("later", {})]) == 2  # nothing landed
    finally:
        release.set()
        await store.close()


async def test_ended_sessions_are_unavailable_for_a_read_then_reconnected(
    migrated: str, postgres_server: TestPostgres
) -> None:
    # Sessions the server ends under a burst, which holds its connection: no checkout, so
    # the pool's look at an idle one (ADR-0148) never meets them. A read on one is
    # StoreUnavailable, a write CommitUnknown, and the next statement takes a new one.
    store = await PostgresStore.open(migrated, application_name="noeta-ended")
    try:
        await store.create_task(created("a"))
        async with store.holding():
            await store.get_task("a")  # the burst's connection, taken here
            assert postgres_server.end_sessions(migrated, "noeta-ended") >= 1
            with pytest.raises(StoreUnavailable):
                await store.get_task("a")
        assert await store.get_task("a") is not None  # a fresh session from the pool
        async with store.holding():
            await store.get_task("a")
            assert postgres_server.end_sessions(migrated, "noeta-ended") >= 1
            with pytest.raises(CommitUnknown):  # a write whose reply was lost: never retried
                await store.create_task(created("b"))
    finally:
        await store.close()


@pytest.fixture
async def private_store(private_server: EmbeddedPostgres) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(private_server.start(), migrate=True, deadline_seconds=2)
    yield store
    await store.close()


async def test_a_stopped_server_is_unavailable_and_a_restart_is_used_again(
    private_server: EmbeddedPostgres, private_store: PostgresStore
) -> None:
    await private_store.create_task(created("a"))
    private_server.stop(mode="fast")  # an admin shutdown of every session
    for _ in range(2):  # the pooled session ends, then no new one can be made
        with pytest.raises(StoreUnavailable):
            await private_store.get_task("a")
    with pytest.raises((StoreUnavailable, CommitUnknown)):
        await private_store.create_task(created("b"))
    private_server.start()
    await _until_answered(private_store)
    assert await private_store.get_task("a") is not None


async def _until_answered(store: PostgresStore) -> None:
    """Until the pool has replaced the sessions that were ended (each failure is one)."""
    for _ in range(100):
        try:
            await store.get_task("-")
            return
        except StoreUnavailable:
            await asyncio.sleep(0.05)
    raise AssertionError("the store never answered again")
