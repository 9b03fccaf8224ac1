"""Pruning chosen tasks on sqlite (`Pruning.prune_tasks`, a bulk prune's batch): the
steps of a prune batch (`retention.py`) for ids instead of an age, in one BEGIN IMMEDIATE
transaction, under the same lock file."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Sequence

from noeta.backends.stores.sqlite.retention import (
    DELETE_TASK_ROWS,
    DELETE_TASKS,
    KEEP_PRUNED_IDS,
    SqliteRetention,
    register_family_rule,
)
from noeta.core.ports.retention import PruneCounts, PruneRunning, check_pruned_ids

# The family rule of retention.PRUNABLE (no live parent, no live subtask; a live retry is
# none: ADR-0113), for ids.
PICK_PRUNABLE_IDS = """
SELECT t.id FROM tasks t
 WHERE t.id IN (SELECT value FROM json_each(:ids))
   AND t.status IN ('done', 'failed', 'cancelled')
   AND NOT EXISTS (SELECT 1 FROM tasks parent
                    WHERE parent.id IN (SELECT value FROM json_each(noeta_parent_ids(t.id)))
                      AND parent.status IN ('ready', 'running', 'holding', 'waiting'))
   AND NOT EXISTS (SELECT 1 FROM tasks child
                    WHERE child.id >= t.id || '.' AND child.id < t.id || '/'
                      AND child.status IN ('ready', 'running', 'holding', 'waiting')
                      AND NOT noeta_in_retry_line(t.id, child.id))"""


class SqliteTaskPruning(SqliteRetention):
    """`prune_finished` and `prune_tasks` (the `Pruning` port)."""

    async def prune_tasks(
        self, task_ids: Sequence[str], *, forget_ids: bool = False
    ) -> PruneCounts:
        ids = check_pruned_ids(task_ids)
        if not ids:
            return PruneCounts()
        lock = os.open(f"{self._path}.prune-lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PruneRunning(
                    f"another prune is running on sqlite store {self._path}; "
                    "try again when it has finished"
                ) from None
            await self._run(register_family_rule, self._connection)
            return await self._run(self._write, lambda c, now: _prune_ids(c, now, ids, forget_ids))
        finally:
            os.close(lock)  # frees the lock


def _prune_ids(
    connection: sqlite3.Connection, now: int, task_ids: list[str], forget_ids: bool
) -> PruneCounts:
    candidates = {"ids": json.dumps(task_ids)}
    picked = [row[0] for row in connection.execute(PICK_PRUNABLE_IDS, candidates)]
    if not picked:
        return PruneCounts()
    ids = {"ids": json.dumps(picked), "now": now}
    events = connection.execute(DELETE_TASK_ROWS[0], ids).rowcount
    for statement in DELETE_TASK_ROWS[1:]:
        connection.execute(statement, ids)
    if not forget_ids:
        connection.execute(KEEP_PRUNED_IDS, ids)
    connection.execute(DELETE_TASKS, ids)
    return PruneCounts(len(picked), events)
