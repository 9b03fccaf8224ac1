"""The PostgreSQL task store, on psycopg 3 and psycopg_pool (async): `PostgresStore` is
composed of one class per concern, each beside its SQL.

Every operation is one statement in autocommit (its own transaction, one round trip);
the multi-step writes are the functions in `queue/postgres/functions/`.
"""

from __future__ import annotations

import functools
from typing import Any

from psycopg_pool import AsyncConnectionPool

from noeta.backends.stores.postgres.append_and_claim import PostgresAppendAndClaim
from noeta.backends.stores.postgres.bulk import PostgresBulk
from noeta.backends.stores.postgres.claim_sql import CLAIM_NEXT_TASK
from noeta.backends.stores.postgres.claims import PostgresClaims
from noeta.backends.stores.postgres.connection import DEFAULT_DEADLINE_SECONDS, describe
from noeta.backends.stores.postgres.cron import PostgresCron
from noeta.backends.stores.postgres.group_commit import ROUNDS_IN_FLIGHT
from noeta.backends.stores.postgres.held_claim import HELD_SINCE
from noeta.backends.stores.postgres.inbox import PostgresInbox
from noeta.backends.stores.postgres.late_results import PostgresLateResults
from noeta.backends.stores.postgres.logs import PostgresLogs
from noeta.backends.stores.postgres.model_limits import PostgresModelLimits
from noeta.backends.stores.postgres.pool import LastInFirstOutPool, open_pool
from noeta.backends.stores.postgres.queues import PostgresQueues
from noeta.backends.stores.postgres.reply_streams import PostgresReplyStreams
from noeta.backends.stores.postgres.schema import SESSION_ENV, check_schema, migrate_database
from noeta.backends.stores.postgres.session import (
    SessionLimits,
    server_keepalives,
    startup_options,
    with_keepalives,
)
from noeta.backends.stores.postgres.task_pruning import PostgresTaskPruning
from noeta.backends.stores.postgres.unique_jobs import PostgresUniqueJobs
from noeta.backends.stores.postgres.views import PostgresViews
from noeta.backends.stores.postgres.wakeups import PostgresWakeups
from noeta.backends.stores.postgres.workers import PostgresWorkers
from noeta.core.errors import ConfigError, StoreUnavailable
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
    PostgresAppendAndClaim,
    PostgresInbox,
    PostgresLogs,
    PostgresCron,
    PostgresReplyStreams,
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
            reply_streams=self,
            append_and_claim=self,
        )

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        session_dsn: str | None = None,
        application_name: str = "noeta",
        migrate: bool = False,
        max_connections: int = 10,
        min_connections: int = 1,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        idle_in_transaction_seconds: float = 30.0,
        for_worker: bool = False,
    ) -> PostgresStore:
        """Connect, check (or with `migrate`, bring up to date) the schema, open the pool
        with `min_connections` connected (a worker opens them all before its first claim:
        growing the pool under its first runs kept their renewal waiting, issue 26).

        `for_worker` (ADR-0139): of the `max_connections`, ROUNDS_IN_FLIGHT run the group
        commit's rounds and the rest everything else, and one more connection (a second
        while a round is held up) renews the leases: none waits behind the runs.

        `session_dsn`: `dsn` is a pooler's in transaction mode and this is PostgreSQL's
        own, for migrating, checking, LISTEN and the prune's lock (ADR-0106)."""
        where = describe(dsn)
        direct = session_dsn or dsn
        pooled = direct != dsn
        # TCP keepalives where the URL sets none (ADR-0129).
        dsn, direct = with_keepalives(dsn), with_keepalives(direct)
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
            await migrate_database(direct, **connecting, options=startup_options(direct, only_idle))
        # The check's session is probed by the server too (ADR-0154): a worker restarting in
        # a loop behind a path that forgets would otherwise leave one backend a start for
        # the kernel's two hours. Its version is not known yet: no user timeout.
        checking = startup_options(direct, limits.settings(0) | server_keepalives(direct, 0))
        checked = await check_schema(direct, **connecting, options=checking)
        if checked.through_pooler and session_dsn is None:
            raise ConfigError(
                f"{where} is a connection pooler, not PostgreSQL itself: a LISTEN or a "
                f"session lock through it is lost in transaction mode. Set {SESSION_ENV} "
                "(store_session: in noeta.yaml) to PostgreSQL's own URL (or to this one, "
                "for a pooler in session mode); see docs/scaling.md"
            )
        # The server probes a session as its client does (ADR-0154); a LISTEN's session,
        # idle for hours, sets nothing else.
        keepalives = server_keepalives(direct, checked.server_version)
        session_options = startup_options(
            direct, limits.settings(checked.server_version) | keepalives
        )
        listening_options = startup_options(direct, keepalives)
        settings: dict[str, Any] = {**connecting, "autocommit": True}
        if pooled:
            # A pooler in transaction mode: no statement prepared on a server session
            # another client gets next (PgBouncer before 1.21 knows none), and no startup
            # options (it refuses them): the limits are set on the role (docs/scaling.md).
            settings["prepare_threshold"] = None
        else:
            settings["options"] = session_options

        def pool_of(size: int, opened: int, name: str) -> AsyncConnectionPool[Any]:
            # Last in, first out: a quiet worker's statements reuse its warm sessions
            # (ADR-0127).
            return LastInFirstOutPool(
                dsn,
                kwargs=settings,
                min_size=min(opened, size),
                max_size=size,
                open=False,
                timeout=deadline_seconds,
                name=f"{name}:{where}",
                where=where,
            )

        rounds = renewals = None
        if for_worker:
            if max_connections <= ROUNDS_IN_FLIGHT:
                raise ConfigError(
                    f"a worker needs at least {ROUNDS_IN_FLIGHT + 1} connections, "
                    f"not {max_connections}"
                )
            max_connections -= ROUNDS_IN_FLIGHT
            rounds = pool_of(ROUNDS_IN_FLIGHT, ROUNDS_IN_FLIGHT, "noeta-rounds")
            renewals = pool_of(2, 1, "noeta-renewals")
        pool = await open_pool(
            pool_of(max_connections, min_connections, "noeta"), where, deadline_seconds
        )
        try:
            for own in (rounds, renewals):
                if own is not None:
                    await open_pool(own, where, deadline_seconds)
        except StoreUnavailable:
            await pool.close()
            if rounds is not None:
                await rounds.close()
            raise
        # The claims' own connection forces generic plans (ADR-0108); none behind a pooler.
        generic = f"{session_options} -c plan_cache_mode=force_generic_plan".strip()
        return cls(
            pool,
            where,
            deadline_seconds,
            dsn,
            session_dsn=direct,
            session_options=session_options,
            listening_options=listening_options,
            generic_settings=None if pooled else {**settings, "options": generic},
            rounds_pool=rounds,
            renewal_pool=renewals,
            holds_claims=checked.server_version >= HELD_SINCE,
        )
