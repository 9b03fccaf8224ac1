"""Wake-ups on PostgreSQL: the scheduler announces tasks that fell due (NOTIFY noeta_wake),
and workers listen for them instead of polling; clients listen for finished tasks
(noeta_finished, sent by the append that finishes one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from datetime import datetime

import psycopg

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import check_moment

LISTEN_FOR_WAKEUPS = "LISTEN noeta_wake"
LISTEN_FOR_FINISHES = "LISTEN noeta_finished"
ANY_QUEUE = "*"

# Both reads walk tasks_due_to_wake (0010): ready and waiting tasks by due time. A lease
# lapsing is no wake-up of the scheduler's: the workers of its queue see it coming
# (seconds_until_due) and nothing is announced for a running task.
WAKE_DUE = """
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT DISTINCT queue FROM tasks, clock
     WHERE claimable_at > %(since)s AND claimable_at <= clock.now
       AND status IN ('ready', 'waiting')
),
told AS (SELECT pg_notify('noeta_wake', queue) FROM due)
SELECT clock.now,
       (SELECT min(claimable_at) FROM tasks
         WHERE claimable_at > clock.now AND status IN ('ready', 'waiting')),
       (SELECT count(*) FROM told)
  FROM clock
"""


class PostgresWakeups(PostgresConnection):
    """Announcing due tasks, and listening for the announcements."""

    def wakeups(self) -> AsyncGenerator[str, None]:
        """Queue names in which a task just became claimable (LISTEN noeta_wake), and "*"
        each time listening (re)starts. Reconnects after a lost connection."""
        return self._listen(LISTEN_FOR_WAKEUPS)

    def finishes(self) -> AsyncGenerator[str, None]:
        """Ids of tasks that just finished (LISTEN noeta_finished), and "*" each time
        listening (re)starts: a task finished before then was not announced."""
        return self._listen(LISTEN_FOR_FINISHES)

    async def _listen(self, statement: str) -> AsyncGenerator[str, None]:
        while True:
            try:
                connection = await self._listening_connection("noeta-listen")
            except psycopg.OperationalError:
                await asyncio.sleep(self.deadline_seconds)
                continue
            try:
                await connection.execute(statement)
                # Anything that happened before the LISTEN took effect was not
                # announced: "*" tells the listener to look now.
                yield ANY_QUEUE
                async for notification in connection.notifies():
                    yield notification.payload
            except psycopg.Error:  # lost, ended, or refused (a read-only standby): again
                await asyncio.sleep(1)
            finally:
                await connection.close()

    async def wake_due(self, since: datetime) -> tuple[datetime, datetime | None]:
        check_moment(since)
        rows = await self._write_many(WAKE_DUE, {"since": since})
        return rows[0][0], rows[0][1]
