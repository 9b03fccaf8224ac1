"""PgBouncer's refusals of a statement it never gave a server (ADR-0155): nothing of it
reached PostgreSQL, so the store says so (PoolerRefused, a StoreUnavailable), not
CommitUnknown, though PgBouncer closes the client's connection as it refuses."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import PoolerRefused
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.pgbouncer import PgBouncer
from noeta.testing.store_contract import created


async def test_statements_pgbouncer_refuses_for_want_of_a_server_are_unavailable_not_unknown(
    postgres_url: str,
    pgbouncer_on_a_path: PgBouncer,
    pgbouncer_server_path: FaultProxy,
) -> None:
    # Each refused write is sent again until its deadline: a short one keeps the test short.
    store = await PostgresStore.open(
        pgbouncer_on_a_path.pooled(postgres_url), session_dsn=postgres_url, deadline_seconds=4
    )
    direct = await open_store(postgres_url)
    try:
        assert await store.create_task(created("before"))
        pgbouncer_server_path.stop()  # its server sessions end, and its next login fails
        await pgbouncer_on_a_path.until_no_server_sessions()  # none a write could be sent on
        # The first write waits for a server until PgBouncer gives up on it
        # (query_wait_timeout); each is sent again, and meets the failed login PgBouncer
        # caches, until its deadline.
        for name in ("waited", "refused", "refused-again"):
            with pytest.raises(PoolerRefused) as refused:
                await store.create_task(created(name))
            assert await direct.get_task(name) is None
        assert "server_login_retry" in str(refused.value)
    finally:
        await store.close()
        await direct.close()


async def test_a_write_pgbouncer_refuses_for_a_moment_is_sent_again_and_lands_once(
    postgres_url: str,
    pgbouncers_on_the_path: Callable[[int], PgBouncer],
    pgbouncer_server_path: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A run's write refused while PostgreSQL restarts behind PgBouncer: nothing of it was
    # written, so the store sends it again within its deadline instead of ending the run
    # (which would leave the task for a takeover once its lease lapsed).
    bouncer = pgbouncers_on_the_path(1)  # tries PostgreSQL again a second after a failure
    monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
    store = await open_store(bouncer.pooled(postgres_url))
    direct = await open_store(postgres_url)
    caplog.set_level(logging.DEBUG, logger="noeta.backends.stores.postgres.connection")
    try:
        assert await store.create_task(created("before"))
        pgbouncer_server_path.refuse()  # PostgreSQL gone: PgBouncer's logins fail
        await bouncer.until_no_server_sessions()
        writing = asyncio.ensure_future(store.create_task(created("during")))

        async def refused_and_sent_again() -> bool:
            return writing.done() or "sending the statement again" in caplog.text

        await until(refused_and_sent_again, "the write refused once")
        assert not writing.done(), writing  # refused, not failed: it is sent again
        pgbouncer_server_path.accept()  # PostgreSQL back: PgBouncer's next login passes
        assert await writing
        assert await direct.get_task("during") is not None
    finally:
        await store.close()
        await direct.close()


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30) -> None:
    """Poll a condition (not a sleep standing in for synchronisation)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)
