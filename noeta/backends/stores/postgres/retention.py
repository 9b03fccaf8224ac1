"""Pruning finished tasks on PostgreSQL: batch after batch of `noeta_prune_finished`
(queue/postgres/functions/), each its own short transaction, on one session that holds the
schema's prune lock so that a second prune says so instead of racing the first."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.round_trip import fetch_within_deadline
from noeta.backends.stores.postgres.store_errors import reason
from noeta.core.errors import StoreError, StoreUnavailable
from noeta.core.ports.retention import (
    DEFAULT_BATCH_EVENTS,
    DEFAULT_BATCH_SIZE,
    REST_PER_BATCH,
    PruneCounts,
    PruneRunning,
    check_batch_size,
)
from noeta.core.ports.store import check_key

# A session lock, one per schema: held across the batches, freed by the server if the
# pruning process dies.
TRY_PRUNE_LOCK = (
    "SELECT pg_try_advisory_lock(hashtextextended('noeta.prune:' || current_schema(), 0))"
)
RELEASE_PRUNE_LOCK = (
    "SELECT pg_advisory_unlock(hashtextextended('noeta.prune:' || current_schema(), 0))"
)
PRUNE_CUTOFF = "SELECT clock_timestamp() - %(age)s::interval"
PRUNE_BATCH = """
SELECT tasks_pruned, events_pruned, more
  FROM noeta_prune_finished(%(before)s, %(queue)s, %(limit)s, %(keep_ids)s, %(events)s)
"""
COUNT_PRUNABLE = """
SELECT count(*), coalesce(sum(last_seq), 0) FROM tasks t
 WHERE t.finished_at < %(before)s
   AND (%(queue)s::text IS NULL OR t.queue = %(queue)s) AND noeta_may_prune(t.id)
"""
# With --forget-ids, every id pruned before may be used again too (a subtask's id among
# them, which a re-used parent id would launch again), a batch at a time.
FORGET_PRUNED_IDS = """
WITH forgotten AS (
    DELETE FROM pruned_task_ids
     WHERE id IN (SELECT id FROM pruned_task_ids LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
    RETURNING 1)
SELECT count(*) FROM forgotten
"""


class PostgresRetention(PostgresConnection):
    """`prune_finished` (the `Pruning` port)."""

    async def prune_finished(
        self,
        older_than: timedelta,
        *,
        queue: str | None = None,
        forget_ids: bool = False,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_events: int = DEFAULT_BATCH_EVENTS,
    ) -> PruneCounts:
        check_batch_size(batch_size, batch_events)
        if queue is not None:
            check_key("queue name", queue)
        connection = await self._prune_session()
        locked = False
        try:
            locked = bool((await self._on(connection, TRY_PRUNE_LOCK, {}))[0][0])
            if not locked:
                raise PruneRunning(
                    f"another prune is running on PostgreSQL at {self.where}; "
                    "try again when it has finished"
                )
            before = (await self._on(connection, PRUNE_CUTOFF, {"age": older_than}))[0][0]
            params = {"before": before, "queue": queue}
            if dry_run:
                tasks, events = (await self._on(connection, COUNT_PRUNABLE, params))[0]
                return PruneCounts(int(tasks), int(events))
            total = PruneCounts()
            batch = {
                **params,
                "limit": batch_size,
                "events": batch_events,
                "keep_ids": not forget_ids,
            }
            while True:
                started = time.monotonic()
                tasks, events, more = (await self._on(connection, PRUNE_BATCH, batch, write=True))[
                    0
                ]
                total += PruneCounts(int(tasks), int(events))
                if not more:
                    break
                await asyncio.sleep((time.monotonic() - started) * REST_PER_BATCH)
            forgetting = forget_ids
            while forgetting:
                forgotten = await self._on(connection, FORGET_PRUNED_IDS, batch, write=True)
                forgetting = forgotten[0][0] >= batch_size
            return total
        finally:
            await self._put_back(connection, locked)

    async def _on(
        self,
        connection: psycopg.AsyncConnection[Any],
        query: str,
        params: dict[str, Any],
        *,
        write: bool = False,
    ) -> list[tuple[Any, ...]]:
        """One statement on the prune's own session, under the usual deadline."""
        try:
            return await fetch_within_deadline(connection, query, params, self.deadline_seconds)
        except psycopg.errors.InsufficientPrivilege as error:
            # The worker role may not delete (ops/grants.sql): pruning is the owner's.
            raise StoreError(
                f"cannot prune PostgreSQL at {self.where}: {reason(error)}; "
                "run `noeta db prune` as the schema's owner"
            ) from None
        except (psycopg.Error, TimeoutError) as error:
            raise await self._failed(error, connection, write=write) from None

    async def _prune_session(self) -> psycopg.AsyncConnection[Any]:
        """A session to hold the prune lock on: one of the pool's, or, when the pool's URL
        is a pooler's (whose sessions are shared per transaction), one of its own on
        PostgreSQL itself (ADR-0106)."""
        try:
            if self.pooled:
                return await self._session_connection("noeta-prune")
            connection: psycopg.AsyncConnection[Any] = await self._pool.getconn()
            return connection
        except PoolTimeout as error:
            raise StoreUnavailable(f"cannot reach PostgreSQL at {self.where}") from error
        except psycopg.OperationalError as error:
            raise StoreUnavailable(
                f"cannot reach PostgreSQL at {self.where}: {reason(error)}"
            ) from None

    async def _put_back(self, connection: psycopg.AsyncConnection[Any], locked: bool) -> None:
        """Return the session to the pool without the lock; a session that cannot let go
        of it is closed instead, which frees it. A session of its own is closed."""
        if locked and not connection.broken:
            try:
                await self._on(connection, RELEASE_PRUNE_LOCK, {})
            except Exception:
                await connection.close()
        if self.pooled:
            await connection.close()
        else:
            await self._pool.putconn(connection)
