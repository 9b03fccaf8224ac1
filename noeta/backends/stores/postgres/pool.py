"""The store's pool hands out the connection returned last (LIFO), not the one idle
longest (psycopg_pool's FIFO): a quiet process reuses the few connections it keeps warm
(ADR-0127). It never hands out one the server or the network already ended (ADR-0148).

A PostgreSQL session is warm for a statement once it has run it: psycopg prepares a
statement on a connection after `prepare_threshold` (5) runs there, and the server
compiles a plpgsql function and plans its queries once per session. In turn (FIFO), a
worker of concurrency 32 holds 34 connections and an idle worker's pickup sends each of its
statements to the next of them, so nearly every pickup ran cold: never prepared, its
function compiled again (measured: docs/scaling.md, "The idle pickup on a warm
connection"). Last in, first out, the pickup's statements land on the two or three
connections the quiet worker keeps busy; under load every connection is in use either way.

An idle session has nothing to say: a socket that is readable while its connection sits
in the pool holds the server's goodbye (a FATAL and EOF: a restart, `pg_terminate_backend`,
`idle_session_timeout`) or the kernel's (a reset, a keepalive that went unanswered), or,
rarely, something a healthy session may send unasked (a NOTIFY, a NOTICE, a
ParameterStatus). One zero-timeout poll tells the usual case (nothing readable) without a
round trip; libpq reads and parses what is there, and only a connection it finds closed is
discarded.
"""

from __future__ import annotations

import random
import select
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from noeta.backends.stores.postgres.outages import OUTAGES
from noeta.backends.stores.postgres.store_errors import reason
from noeta.core.errors import StoreUnavailable, StoreUnreachable

_OK = psycopg.pq.ConnStatus.OK
_SEVERITY = psycopg.pq.DiagnosticField.SEVERITY_NONLOCALIZED
# A FATAL and then EOF may arrive as two reads; more than this many readable in a row is a
# healthy session receiving a stream of notifications, kept.
_READS = 4


def is_alive(connection: psycopg.AsyncConnection[Any]) -> bool:
    """False if the server or the network has ended this idle connection: without a round
    trip (a zero-timeout poll of its socket; libpq reads what is there, if anything).

    What a healthy session sent unasked stays with it: a NOTIFY queued in libpq for the
    next statement to deliver, a NOTICE given to the connection's handlers, a
    ParameterStatus recorded."""
    pgconn = connection.pgconn
    if pgconn.status != _OK:
        return False
    poller = select.poll()  # not select(): a process may hold descriptors past 1024
    poller.register(pgconn.socket, select.POLLIN)
    for _ in range(_READS):
        if not poller.poll(0):
            return True
        try:
            pgconn.consume_input()  # EOF, a reset or a timed-out keepalive raise here
        except psycopg.OperationalError:
            return False
        if _ended_in_what_came(pgconn):
            return False
    return pgconn.status == _OK


def _ended_in_what_came(pgconn: Any) -> bool:
    """Parse what an idle session received; True if it is the server's FATAL, which it
    sends an idle session only as it ends it (its EOF may not have arrived yet). libpq
    gives an error received while idle to the notice handler: it is watched here, and
    still passed on to psycopg's."""
    handler = pgconn.notice_handler
    severities: list[bytes | None] = []

    def noticed(result: Any) -> None:
        severities.append(result.error_field(_SEVERITY))
        handler(result)

    pgconn.notice_handler = noticed
    try:
        pgconn.is_busy()  # parses the input: notices to the handler, NOTIFYs queued
    finally:
        pgconn.notice_handler = handler
    return b"FATAL" in severities or b"PANIC" in severities


class LastInFirstOutPool(AsyncConnectionPool[Any]):
    """psycopg_pool's pool, taking the most recently returned connection first, and
    passing over (and replacing) any the server or the network has ended.

    The override replaces one line of psycopg_pool's `_get_ready_connection` (its
    `popleft()`); the rest (the wait queue, growth, shrinking the least recently used
    from the left, the statistics) is psycopg_pool's own. `tests/stores/test_pool_order`
    fails if a psycopg_pool upgrade stops calling it.

    The look is here, under the pool's lock, rather than in psycopg_pool's `check`
    callback: after a connection fails that check, psycopg_pool tries the next at once,
    then sleeps 1 s, 2 s, ... before each further one, and after a restart every idle
    connection fails it (ADR-0148).

    It also keeps why its last attempt to open a connection failed (`connect_failure`,
    None once one opens): a caller who waited a deadline for a connection is told the
    server's or libpq's reason, not that the pool was full (ADR-0156)."""

    def __init__(self, *args: Any, where: str, **kwargs: Any) -> None:
        self.where = where  # the server, for the outage's lines
        self.connect_failure: str | None = None
        super().__init__(*args, **kwargs)

    # The signature is psycopg_pool's.
    async def _add_connection(self, attempt: Any, growing: bool = False) -> None:
        # A connection's replacement is tried again after 1 s, 2 s, 4 s, ... up to half
        # the deadline (ADR-0156), not psycopg_pool's doubling for 5 minutes: after a
        # 70 s outage its next try came 44 s after the server was back, and every
        # statement meanwhile waited out its deadline for nothing. Capped below the
        # deadline, a statement that waits for a connection sees a fresh try.
        await super()._add_connection(attempt or _Reconnecting(self), growing)

    # The signature is psycopg_pool's.
    async def _connect(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        try:
            connection = await super()._connect(timeout)
        except psycopg.Error as error:
            self.connect_failure = reason(error)
            OUTAGES.failed(self.where, self.connect_failure)
            raise
        self.connect_failure = None
        OUTAGES.connected(self.where)
        return connection

    # The signature is psycopg_pool's, timeout included.
    async def _get_ready_connection(self, timeout: float | None) -> Any:  # noqa: ASYNC109
        while self._pool and (timeout is None or timeout > 0.0):
            connection = self._pool.pop()
            self._nconns_min = min(self._nconns_min, len(self._pool))
            if is_alive(connection):
                return connection
            # Closed, it goes back as psycopg_pool's own broken ones do: counted lost and
            # replaced by a new connection; the next one is looked at.
            await self._close_connection(connection)
            await self._return_connection(connection, from_getconn=True)
        # None ready (the wait queue's rules), or out of time (PoolTimeout): its own.
        return await super()._get_ready_connection(timeout)


class _Reconnecting(AttemptWithBackoff):
    """psycopg_pool's back-off between a connection's replacement attempts, capped at
    half the pool's deadline (its `timeout`), jittered so a fleet does not try as one."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        super().__init__(timeout=pool.reconnect_timeout)
        self._most = pool.timeout / 2

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        if self.delay > self._most:
            self.delay = self._most * random.uniform(0.5, 1.0)


async def open_pool(
    pool: AsyncConnectionPool[Any], where: str, deadline_seconds: float
) -> AsyncConnectionPool[Any]:
    """`pool` with its `min_size` connections open, or StoreUnavailable (and it closed)
    if they cannot be within the deadline."""
    try:
        await pool.open(wait=True, timeout=deadline_seconds)
    except PoolTimeout as error:
        await pool.close()
        failure = getattr(pool, "connect_failure", None)
        if failure is not None:
            raise StoreUnreachable(f"cannot reach PostgreSQL at {where}: {failure}") from error
        raise StoreUnavailable(f"cannot reach PostgreSQL at {where}") from error
    return pool
