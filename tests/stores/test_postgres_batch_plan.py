"""A batch reads only its own tasks' rows, whatever join the plan picks between its items
and `tasks` (ADR-0150): its one UPDATE reaches the rows by their ids. A plan that hashed
every running task to join them with the items read the whole claimed set at every
batch. Counted, not timed: the rows the backend read from `tasks` in the transaction."""

from __future__ import annotations

import json

import psycopg
import pytest

from noeta.testing.generic_plans import NESTED_LOOPS_ONLY

RUNNING = 3000
# Each a join method the planner may pick, alone: with the others off, it must.
JOINS = {
    "as planned": "SELECT 1",
    "nested loops only": NESTED_LOOPS_ONLY,
    "hash joins only": "SELECT set_config('enable_nestloop', 'off', false),"
    " set_config('enable_mergejoin', 'off', false)",
    "merge joins only": "SELECT set_config('enable_nestloop', 'off', false),"
    " set_config('enable_hashjoin', 'off', false)",
}
FILL = """
INSERT INTO tasks (id, queue, status, owner, owner_epoch, last_seq, lease_until, claimable_at)
SELECT 'run-' || g, 'default', 'running', 'w', 1, 1, now() + interval '1 day',
       now() + interval '1 day' FROM generate_series(1, %s) g
"""
READ_FROM_TASKS = """
SELECT pg_stat_get_xact_tuples_returned('tasks'::regclass)
     + pg_stat_get_xact_tuples_fetched('tasks'::regclass)
"""


def _items(ids: list[str], finishing: bool) -> str:
    items = []
    for task_id in ids:
        item = {"task": task_id, "epoch": 1, "expected_seq": 1, "events": [["Noted", "{}"]]}
        if finishing:
            item["status"] = "done"
        items.append(item)
    return json.dumps(items)


@pytest.mark.parametrize("joins", JOINS)
@pytest.mark.parametrize("finishing", [False, True], ids=["continuing", "finishing"])
def test_a_batch_reads_only_its_own_rows(postgres_url: str, joins: str, finishing: bool) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as setup:
        setup.execute(FILL, [RUNNING])
        setup.execute("ANALYZE tasks")
    with psycopg.connect(postgres_url) as connection:
        connection.execute(JOINS[joins])
        connection.commit()
        # The function's plans are made at its first call in a session, under these joins.
        for batch in (["run-1", "run-2", "run-3"], ["run-4", "run-5", "run-6"]):
            rows = connection.execute(
                "SELECT refusal_code FROM noeta_append_batch(%s::jsonb)",
                [_items(batch, finishing)],
            ).fetchall()
            assert rows == [(None,)] * 3
            read = connection.execute(READ_FROM_TASKS).fetchone()
            assert read is not None
            # Each item's row once by the write; a few more at most, never the claimed set.
            assert read[0] <= 4 * len(batch), f"{joins}: {read[0]} rows read from tasks"
            connection.commit()
