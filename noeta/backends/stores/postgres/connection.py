"""Running statements on the PostgreSQL pool: one round trip each, under a deadline, with
driver errors mapped into the store's error tree.

No transaction is ever held open across a model or tool call. Every call has an
application deadline: a blackholed connection fails in seconds, not when TCP gives up.
A burst of statements (`holding`) runs on one connection, taken from the pool once. One
transaction spans two round trips: an idle worker's lone claim, left open for its run's
first write (`held_claim.py`, ADR-0136)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from noeta.backends.stores.postgres.forgotten_path import ForgottenPath
from noeta.backends.stores.postgres.group_commit import APPEND_BATCH, GroupCommit, Rows
from noeta.backends.stores.postgres.held_claim import BEGIN, HeldClaim
from noeta.backends.stores.postgres.pool import LastInFirstOutPool, open_pool
from noeta.backends.stores.postgres.round_trip import fetch_all, within_deadline
from noeta.backends.stores.postgres.store_errors import Rerun, reason, store_error
from noeta.core.errors import PoolerRefused, StoreError, StoreUnavailable, StoreUnreachable

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_DEADLINE_SECONDS = 10.0
DEADLOCK_RETRIES = 5
# Between sends of a write a pooler refused for want of a server (ADR-0155).
REFUSED_PAUSE = 0.5
_IDLE = psycopg.pq.TransactionStatus.IDLE


def describe(dsn: str) -> str:
    """`host:port/dbname` of a DSN, for messages: never the password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparseable PostgreSQL URL"
    host = parts.get("host") or os.environ.get("PGHOST") or "localhost"
    port = parts.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = parts.get("dbname") or ""
    return f"{host}:{port}/{dbname}"


@dataclass
class _Held:
    """One asyncio task's burst of statements on one store: the connection it took from
    the pool (at its first statement), and the loop its deadlines are timed on."""

    pool: AsyncConnectionPool[Any]
    loop: asyncio.AbstractEventLoop
    task: asyncio.Task[Any] | None  # the burst's own; a task it spawns copies the context
    connection: psycopg.AsyncConnection[Any] | None = None


# Per asyncio task (a context variable, and checked against the task: one spawned inside a
# burst inherits the variable): a burst never lends its connection to another task, whose
# statements would interleave with its own or outlive the burst.
_HELD: ContextVar[_Held | None] = ContextVar("noeta_held_connection", default=None)


