"""Late results on PostgreSQL: a tool's result kept, without a claim, for the call's next
claimer (ADR-040). One statement each; the log and the task row are never touched."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.store_errors import store_error
from noeta.core.errors import UnknownTask
from noeta.core.ports import payload
from noeta.core.ports.store import LateResult, check_late_result

# The first result for a call is kept (DO NOTHING): the hint never changes once written.
# Whether the task exists and whether the row went in, in one round trip.
KEEP_LATE_RESULT = """
WITH task AS (SELECT id FROM tasks WHERE id = %(task)s),
kept AS (
    INSERT INTO late_results (task_id, call_id, content, is_error, epoch, worker)
    SELECT id, %(call)s, %(content)s, %(is_error)s, %(epoch)s, %(worker)s FROM task
    ON CONFLICT (task_id, call_id) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM task), EXISTS (SELECT 1 FROM kept)
"""

# Sent by the late_results_announced trigger (0017) for each row kept: the payload is the
# task id alone (any role may LISTEN: no content, ever).
LISTEN_FOR_LATE_RESULTS = "LISTEN noeta_late_result"
READ_LATE_RESULT = """
SELECT task_id, call_id, content, is_error, epoch, worker, created_at FROM late_results
 WHERE task_id = %(task)s AND call_id = %(call)s
"""

READ_LATE_RESULTS = """
SELECT task_id, call_id, content, is_error, epoch, worker, created_at FROM late_results
 WHERE task_id = %(task)s ORDER BY created_at, call_id
"""


class PostgresLateResults(PostgresConnection):
    """Keeping and reading late results."""

    async def keep_late_result(self, result: LateResult) -> bool:
        params = {
            "task": result.task_id,
            "call": result.call_id,
            "content": check_late_result(result),
            "is_error": result.is_error,
            "epoch": result.epoch,
            "worker": result.worker,
        }
        row = await self._write(KEEP_LATE_RESULT, params, task_id=result.task_id)
        if row is None or not row[0]:
            raise UnknownTask(result.task_id)
        return bool(row[1])

    async def late_results(self, task_id: str) -> list[LateResult]:
        rows = await self._read(READ_LATE_RESULTS, {"task": task_id})
        return [late_result(row) for row in rows]

    async def wait_for_late_result(
        self, task_id: str, call_id: str, seconds: float
    ) -> LateResult | None:
        # Rare (a takeover of a half-done call whose worker lives on): a connection of its
        # own, outside the pool, so a LISTEN never lingers on a pooled session.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        params = {"task": task_id, "call": call_id}
        try:
            connection = await self._listening_connection("noeta-grace")
        except psycopg.Error as error:
            raise store_error(error, self.where, write=False, broken=True) from None
        try:
            async with asyncio.timeout(seconds + self.deadline_seconds):
                await connection.execute(LISTEN_FOR_LATE_RESULTS)
                while True:
                    # Listening first, then looking: a row kept in between is announced.
                    rows = await (await connection.execute(READ_LATE_RESULT, params)).fetchall()
                    if rows:
                        return late_result(rows[0])
                    left = deadline - loop.time()
                    if left <= 0:
                        return None
                    await _announced(connection, task_id, left)
        except (psycopg.Error, TimeoutError) as error:
            raise store_error(error, self.where, write=False, broken=True) from None
        finally:
            await connection.close()


async def _announced(connection: psycopg.AsyncConnection[Any], task_id: str, left: float) -> None:
    """Until a keep for `task_id` is announced, or `left` seconds pass (then one more look:
    a worker frozen across its deadline still finds a row kept meanwhile)."""
    async for notice in connection.notifies(timeout=left):
        if notice.payload == task_id:
            return


def late_result(row: tuple[Any, ...]) -> LateResult:
    task_id, call_id, content, is_error, epoch, worker, created_at = row
    text = payload.decode(content)
    assert isinstance(text, str)
    return LateResult(task_id, call_id, text, is_error, epoch, worker, created_at)
