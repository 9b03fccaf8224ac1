"""A prune by id (`Pruning.prune_tasks`, a bulk prune's batch) empties the same tables of
a pruned task as the prune by age: its list is held to noeta_prune_finished's text and to
the sqlite store's steps, so a table added to one is not forgotten by the other."""

from __future__ import annotations

import re
from pathlib import Path

from noeta.backends.stores.postgres.task_pruning import PRUNE_TASKS, TASK_ROWS
from noeta.backends.stores.sqlite.retention import DELETE_TASK_ROWS

FUNCTION = Path(__file__).parents[2] / "queue/postgres/functions/noeta_prune_finished.sql"


def test_the_prune_by_id_empties_the_tables_the_prune_by_age_does() -> None:
    by_age = re.findall(r"DELETE FROM (\w+) WHERE task_id = ANY", FUNCTION.read_text())
    assert by_age == ["events", *TASK_ROWS]
    by_id = re.findall(r"DELETE FROM (\w+) WHERE task_id IN", PRUNE_TASKS)
    assert by_id == ["events", *TASK_ROWS]
    on_sqlite = [re.search(r"DELETE FROM (\w+)", step).group(1) for step in DELETE_TASK_ROWS]  # type: ignore[union-attr]
    # sqlite searches its tasks as written: it has no task_search (ADR-0102).
    assert on_sqlite == ["events", *(table for table in TASK_ROWS if table != "task_search")]
