"""Reading on PostgreSQL: a task's log, its row and the task list, and snapshots; `load`
reads snapshot, log tail and inbox in one round trip."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.inbox import READ_INBOX, inbox_entry
from noeta.core.ports import payload
from noeta.core.ports.store import (
    LoadedTask,
    Snapshot,
    StoredEvent,
    TaskRecord,
    TaskStatus,
    check_key,
)

READ_LOG = """
SELECT task_id, seq, type, data, created_at, epoch, owner FROM events
 WHERE task_id = %(task)s AND seq > %(after)s ORDER BY seq
"""

# The log after the snapshot of this version, if any: one round trip with the snapshot.
READ_LOG_AFTER_SNAPSHOT = """
SELECT task_id, seq, type, data, created_at, epoch, owner FROM events
 WHERE task_id = %(task)s
   AND seq > coalesce((SELECT seq FROM snapshots
                        WHERE task_id = %(task)s AND version = %(version)s), 0)
 ORDER BY seq
"""

TASK_COLUMNS = (
    "id, queue, status, owner, owner_epoch, lease_until, ready_at, last_seq, created_at,"
    " updated_at, concurrency_key, priority"
)
GET_TASK = f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = %(id)s"
LIST_TASKS = f"""
SELECT {TASK_COLUMNS} FROM tasks
 WHERE (%(status)s::text IS NULL OR status = %(status)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
 ORDER BY created_at DESC, id LIMIT %(limit)s
"""

PUT_SNAPSHOT = """
INSERT INTO snapshots (task_id, version, seq, data)
VALUES (%(task)s, %(version)s, %(seq)s, %(data)s)
ON CONFLICT (task_id, version) DO UPDATE SET seq = excluded.seq, data = excluded.data,
    created_at = clock_timestamp()
 WHERE snapshots.seq <= excluded.seq
"""

GET_SNAPSHOT = """
SELECT task_id, version, seq, data FROM snapshots WHERE task_id = %(task)s AND version = %(version)s
"""

READ_CLOCK = "SELECT clock_timestamp()"


class PostgresLogs(PostgresConnection):
    """Logs, task rows, snapshots, loading, and the database clock."""

    async def read_log(self, task_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._read(READ_LOG, {"task": task_id, "after": after_seq})
        return [_stored_event(row) for row in rows]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        rows = await self._read(GET_TASK, {"id": task_id})
        return _task_record(rows[0]) if rows else None

    async def list_tasks(
        self, *, status: TaskStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        params = {"status": status.value if status else None, "queue": queue, "limit": limit}
        return [_task_record(row) for row in await self._read(LIST_TASKS, params)]

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        params = {
            "task": snapshot.task_id,
            "version": snapshot.version,
            "seq": snapshot.seq,
            "data": snapshot.data,
        }
        check_key("snapshot version", snapshot.version)
        await self._write_many(PUT_SNAPSHOT, params, task_id=snapshot.task_id)

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        snapshot_params = {"task": task_id, "version": snapshot_version}
        snapshots, events, inbox = await self._run_all(
            [
                (GET_SNAPSHOT, snapshot_params),
                (READ_LOG_AFTER_SNAPSHOT, snapshot_params),
                (READ_INBOX, {"task": task_id, "untaken_only": True}),
            ],
            write=False,
        )
        found = None
        if snapshots:
            task, version, seq, data = snapshots[0]
            found = Snapshot(task, version, seq, bytes(data))
        return LoadedTask(
            found, [_stored_event(row) for row in events], [inbox_entry(row) for row in inbox]
        )

    async def get_snapshot(self, task_id: str, version: str) -> Snapshot | None:
        rows = await self._read(GET_SNAPSHOT, {"task": task_id, "version": version})
        return Snapshot(rows[0][0], rows[0][1], rows[0][2], bytes(rows[0][3])) if rows else None

    async def clock(self) -> datetime:
        rows = await self._read(READ_CLOCK, {})
        now: datetime = rows[0][0]
        return now


def _stored_event(row: tuple[Any, ...]) -> StoredEvent:
    return StoredEvent(row[0], row[1], row[2], payload.decode(row[3]), row[4], row[5], row[6])


def _task_record(row: tuple[Any, ...]) -> TaskRecord:
    return TaskRecord(row[0], row[1], TaskStatus(row[2]), *row[3:])
