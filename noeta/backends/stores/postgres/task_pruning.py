"""Pruning chosen tasks on PostgreSQL (`Pruning.prune_tasks`, a bulk prune's batch): the
rows `noeta_prune_finished` removes, for ids instead of an age, in one statement on a
session that holds the same prune lock; no new SQL function (no migration)."""

from __future__ import annotations

from collections.abc import Sequence

from noeta.backends.stores.postgres.retention import TRY_PRUNE_LOCK, PostgresRetention
from noeta.core.ports.retention import PruneCounts, PruneRunning, check_pruned_ids

# noeta_prune_finished's own first step, with nothing old enough to prune: it turns on
# the check of kept ids at every create (0018) if no prune has yet, so that an id kept
# below is refused to a new task as every pruned id is.
CHECK_KEPT_IDS = "SELECT tasks_pruned FROM noeta_prune_finished('-infinity', NULL, 1, true, 1)"

# The tables noeta_prune_finished empties of a pruned task, in its order; the test
# tests/stores/test_prune_tasks.py holds this list to the function's text.
TASK_ROWS = (
    "inbox",
    "snapshots",
    "late_results",
    "cron_fires",
    "model_limit_holds",
    "job_unique_keys",
    "task_search",
)
# One statement (one transaction): the finished tasks among the ids that the family rule
# lets go (noeta_may_prune), locked, skipping any another transaction holds; then every
# row that names them. Each part of a WITH runs whether or not it is read.
PRUNE_TASKS = (
    """
WITH picked AS MATERIALIZED (
    SELECT t.id FROM tasks t
     WHERE t.id = ANY (%(ids)s) AND t.status IN ('done', 'failed', 'cancelled')
       AND noeta_may_prune(t.id)
     FOR UPDATE OF t SKIP LOCKED),
events_gone AS (DELETE FROM events WHERE task_id IN (SELECT id FROM picked) RETURNING 1),
"""
    + "".join(
        f"{table}_gone AS (DELETE FROM {table} WHERE task_id IN (SELECT id FROM picked)),\n"
        for table in TASK_ROWS
    )
    + """ids_kept AS (INSERT INTO pruned_task_ids (id) SELECT id FROM picked WHERE %(keep_ids)s
              ON CONFLICT (id) DO NOTHING),
tasks_gone AS (DELETE FROM tasks WHERE id IN (SELECT id FROM picked) RETURNING 1)
SELECT (SELECT count(*) FROM tasks_gone), (SELECT count(*) FROM events_gone)
"""
)


class PostgresTaskPruning(PostgresRetention):
    """`prune_finished` and `prune_tasks` (the `Pruning` port)."""

    async def prune_tasks(
        self, task_ids: Sequence[str], *, forget_ids: bool = False
    ) -> PruneCounts:
        ids = check_pruned_ids(task_ids)
        if not ids:
            return PruneCounts()
        connection = await self._prune_session()  # PostgreSQL's own beside a pooler
        locked = False
        try:
            locked = bool((await self._on(connection, TRY_PRUNE_LOCK, {}))[0][0])
            if not locked:
                raise PruneRunning(
                    f"another prune is running on PostgreSQL at {self.where}; "
                    "try again when it has finished"
                )
            if not forget_ids:
                await self._on(connection, CHECK_KEPT_IDS, {}, write=True)
            params = {"ids": ids, "keep_ids": not forget_ids}
            tasks, events = (await self._on(connection, PRUNE_TASKS, params, write=True))[0]
            return PruneCounts(int(tasks), int(events))
        finally:
            await self._put_back(connection, locked)
