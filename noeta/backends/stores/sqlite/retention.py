"""Pruning finished tasks on sqlite: the steps of PostgreSQL's `noeta_prune_finished`,
one BEGIN IMMEDIATE transaction per batch; a lock file beside the store makes a second
prune say so (the kernel frees it when the pruning process dies)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sqlite3
import time
from datetime import timedelta

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import now_micros
from noeta.core.ports.retention import (
    DEFAULT_BATCH_EVENTS,
    DEFAULT_BATCH_SIZE,
    REST_PER_BATCH,
    PruneCounts,
    PruneRunning,
    check_batch_size,
)
from noeta.core.ports.store import check_key
from noeta.core.rules.subtasks import possible_parent_ids
from noeta.core.rules.task_id import in_retry_line

# The family rule of queue/postgres/functions/noeta_may_prune.sql: no live parent, no live
# subtask (a live retry, or a retry's subtask, is none: ADR-0113). Ids compare bytewise
# here (BINARY), so a parent's subtasks are one PK range.
PRUNABLE = """
  FROM tasks t
 WHERE t.status IN ('done', 'failed', 'cancelled') AND t.updated_at < :before
   AND (:queue IS NULL OR t.queue = :queue)
   AND NOT EXISTS (SELECT 1 FROM tasks parent
                    WHERE parent.id IN (SELECT value FROM json_each(noeta_parent_ids(t.id)))
                      AND parent.status IN ('ready', 'running', 'holding', 'waiting'))
   AND NOT EXISTS (SELECT 1 FROM tasks child
                    WHERE child.id >= t.id || '.' AND child.id < t.id || '/'
                      AND child.status IN ('ready', 'running', 'holding', 'waiting')
                      AND NOT noeta_in_retry_line(t.id, child.id))"""
COUNT_PRUNABLE = f"SELECT count(*), coalesce(sum(t.last_seq), 0) {PRUNABLE}"
PICK_PRUNABLE = f"SELECT t.id, t.last_seq {PRUNABLE} ORDER BY t.updated_at LIMIT :limit"
LAST_EVENT = "SELECT max(seq) FROM events WHERE task_id = :id"
DELETE_TOP_EVENTS = "DELETE FROM events WHERE task_id = :id AND seq > :keep"
_IDS = "(SELECT value FROM json_each(:ids))"
DELETE_TASK_ROWS = [
    f"DELETE FROM events WHERE task_id IN {_IDS}",
    f"DELETE FROM inbox WHERE task_id IN {_IDS}",
    f"DELETE FROM snapshots WHERE task_id IN {_IDS}",
    f"DELETE FROM late_results WHERE task_id IN {_IDS}",
    f"DELETE FROM cron_fires WHERE task_id IN {_IDS}",
    f"DELETE FROM model_limit_holds WHERE task_id IN {_IDS}",
    # A key whose job is pruned holds nothing, and its row would stay for ever (0026).
    f"DELETE FROM job_unique_keys WHERE task_id IN {_IDS}",
]
KEEP_PRUNED_IDS = (
    "INSERT INTO pruned_task_ids (id, pruned_at) SELECT value, :now FROM json_each(:ids) "
    "WHERE true ON CONFLICT (id) DO NOTHING"
)
DELETE_TASKS = f"DELETE FROM tasks WHERE id IN {_IDS}"
# With --forget-ids, every id pruned before may be used again too (see the PostgreSQL
# store), a batch at a time.
FORGET_PRUNED_IDS = """
DELETE FROM pruned_task_ids WHERE id IN (SELECT id FROM pruned_task_ids LIMIT :limit)"""


def parent_ids(task_id: str) -> str:
    """Every id `task_id` may be a subtask of, as a JSON array (for json_each)."""
    return json.dumps(possible_parent_ids(task_id))


def register_family_rule(connection: sqlite3.Connection) -> None:
    """The functions PRUNABLE calls: a task's possible parents, and whether a live task
    named after it is only its retry (or a retry's subtask), which keeps nothing."""
    connection.create_function("noeta_parent_ids", 1, parent_ids, deterministic=True)
    connection.create_function("noeta_in_retry_line", 2, in_retry_line, deterministic=True)


class SqliteRetention(SqliteConnection):
    """`prune_finished` (the `Pruning` port)."""

    async def prune_finished(
        self,
        older_than: timedelta,
        *,
        queue: str | None = None,
        forget_ids: bool = False,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_events: int = DEFAULT_BATCH_EVENTS,
    ) -> PruneCounts:
        check_batch_size(batch_size, batch_events)
        if queue is not None:
            check_key("queue name", queue)
        lock = os.open(f"{self._path}.prune-lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PruneRunning(
                    f"another prune is running on sqlite store {self._path}; "
                    "try again when it has finished"
                ) from None
            cutoff = now_micros() - older_than // timedelta(microseconds=1)
            params: dict[str, object] = {"before": cutoff, "queue": queue}
            await self._run(register_family_rule, self._connection)
            if dry_run:
                tasks, events = await self._run(self._read_one, COUNT_PRUNABLE, params)
                return PruneCounts(tasks, events)
            total = PruneCounts()
            bounds = (batch_size, batch_events)
            while True:
                started = time.monotonic()
                pruned, more = await self._run(
                    self._write, lambda c, now: _prune_batch(c, now, params, bounds, forget_ids)
                )
                total += pruned
                if not more:
                    break
                await asyncio.sleep((time.monotonic() - started) * REST_PER_BATCH)
            forgetting = forget_ids
            while forgetting:
                forgotten = await self._run(
                    self._write,
                    lambda c, now: c.execute(FORGET_PRUNED_IDS, {"limit": batch_size}).rowcount,
                )
                forgetting = forgotten >= batch_size
            return total
        finally:
            os.close(lock)  # frees the lock


def _prune_batch(
    connection: sqlite3.Connection,
    now: int,
    params: dict[str, object],
    bounds: tuple[int, int],
    forget_ids: bool,
) -> tuple[PruneCounts, bool]:
    """One batch: the oldest prunable tasks whose events fit `bounds` (tasks, events) go
    whole; the oldest alone over the events bound loses that many events from the top.
    And whether a bound cut it (another batch may find more)."""
    batch_size, batch_events = bounds
    candidates = connection.execute(PICK_PRUNABLE, {**params, "limit": batch_size}).fetchall()
    picked: list[str] = []
    events_so_far = 0
    for task_id, last_seq in candidates:
        events_so_far += last_seq
        if events_so_far > batch_events:
            break
        picked.append(task_id)
    if candidates and not picked:
        oldest = candidates[0][0]
        left = connection.execute(LAST_EVENT, {"id": oldest}).fetchone()[0] or 0
        if left > batch_events:
            keep = {"id": oldest, "keep": left - batch_events}
            return PruneCounts(0, connection.execute(DELETE_TOP_EVENTS, keep).rowcount), True
        picked = [oldest]
    if not picked:
        return PruneCounts(), False
    more = len(candidates) == batch_size or len(picked) < len(candidates)
    ids = {"ids": json.dumps(picked), "now": now}
    events = connection.execute(DELETE_TASK_ROWS[0], ids).rowcount
    for statement in DELETE_TASK_ROWS[1:]:
        connection.execute(statement, ids)
    if not forget_ids:
        connection.execute(KEEP_PRUNED_IDS, ids)
    connection.execute(DELETE_TASKS, ids)
    return PruneCounts(len(picked), events), more
