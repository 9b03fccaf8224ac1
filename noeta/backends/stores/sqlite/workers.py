"""The live workers on sqlite (0022, ADR-0092), as PostgreSQL keeps them: queues and
offers are JSON arrays, times integer microseconds."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros, lease_micros, now_micros
from noeta.core.ports.payload import encode
from noeta.core.ports.store import check_key
from noeta.core.ports.worker_registry import OVERDUE_BATCH, WorkerEntry

RECORD_WORKER = """
INSERT INTO workers (id, queues, offers, started_at, last_seen, expires_at)
VALUES (:id, :queues, :offers, :now, :now, :expires)
ON CONFLICT (id) DO UPDATE
   SET queues = excluded.queues, offers = excluded.offers,
       last_seen = excluded.last_seen, expires_at = excluded.expires_at
"""
REMOVE_WORKER = "DELETE FROM workers WHERE id = ?"
LIVE_WORKERS = """
SELECT id, queues, offers, last_seen FROM workers WHERE expires_at > ? ORDER BY id"""
# PostgreSQL's twin says why; "covers" is its `<@` over JSON arrays.
NO_LIVE_WORKER_CAN_RUN = """NOT EXISTS (
        SELECT 1 FROM workers AS w
         WHERE w.expires_at > :now
           AND t.queue IN (SELECT value FROM json_each(w.queues))
           AND (w.offers IS NULL OR NOT EXISTS (
                SELECT 1 FROM json_each(t.needs) AS need
                 WHERE need.value NOT IN (SELECT value FROM json_each(w.offers)))))"""
UNRUNNABLE_TASKS = f"""
SELECT t.id, t.needs FROM tasks AS t
 WHERE t.id IN (SELECT value FROM json_each(:ids)) AND t.needs IS NOT NULL
   AND t.status IN ('ready', 'waiting') AND {NO_LIVE_WORKER_CAN_RUN}"""
OVERDUE_TASKS = f"""
SELECT t.id FROM tasks AS t
 WHERE t.queue IN (SELECT value FROM json_each(:queues)) AND t.needs IS NOT NULL
   AND t.claimable_at <= :now - :micros AND t.status IN ('ready', 'waiting')
   AND {NO_LIVE_WORKER_CAN_RUN}
 ORDER BY t.claimable_at
 LIMIT :limit"""


class SqliteWorkers(SqliteConnection):
    """The `WorkerRegistry` port."""

    async def record_worker(self, worker: WorkerEntry, lease_seconds: float) -> None:
        check_key("worker name", worker.id)
        lease = lease_micros(lease_seconds)
        offers = None if worker.offers is None else encode([*sorted(set(worker.offers))])

        def record(connection: sqlite3.Connection, now: int) -> None:
            values = {
                "id": worker.id,
                "queues": encode(list(worker.queues)),
                "offers": offers,
                "now": now,
                "expires": now + lease,
            }
            connection.execute(RECORD_WORKER, values)

        await self._run(self._write, record)

    async def remove_worker(self, worker_id: str) -> None:
        def remove(connection: sqlite3.Connection, now: int) -> None:
            connection.execute(REMOVE_WORKER, (worker_id,))

        await self._run(self._write, remove)

    async def live_workers(self) -> list[WorkerEntry]:
        rows = await self._run(self._read_all, LIVE_WORKERS, (now_micros(),))
        return [
            WorkerEntry(
                id,
                tuple(json.loads(queues)),
                None if offers is None else tuple(json.loads(offers)),
                from_micros(seen),
            )
            for id, queues, offers, seen in rows
        ]

    async def unrunnable(self, task_ids: Sequence[str]) -> Mapping[str, tuple[str, ...]]:
        if not task_ids:
            return {}
        values = {"ids": encode(list(task_ids)), "now": now_micros()}
        rows = await self._run(self._read_all, UNRUNNABLE_TASKS, values)
        return {task_id: tuple(json.loads(needs)) for task_id, needs in rows}

    async def overdue(self, queues: Sequence[str], seconds: float) -> list[str]:
        values = {
            "queues": encode(list(queues)),
            "now": now_micros(),
            "micros": round(seconds * 1_000_000),
            "limit": OVERDUE_BATCH,
        }
        rows = await self._run(self._read_all, OVERDUE_TASKS, values)
        return [task_id for (task_id,) in rows]
