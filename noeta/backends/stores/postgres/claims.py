"""Claims and leases on PostgreSQL: claiming (the next due task, or one named task),
renewing a worker's round, releasing, and what is due or owned."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from noeta.backends.stores.postgres.claimed import claim_params, claimed_tasks
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import Claim, ClaimedTask, check_key, check_lease

# Claim up to %(limit)s tasks, the highest priority first and then those due longest, each
# with its own epoch and lease. The due rows are walked and locked by noeta_due_for_claim
# (0027; its file under queue/postgres/functions says how it walks the claim index, queue
# limits and what the claimer offers): a function, so that the walk's plan is made once
# per session (ADR-0099); sent as part of this statement, it was planned anew at every
# call, and planning it cost more than running it. This statement takes the locked rows
# (their locks last to its end: it is its own transaction), each with its own epoch and
# lease, and charges the rate of the queues with settings for the tasks claimed
# (`charged`), not for the candidates the function offered (0014). %(excluding)s: the
# claimer's own runs (ADR-0079); %(offers)s: the plugin names it has, NULL for anything.
_CLAIM_DUE_TASKS = """
WITH due AS MATERIALIZED (
    SELECT id, taken_over, limited
      FROM noeta_due_for_claim(%(queues)s::text[], %(limit)s::integer, %(excluding)s::text[],
                               %(offers)s::text[])
), lease AS (
    SELECT clock_timestamp() AS at, clock_timestamp() + make_interval(secs => %(lease)s) AS until
), claimed AS (
    UPDATE tasks AS t
       SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
           lease_until = lease.until, claimable_at = lease.until,
           updated_at = clock_timestamp()
      FROM due, lease
     WHERE t.id = due.id
    RETURNING t.id, t.owner_epoch, t.lease_until, t.last_seq, due.taken_over, due.limited,
              t.queue
), charged AS (
    UPDATE queue_settings AS s
       SET rate_tokens = least(s.rate_count::float8, coalesce(s.rate_tokens, s.rate_count)
               + extract(epoch FROM lease.at - coalesce(s.rate_at, lease.at))
                 * s.rate_count / s.rate_seconds) - took.n,
           rate_at = lease.at
      FROM (SELECT c.queue, count(*) AS n FROM claimed AS c WHERE c.limited GROUP BY c.queue)
           AS took, lease
     WHERE s.queue = took.queue AND s.rate_count IS NOT NULL
)"""

CLAIM_NEXT_TASK = f"""{_CLAIM_DUE_TASKS}
SELECT id, owner_epoch, lease_until, taken_over FROM claimed
"""

# The claim and, in the same statement, what each claimed task's run reads first: its
# snapshot of this version, the log after it, its untaken inbox. Rows of four parts (0
# claim, 1 snapshot, 2 event, 3 inbox entry) in one shape; the reads see the statement's
# snapshot, so an append committed after it began (a lapsed owner's, just before the
# claim locked the row) is missing: the client sees the log end short of last_seq and
# loads that task again.
CLAIM_AND_LOAD = f"""{_CLAIM_DUE_TASKS}, snapshot AS (
    SELECT s.task_id, s.seq, s.data FROM claimed AS c
      JOIN snapshots AS s ON s.task_id = c.id AND s.version = %(version)s
)
SELECT 0, c.id, c.last_seq, c.owner_epoch, NULL, NULL, c.lease_until, NULL, c.taken_over, NULL
  FROM claimed AS c
UNION ALL
SELECT 1, s.task_id, s.seq, NULL, NULL, NULL, NULL, NULL, NULL, s.data FROM snapshot AS s
UNION ALL
SELECT 2, e.task_id, e.seq, e.epoch, e.type, e.data, e.created_at, e.owner, NULL, NULL
  FROM claimed AS c
  JOIN events AS e ON e.task_id = c.id
   AND e.seq > coalesce((SELECT s.seq FROM snapshot AS s WHERE s.task_id = c.id), 0)
UNION ALL
SELECT 3, i.task_id, i.id, i.taken_seq, i.dedupe_key, i.payload, i.created_at, NULL, NULL,
       NULL
  FROM claimed AS c JOIN inbox AS i ON i.task_id = c.id AND i.taken_seq IS NULL
 ORDER BY 1, 2, 3
"""

# The same, for one named task (noeta run claims the task it just created).
CLAIM_THIS_TASK = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
       lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease
 WHERE t.id = %(id)s AND t.claimable_at <= clock_timestamp()
   AND (%(offers)s::text[] IS NULL OR t.needs IS NULL OR t.needs <@ %(offers)s::text[])
RETURNING t.id, t.owner_epoch, t.lease_until
"""

# The same walk per queue and priority as the claim, for each first row not yet due.
SECONDS_UNTIL_DUE = """
SELECT extract(epoch FROM min(next.claimable_at) - clock_timestamp())::float8
  FROM (SELECT q.queue, (SELECT t.priority FROM tasks AS t
                          WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                          ORDER BY t.priority DESC LIMIT 1) AS top
          FROM unnest(%(queues)s::text[]) AS q(queue) OFFSET 0) AS q
 CROSS JOIN generate_series(q.top, 0, -1) AS p(priority)
 CROSS JOIN LATERAL (
    SELECT claimable_at FROM tasks
     WHERE queue = q.queue AND priority = p.priority AND claimable_at > now()
     ORDER BY claimable_at LIMIT 1
 ) AS next
"""

# A claim index alone answers it: only claimable rows.
COUNT_CLAIMABLE = """
SELECT queue, count(*) FROM tasks
 WHERE claimable_at <= now() AND queue = ANY(%(queues)s::text[])
 GROUP BY queue
"""

# One statement renews every claim of a worker's renewal round. In a queue with settings a
# lapsed lease is not renewed: its slot was free, and may have been taken (ADR-0073).
RENEW_CLAIMS = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease, unnest(%(ids)s::text[], %(epochs)s::bigint[]) AS held(id, epoch)
 WHERE t.id = held.id AND t.owner_epoch = held.epoch AND t.status IN ('running', 'holding')
   AND (t.lease_until > clock_timestamp()
        OR NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = t.queue))
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

    async def claim(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        params = claim_params(worker, queues, lease_seconds, 1, offers=offers)
        row = await self._write(CLAIM_NEXT_TASK, params)
        if row is None:
            return None
        return Claim(row[0], worker, row[1], row[2], taken_over=row[3])

    async def claim_and_load(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        limit: int = 1,
        snapshot_version: str,
        excluding: Collection[str] = (),
        offers: Collection[str] | None = None,
    ) -> list[ClaimedTask]:
        params = claim_params(worker, queues, lease_seconds, limit, excluding, offers)
        params["version"] = snapshot_version
        rows = await self._write_many(CLAIM_AND_LOAD, params)
        return claimed_tasks(rows, worker, snapshot_version)

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        rows = await self._read(SECONDS_UNTIL_DUE, {"queues": list(queues)})
        return max(0.0, rows[0][0]) if rows and rows[0][0] is not None else None

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        rows = await self._read(COUNT_CLAIMABLE, {"queues": list(queues)})
        return {queue: count for queue, count in rows}

    async def claim_task(
        self,
        worker: str,
        task_id: str,
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        offered = None if offers is None else sorted(set(offers))
        params = {"worker": worker, "id": task_id, "lease": lease_seconds, "offers": offered}
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
