"""Whether a store is ready for a process to work on it: it answers, and its schema is
exactly this noeta's migrations (`/readyz`, `noeta worker --check`). Each check uses a
connection of its own, never one a task's statements wait for."""

from __future__ import annotations

import math

from noeta.backends.stores import resolve_url, sqlite_path, store_kind
from noeta.core.errors import StoreUnavailable


async def check_store_ready(url: str | None, timeout_seconds: float) -> None:
    """Raise a StoreError (SchemaMismatch for a schema that is not current) unless the
    store at `url` (None: the embedded server, which this never starts) answers and is
    current; its statements are bounded by `timeout_seconds`."""
    url = resolve_url(url)
    if url is None:
        url = _running_embedded_dsn()
    if store_kind(url) == "sqlite":
        from noeta.backends.stores.sqlite import SqliteStore

        store = await SqliteStore.open(
            sqlite_path(url), migrate=False, busy_timeout_seconds=timeout_seconds
        )
        await store.close()
        return
    from noeta.backends.stores.postgres import check_schema
    from noeta.backends.stores.postgres.session import startup_options

    limit = f"{math.ceil(timeout_seconds * 1000)}ms"
    await check_schema(
        url,
        application_name="noeta-health",
        connect_timeout=max(1, math.ceil(timeout_seconds)),
        options=startup_options(url, {"statement_timeout": limit, "lock_timeout": limit}),
    )


def _running_embedded_dsn() -> str:
    from noeta.backends.stores.embedded import EmbeddedPostgres
    from noeta.backends.stores.embedded_home import default_home

    server = EmbeddedPostgres(default_home())
    running = server.running_dsn()
    if running is None:
        raise StoreUnavailable(f"the embedded PostgreSQL in {server.root} is not running")
    return running
