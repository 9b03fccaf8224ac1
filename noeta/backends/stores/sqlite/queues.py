"""Queue settings on sqlite: setting, clearing and listing the limits its claim reads from
`queue_settings` (0010, ADR-0073), with what each queue holds now."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from noeta.backends.stores.queue_rows import TOP_KEYS, change_params, check_period, overviews
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros, now_micros, to_micros
from noeta.core.ports.payload import JSONValue, encode
from noeta.core.ports.queue_settings import (
    QueueActivity,
    QueueChange,
    QueueOverview,
    QueueSettings,
)
from noeta.core.ports.store import check_key

_NAMED = "(json_array_length(:queues) = 0 OR {column} IN (SELECT value FROM json_each(:queues)))"
QUEUE_OVERVIEW = f"""
WITH counts AS (
    SELECT queue,
           sum(claimable_at <= :now) AS claimable,
           sum(status IN ('running', 'holding') AND lease_until > :now) AS running,
           sum(claimable_at > :now AND NOT (status IN ('running', 'holding')
                                            AND lease_until > :now)) AS scheduled
      FROM tasks WHERE claimable_at IS NOT NULL AND {_NAMED.format(column="queue")}
     GROUP BY queue
), unfinished AS (
    SELECT queue, count(*) AS unfinished FROM tasks
     WHERE status IN ('ready', 'waiting', 'running', 'holding') AND {_NAMED.format(column="queue")}
     GROUP BY queue
), named AS (
    SELECT queue FROM queue_settings WHERE {_NAMED.format(column="queue")}
    UNION SELECT queue FROM counts
)
SELECT n.queue, s.concurrency, s.per_key_concurrency, s.rate_count, s.rate_seconds,
       coalesce(s.paused, 0), s.queue IS NOT NULL, coalesce(c.claimable, 0),
       coalesce(c.running, 0), coalesce(c.scheduled, 0), s.updated_at,
       coalesce(u.unfinished, 0)
  FROM named AS n
  LEFT JOIN queue_settings AS s ON s.queue = n.queue
  LEFT JOIN counts AS c ON c.queue = n.queue
  LEFT JOIN unfinished AS u ON u.queue = n.queue
 ORDER BY n.queue"""
# Tasks created (tasks_by_creation) and tasks finished (tasks_finished: this store keeps
# no finished_at, and a finished row's updated_at is its finish, as pruning reads it) per
# queue and period.
ACTIVITY_PER_PERIOD = f"""
WITH happened AS (
    SELECT queue, created_at AS at, NULL AS ended FROM tasks
     WHERE created_at >= :since AND {_NAMED.format(column="queue")}
    UNION ALL
    SELECT queue, updated_at, status FROM tasks
     WHERE status IN ('done', 'failed', 'cancelled') AND updated_at >= :since
       AND {_NAMED.format(column="queue")}
)
SELECT queue, at / :period * :period AS start, sum(ended IS NULL), sum(ended = 'done'),
       sum(ended = 'failed'), sum(ended = 'cancelled')
  FROM happened
 GROUP BY 1, 2
 ORDER BY 1, 2"""
RUNNING_BY_KEY = """
SELECT queue, concurrency_key, count(*) FROM tasks
 WHERE status IN ('running', 'holding') AND lease_until > :now
   AND concurrency_key IS NOT NULL AND queue IN (SELECT value FROM json_each(:queues))
 GROUP BY 1, 2
 ORDER BY 1, 3 DESC, 2"""
# A field bound as NULL stays as it was; a new rate starts with a full bucket.
SET_QUEUE = """
INSERT INTO queue_settings AS s
       (queue, concurrency, per_key_concurrency, rate_count, rate_seconds, paused, updated_at)
VALUES (:queue, :concurrency, :per_key, :rate_count, :rate_seconds, coalesce(:paused, 0), :now)
ON CONFLICT (queue) DO UPDATE SET
    concurrency = coalesce(:concurrency, s.concurrency),
    per_key_concurrency = coalesce(:per_key, s.per_key_concurrency),
    rate_count = coalesce(:rate_count, s.rate_count),
    rate_seconds = coalesce(:rate_seconds, s.rate_seconds),
    rate_tokens = CASE WHEN :rate_count IS NULL THEN s.rate_tokens END,
    rate_at = CASE WHEN :rate_count IS NULL THEN s.rate_at END,
    paused = coalesce(:paused, s.paused),
    updated_at = :now"""
CLEAR_QUEUE = "DELETE FROM queue_settings WHERE queue = ?"


class SqliteQueues(SqliteConnection):
    """The `QueueSettingsStore` port on sqlite."""

    async def set_queue(self, queue: str, change: QueueChange) -> QueueOverview:
        change.applied_to(QueueSettings(queue))  # every value checked before the write
        params = change_params(queue, change)

        def set_it(connection: sqlite3.Connection, now: int) -> None:
            connection.execute(SET_QUEUE, {**params, "now": now})

        await self._run(self._write, set_it)
        return (await self.queue_overview([queue]))[0]

    async def clear_queue(self, queue: str) -> bool:
        check_key("queue name", queue)

        def clear_it(connection: sqlite3.Connection, now: int) -> bool:
            return bool(connection.execute(CLEAR_QUEUE, (queue,)).rowcount == 1)

        return await self._run(self._write, clear_it)

    async def queue_overview(self, queues: Sequence[str] = ()) -> list[QueueOverview]:
        names: list[JSONValue] = [check_key("queue name", queue) for queue in queues]
        now = now_micros()
        rows = await self._run(
            self._read_all, QUEUE_OVERVIEW, {"now": now, "queues": encode(names)}
        )
        found: list[JSONValue] = [row[0] for row in rows]
        by_key_values = {"now": now, "queues": encode(found)}
        by_key = await self._run(self._read_all, RUNNING_BY_KEY, by_key_values)
        changed = [
            (*row[:10], None if row[10] is None else from_micros(row[10]), row[11]) for row in rows
        ]
        return overviews(changed, by_key, TOP_KEYS)

    async def activity_per_period(
        self, since: datetime, period_seconds: int, queues: Sequence[str] = ()
    ) -> list[QueueActivity]:
        names: list[JSONValue] = [check_key("queue name", queue) for queue in queues]
        period = check_period(period_seconds) * 1_000_000
        params = {"since": to_micros(since), "period": period, "queues": encode(names)}
        rows = await self._run(self._read_all, ACTIVITY_PER_PERIOD, params)
        return [
            QueueActivity(
                queue, from_micros(start), created, done or 0, failed or 0, cancelled or 0
            )
            for queue, start, created, done, failed, cancelled in rows
        ]
