"""Bulk creation on sqlite: a batch of tasks in one BEGIN IMMEDIATE transaction, with the
same inserts as one `create_task`, all or none."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from noeta.backends.stores.sqlite.appends import insert_task
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import encode_task
from noeta.core.errors import Conflict
from noeta.core.ports import payload
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.store import NewTask

# Pruned ids stay taken (ADR-0066): a create would refuse them as it refuses a live one.
TAKEN_IDS = """
SELECT id FROM tasks WHERE id IN (SELECT value FROM json_each(:ids))
UNION SELECT id FROM pruned_task_ids WHERE id IN (SELECT value FROM json_each(:ids))"""


class SqliteBulk(SqliteConnection):
    """Creating many tasks in one transaction."""

    async def create_tasks(self, tasks: Sequence[NewTask]) -> None:
        if not tasks:
            return
        check_distinct_ids(tasks)
        encoded = [encode_task(task) for task in tasks]

        def create_all(connection: sqlite3.Connection, now: int) -> None:
            for task in encoded:
                if not insert_task(connection, task, now):
                    # Raised inside the transaction: it rolls back whole.
                    raise Conflict(task.id, "the id is taken (by a task, or a pruned one)")

        await self._run(self._write, create_all)

    async def taken_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        values = {"ids": payload.encode(list(ids))}
        return {row[0] for row in await self._run(self._read_all, TAKEN_IDS, values)}
