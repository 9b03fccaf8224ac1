"""The store's pool hands out the connection returned last (LIFO), not the one idle
longest (psycopg_pool's FIFO): a quiet process reuses the few connections it keeps warm
(ADR-0127).

A PostgreSQL session is warm for a statement once it has run it: psycopg prepares a
statement on a connection after `prepare_threshold` (5) runs there, and the server
compiles a plpgsql function and plans its queries once per session. In turn (FIFO), a
worker of concurrency 32 holds 34 connections and an idle worker's pickup sends each of its
statements to the next of them, so nearly every pickup ran cold: never prepared, its
function compiled again (measured: docs/scaling.md, "The idle pickup on a warm
connection"). Last in, first out, the pickup's statements land on the two or three
connections the quiet worker keeps busy; under load every connection is in use either way.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool, PoolTimeout

from noeta.core.errors import StoreUnavailable


class LastInFirstOutPool(AsyncConnectionPool[Any]):
    """psycopg_pool's pool, taking the most recently returned connection first.

    The override replaces one line of psycopg_pool's `_get_ready_connection` (its
    `popleft()`); the rest (the wait queue, growth, shrinking the least recently used
    from the left, the statistics) is psycopg_pool's own. `tests/stores/test_pool_order`
    fails if a psycopg_pool upgrade stops calling it."""

    # The signature is psycopg_pool's, timeout included.
    async def _get_ready_connection(self, timeout: float | None) -> Any:  # noqa: ASYNC109
        if not self._pool or (timeout is not None and timeout <= 0.0):
            # None ready (the wait queue's rules), or out of time (PoolTimeout): its own.
            return await super()._get_ready_connection(timeout)
        connection = self._pool.pop()
        self._nconns_min = min(self._nconns_min, len(self._pool))
        return connection


async def open_pool(
    pool: AsyncConnectionPool[Any], where: str, deadline_seconds: float
) -> AsyncConnectionPool[Any]:
    """`pool` with its `min_size` connections open, or StoreUnavailable (and it closed)
    if they cannot be within the deadline."""
    try:
        await pool.open(wait=True, timeout=deadline_seconds)
    except PoolTimeout as error:
        await pool.close()
        raise StoreUnavailable(f"cannot reach PostgreSQL at {where}") from error
    return pool
