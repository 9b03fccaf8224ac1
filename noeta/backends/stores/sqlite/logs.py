"""Reading on sqlite: a task's log, its row and the task list, snapshots, and `load`."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from noeta.backends.stores.sqlite.encoding import from_micros, now_micros, task_record
from noeta.backends.stores.sqlite.inbox import SELECT_TASK_STATUS, SqliteInbox
from noeta.core.errors import ConfigError, UnknownTask
from noeta.core.ports.payload import decode
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
 WHERE task_id = ? AND seq > ? ORDER BY seq"""
_TASK_COLUMNS = (
    "id, queue, status, owner, owner_epoch, lease_until, ready_at, last_seq, created_at,"
    " updated_at, concurrency_key, priority"
)
GET_TASK = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?"
LIST_TASKS = f"""
SELECT {_TASK_COLUMNS} FROM tasks
 WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
 ORDER BY created_at DESC, id
 LIMIT :limit"""
UPSERT_SNAPSHOT = """
INSERT INTO snapshots (task_id, version, seq, data, created_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (task_id, version) DO UPDATE
   SET seq = excluded.seq, data = excluded.data, created_at = excluded.created_at
 WHERE snapshots.seq <= excluded.seq"""
GET_SNAPSHOT = "SELECT seq, data FROM snapshots WHERE task_id = ? AND version = ?"


class SqliteLogs(SqliteInbox):
    """Logs, task rows, snapshots, loading (with the inbox), and the clock."""

    async def read_log(self, task_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._run(self._read_all, READ_LOG, (task_id, after_seq))
        return [
            StoredEvent(task, seq, event_type, decode(data), from_micros(created), epoch, owner)
            for task, seq, event_type, data, created, epoch, owner in rows
        ]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._run(self._read_one, GET_TASK, (task_id,))
        return None if row is None else task_record(row)

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        if limit < 0:
            raise ConfigError(f"limit must be 0 or more, not {limit}")
        values = {"status": None if status is None else status.value, "queue": queue}
        rows = await self._run(self._read_all, LIST_TASKS, {**values, "limit": limit})
        return [task_record(row) for row in rows]

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        check_key("snapshot version", snapshot.version)

        def upsert(connection: sqlite3.Connection, now: int) -> None:
            if connection.execute(SELECT_TASK_STATUS, (snapshot.task_id,)).fetchone() is None:
                raise UnknownTask(snapshot.task_id)
            values = (snapshot.task_id, snapshot.version, snapshot.seq, bytes(snapshot.data), now)
            connection.execute(UPSERT_SNAPSHOT, values)

        await self._run(self._write, upsert)

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        found = await self.get_snapshot(task_id, snapshot_version)
        events = await self.read_log(task_id, after_seq=found.seq if found else 0)
        return LoadedTask(found, events, await self.read_inbox(task_id))

    async def get_snapshot(self, task_id: str, version: str) -> Snapshot | None:
        row = await self._run(self._read_one, GET_SNAPSHOT, (task_id, version))
        return None if row is None else Snapshot(task_id, version, row[0], bytes(row[1]))

    async def clock(self) -> datetime:
        return from_micros(now_micros())
