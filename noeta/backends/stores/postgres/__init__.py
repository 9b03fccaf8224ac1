"""The PostgreSQL task store, on psycopg 3 and psycopg_pool (async): `PostgresStore` is
composed of one class per concern, each beside its SQL.

Every operation is one statement in autocommit (its own transaction, one round trip);
the multi-step writes are the functions in `queue/postgres/functions/`.
"""

from __future__ import annotations

import functools
from typing import Any

from psycopg_pool import AsyncConnectionPool, PoolTimeout

from noeta.backends.stores.postgres.appends import PostgresAppends
from noeta.backends.stores.postgres.bulk import PostgresBulk
from noeta.backends.stores.postgres.claims import CLAIM_NEXT_TASK, PostgresClaims
from noeta.backends.stores.postgres.connection import DEFAULT_DEADLINE_SECONDS, describe
from noeta.backends.stores.postgres.cron import PostgresCron
from noeta.backends.stores.postgres.inbox import PostgresInbox
from noeta.backends.stores.postgres.late_results import PostgresLateResults
from noeta.backends.stores.postgres.logs import PostgresLogs
from noeta.backends.stores.postgres.model_limits import PostgresModelLimits
from noeta.backends.stores.postgres.queues import PostgresQueues
from noeta.backends.stores.postgres.schema import check_schema, migrate_database
from noeta.backends.stores.postgres.session import SessionLimits, startup_options
from noeta.backends.stores.postgres.task_pruning import PostgresTaskPruning
from noeta.backends.stores.postgres.unique_jobs import PostgresUniqueJobs
from noeta.backends.stores.postgres.views import PostgresViews
from noeta.backends.stores.postgres.wakeups import PostgresWakeups
from noeta.backends.stores.postgres.workers import PostgresWorkers
from noeta.core.errors import StoreUnavailable
from noeta.core.ports.store_capabilities import StoreCapabilities

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
    PostgresBulk,
    PostgresTaskPruning,
    PostgresViews,
    PostgresModelLimits,
    PostgresQueues,
    PostgresWorkers,
    PostgresUniqueJobs,
):
    """A `Store` on one PostgreSQL database (or schema, via the URL's search_path)."""

    @functools.cached_property  # asked per append and per model call
    def capabilities(self) -> StoreCapabilities:
        """Every optional port: bursts on one connection and LISTEN are PostgreSQL's."""
        return StoreCapabilities(
            bulk=self,
            queue_settings=self,
            views=self,
            pruning=self,
            model_limits=self,
            holding=self.holding,
            wakeups=self.wakeups,
            finishes=self.finishes,
            idle_workers=self,
            await_finish=self.await_finish,
            workers=self,
            unique_jobs=self,
        )

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        application_name: str = "noeta",
        migrate: bool = False,
        max_connections: int = 10,
        min_connections: int = 1,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        idle_in_transaction_seconds: float = 30.0,
    ) -> PostgresStore:
        """Connect, check (or with `migrate`, bring up to date) the schema, open the pool
        with `min_connections` connected (a worker opens them all before its first claim:
        growing the pool under its first runs kept their renewal waiting, issue 26)."""
        where = describe(dsn)
        limits = SessionLimits.for_deadline(deadline_seconds, idle_in_transaction_seconds)
        connecting = {
            "application_name": application_name,
            "connect_timeout": max(1, round(deadline_seconds)),
        }
        if migrate:
            # A migration waits on an advisory lock and may run long DDL: of the limits,
            # only the one for a frozen client's open transaction.
            idle = "idle_in_transaction_session_timeout"
            only_idle = {idle: limits.settings(0)[idle]}
            await migrate_database(dsn, **connecting, options=startup_options(dsn, only_idle))
        checking = startup_options(dsn, limits.settings(0))
        server_version = await check_schema(dsn, **connecting, options=checking)
        settings = {
            **connecting,
            "options": startup_options(dsn, limits.settings(server_version)),
        }
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            kwargs={**settings, "autocommit": True},
            min_size=min(min_connections, max_connections),
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