class PostgresConnection:
    """The pool a `PostgresStore` runs its statements on; each concern's methods use it."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        where: str,
        deadline_seconds: float,
        dsn: str = "",
        *,
        session_dsn: str | None = None,
        session_options: str = "",
        listening_options: str = "",
        generic_settings: dict[str, Any] | None = None,
        rounds_pool: AsyncConnectionPool[Any] | None = None,
        renewal_pool: AsyncConnectionPool[Any] | None = None,
        holds_claims: bool = False,
    ) -> None:
        self._pool = pool
        # A worker's (ADR-0139): its group commit's rounds and its lease renewals each on
        # connections of their own, never queued behind its runs' statements for the
        # pool's; None (a client's, a command's): they run on the pool.
        self._rounds_pool = rounds_pool
        self._renewal_pool = renewal_pool
        # For what needs a session of its own (a LISTEN, the prune's lock), which cannot
        # come from the pool: PostgreSQL's own URL when the pool's is a pooler's (ADR-0106).
        self._dsn = session_dsn or dsn
        self.pooled = self._dsn != dsn  # the pool's URL is a pooler in transaction mode
        self._session_options = session_options  # the limits, for a session of our own
        self._listening_options = listening_options  # the server's keepalives (ADR-0154)
        self.where = where
        self.deadline_seconds = deadline_seconds
        self._group_commit = GroupCommit(self._write_round, self._write_batch_and_claim)
        # The claims' connection (`_write_generic`): its settings, None behind a pooler.
        self._generic_settings = generic_settings
        self._generic_pool: AsyncConnectionPool[Any] | None = None
        self._generic_opening = asyncio.Lock()
        # Claims held open for their run's first write, by task (ADR-0136): where the
        # server bounds their transaction (PostgreSQL 17+) and the claims' connection is
        # its own (not behind a pooler).
        self.holds_claims = holds_claims and generic_settings is not None
        self._held: dict[str, HeldClaim] = {}
        # A deadline passed: this store's idle and listening connections go (ADR-0152).
        self._path = ForgottenPath(where, deadline_seconds, self._pools)

    def _pools(self) -> tuple[AsyncConnectionPool[Any] | None, ...]:
        return (self._pool, self._rounds_pool, self._renewal_pool, self._generic_pool)

    async def close(self) -> None:
        for held in list(self._held.values()):
            await held.abandon()
        for own in self._pools():
            if own is not None:
                await own.close()

    async def _listening_connection(self, application_name: str) -> psycopg.AsyncConnection[Any]:
        """A connection of its own, outside the pool, for a LISTEN: a pooled session must
        never be left listening, idle for hours. Of the limits, only the server's
        keepalives (ADR-0154). Raises psycopg's error if it cannot connect."""
        return await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=application_name,
            connect_timeout=max(1, round(self.deadline_seconds)),
            options=self._listening_options,
        )

    async def _session_connection(self, application_name: str) -> psycopg.AsyncConnection[Any]:
        """A session of its own on PostgreSQL itself, under the pool's limits: for a lock
        held across transactions, which a pooler in transaction mode would lose."""
        return await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=application_name,
            connect_timeout=max(1, round(self.deadline_seconds)),
            options=self._session_options,
        )

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[None]:
        """Run this task's store statements inside on one connection, taken from the pool
        at the first and given back at the end: one checkout and one event-loop lookup
        for a burst instead of one per statement. For a burst of store statements only:
        never across a model call or a tool run (the connection is the pool's capacity).
        A statement that fails gives the connection back at once (a broken one is
        discarded): the next takes a fresh one, and the error is what it always was."""
        if _HELD.get() is not None:
            yield  # already holding: the outer burst gives it back
            return
        held = _Held(self._pool, asyncio.get_running_loop(), asyncio.current_task())
        token = _HELD.set(held)
        try:
            yield
        finally:
            _HELD.reset(token)
            if held.connection is not None:
                await self._pool.putconn(held.connection)

    async def _write(
        self, query: str, params: Mapping[str, Any], *, task_id: str | None = None
    ) -> tuple[Any, ...] | None:
        rows = await self._write_many(query, params, task_id=task_id)
        return rows[0] if rows else None

    async def _write_many(
        self,
        query: str,
        params: Mapping[str, Any],
        *,
        task_id: str | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
        resend_refused: bool = True,
    ) -> list[tuple[Any, ...]]:
        """Run a write (on the store's pool, or `pool`); a broken connection means its
        outcome is unknown (CommitUnknown). A task's write under a claim held open for
        it goes with that claim's commit (ADR-0136). `resend_refused`: see `_run_write`."""
        held = self._held.get(task_id) if task_id is not None else None
        if held is not None and held.epoch == params.get("epoch"):
            written = await held.write(query, params)
            if written is not None:
                return written
        statements = [(query, params)]
        rows = await self._run_write(
            statements, "the statement", task_id=task_id, pool=pool, resend_refused=resend_refused
        )
        return rows[0]

    async def _write_round(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """A group commit's round, on the rounds' own connections where the store has them:
        a run holding a pool connection in a burst (`holding`) awaits the round that
        carries its write, which must never wait for that run's pool (ADR-0139)."""
        return await self._write_many(query, params, pool=self._rounds_pool)

    async def _write_batch_and_claim(
        self, batch: dict[str, Any], claim: str, params: dict[str, Any]
    ) -> tuple[Rows, Rows]:
        """A group commit's batch and a claim (ADR-0116): `_write_and_claim`."""
        return await self._write_and_claim(APPEND_BATCH, batch, claim, params)

    async def _write_and_claim(
        self, write: str, written: Mapping[str, Any], claim: str, params: Mapping[str, Any]
    ) -> tuple[Rows, Rows]:
        """A write and a claim, pipelined: one round trip, one transaction (the Sync that
        ends the pipeline commits both), on the claims' connection (ADR-0116, ADR-0121).
        Rolled back whole by a deadlock, it is run again, checks included."""
        pool = None
        if self._generic_settings is not None:
            pool = self._generic_pool or await self._open_generic_pool(self._generic_settings)
        statements = [(write, written), (claim, params)]
        rows, claimed = await self._run_write(statements, "the batch and the claim", pool=pool)
        return rows, claimed

    async def _run_write(
        self,
        statements: Sequence[tuple[str, Mapping[str, Any]]],
        what: str,
        *,
        task_id: str | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
        resend_refused: bool = True,
    ) -> list[list[tuple[Any, ...]]]:
        """`_run_all` for a write, sent again where nothing of it can have been written:
        rolled back whole by a deadlock (its checks run again), or refused by a pooler
        that found no server for it (ADR-0155), every REFUSED_PAUSE seconds for one
        deadline after the first refusal at most, so a run's write outlives a pooler's
        short refusal window. The claim loop's own claims do not wait here: the loop
        asks again at its poll."""
        reruns, give_up = 0, 0.0  # the clock is read after a refusal, never before
        while True:
            try:
                return await self._run_all(statements, write=True, task_id=task_id, pool=pool)
            except Rerun as error:
                if reruns == DEADLOCK_RETRIES:
                    raise
                reruns += 1
                log.info("store: %s; re-running %s with its checks", error, what)
            except PoolerRefused as error:
                now = time.monotonic()
                give_up = give_up or now + self.deadline_seconds
                if not resend_refused or now + REFUSED_PAUSE > give_up:
                    raise
                log.debug("store: %s; sending %s again in %g s", error, what, REFUSED_PAUSE)
                await asyncio.sleep(REFUSED_PAUSE)

    async def _write_generic(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """`_write_many` for a statement whose generic plan is as good as a custom one (the
        claims that load): it runs on a connection of its own whose session forces generic
        plans, so its cached plan is made once per connection instead of at every run
        (ADR-0108). Behind a pooler nothing is prepared, so nothing is cached: it runs on
        the pool as any write."""
        if self._generic_settings is None:
            return await self._write_many(query, params, resend_refused=False)
        pool = self._generic_pool or await self._open_generic_pool(self._generic_settings)
        return await self._write_many(query, params, pool=pool, resend_refused=False)

    async def _claim_held(self, query: str, params: Mapping[str, Any]) -> tuple[Rows, Any]:
        """A claim whose transaction stays open (ADR-0136): its rows, and the claims'
        connection it holds, in a transaction the caller commits (`_hold_claim`)."""
        assert self._generic_settings is not None
        pool = self._generic_pool or await self._open_generic_pool(self._generic_settings)
        connection = await self._checkout(pool)
        try:
            *_, rows = await self._run_on(connection, (*BEGIN, (query, params)))
        except BaseException:
            await self._give_back_claims(connection)
            raise
        return rows, connection

    async def _commit_held(self, connection: Any) -> None:
        """A claim opened by `_claim_held` committed at once: none to hold it for."""
        try:
            await self._run_on(connection, (("COMMIT", {}),))
        finally:
            await self._give_back_claims(connection)

    def _hold_claim(self, connection: Any, task_id: str, epoch: int) -> HeldClaim:
        """The claim open on `connection` waits for its run's first write (or commits alone
        within `HOLD_SECONDS`)."""
        held = HeldClaim(
            connection, task_id, epoch, self._run_on, self._give_back_claims, self._settled
        )
        self._held[task_id] = held
        return held

    def _settled(self, held: HeldClaim, committed: bool) -> None:
        """A committed claim's writes go as any; an undone one's stay refused here until
        its task is claimed again (its epoch may be the next claimer's)."""
        if committed and self._held.get(held.task_id) is held:
            del self._held[held.task_id]

    def _claimed_again(self, claimed: Sequence[Any]) -> None:
        """An undone claim's epoch is refused here until this store claims its task again
        (its own runs are never claimed by it while they run: ADR-0079)."""
        if self._held:
            for each in claimed:
                self._held.pop(each.claim.task_id, None)

    async def _give_back_claims(self, connection: Any) -> None:
        assert self._generic_pool is not None
        if not connection.broken and connection.info.transaction_status != _IDLE:
            await connection.close()  # never hand on a transaction left open
        await self._generic_pool.putconn(connection)

    async def _run_on(
        self,
        connection: psycopg.AsyncConnection[Any],
        statements: Sequence[tuple[str, Mapping[str, Any]]],
    ) -> list[Rows]:
        """Statements on a connection the caller holds (a held claim's), in one round trip,
        under the deadline; errors as a write's."""
        loop = asyncio.get_running_loop()
        try:
            return await within_deadline(
                connection, lambda: fetch_all(connection, statements), self.deadline_seconds, loop
            )
        except (psycopg.Error, TimeoutError) as error:
            raise await self._failed(error, connection, write=True) from None

    async def _failed(
        self,
        error: psycopg.Error | TimeoutError,
        connection: Any,
        *,
        write: bool,
        task_id: str | None = None,
    ) -> StoreError:
        """A failed statement's store error; a deadline passing replaces the store's idle
        and listening connections first (ADR-0152)."""
        if isinstance(error, TimeoutError):
            await self._path.no_answer()
        return store_error(
            error, self.where, write=write, broken=connection.broken, task_id=task_id
        )

    async def _open_generic_pool(self, settings: dict[str, Any]) -> AsyncConnectionPool[Any]:
        """The claims' connection, opened at the first claim: a client, which never claims,
        never holds one."""
        async with self._generic_opening:
            if self._generic_pool is None:
                # One connection, so order does not apply: the pool is for its look at
                # an idle session before the claim's write (ADR-0148).
                pool: AsyncConnectionPool[Any] = LastInFirstOutPool(
                    self._dsn,
                    kwargs=settings,
                    min_size=1,
                    max_size=1,
                    open=False,
                    timeout=self.deadline_seconds,
                    name=f"noeta-claims:{self.where}",
                    where=self.where,
                )
                self._generic_pool = await open_pool(pool, self.where, self.deadline_seconds)
            return self._generic_pool

    async def _read(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return (await self._run_all([(query, params)], write=False))[0]

    async def _run_all(
        self,
        statements: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        write: bool,
        task_id: str | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
    ) -> list[list[tuple[Any, ...]]]:
        """Run statements in one round trip (pipelined), under one deadline, on the store's
        pool (or `pool`). Every driver error leaves as a `StoreError` (see `store_error`)."""
        pool = pool or self._pool
        held = _HELD.get()
        if held is not None and (
            held.pool is not pool or held.task is not asyncio.current_task(held.loop)
        ):
            held = None  # a burst on another pool, or of the task that spawned this one
        connection = held.connection if held is not None else None
        if connection is None:
            connection = await self._checkout(pool)
            if held is not None:
                held.connection = connection
        loop = held.loop if held is not None else asyncio.get_running_loop()
        try:
            return await within_deadline(
                connection, lambda: fetch_all(connection, statements), self.deadline_seconds, loop
            )
        except (psycopg.Error, TimeoutError) as error:
            if held is not None:
                held.connection = None  # given back below; the burst's next takes another
                held = None
            raise await self._failed(error, connection, write=write, task_id=task_id) from None
        except BaseException:
            if held is not None:  # cancelled mid-statement: the connection's state is unknown
                held.connection = None
                held = None
            raise
        finally:
            if held is None:
                await pool.putconn(connection)

    async def _checkout(
        self, pool: AsyncConnectionPool[Any] | None = None
    ) -> psycopg.AsyncConnection[Any]:
        pool = pool or self._pool
        try:
            connection: psycopg.AsyncConnection[Any] = await pool.getconn()
        except PoolTimeout as error:
            failure = getattr(pool, "connect_failure", None)
            if failure is not None:  # none could be opened: say why, not that it was full
                raise StoreUnreachable(
                    f"cannot reach PostgreSQL at {self.where}: {failure}"
                ) from error
            raise StoreUnavailable(self._why_no_connection(pool)) from error
        except psycopg.Error as error:  # PoolClosed: this store was closed
            raise StoreUnavailable(f"PostgreSQL at {self.where}: {reason(error)}") from None
        return connection

    def _why_no_connection(self, pool: AsyncConnectionPool[Any]) -> str:
        """Why no connection came within the deadline, none having failed to open: every
        one this pool may open was busy (its own load: say how to size it)."""
        stats = pool.get_stats()
        size, most = stats.get("pool_size", 0), stats.get("pool_max", 0)
        if most and size >= most:
            waiting = stats.get("requests_waiting", 0)
            return (
                f"this process's pool of {most} connection(s) to PostgreSQL at {self.where} "
                f"is full: all were in use for {self.deadline_seconds:g}s and {waiting} more "
                "call(s) waited. PostgreSQL may be slow or unreachable, or the process sends "
                "more calls at once than its pool holds (enqueue_many writes a batch on one "
                "connection; a Client takes max_connections=N, a worker --connections N, within "
                "the server's max_connections)"
            )
        return f"cannot reach PostgreSQL at {self.where}"
