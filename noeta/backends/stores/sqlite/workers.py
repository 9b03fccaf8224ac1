"""The workers on sqlite (ADR-0092, ADR-0100), as PostgreSQL keeps them: queues and
offers are JSON arrays, times integer microseconds."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros, lease_micros, now_micros
from noeta.core.ports.payload import encode
from noeta.core.ports.store import check_key
from noeta.core.ports.worker_registry import (
    KEPT_AFTER_LEAVING_SECONDS,
    OVERDUE_BATCH,
    Heartbeat,
    WorkerEntry,
    heartbeat,
    listed,
    reported,
)

# PostgreSQL's one statement, as three in the round's one transaction.
PREVIOUS_WORKER = """
SELECT instance, host, pid, last_seen, stopped_at IS NOT NULL,
       expires_at > :now AND stopped_at IS NULL
  FROM workers WHERE id = :id"""
DELETE_DEPARTED = "DELETE FROM workers WHERE id <> :id AND expires_at < :now - :kept"
RECORD_WORKER = """
INSERT INTO workers AS w (id, queues, offers, host, pid, version, concurrency, instance,
                          processed, failed, started_at, last_seen, expires_at)
VALUES (:id, :queues, :offers, :host, :pid, :version, :concurrency, :instance, :processed,
        :failed, :now, :now, :expires)
ON CONFLICT (id) DO UPDATE
   SET queues = excluded.queues, offers = excluded.offers, host = excluded.host,
       pid = excluded.pid, version = excluded.version, concurrency = excluded.concurrency,
       processed = excluded.processed, failed = excluded.failed,
       started_at = CASE WHEN w.instance = excluded.instance THEN w.started_at
                         ELSE excluded.started_at END,
       instance = excluded.instance, stopped_at = NULL,
       last_seen = excluded.last_seen, expires_at = excluded.expires_at
 WHERE w.instance = excluded.instance OR w.stopped_at IS NOT NULL OR w.expires_at <= :now"""
WORKER_STOPPED = """
UPDATE workers SET stopped_at = :now, expires_at = :now, last_seen = :now,
                   processed = :processed, failed = :failed
 WHERE id = :id AND instance = :instance"""
LIVE_WORKERS = """
SELECT id, queues, offers, last_seen FROM workers WHERE expires_at > ? ORDER BY id"""
LISTED_WORKERS = """
SELECT id, queues, offers, last_seen, host, pid, version, concurrency, instance,
       processed, failed, started_at, expires_at, state
  FROM (SELECT w.*, CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
                         WHEN expires_at > :now THEN 'live'
                         ELSE 'dead' END AS state
          FROM workers AS w)
 WHERE state = 'live' OR (:departed AND expires_at >= :now - :kept)
 ORDER BY state <> 'live', id"""
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

    async def record_worker(
        self,
        worker: WorkerEntry,
        lease_seconds: float,
        departed_kept_seconds: float = KEPT_AFTER_LEAVING_SECONDS,
    ) -> Heartbeat:
        check_key("worker name", worker.id)
        lease = lease_micros(lease_seconds)
        offers = None if worker.offers is None else encode([*sorted(set(worker.offers))])

        def record(connection: sqlite3.Connection, now: int) -> Heartbeat:
            values = {
                **reported(worker),
                "queues": encode(list(worker.queues)),
                "offers": offers,
                "now": now,
                "expires": now + lease,
                "kept": round(departed_kept_seconds * 1_000_000),
            }
            row = connection.execute(PREVIOUS_WORKER, values).fetchone()
            connection.execute(DELETE_DEPARTED, values)
            recorded = connection.execute(RECORD_WORKER, values).rowcount > 0
            if row is None:
                nothing = (None, None, None, None, None)
                return heartbeat(worker, recorded, None, nothing, from_micros(now))
            instance, host, pid, seen, stopped, live = row
            previous = (host, pid, from_micros(seen), bool(stopped), bool(live))
            return heartbeat(worker, recorded, instance, previous, from_micros(now))

        return await self._run(self._write, record)

    async def worker_stopped(self, worker: WorkerEntry) -> None:
        def stopped(connection: sqlite3.Connection, now: int) -> None:
            connection.execute(WORKER_STOPPED, {**reported(worker), "now": now})

        await self._run(self._write, stopped)

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

    async def listed_workers(self, departed: bool = False) -> list[WorkerEntry]:
        values = {
            "now": now_micros(),
            "departed": departed,
            "kept": round(KEPT_AFTER_LEAVING_SECONDS * 1_000_000),
        }
        rows = await self._run(self._read_all, LISTED_WORKERS, values)
        return [
            listed(
                (
                    id,
                    tuple(json.loads(queues)),
                    None if offers is None else tuple(json.loads(offers)),
                ),
                reported_values,
                (from_micros(seen), from_micros(started), from_micros(expires)),
                state,
            )
            for id, queues, offers, seen, *reported_values, started, expires, state in rows
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
