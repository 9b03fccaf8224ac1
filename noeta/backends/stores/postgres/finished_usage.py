"""What the cost page reads on PostgreSQL (`StoreViews.finished_tasks`, `ledger_events`):
the finished tasks walked by finish through `tasks_finished`, then their ledgers' events
through the events' primary key, long texts cut to their opening and end."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from noeta.backends.stores.ledger_event_rows import PART_CHARS, WHOLE_CHARS, ledger_event
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.search import CUTOFF
from noeta.core.ports.store import StoredEvent
from noeta.core.ports.store_views import (
    LEDGER_EVENT_TYPES,
    FinishedTask,
    FinishedTasks,
    check_ledger_tasks,
    check_page,
)

# The next finishes past the walk's mark and short of the cutoff (the search's: no task
# still uncommitted can carry an older finished_at), one range read of tasks_finished.
FINISHED_TASKS = f"""
WITH {CUTOFF}
SELECT c.at, t.id, t.queue, t.concurrency_key, t.finished_at
  FROM cutoff c LEFT JOIN LATERAL (
    SELECT id, queue, concurrency_key, finished_at FROM tasks
     WHERE finished_at >= %(after)s AND (finished_at, id) > (%(after)s, %(after_id)s)
       AND finished_at < c.at
     ORDER BY finished_at, id LIMIT %(limit)s) AS t ON true
 ORDER BY t.finished_at, t.id"""

# Each task's ledger events (events_pkey per task; the type filtered on the row, whose
# long text stays in TOAST unless the event is a ledger's).
LEDGER_EVENTS = """
SELECT e.task_id, e.seq, e.type, e.created_at,
       CASE WHEN octet_length(e.data) <= %(whole)s THEN e.data END,
       CASE WHEN octet_length(e.data) > %(whole)s THEN left(e.data, %(part)s) END,
       CASE WHEN octet_length(e.data) > %(whole)s THEN right(e.data, %(part)s) END
  FROM unnest(%(ids)s::text[]) AS wanted(id)
  JOIN events e ON e.task_id = wanted.id
 WHERE e.type = ANY(%(types)s)
 ORDER BY e.task_id, e.seq"""


class PostgresFinishedUsage(PostgresConnection):
    """`finished_tasks` and `ledger_events`, read-only views of `noeta web`."""

    async def finished_tasks(
        self, after: datetime, after_id: str, limit: int, settle: float
    ) -> FinishedTasks:
        params = {
            "after": after,
            "after_id": after_id,
            "limit": check_page(limit),
            "settle": timedelta(seconds=settle),
        }
        rows = await self._read(FINISHED_TASKS, params)
        found = [FinishedTask(*row[1:]) for row in rows if row[1] is not None]
        return FinishedTasks(found, rows[0][0])

    async def ledger_events(self, task_ids: Sequence[str]) -> dict[str, list[StoredEvent]]:
        ids = check_ledger_tasks(task_ids)
        if not ids:
            return {}
        params = {
            "ids": ids,
            "types": list(LEDGER_EVENT_TYPES),
            "whole": WHOLE_CHARS,
            "part": PART_CHARS,
        }
        found: dict[str, list[StoredEvent]] = {}
        for row in await self._read(LEDGER_EVENTS, params):
            found.setdefault(row[0], []).append(ledger_event(*row))
        return found
