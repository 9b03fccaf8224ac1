"""Queue settings on PostgreSQL: setting, clearing and listing the limits the claim reads
from `queue_settings` (0010, ADR-0073), with what each queue holds now."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.queue_rows import TOP_KEYS, change_params, check_period, overviews
from noeta.core.ports.queue_settings import (
    QueueActivity,
    QueueChange,
    QueueOverview,
    QueueSettings,
)
from noeta.core.ports.store import check_key

# What a queue holds now: claimable (due, not held), live claims (running or holding,
# lease not lapsed) and scheduled (due later, not held), from the rows of the claim index
# (every claimed row is in it). An empty list: every queue that has settings or such rows.
_COUNTS = """
counts AS (
    SELECT queue,
           count(*) FILTER (WHERE claimable_at <= now()) AS claimable,
           count(*) FILTER (WHERE status IN ('running', 'holding') AND lease_until > now())
               AS running,
           count(*) FILTER (WHERE claimable_at > now() AND NOT (
                   status IN ('running', 'holding') AND lease_until > now()))
               AS scheduled
      FROM tasks
     WHERE claimable_at IS NOT NULL
       AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))
     GROUP BY queue
)"""
# Every task not finished, per queue, in two index reads: ready and waiting through the
# status index (0021), running and holding through tasks_by_owner. Asked for all four at
# once, the planner matches neither partial index and scans the table (360 ms at 1M).
_UNFINISHED = """
unfinished AS (
    SELECT queue, count(*) AS unfinished FROM (
        SELECT queue FROM tasks
         WHERE status IN ('ready', 'waiting')
           AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))
        UNION ALL
        SELECT queue FROM tasks
         WHERE status IN ('running', 'holding')
           AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))
    ) AS open
     GROUP BY queue
)"""
_SETTINGS_COLUMNS = "concurrency, per_key_concurrency, rate_count, rate_seconds, paused"

QUEUE_OVERVIEW = f"""
WITH {_COUNTS}, {_UNFINISHED}
SELECT coalesce(s.queue, c.queue), s.concurrency, s.per_key_concurrency, s.rate_count,
       s.rate_seconds, coalesce(s.paused, false), s.queue IS NOT NULL,
       coalesce(c.claimable, 0), coalesce(c.running, 0), coalesce(c.scheduled, 0),
       s.updated_at, coalesce(u.unfinished, 0)
  FROM queue_settings AS s FULL JOIN counts AS c ON c.queue = s.queue
  LEFT JOIN unfinished AS u ON u.queue = coalesce(s.queue, c.queue)
 WHERE cardinality(%(queues)s::text[]) = 0 OR coalesce(s.queue, c.queue) = ANY(%(queues)s::text[])
 ORDER BY 1
"""

# Tasks created and tasks finished per queue and period: two index ranges, of
# tasks_by_creation (0011) and tasks_finished (0010), each row read once per side. Each
# period's start is a whole number of periods from the epoch, so a page's periods line
# up however often it is read (date_part: a float8, far cheaper per row than extract's
# numeric).
ACTIVITY_PER_PERIOD = """
WITH happened AS (
    SELECT queue, created_at AS at, NULL::text AS ended FROM tasks
     WHERE created_at >= %(since)s
       AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))
    UNION ALL
    SELECT queue, finished_at, status FROM tasks
     WHERE finished_at >= %(since)s
       AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))
)
SELECT queue, to_timestamp(floor(date_part('epoch', at) / %(period)s) * %(period)s),
       count(*) FILTER (WHERE ended IS NULL), count(*) FILTER (WHERE ended = 'done'),
       count(*) FILTER (WHERE ended = 'failed'), count(*) FILTER (WHERE ended = 'cancelled')
  FROM happened
 GROUP BY 1, 2
 ORDER BY 1, 2
"""

RUNNING_BY_KEY = """
SELECT queue, concurrency_key, count(*) FROM tasks
 WHERE status IN ('running', 'holding') AND lease_until > now()
   AND concurrency_key IS NOT NULL AND queue = ANY(%(queues)s::text[])
 GROUP BY 1, 2
 ORDER BY 1, 3 DESC, 2
"""

# A field sent as NULL stays as it was. A new rate starts with a full bucket. Every idle
# worker of the queue is woken (noeta_wake_idle) unless the queue is left paused: a
# resumed or raised queue is claimed at once, not at the next poll.
SET_QUEUE = f"""
WITH kept AS (
    INSERT INTO queue_settings AS s (queue, {_SETTINGS_COLUMNS})
    VALUES (%(queue)s, %(concurrency)s, %(per_key)s, %(rate_count)s, %(rate_seconds)s,
            coalesce(%(paused)s, false))
    ON CONFLICT (queue) DO UPDATE SET
        concurrency = coalesce(%(concurrency)s, s.concurrency),
        per_key_concurrency = coalesce(%(per_key)s, s.per_key_concurrency),
        rate_count = coalesce(%(rate_count)s, s.rate_count),
        rate_seconds = coalesce(%(rate_seconds)s, s.rate_seconds),
        rate_tokens = CASE WHEN %(rate_count)s IS NULL THEN s.rate_tokens END,
        rate_at = CASE WHEN %(rate_count)s IS NULL THEN s.rate_at END,
        paused = coalesce(%(paused)s, s.paused),
        updated_at = clock_timestamp()
    RETURNING s.queue, {_SETTINGS_COLUMNS}
), woken AS (
    SELECT noeta_wake_idle(queue, 2147483647) FROM kept WHERE NOT paused
)
SELECT kept.queue, {_SETTINGS_COLUMNS}, (SELECT count(*) FROM woken) FROM kept
"""

CLEAR_QUEUE = """
WITH cleared AS (DELETE FROM queue_settings WHERE queue = %(queue)s RETURNING queue)
SELECT queue, noeta_wake_idle(queue, 2147483647) IS NULL FROM cleared
"""


class PostgresQueues(PostgresConnection):
    """The `QueueSettingsStore` port on PostgreSQL."""

    async def set_queue(self, queue: str, change: QueueChange) -> QueueOverview:
        change.applied_to(QueueSettings(queue))  # every value checked before the write
        await self._write(SET_QUEUE, change_params(queue, change))
        return (await self.queue_overview([queue]))[0]

    async def clear_queue(self, queue: str) -> bool:
        row = await self._write(CLEAR_QUEUE, {"queue": check_key("queue name", queue)})
        return row is not None

    async def queue_overview(self, queues: Sequence[str] = ()) -> list[QueueOverview]:
        names = [check_key("queue name", queue) for queue in queues]
        rows = await self._read(QUEUE_OVERVIEW, {"queues": names})
        found = [row[0] for row in rows]
        by_key = await self._read(RUNNING_BY_KEY, {"queues": found}) if found else []
        return overviews(rows, by_key, TOP_KEYS)

    async def activity_per_period(
        self, since: datetime, period_seconds: int, queues: Sequence[str] = ()
    ) -> list[QueueActivity]:
        names = [check_key("queue name", queue) for queue in queues]
        params = {"since": since, "period": check_period(period_seconds), "queues": names}
        rows = await self._read(ACTIVITY_PER_PERIOD, params)
        return [QueueActivity(*row) for row in rows]
