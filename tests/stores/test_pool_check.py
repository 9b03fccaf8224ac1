"""The store's pool looks at an idle connection before handing it out (ADR-0148): one the
server ended is passed over and replaced, never given to a statement; one a healthy
session made readable (a NOTIFY) is kept."""

from __future__ import annotations

import asyncio
import select
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.embedded import EmbeddedPostgres
from noeta.backends.stores.postgres import PostgresStore
from noeta.testing.store_contract import created
from tests.stores.test_pool_order import backend_pid
from tests.worker.conftest import private_server

__all__ = ["private_server"]  # the fixture

CONNECTIONS = 4
APPLICATION = "noeta-pool-check"
SESSIONS = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(
        postgres_url,
        migrate=True,
        max_connections=CONNECTIONS,
        min_connections=CONNECTIONS,
        application_name=APPLICATION,
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _end_every_session(postgres_url: str) -> list[int]:
    """`pg_terminate_backend` of every session of the store, returned once all are gone."""
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        ended = [row[0] for row in await (await admin.execute(SESSIONS, (APPLICATION,))).fetchall()]
        for pid in ended:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(200):  # the server's own record of the sessions ending, not a sleep
            if not await (await admin.execute(SESSIONS, (APPLICATION,))).fetchall():
                return ended
            await asyncio.sleep(0.05)
    raise AssertionError("the store's sessions were not ended")


async def test_sessions_the_server_ended_are_never_handed_to_a_statement(
    store: PostgresStore, postgres_url: str
) -> None:
    assert store._pool.get_stats()["pool_size"] == CONNECTIONS
    ended = await _end_every_session(postgres_url)
    assert len(ended) == CONNECTIONS, ended
    ready = asyncio.Barrier(CONNECTIONS)

    async def burst() -> int:
        async with store.holding():  # each takes a connection of its own: all four
            backend = await backend_pid(store)
            await ready.wait()
            return backend

    backends = await asyncio.gather(*(burst() for _ in range(CONNECTIONS)))
    assert not set(backends) & set(ended)  # every statement ran on a new session
    assert store._pool.get_stats()["connections_lost"] == CONNECTIONS
    # A write too: its outcome known, not CommitUnknown on a dead session.
    await _end_every_session(postgres_url)
    rows = await store._write("SELECT 1", {})
    assert rows == (1,)


async def test_a_session_with_a_notification_waiting_is_kept(
    store: PostgresStore, postgres_url: str
) -> None:
    listening = await backend_pid(store)  # the session returned last: the next one handed out
    await store._read("LISTEN pool_check", {})
    idle = store._pool._pool[-1]
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other:
        await other.execute("NOTIFY pool_check, 'unasked'")
    poller = select.poll()
    poller.register(idle.pgconn.socket, select.POLLIN)
    assert poller.poll(30_000)  # readable while idle: the notification has arrived
    delivered: list[psycopg.Notify] = []
    idle.add_notify_handler(delivered.append)
    assert await backend_pid(store) == listening  # kept, and handed out
    assert [n.payload for n in delivered] == ["unasked"]  # given to its next statement
    assert store._pool.get_stats().get("connections_lost", 0) == 0
    await store._read("UNLISTEN *", {})


async def test_after_a_restart_the_first_write_takes_a_live_session(
    private_server: EmbeddedPostgres,
) -> None:
    # After a restart every pooled session is one the server ended: a write on one would
    # be CommitUnknown (a worker's claim reported lost).
    store = await PostgresStore.open(
        private_server.start(),
        migrate=True,
        max_connections=CONNECTIONS,
        min_connections=CONNECTIONS,
    )
    try:
        await store.create_task(created("before"))
        await asyncio.to_thread(private_server.stop, mode="fast")  # ends every session
        await asyncio.to_thread(private_server.start)
        await store.create_task(created("after"))  # no error: its session was a new one
        assert await store.get_task("after") is not None
        assert store._pool.get_stats()["connections_lost"] == CONNECTIONS
    finally:
        await store.close()
