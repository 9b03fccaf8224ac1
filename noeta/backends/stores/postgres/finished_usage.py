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
# still uncommitted can carry an older finished_at), in (finished_at, id) order with no
# index of that order: the rest of the mark's own moment, then every task finished up to
# the moment of the `limit`-th one after it, ties included, so the order is exact. One
# `ORDER BY finished_at, id LIMIT` over tasks_finished sorted the whole range left
# (EXPLAIN at 20,000 tasks: 19,940 rows read for 1,000, 88 ms; now 1,000).
FINISHED_TASKS = f"""
WITH {CUTOFF},
bound AS (
  SELECT max(finished_at) AS at FROM (
    SELECT finished_at FROM tasks
     WHERE finished_at > %(after)s AND finished_at < (SELECT at FROM cutoff)
     ORDER BY finished_at LIMIT %(limit)s) AS next),
batch AS (
  (SELECT id, queue, concurrency_key, finished_at FROM tasks
    WHERE finished_at = %(after)s AND id > %(after_id)s
      AND finished_at < (SELECT at FROM cutoff))
  UNION ALL
  (SELECT id, queue, concurrency_key, finished_at FROM tasks
    WHERE finished_at > %(after)s AND finished_at <= (SELECT at FROM bound))
  ORDER BY finished_at, id LIMIT %(limit)s)
SELECT c.at, b.id, b.queue, b.concurrency_key, b.finished_at
  FROM cutoff c LEFT JOIN batch b ON true
 ORDER BY b.finished_at, b.id"""


# Each task's ledger events, probed per task through events_pkey (the type filtered on
# the row, whose long text stays in TOAST unless the event is a ledger's). OFFSET 0 keeps
# the probes: without it the planner hashes every event of the table for a batch (EXPLAIN
# at 20,000 tasks: a sequential scan of 58,000 events for 1,000 tasks, 136 ms).
LEDGER_EVENTS = """
SELECT e.task_id, e.seq, e.type, e.created_at, e.whole, e.opening, e.ending
  FROM unnest(%(ids)s::text[]) AS wanted(id)
 CROSS JOIN LATERAL (
    SELECT task_id, seq, type, created_at,
           CASE WHEN octet_length(data) <= %(whole)s THEN data END AS whole,
           CASE WHEN octet_length(data) > %(whole)s THEN left(data, %(part)s) END AS opening,
           CASE WHEN octet_length(data) > %(whole)s THEN right(data, %(part)s) END AS ending
      FROM events
     WHERE events.task_id = wanted.id AND events.type = ANY(%(types)s)
     OFFSET 0) AS e
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
