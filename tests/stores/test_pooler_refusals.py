"""PgBouncer's refusals of a statement it never gave a server (ADR-0155): nothing of it
reached PostgreSQL, so the store says so (StoreUnavailable), not CommitUnknown, though
PgBouncer closes the client's connection as it refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores import open_store
from noeta.backends.stores.embedded import make_home
from noeta.core.errors import CommitUnknown, StoreUnavailable
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.pgbouncer import PgBouncer, pgbouncer_binary
from noeta.testing.postgres import TestPostgres
from noeta.testing.store_contract import created

# PgBouncer's wait for a server for a client that has none: short, so that the first
# statement after the server went away is refused within the store's deadline (60 s).
QUERY_WAIT_SECONDS = 2
# Long enough that every later statement of the test meets the refusal PgBouncer caches
# after its failed login, never a new login attempt.
LOGIN_RETRY_SECONDS = 600


@pytest.fixture
def server_path(postgres_server: TestPostgres) -> Iterator[FaultProxy]:
    """The path from PgBouncer to PostgreSQL, which a test can take away."""
    parts = conninfo_to_dict(postgres_server.admin_dsn)
    proxy = FaultProxy(str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def bouncer(postgres_server: TestPostgres, server_path: FaultProxy) -> Iterator[PgBouncer]:
    binary = pgbouncer_binary()
    if binary is None:
        pytest.skip("no pgbouncer on this machine (`make pgbouncer` installs it)")
    behind_the_path = make_conninfo(
        postgres_server.admin_dsn, host="127.0.0.1", port=str(server_path.port)
    )
    bouncer = PgBouncer(
        binary,
        behind_the_path,
        make_home("noeta-test-pgbouncer-"),
        login_retry_seconds=LOGIN_RETRY_SECONDS,
        query_wait_seconds=QUERY_WAIT_SECONDS,
    )
    bouncer.start()
    yield bouncer
    bouncer.remove()


async def until_no_server_sessions(bouncer: PgBouncer, within: float = 30) -> None:
    """Poll PgBouncer's console until it holds no server session (not a sleep standing in
    for synchronisation)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while bouncer.admin("SHOW SERVERS"):
        assert loop.time() < deadline, "PgBouncer kept a server session"
        await asyncio.sleep(0.05)


async def test_statements_pgbouncer_refuses_for_want_of_a_server_are_unavailable_not_unknown(
    postgres_url: str,
    bouncer: PgBouncer,
    server_path: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
    store = await open_store(bouncer.pooled(postgres_url))
    direct = await open_store(postgres_url)
    try:
        assert await store.create_task(created("before"))
        server_path.stop()  # PgBouncer's server sessions end, and its next login fails
        await until_no_server_sessions(bouncer)  # none a write could be sent on
        # The first write waits for a server until PgBouncer gives up on it
        # (query_wait_timeout); the next ones meet the failed login it caches.
        for name in ("waited", "refused", "refused-again"):
            with pytest.raises(StoreUnavailable) as refused:
                await store.create_task(created(name))
            assert not isinstance(refused.value, CommitUnknown)
            assert await direct.get_task(name) is None
        assert "server_login_retry" in str(refused.value)
    finally:
        await store.close()
        await direct.close()
