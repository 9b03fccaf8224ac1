"""Late results on sqlite: a tool's result kept, without a claim, for the call's next
claimer (ADR-040). The log and the task row are never touched."""

from __future__ import annotations

import asyncio
import sqlite3

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros
from noeta.backends.stores.sqlite.inbox import SELECT_TASK_STATUS
from noeta.core.errors import UnknownTask
from noeta.core.ports import payload
from noeta.core.ports.store import LateResult, check_late_result

# The first result for a call is kept (DO NOTHING): the hint never changes once written.
KEEP_LATE_RESULT = """
INSERT INTO late_results (task_id, call_id, content, is_error, epoch, worker, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (task_id, call_id) DO NOTHING"""
READ_LATE_RESULTS = """
SELECT task_id, call_id, content, is_error, epoch, worker, created_at FROM late_results
 WHERE task_id = ? ORDER BY created_at, call_id"""


# sqlite has no NOTIFY: a claimer waiting out its grace (ADR-0083) looks this often.
GRACE_POLL_SECONDS = 0.1


class SqliteLateResults(SqliteConnection):
    """Keeping and reading late results."""

    async def keep_late_result(self, result: LateResult) -> bool:
        content = check_late_result(result)

        def keep(connection: sqlite3.Connection, now: int) -> bool:
            if connection.execute(SELECT_TASK_STATUS, (result.task_id,)).fetchone() is None:
                raise UnknownTask(result.task_id)
            values = (
                result.task_id,
                result.call_id,
                content,
                int(result.is_error),
                result.epoch,
                result.worker,
                now,
            )
            return bool(connection.execute(KEEP_LATE_RESULT, values).rowcount == 1)

        return await self._run(self._write, keep)

    async def late_results(self, task_id: str) -> list[LateResult]:
        rows = await self._run(self._read_all, READ_LATE_RESULTS, (task_id,))
        results = []
        for task, call_id, content, is_error, epoch, worker, created in rows:
            text = payload.decode(content)
            assert isinstance(text, str)
            results.append(
                LateResult(task, call_id, text, bool(is_error), epoch, worker, from_micros(created))
            )
        return results

    async def wait_for_late_result(
        self, task_id: str, call_id: str, seconds: float
    ) -> LateResult | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            for result in await self.late_results(task_id):
                if result.call_id == call_id:
                    return result
            left = deadline - loop.time()
            if left <= 0:
                return None
            await asyncio.sleep(min(GRACE_POLL_SECONDS, left))
