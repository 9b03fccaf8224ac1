"""Late results on PostgreSQL: a tool's result kept, without a claim, for the call's next
claimer (ADR-040). One statement each; the log and the task row are never touched."""

from __future__ import annotations

from typing import Any

from noeta.backends.stores.postgres.connection import PostgresConnection
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


def late_result(row: tuple[Any, ...]) -> LateResult:
    task_id, call_id, content, is_error, epoch, worker, created_at = row
    text = payload.decode(content)
    assert isinstance(text, str)
    return LateResult(task_id, call_id, text, is_error, epoch, worker, created_at)
