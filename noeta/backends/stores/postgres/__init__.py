"""The PostgreSQL task store, on psycopg 3 and psycopg_pool (async): `PostgresStore` is
composed of one class per concern, each beside its SQL.

Every operation is one statement in autocommit (its own transaction, one round trip);
the multi-step writes are the functions of `queue/postgres/0005_create_store_functions.sql`.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from noeta.backends.stores.postgres.appends import PostgresAppends
from noeta.backends.stores.postgres.claims import CLAIM_NEXT_TASK, PostgresClaims
from noeta.backends.stores.postgres.connection import DEFAULT_DEADLINE_SECONDS, describe
from noeta.backends.stores.postgres.cron import PostgresCron
from noeta.backends.stores.postgres.inbox import PostgresInbox
from noeta.backends.stores.postgres.late_results import PostgresLateResults
from noeta.backends.stores.postgres.logs import PostgresLogs
from noeta.backends.stores.postgres.schema import check_schema, migrate_database
from noeta.backends.stores.postgres.wakeups import PostgresWakeups
from noeta.core.errors import StoreUnavailable

__all__ = [
    "CLAIM_NEXT_TASK",
    "DEFAULT_DEADLINE_SECONDS",
    "PostgresStore",
    "check_schema",
    "describe",
    "migrate_database",
]


class PostgresStore(
    PostgresClaims,
    PostgresAppends,
    PostgresInbox,
    PostgresLogs,
    PostgresCron,
    PostgresWakeups,
    PostgresLateResults,
):
    """A `Store` on one PostgreSQL database (or schema, via the URL's search_path)."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        application_name: str = "noeta",
        migrate: bool = False,
        max_connections: int = 10,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        idle_in_transaction_seconds: float = 30.0,
    ) -> PostgresStore:
        """Connect, check (or with `migrate`, bring up to date) the schema, open the pool."""
        where = describe(dsn)
        settings = {
            "application_name": application_name,
            "connect_timeout": max(1, round(deadline_seconds)),
            # A frozen client's open transaction must not hold a task row for long.
            "options": _options(dsn, idle_in_transaction_seconds),
        }
        if migrate:
            await migrate_database(dsn, **settings)
        else:
            await check_schema(dsn, **settings)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            kwargs={**settings, "autocommit": True},
            min_size=1,
            max_size=max_connections,
            open=False,
            timeout=deadline_seconds,
            name=f"noeta:{where}",
        )
        try:
            await pool.open(wait=True, timeout=deadline_seconds)
        except PoolTimeout as error:
            await pool.close()
            raise StoreUnavailable(f"cannot reach PostgreSQL at {where}") from error
        return cls(pool, where, deadline_seconds, dsn)


def _options(dsn: str, idle_in_transaction_seconds: float) -> str:
    existing = conninfo_to_dict(dsn).get("options") or ""
    timeout_ms = int(idle_in_transaction_seconds * 1000)
    return f"{existing} -c idle_in_transaction_session_timeout={timeout_ms}".strip()
