"""The workers on PostgreSQL (ADR-0092, ADR-0100): each worker's row, refreshed by its
round, the departed kept a while, and which waiting tasks no live worker can run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import check_key, check_lease
from noeta.core.ports.worker_registry import (
    KEPT_AFTER_LEAVING_SECONDS,
    OVERDUE_BATCH,
    Heartbeat,
    WorkerEntry,
    heartbeat,
    listed,
    reported,
)

# One statement a round (ADR-0100): what the row was (`previous`: to refuse a name another
# run holds live, or to see that this run was dead), the rows of the others that left
# long ago deleted, and this run's row written unless another run holds it live.
RECORD_WORKER = """
WITH previous AS MATERIALIZED (
    SELECT instance, host, pid, last_seen, stopped_at IS NOT NULL AS stopped,
           expires_at > clock_timestamp() AND stopped_at IS NULL AS live
      FROM workers WHERE id = %(id)s
), departed AS (
    DELETE FROM workers
     WHERE id <> %(id)s AND expires_at < clock_timestamp() - make_interval(secs => %(kept)s)
), recorded AS (
    INSERT INTO workers AS w (id, queues, offers, host, pid, version, concurrency, instance,
                              processed, failed, started_at, last_seen, expires_at)
    VALUES (%(id)s, %(queues)s::text[], %(offers)s::text[], %(host)s, %(pid)s, %(version)s,
            %(concurrency)s, %(instance)s, %(processed)s, %(failed)s, clock_timestamp(),
            clock_timestamp(), clock_timestamp() + make_interval(secs => %(lease)s))
    ON CONFLICT (id) DO UPDATE
       SET queues = excluded.queues, offers = excluded.offers, host = excluded.host,
           pid = excluded.pid, version = excluded.version, concurrency = excluded.concurrency,
           processed = excluded.processed, failed = excluded.failed,
           started_at = CASE WHEN w.instance = excluded.instance THEN w.started_at
                             ELSE excluded.started_at END,
           instance = excluded.instance, stopped_at = NULL,
           last_seen = excluded.last_seen, expires_at = excluded.expires_at
     WHERE w.instance = excluded.instance OR w.stopped_at IS NOT NULL
        OR w.expires_at <= clock_timestamp()
    RETURNING 1
)
SELECT EXISTS (SELECT FROM recorded), p.instance, p.host, p.pid, p.last_seen, p.stopped, p.live,
       clock_timestamp()
  FROM (VALUES (1)) AS one LEFT JOIN previous AS p ON true
"""

# Only this run's row: a name another run has taken since is not this run's to stop.
WORKER_STOPPED = """
UPDATE workers SET stopped_at = now(), expires_at = now(), last_seen = now(),
                   processed = %(processed)s, failed = %(failed)s
 WHERE id = %(id)s AND instance = %(instance)s
"""

LIVE_WORKERS = """
SELECT id, queues, offers, last_seen FROM workers
 WHERE expires_at > clock_timestamp() ORDER BY id
"""

# The live first, then those that left within the time they are kept.
LISTED_WORKERS = """
SELECT id, queues, offers, last_seen, host, pid, version, concurrency, instance,
       processed, failed, started_at, expires_at, state
  FROM (SELECT w.*, CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
                         WHEN expires_at > clock_timestamp() THEN 'live'
                         ELSE 'dead' END AS state
          FROM workers AS w) AS listed
 WHERE state = 'live'
    OR (%(departed)s AND expires_at >= clock_timestamp() - make_interval(secs => %(kept)s))
 ORDER BY state <> 'live', id
"""

# A task waits for a plugin when no one live worker serving its queue offers all it needs.
UNRUNNABLE_TASKS = """
SELECT t.id, t.needs FROM tasks AS t
 WHERE t.id = ANY(%(ids)s::text[]) AND t.needs IS NOT NULL
   AND t.status IN ('ready', 'waiting')
   AND NOT EXISTS (SELECT FROM workers AS w
                    WHERE w.expires_at > clock_timestamp() AND t.queue = ANY(w.queues)
                      AND (w.offers IS NULL OR t.needs <@ w.offers))
"""

# Walks the due rows of the queues (tasks_claimable_by_priority): only a worker run with
# --unrunnable-after sends it, once a round.
OVERDUE_TASKS = """
SELECT t.id FROM tasks AS t
 WHERE t.queue = ANY(%(queues)s::text[]) AND t.needs IS NOT NULL
   AND t.claimable_at <= clock_timestamp() - make_interval(secs => %(seconds)s)
   AND t.status IN ('ready', 'waiting')
   AND NOT EXISTS (SELECT FROM workers AS w
                    WHERE w.expires_at > clock_timestamp() AND t.queue = ANY(w.queues)
                      AND (w.offers IS NULL OR t.needs <@ w.offers))
 ORDER BY t.claimable_at
 LIMIT %(limit)s
"""


class PostgresWorkers(PostgresConnection):
    """The `WorkerRegistry` port."""

    async def record_worker(
        self,
        worker: WorkerEntry,
        lease_seconds: float,
        departed_kept_seconds: float = KEPT_AFTER_LEAVING_SECONDS,
    ) -> Heartbeat:
        check_key("worker name", worker.id)
        check_lease(lease_seconds)
        offers = None if worker.offers is None else sorted(set(worker.offers))
        params = {
            **reported(worker),
            "queues": list(worker.queues),
            "offers": offers,
            "lease": lease_seconds,
            "kept": departed_kept_seconds,
        }
        row = await self._write(RECORD_WORKER, params)
        assert row is not None
        recorded, instance, host, pid, seen, stopped, live, clock = row
        return heartbeat(worker, recorded, instance, (host, pid, seen, stopped, live), clock)

    async def worker_stopped(self, worker: WorkerEntry) -> None:
        await self._write(WORKER_STOPPED, reported(worker))

    async def live_workers(self) -> list[WorkerEntry]:
        rows = await self._read(LIVE_WORKERS, {})
        return [
            WorkerEntry(id, tuple(queues), None if offers is None else tuple(offers), seen)
            for id, queues, offers, seen in rows
        ]

    async def listed_workers(self, departed: bool = False) -> list[WorkerEntry]:
        params = {"departed": departed, "kept": KEPT_AFTER_LEAVING_SECONDS}
        rows = await self._read(LISTED_WORKERS, params)
        return [
            listed(
                (id, tuple(queues), None if offers is None else tuple(offers)),
                reported_values,
                (seen, started, expires),
                state,
            )
            for id, queues, offers, seen, *reported_values, started, expires, state in rows
        ]

    async def unrunnable(self, task_ids: Sequence[str]) -> Mapping[str, tuple[str, ...]]:
        if not task_ids:
            return {}
        rows = await self._read(UNRUNNABLE_TASKS, {"ids": list(task_ids)})
        return {task_id: tuple(needs) for task_id, needs in rows}

    async def overdue(self, queues: Sequence[str], seconds: float) -> list[str]:
        params = {"queues": list(queues), "seconds": seconds, "limit": OVERDUE_BATCH}
        return [task_id for (task_id,) in await self._read(OVERDUE_TASKS, params)]
