"""The server-side limits every pooled session sets: read back with SHOW from the store's
own sessions, with the defaults derived from the client deadline, and a URL's own
`options` winning over them."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import ConfigError

LIMITS = (
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "client_connection_check_interval",
)


async def _shown(store: PostgresStore) -> dict[str, Any]:
    shown = {}
    async with store._pool.connection() as connection:
        for name in LIMITS:
            cursor = await connection.execute(f"SHOW {name}")
            row = await cursor.fetchone()
            assert row is not None
            shown[name] = row[0]
        shown["version"] = connection.info.server_version
    return shown


async def test_sessions_have_limits_that_fit_the_deadline_and_the_lease(
    postgres_url: str,
) -> None:
    store = await PostgresStore.open(postgres_url, migrate=True)
    try:
        shown = await _shown(store)
    finally:
        await store.close()
    assert shown["statement_timeout"] == "30s"  # 3 client deadlines
    assert shown["lock_timeout"] == "15s"
    assert shown["idle_in_transaction_session_timeout"] == "30s"  # one default lease
    assert shown["version"] >= 140000  # the test server has the setting
    assert shown["client_connection_check_interval"] == "5s"


async def test_the_urls_own_options_win(postgres_url: str) -> None:
    own = conninfo_to_dict(postgres_url).get("options") or ""
    options = f"{own} -c statement_timeout=90s -c lock_timeout=0"
    store = await PostgresStore.open(
        make_conninfo(postgres_url, options=options), migrate=True, deadline_seconds=2
    )
    try:
        shown = await _shown(store)
    finally:
        await store.close()
    assert shown["statement_timeout"] == "90s"
    assert shown["lock_timeout"] == "0"
    assert shown["client_connection_check_interval"] == "1s"  # half the 2 s deadline


async def test_an_unparseable_url_is_a_config_error_without_its_password() -> None:
    url = "postgresql://noeta:s3cret-pw@127.0.0.1:1/noeta options='-c statement_timeout=1s'"
    with pytest.raises(ConfigError, match="percent-encode") as raised:
        await PostgresStore.open(url)
    assert "s3cret-pw" not in str(raised.value)
