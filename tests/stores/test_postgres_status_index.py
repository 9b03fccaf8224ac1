"""The index on a task's status holds only the rows its readers look up by status: a
claim and a done finish add no entry to it (issue 28 item 1, migration 0021), and every
reader of a status other than done still finds its rows through an index, never by a
walk of the table (measured on 1M tasks by bench/status_readers.py)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import migrate_database
from noeta.backends.stores.postgres.logs import LIST_TASKS
from noeta.backends.stores.postgres.views import COUNT_TASKS, TASK_PAGE, capped_count
from noeta.core.ports.store import TaskStatus

# Indexes of tasks with status among their keys, and the rows they hold (the predicate).
STATUS_INDEXES = """
SELECT i.indexrelid::regclass::text, coalesce(pg_get_expr(i.indpred, i.indrelid), 'true')
  FROM pg_index AS i
 WHERE i.indrelid = 'tasks'::regclass
   AND (SELECT attnum FROM pg_attribute WHERE attrelid = 'tasks'::regclass
                                          AND attname = 'status') = ANY (i.indkey)
"""
# A table that keeps its history: mostly done, a backlog, a few live claims.
FILL = """
INSERT INTO tasks (id, queue, status, owner, lease_until, claimable_at, finished_at)
SELECT s.status || g, 'q' || g %% 4, s.status,
       CASE WHEN s.live THEN 'w' END, CASE WHEN s.live THEN now() + interval '1 h' END,
       CASE WHEN s.live OR s.status = 'ready' THEN now() + interval '1 h' END,
       CASE WHEN s.status IN ('done', 'failed', 'cancelled') THEN now() END
  FROM (VALUES ('done', 18000), ('failed', 600), ('cancelled', 40), ('ready', 1200),
               ('running', 30), ('holding', 5), ('waiting', 25)) AS s0(status, n),
       LATERAL (SELECT s0.status, s0.status IN ('running', 'holding')) AS s(status, live),
       generate_series(1, s0.n) AS g
"""
LIVE_CLAIMS = """
SELECT count(*) FROM tasks AS t
 WHERE t.status IN ('running', 'holding') AND t.queue = 'q1' AND t.lease_until > now()
"""
NOT_DONE = [status.value for status in TaskStatus if status is not TaskStatus.DONE]


async def rows(url: str, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query, params)
        return await cursor.fetchall() if cursor.description else []


async def test_a_claimed_or_done_task_has_no_entry_in_an_index_on_status(
    postgres_url: str,
) -> None:
    await migrate_database(postgres_url)
    indexes = await rows(postgres_url, STATUS_INDEXES)
    assert indexes  # the readers of a status still have one
    for name, predicate in indexes:
        for status in ("running", "holding", "done"):
            check = f"SELECT {predicate} FROM (VALUES (%s)) AS tasks(status)"
            [(held,)] = await rows(postgres_url, check, (status,))
            assert not held, f"{name} holds {status} rows: each claim or finish adds one"


@pytest.mark.parametrize("status", NOT_DONE)
async def test_every_reader_of_a_status_but_done_finds_its_rows_through_an_index(
    postgres_url: str, status: str
) -> None:
    await migrate_database(postgres_url)
    await rows(postgres_url, FILL)
    await rows(postgres_url, "ANALYZE tasks")
    page = {"statuses": [status], "queue": None, "since": None, "limit": 50, "before_id": ""}
    page |= {"created_since": None, "job_regex": None, "error_regex": None}  # no such filter
    readers: list[tuple[str, dict[str, Any]]] = [
        (capped_count(TaskStatus(status)), {"cap": 10000}),  # its count in the web view
        (LIST_TASKS, {"status": status, "queue": None, "limit": 100}),  # noeta list
        (TASK_PAGE, {**page, "before_at": "9999-12-31T00:00:00Z"}),  # a web page
        (COUNT_TASKS, {**page, "cap": None}),  # a bulk action's count, uncapped
        (LIVE_CLAIMS, {}),  # a queue limit's live claims
    ]
    for query, params in readers:
        plan = "\n".join(row[0] for row in await rows(postgres_url, f"EXPLAIN {query}", params))
        assert "Seq Scan" not in plan, plan
