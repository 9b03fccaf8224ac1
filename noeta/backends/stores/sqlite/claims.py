"""Claims and leases on sqlite: claiming (the next due task, or one named task), renewing,
releasing, and what is due or owned."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping, Sequence

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros, lease_micros, now_micros
from noeta.core.ports.payload import encode
from noeta.core.ports.store import Claim, check_key

# The queue list is bound as one JSON array, so the query stays one constant. Each queue's
# first claimable row is found in its own part of tasks_claimable_by_priority (a backlog
# due in another queue is never read), highest priority first, then the earliest of them
# is taken. A queue with settings (0010, ADR-0073) is skipped while paused, at its
# concurrency or out of its rate's tokens, and its keys at their per-key limit are
# skipped: sqlite has one writer at a time, so the count and the claim that follows it
# in the same BEGIN IMMEDIATE transaction cannot race another claimer.
_LIVE = "r.status IN ('running', 'holding') AND r.lease_until > :now"
FIND_NEXT_CLAIMABLE = f"""
SELECT t.id, t.owner_epoch, t.status IN ('running', 'holding'), t.queue
  FROM json_each(:queues) AS q
  LEFT JOIN queue_settings AS s ON s.queue = q.value
  JOIN tasks AS t ON t.id = (
        SELECT x.id FROM tasks AS x
         WHERE x.queue = q.value AND x.claimable_at IS NOT NULL AND x.claimable_at <= :now
           AND x.id NOT IN (SELECT value FROM json_each(:excluding))
           AND ({{offered}})
           AND (s.per_key_concurrency IS NULL OR x.concurrency_key IS NULL
                OR (SELECT count(*) FROM tasks AS r
                     WHERE r.queue = x.queue AND r.concurrency_key = x.concurrency_key
                       AND {_LIVE}) < s.per_key_concurrency)
         ORDER BY x.priority DESC, x.claimable_at LIMIT 1)
 WHERE coalesce(s.paused, 0) = 0
   AND (s.concurrency IS NULL
        OR (SELECT count(*) FROM tasks AS r WHERE r.queue = q.value AND {_LIVE})
           < s.concurrency)
   AND (s.rate_count IS NULL OR {{tokens}} >= 1)
 ORDER BY t.priority DESC, t.claimable_at
 LIMIT 1"""
# A rate's token bucket as of :now: refilled evenly up to rate_count (times in microseconds).
RATE_TOKENS = """min(s.rate_count, coalesce(s.rate_tokens, s.rate_count)
    + (:now - coalesce(s.rate_at, :now)) * s.rate_count / (s.rate_seconds * 1000000.0))"""
# What a task needs (0022: a JSON array of plugin names) the claimer offers (:offers, a
# JSON array; NULL: it runs anything). ADR-0092.
OFFERED = """:offers IS NULL OR x.needs IS NULL OR NOT EXISTS (
                SELECT 1 FROM json_each(x.needs) AS need
                 WHERE need.value NOT IN (SELECT value FROM json_each(:offers)))"""
FIND_NEXT_CLAIMABLE = FIND_NEXT_CLAIMABLE.replace("{tokens}", RATE_TOKENS).replace(
    "{offered}", OFFERED
)
TAKE_A_RATE_TOKEN = f"""
UPDATE queue_settings AS s SET rate_tokens = {RATE_TOKENS} - 1, rate_at = :now
 WHERE s.queue = :queue AND s.rate_count IS NOT NULL"""
FIND_NEXT_DUE = """
SELECT min((SELECT min(claimable_at) FROM tasks
             WHERE queue = q.value AND claimable_at > :now))
  FROM json_each(:queues) AS q"""
COUNT_CLAIMABLE = """
SELECT queue, count(*) FROM tasks
 WHERE claimable_at <= ? AND queue IN (SELECT value FROM json_each(?))
 GROUP BY queue"""
# CLAIM_NAMED_AND_LOAD's rule (PostgreSQL's claims.py): the first of the named tasks
# claimable now, in the claimer's queues and in none with settings (ADR-0109).
FIND_NAMED_CLAIMABLE = f"""
SELECT x.id, x.owner_epoch, x.status IN ('running', 'holding'), x.queue FROM tasks AS x
 WHERE x.id IN (SELECT value FROM json_each(:only))
   AND x.claimable_at IS NOT NULL AND x.claimable_at <= :now
   AND x.queue IN (SELECT value FROM json_each(:queues))
   AND x.id NOT IN (SELECT value FROM json_each(:excluding))
   AND ({OFFERED})
   AND NOT EXISTS (SELECT 1 FROM queue_settings AS s WHERE s.queue = x.queue)
 ORDER BY x.id LIMIT 1"""
FIND_THIS_TASK_IF_CLAIMABLE = f"""
SELECT x.id, x.owner_epoch FROM tasks AS x
 WHERE x.id = :id AND x.claimable_at IS NOT NULL AND x.claimable_at <= :now
   AND ({OFFERED})"""
CLAIM_TASK = """
UPDATE tasks SET status = 'running', owner = ?, owner_epoch = owner_epoch + 1,
       lease_until = ?, claimable_at = ?, updated_at = ?
 WHERE id = ?"""
# In a queue with settings a lapsed lease is not renewed: its slot was free (ADR-0073).
RENEW_CLAIM = """
UPDATE tasks SET lease_until = :until, claimable_at = :until, updated_at = :now
 WHERE id = :id AND owner_epoch = :epoch AND status IN ('running', 'holding')
   AND (lease_until > :now
        OR NOT EXISTS (SELECT 1 FROM queue_settings AS s WHERE s.queue = tasks.queue))"""
RELEASE_CLAIM = """
UPDATE tasks SET status = 'ready', lease_until = NULL, ready_at = NULL, claimable_at = ?,
       updated_at = ?
 WHERE id = ? AND owner_epoch = ? AND status = 'running'"""
LIST_OWNED_CLAIMS = """
SELECT id, owner, owner_epoch, lease_until FROM tasks
 WHERE owner = ? AND status IN ('running', 'holding') ORDER BY id"""


class SqliteClaims(SqliteConnection):
    """The claim half of the `Store` protocol."""

    async def claim(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        excluding: Collection[str] = (),
        offers: Collection[str] | None = None,
        only: Collection[str] | None = None,
    ) -> Claim | None:
        """`only`: among these tasks alone (FIND_NAMED_CLAIMABLE)."""
        lease = lease_micros(lease_seconds)
        check_key("worker name", worker)
        if not queues:
            return None
        queue_list, excluded = encode(list(queues)), encode(list(excluding))
        offered = offers_json(offers)
        find, named = FIND_NEXT_CLAIMABLE, {}
        if only is not None:
            find, named = FIND_NAMED_CLAIMABLE, {"only": encode(list(only))}
        # Peek outside the write lock first, so idle pollers do not queue up behind writers.
        peek = {"now": now_micros(), "queues": queue_list, "excluding": excluded}
        peek["offers"] = offered
        due = await self._run(self._read_one, find, {**peek, **named})
        if due is None:
            return None

        def claim_next(connection: sqlite3.Connection, now: int) -> Claim | None:
            values = {"now": now, "queues": queue_list, "excluding": excluded, "offers": offered}
            row = connection.execute(find, {**values, **named}).fetchone()
            if row is None:
                return None
            task_id, epoch, taken_over, queue = row
            connection.execute(CLAIM_TASK, (worker, now + lease, now + lease, now, task_id))
            connection.execute(TAKE_A_RATE_TOKEN, {"now": now, "queue": queue})
            lease_until = from_micros(now + lease)
            return Claim(task_id, worker, epoch + 1, lease_until, taken_over=bool(taken_over))

        return await self._run(self._write, claim_next)

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        now = now_micros()
        values = {"now": now, "queues": encode(list(queues))}
        row = await self._run(self._read_one, FIND_NEXT_DUE, values)
        return None if row is None or row[0] is None else max(0.0, (row[0] - now) / 1_000_000)

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        values = (now_micros(), encode(list(queues)))
        rows = await self._run(self._read_all, COUNT_CLAIMABLE, values)
        return {queue: count for queue, count in rows}

    async def claim_task(
        self,
        worker: str,
        task_id: str,
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        lease = lease_micros(lease_seconds)
        check_key("worker name", worker)
        offered = offers_json(offers)

        def claim_it(connection: sqlite3.Connection, now: int) -> Claim | None:
            values = {"id": task_id, "now": now, "offers": offered}
            row = connection.execute(FIND_THIS_TASK_IF_CLAIMABLE, values).fetchone()
            if row is None:
                return None
            connection.execute(CLAIM_TASK, (worker, now + lease, now + lease, now, task_id))
            return Claim(task_id, worker, row[1] + 1, from_micros(now + lease))

        return await self._run(self._write, claim_it)

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        lease = lease_micros(lease_seconds)
        if not claims:
            return {}

        def renew_all(connection: sqlite3.Connection, now: int) -> dict[str, Claim]:
            renewed = {}
            for claim in claims:
                values = {
                    "until": now + lease,
                    "now": now,
                    "id": claim.task_id,
                    "epoch": claim.epoch,
                }
                if connection.execute(RENEW_CLAIM, values).rowcount == 1:
                    renewed[claim.task_id] = Claim(
                        claim.task_id, claim.worker, claim.epoch, from_micros(now + lease)
                    )
            return renewed

        return await self._run(self._write, renew_all)

    async def release(self, claim: Claim) -> bool:
        def release_one(connection: sqlite3.Connection, now: int) -> bool:
            values = (now, now, claim.task_id, claim.epoch)
            return bool(connection.execute(RELEASE_CLAIM, values).rowcount == 1)

        return await self._run(self._write, release_one)

    async def owned_by(self, worker: str) -> list[Claim]:
        rows = await self._run(self._read_all, LIST_OWNED_CLAIMS, (worker,))
        return [
            Claim(task_id, owner, epoch, from_micros(lease_until))
            for task_id, owner, epoch, lease_until in rows
        ]


def offers_json(offers: Collection[str] | None) -> str | None:
    """A claimer's offers as the claim binds them: a JSON array, or NULL for anything."""
    return None if offers is None else encode([*sorted(set(offers))])
