"""The live workers on PostgreSQL (0022, ADR-0092): each worker's row, refreshed by its
round, and which waiting tasks no live worker can run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import check_key, check_lease
from noeta.core.ports.worker_registry import OVERDUE_BATCH, WorkerEntry

RECORD_WORKER = """
INSERT INTO workers AS w (id, queues, offers, last_seen, expires_at)
VALUES (%(id)s, %(queues)s::text[], %(offers)s::text[], clock_timestamp(),
        clock_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (id) DO UPDATE
   SET queues = excluded.queues, offers = excluded.offers,
       last_seen = excluded.last_seen, expires_at = excluded.expires_at
"""

REMOVE_WORKER = "DELETE FROM workers WHERE id = %(id)s"

LIVE_WORKERS = """
SELECT id, queues, offers, last_seen FROM workers
 WHERE expires_at > clock_timestamp() ORDER BY id
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

    async def record_worker(self, worker: WorkerEntry, lease_seconds: float) -> None:
        check_key("worker name", worker.id)
        check_lease(lease_seconds)
        offers = None if worker.offers is None else sorted(set(worker.offers))
        params = {
            "id": worker.id,
            "queues": list(worker.queues),
            "offers": offers,
            "lease": lease_seconds,
        }
        await self._write(RECORD_WORKER, params)

    async def remove_worker(self, worker_id: str) -> None:
        await self._write(REMOVE_WORKER, {"id": worker_id})

    async def live_workers(self) -> list[WorkerEntry]:
        rows = await self._read(LIVE_WORKERS, {})
        return [
            WorkerEntry(id, tuple(queues), None if offers is None else tuple(offers), seen)
            for id, queues, offers, seen in rows
        ]

    async def unrunnable(self, task_ids: Sequence[str]) -> Mapping[str, tuple[str, ...]]:
        if not task_ids:
            return {}
        rows = await self._read(UNRUNNABLE_TASKS, {"ids": list(task_ids)})
        return {task_id: tuple(needs) for task_id, needs in rows}

    async def overdue(self, queues: Sequence[str], seconds: float) -> list[str]:
        params = {"queues": list(queues), "seconds": seconds, "limit": OVERDUE_BATCH}
        return [task_id for (task_id,) in await self._read(OVERDUE_TASKS, params)]
