"""Claims and leases on PostgreSQL: claiming (the next due task, or one named task),
renewing a worker's round, releasing, and what is due or owned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.store import Claim, check_key, check_lease

# Claim the task that has been due longest. now() (the statement's start; this statement
# is its own transaction) is stable, so PostgreSQL can use it as the index bound and stop
# the scan at the present; clock_timestamp() is volatile and would make it a filter that
# walks every future-dated row. SKIP LOCKED: claimants never wait on each other.
CLAIM_NEXT_TASK = """
WITH due AS MATERIALIZED (
    SELECT id, status IN ('running', 'holding') AS taken_over FROM tasks
     WHERE claimable_at <= now() AND queue = ANY(%(queues)s::text[])
     ORDER BY claimable_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED
), lease AS (
    SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until
)
UPDATE tasks AS t
   SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
       lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM due, lease
 WHERE t.id = due.id
RETURNING t.id, t.owner_epoch, t.lease_until, due.taken_over
"""

# The same, for one named task (noeta run claims the task it just created).
CLAIM_THIS_TASK = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
       lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease
 WHERE t.id = %(id)s AND t.claimable_at <= clock_timestamp()
RETURNING t.id, t.owner_epoch, t.lease_until
"""

# The same index walk as the claim, for the first row not yet due.
SECONDS_UNTIL_DUE = """
SELECT extract(epoch FROM claimable_at - clock_timestamp())::float8 FROM tasks
 WHERE claimable_at > now() AND queue = ANY(%(queues)s::text[])
 ORDER BY claimable_at LIMIT 1
"""

# The claim index alone answers it (claimable_at INCLUDE queue): only claimable rows.
COUNT_CLAIMABLE = """
SELECT queue, count(*) FROM tasks
 WHERE claimable_at <= now() AND queue = ANY(%(queues)s::text[])
 GROUP BY queue
"""

# One statement renews every claim of a worker's renewal round.
RENEW_CLAIMS = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease, unnest(%(ids)s::text[], %(epochs)s::bigint[]) AS held(id, epoch)
 WHERE t.id = held.id AND t.owner_epoch = held.epoch AND t.status IN ('running', 'holding')
RETURNING t.id, t.owner_epoch, t.lease_until
"""

RELEASE_CLAIM = """
UPDATE tasks
   SET status = 'ready', lease_until = NULL, ready_at = NULL,
       claimable_at = clock_timestamp(), updated_at = clock_timestamp()
 WHERE id = %(id)s AND owner_epoch = %(epoch)s AND status = 'running'
RETURNING id
"""

OWNED_BY = """
SELECT id, owner_epoch, lease_until FROM tasks
 WHERE owner = %(worker)s AND status IN ('running', 'holding') ORDER BY id
"""


class PostgresClaims(PostgresConnection):
    """The claim half of the `Store` protocol."""

    async def claim(self, worker: str, queues: Sequence[str], lease_seconds: float) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        params = {"worker": worker, "queues": list(queues), "lease": lease_seconds}
        row = await self._write(CLAIM_NEXT_TASK, params)
        if row is None:
            return None
        return Claim(row[0], worker, row[1], row[2], taken_over=row[3])

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        rows = await self._read(SECONDS_UNTIL_DUE, {"queues": list(queues)})
        return max(0.0, rows[0][0]) if rows else None

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        rows = await self._read(COUNT_CLAIMABLE, {"queues": list(queues)})
        return {queue: count for queue, count in rows}

    async def claim_task(self, worker: str, task_id: str, lease_seconds: float) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        params = {"worker": worker, "id": task_id, "lease": lease_seconds}
        row = await self._write(CLAIM_THIS_TASK, params)
        if row is None:
            return None
        return Claim(task_id=row[0], worker=worker, epoch=row[1], lease_until=row[2])

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        check_lease(lease_seconds)
        if not claims:
            return {}
        by_id = {claim.task_id: claim for claim in claims}
        params = {
            "lease": lease_seconds,
            "ids": [c.task_id for c in claims],
            "epochs": [c.epoch for c in claims],
        }
        rows = await self._write_many(RENEW_CLAIMS, params)
        return {
            task_id: Claim(task_id, by_id[task_id].worker, epoch, lease_until)
            for task_id, epoch, lease_until in rows
        }

    async def release(self, claim: Claim) -> bool:
        row = await self._write(RELEASE_CLAIM, {"id": claim.task_id, "epoch": claim.epoch})
        return row is not None

    async def owned_by(self, worker: str) -> list[Claim]:
        rows = await self._read(OWNED_BY, {"worker": worker})
        return [Claim(task_id, worker, epoch, lease_until) for task_id, epoch, lease_until in rows]
