"""PgBouncer's refusals of a statement it never gave a server (ADR-0155): nothing of it
reached PostgreSQL, so the store says so (PoolerRefused, a StoreUnavailable), not
CommitUnknown, though PgBouncer closes the client's connection as it refuses."""

from __future__ import annotations

import pytest

from noeta.backends.stores import open_store
from noeta.core.errors import PoolerRefused
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.pgbouncer import PgBouncer
from noeta.testing.store_contract import created


async def test_statements_pgbouncer_refuses_for_want_of_a_server_are_unavailable_not_unknown(
    postgres_url: str,
    pgbouncer_on_a_path: PgBouncer,
    pgbouncer_server_path: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
    store = await open_store(pgbouncer_on_a_path.pooled(postgres_url))
    direct = await open_store(postgres_url)
    try:
        assert await store.create_task(created("before"))
        pgbouncer_server_path.stop()  # its server sessions end, and its next login fails
        await pgbouncer_on_a_path.until_no_server_sessions()  # none a write could be sent on
        # The first write waits for a server until PgBouncer gives up on it
        # (query_wait_timeout); the next ones meet the failed login it caches.
        for name in ("waited", "refused", "refused-again"):
            with pytest.raises(PoolerRefused) as refused:
                await store.create_task(created(name))
            assert await direct.get_task(name) is None
        assert "server_login_retry" in str(refused.value)
    finally:
        await store.close()
        await direct.close()
