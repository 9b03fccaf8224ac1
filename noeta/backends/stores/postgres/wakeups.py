"""Wake-ups on PostgreSQL (ADR-0087): an idle worker registers and listens on its own
channel, and a task made claimable wakes one of them; the scheduler does the same for
timers. A client waiting on a task marks it, and only a marked task's finish is announced."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime

import psycopg
from psycopg import sql

from noeta.backends.stores.postgres.claim_sql import SECONDS_UNTIL_DUE
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import check_lease, check_moment

LISTEN_FOR_WAKEUPS = "LISTEN noeta_wake"
LISTEN_FOR_FINISHES = "LISTEN noeta_finished"
ANY_QUEUE = "*"
# A worker's own channel: made by the worker, checked here because LISTEN takes no
# parameter (the name is quoted as an identifier as well).
WORKER_CHANNEL = re.compile(r"noeta_wake_[0-9a-f]{8,40}")

# Both reads walk tasks_due_to_wake (0010): ready and waiting tasks by due time. A lease
# lapsing is no wake-up of the scheduler's: the workers of its queue see it coming
# (the due time their registration returns) and nothing is announced for a running task.
# One idle worker is woken per task fallen due (noeta_wake_idle).
WAKE_DUE = """
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT queue, count(*)::integer AS tasks FROM tasks, clock
     WHERE claimable_at > %(since)s AND claimable_at <= clock.now
       AND status IN ('ready', 'waiting')
     GROUP BY queue
),
told AS (SELECT noeta_wake_idle(queue, tasks) FROM due)
SELECT clock.now,
       (SELECT min(claimable_at) FROM tasks
         WHERE claimable_at > clock.now AND status IN ('ready', 'waiting')),
       (SELECT count(*) FROM told)
  FROM clock
"""

# noeta_register_idle takes the exclusive side of noeta_wake_idle's lock: a creator that
# looked for idle workers before this registration has committed by the time it checks
# whether a task is claimable now; one that looks after sees the registration. 0 seconds
# if a task is claimable now (claim before waiting), else what seconds_until_due says.
REGISTER_IDLE = f"""
SELECT CASE WHEN noeta_register_idle(%(channel)s, %(queues)s::text[], %(lease)s) THEN 0
            ELSE ({SECONDS_UNTIL_DUE}) END
"""

LEAVE_IDLE = "DELETE FROM idle_workers WHERE channel = %(channel)s"

# Under the task row's lock, which the finishing UPDATE takes too: either this waits for
# the finish and reads the finished status, or the finish (noeta_announce_finish) finds
# the mark and notifies. A task that does not exist returns no row.
MARK_AWAITED = """
WITH task AS (SELECT id, status FROM tasks WHERE id = %(id)s FOR SHARE),
marked AS (
    INSERT INTO finish_waiters (task_id)
    SELECT id FROM task WHERE status NOT IN ('done', 'failed', 'cancelled')
    ON CONFLICT DO NOTHING
)
SELECT status IN ('done', 'failed', 'cancelled') FROM task
"""


class PostgresWakeups(PostgresConnection):
    """Announcing due tasks, idle workers' registrations, and listening."""

    def wakeups(self) -> AsyncGenerator[str, None]:
        """What is still sent on channel noeta_wake (by hand, or by an older noeta), and
        "*" each time listening (re)starts. Reconnects after a lost connection."""
        return self._listen(LISTEN_FOR_WAKEUPS)

    def finishes(self) -> AsyncGenerator[str, None]:
        """Ids of awaited tasks (`await_finish`) that just finished (LISTEN
        noeta_finished), and "*" each time listening (re)starts: a task finished before
        then was not announced."""
        return self._listen(LISTEN_FOR_FINISHES)

    def calls(self, channel: str) -> AsyncGenerator[str, None]:
        """The queue names sent to this idle worker's own channel, and "*" each time
        listening (re)starts."""
        if not WORKER_CHANNEL.fullmatch(channel):
            raise ValueError(f"not a worker channel: {channel!r}")
        return self._listen(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    async def wait_idle(
        self, channel: str, queues: Sequence[str], lease_seconds: float
    ) -> float | None:
        check_lease(lease_seconds)
        params = {"channel": channel, "queues": list(queues), "lease": lease_seconds}
        row = await self._write(REGISTER_IDLE, params)
        return None if row is None or row[0] is None else max(0.0, row[0])

    async def stop_waiting(self, channel: str) -> None:
        await self._write(LEAVE_IDLE, {"channel": channel})

    async def await_finish(self, task_id: str) -> bool | None:
        """Mark the task awaited: True if it has finished already, None if no such task;
        else its finish will be announced to `finishes` listeners."""
        row = await self._write(MARK_AWAITED, {"id": task_id})
        return None if row is None else bool(row[0])

    async def _listen(
        self, statement: str | sql.Composed, application_name: str = "noeta-listen"
    ) -> AsyncGenerator[str, None]:
        while True:
            try:
                connection = await self._listening_connection(application_name)
            except psycopg.OperationalError:
                await asyncio.sleep(self.deadline_seconds)
                continue
            try:
                # Shut if a statement's deadline passes meanwhile (ADR-0152): lost, as below.
                with self._path.listening(connection):
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
