"""Bulk creation on sqlite: a batch of tasks in one BEGIN IMMEDIATE transaction, with the
same inserts as one `create_task`, all or none."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from noeta.backends.stores.sqlite.appends import insert_task
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import encode_task
from noeta.core.errors import Conflict
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.store import NewTask


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
