"""What the cost page reads on sqlite (`StoreViews.finished_tasks`, `ledger_events`): the
finished tasks walked by finish (`tasks_finished`: a finished row's updated_at is when it
finished), then their ledgers' events, long texts cut to their opening and end."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from noeta.backends.stores.ledger_event_rows import PART_CHARS, WHOLE_CHARS, ledger_event
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros, now_micros, to_micros
from noeta.core.ports import payload
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import StoredEvent
from noeta.core.ports.store_views import (
    LEDGER_EVENT_TYPES,
    FinishedTask,
    FinishedTasks,
    check_ledger_tasks,
    check_page,
)

FINISHED_TASKS = """
SELECT id, queue, concurrency_key, updated_at FROM tasks
 WHERE status IN ('done', 'failed', 'cancelled')
   AND (updated_at > :after OR (updated_at = :after AND id > :after_id))
   AND updated_at < :cutoff
 ORDER BY updated_at, id LIMIT :limit"""

LEDGER_EVENTS = """
SELECT e.task_id, e.seq, e.type, e.created_at,
       CASE WHEN length(e.data) <= :whole THEN e.data END,
       CASE WHEN length(e.data) > :whole THEN substr(e.data, 1, :part) END,
       CASE WHEN length(e.data) > :whole THEN substr(e.data, -:part) END
  FROM json_each(:ids) AS wanted
  JOIN events e ON e.task_id = wanted.value
 WHERE e.type IN (SELECT value FROM json_each(:types))
 ORDER BY e.task_id, e.seq"""


class SqliteFinishedUsage(SqliteConnection):
    """`finished_tasks` and `ledger_events`, read-only views of `noeta web`."""

    async def finished_tasks(
        self, after: datetime, after_id: str, limit: int, settle: float
    ) -> FinishedTasks:
        # A write is stamped inside its transaction (BEGIN IMMEDIATE): one in another
        # process may commit a moment after its stamp, which the settle covers.
        cutoff = now_micros() - int(settle * 1_000_000)
        values = {
            "after": to_micros(after),
            "after_id": after_id,
            "cutoff": cutoff,
            "limit": check_page(limit),
        }
        rows = await self._run(self._read_all, FINISHED_TASKS, values)
        found = [FinishedTask(t, q, key, from_micros(at)) for t, q, key, at in rows]
        return FinishedTasks(found, from_micros(cutoff))

    async def ledger_events(self, task_ids: Sequence[str]) -> dict[str, list[StoredEvent]]:
        ids = check_ledger_tasks(task_ids)
        if not ids:
            return {}
        wanted: list[JSONValue] = [*ids]
        types: list[JSONValue] = [*LEDGER_EVENT_TYPES]
        values = {
            "ids": payload.encode(wanted),
            "types": payload.encode(types),
            "whole": WHOLE_CHARS,
            "part": PART_CHARS,
        }
        found: dict[str, list[StoredEvent]] = {}
        for task, seq, kind, at, whole, opening, end in await self._run(
            self._read_all, LEDGER_EVENTS, values
        ):
            event = ledger_event(task, seq, kind, from_micros(at), whole, opening, end)
            found.setdefault(task, []).append(event)
        return found
