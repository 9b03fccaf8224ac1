"""Unique and debounced jobs on sqlite (ADR-0093): the same steps as PostgreSQL's
`noeta_create_unique_task`, inside one BEGIN IMMEDIATE write (sqlite's one writer is
what serialises racing producers here)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from noeta.backends.stores.sqlite.appends import INSERT_EVENT, insert_task
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import EncodedTask, encode_task
from noeta.core.errors import Conflict
from noeta.core.ports import payload
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import NewTask, check_key
from noeta.core.ports.unique_jobs import KeyRule

READ_KEY = "SELECT task_id, held_until FROM job_unique_keys WHERE job = ? AND unique_key = ?"
TASK_EXISTS = "SELECT 1 FROM tasks WHERE id = ?"
HOLDS_ITS_WINDOW = "SELECT 1 FROM tasks WHERE id = ? AND status NOT IN ('failed', 'cancelled')"
# Not started: ready and never claimed (a claim raises owner_epoch).
SUPERSEDE = """
UPDATE tasks SET status = 'cancelled', ready_at = NULL, claimable_at = NULL,
                 updated_at = :now, last_seq = last_seq + 1
 WHERE id = :id AND status = 'ready' AND owner_epoch = 0"""
LAST_SEQ = "SELECT last_seq FROM tasks WHERE id = ?"
HOLD_KEY = """
INSERT INTO job_unique_keys (job, unique_key, task_id, held_until) VALUES (?, ?, ?, ?)
ON CONFLICT (job, unique_key) DO UPDATE SET task_id = excluded.task_id,
                                            held_until = excluded.held_until"""
MICROSECONDS = 1_000_000


class SqliteUniqueJobs(SqliteConnection):
    """Creating a job unless another holds its unique key."""

    async def create_unique_task(self, task: NewTask, key: str, rule: KeyRule) -> str:
        encoded = encode_task(task)
        check_key("unique key", key)
        return await self._run(
            self._write, lambda connection, now: _create(connection, encoded, key, rule, now)
        )

    async def create_unique_tasks(
        self, tasks: Sequence[NewTask], keys: Sequence[str], rule: KeyRule
    ) -> list[str]:
        check_distinct_ids(tasks)
        encoded = [encode_task(task) for task in tasks]
        for key in keys:
            check_key("unique key", key)

        def create_all(connection: sqlite3.Connection, now: int) -> list[str]:
            return [
                _create(connection, task, key, rule, now)
                for task, key in zip(encoded, keys, strict=True)
            ]

        return await self._run(self._write, create_all)


def _create(
    connection: sqlite3.Connection, task: EncodedTask, key: str, rule: KeyRule, now: int
) -> str:
    """The id of the job holding `key` once `task` was made or not (see the PostgreSQL
    function's comment: the same decisions, in the same order)."""
    row = connection.execute(READ_KEY, (rule.job, key)).fetchone()
    holder, until = row if row else (None, None)
    if holder == task.id or connection.execute(TASK_EXISTS, (task.id,)).fetchone():
        return task.id  # made by an earlier send of this call whose reply was lost
    if (
        holder is not None
        and rule.debounce is None
        and until is not None
        and until > now
        and connection.execute(HOLDS_ITS_WINDOW, (holder,)).fetchone()
    ):
        return str(holder)
    if (
        holder is not None
        and rule.debounce is not None
        and connection.execute(SUPERSEDE, {"now": now, "id": holder}).rowcount
    ):
        (seq,) = connection.execute(LAST_SEQ, (holder,)).fetchone()
        error = f"superseded by {task.id}"
        finished: JSONValue = {"v": 1, "status": "cancelled", "answer": "", "error": error}
        data = payload.encode(finished)  # TaskFinished's encoding, as PostgreSQL writes it
        connection.execute(INSERT_EVENT, (holder, seq, "TaskFinished", data, now))
    if rule.debounce is not None:
        task = replace(task, ready_at=now + round(rule.debounce * MICROSECONDS))
    if not insert_task(connection, task, now):
        raise Conflict(task.id, "the id is taken (by a task, or a pruned one)")
    held_until = None if rule.unique_for is None else now + round(rule.unique_for * MICROSECONDS)
    connection.execute(HOLD_KEY, (rule.job, key, task.id, held_until))
    return task.id
