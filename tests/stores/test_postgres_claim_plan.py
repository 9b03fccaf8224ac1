"""The claim walks its queue's part of the partial claim index, with many rows of every
kind present: a backlog due in another queue, and tasks due tomorrow, are never read."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import CLAIM_NEXT_TASK, migrate_database
from noeta.backends.stores.postgres.claim_sql import CLAIM_AND_LOAD, SECONDS_UNTIL_DUE
from noeta.testing.generic_plans import plan_nodes

# Rows of every kind, in the proportions of a busy deployment: few claimable, many idle.
FILL = """
INSERT INTO tasks (id, queue, status, claimable_at, ready_at)
SELECT 'waiting-' || n, 'default', 'waiting', NULL, NULL FROM generate_series(1, 20000) n;
INSERT INTO tasks (id, queue, status, claimable_at, ready_at)
SELECT 'timer-' || n, 'default', 'waiting', now() + interval '1 day', now() + interval '1 day'
  FROM generate_series(1, 5000) n;
INSERT INTO tasks (id, queue, status, claimable_at, finished_at)
SELECT 'done-' || n, 'default', 'done', NULL, now() FROM generate_series(1, 20000) n;
INSERT INTO tasks (id, queue, status, owner, lease_until, claimable_at)
SELECT 'running-' || n, 'default', 'running', 'w', now() + interval '1 min',
       now() + interval '1 min' FROM generate_series(1, 50) n;
INSERT INTO tasks (id, queue, status, claimable_at)
SELECT 'ready-' || n, CASE WHEN n % 2 = 0 THEN 'default' ELSE 'mail' END, 'ready',
       now() - n * interval '1 second' FROM generate_series(1, 200) n;
-- A backlog in another queue, due before anything of 'default'.
INSERT INTO tasks (id, queue, status, claimable_at)
SELECT 'backlog-' || n, 'bulk', 'ready', now() - interval '1 day' + n * interval '1 ms'
  FROM generate_series(1, 20000) n;
ANALYZE tasks;
"""
INDEX = "tasks_claimable_by_priority"
PARAMS = {
    "queues": ["default"],
    "lease": 30.0,
    "worker": "w",
    "limit": 1,
    "version": "v",
    "excluding": ["held-by-this-worker"],
    "offers": None,
}
# A worker with plugins sends their names (ADR-0092): the walk is the same.
OFFERING = {**PARAMS, "offers": ["core", "jobs_a", "jobs_b"]}


def explain(
    postgres_url: str, statement: str, params: dict[str, Any], *, fill: bool = True
) -> list[dict[str, Any]]:
    """The executed plan's nodes (EXPLAIN ANALYZE, rolled back: nothing is claimed)."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        if fill:
            connection.execute(FILL)
        with connection.transaction(force_rollback=True):
            row = connection.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params)
            found = row.fetchone()
    assert found is not None
    document = found[0] if isinstance(found[0], list) else json.loads(found[0])
    return plan_nodes(document[0]["Plan"])


@pytest.mark.parametrize("params", [PARAMS, OFFERING], ids=["offers-anything", "offers-some"])
@pytest.mark.parametrize("statement", [CLAIM_NEXT_TASK, CLAIM_AND_LOAD, SECONDS_UNTIL_DUE])
async def test_the_claim_reads_one_entry_of_its_queues_index(
    postgres_url: str, statement: str, params: dict[str, Any]
) -> None:
    await migrate_database(postgres_url)
    nodes = explain(postgres_url, statement, params)
    on_tasks = [n for n in nodes if n.get("Relation Name") == "tasks"]
    assert not any(n["Node Type"] == "Seq Scan" for n in on_tasks), on_tasks
    walks = [n for n in on_tasks if n.get("Index Name") == INDEX]
    assert walks, [(n["Node Type"], n.get("Index Name")) for n in on_tasks]
    walk = walks[-1]  # after the one entry that says the queue's highest priority
    # The queue and the due-time bound are index conditions, not filters row by row...
    assert "queue = q.queue" in walk.get("Index Cond", ""), walk
    assert "claimable_at" in walk.get("Index Cond", ""), walk
    assert "now()" in walk.get("Index Cond", ""), walk
    # ...so the walk reads the one row it returns: neither the 20,000 due in 'bulk' nor
    # the 5,000 due tomorrow.
    assert walk.get("Rows Removed by Filter", 0) == 0, walk
    assert walk["Actual Rows"] <= 1, walk


async def test_a_batch_claim_reads_as_many_entries_as_it_claims(postgres_url: str) -> None:
    await migrate_database(postgres_url)
    params = {**PARAMS, "queues": ["default", "mail"], "limit": 8}
    nodes = explain(postgres_url, CLAIM_NEXT_TASK, params)
    walks = [n for n in nodes if n.get("Index Name") == INDEX]
    assert walks, nodes
    for walk in walks:  # one walk per queue, each stopping at the limit
        assert walk["Actual Rows"] <= 8 and walk.get("Rows Removed by Filter", 0) == 0, walk
    update = next(n for n in nodes if n["Node Type"] == "ModifyTable")
    assert update["Actual Rows"] == 8, update  # one statement claimed eight


# 200,000 tasks waiting in one queue, beside the rows of FILL: some at priority 5, or
# every one at the default (the statistics then say any filter on queue and priority
# passes every row, and a planner free to walk a due-time index across queues took it).
WAITING = """
INSERT INTO tasks (id, queue, status, claimable_at, priority)
SELECT 'waiting-due-' || n, 'default', 'ready', now() - n * interval '1 ms',
       CASE WHEN n %% 100 = 0 THEN %(high)s ELSE 0 END
  FROM generate_series(1, 200000) n
"""


def buffers(node: dict[str, Any]) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


@pytest.mark.parametrize("high", [5, 0])
async def test_with_200000_waiting_the_claim_reads_one_entry_per_priority(
    postgres_url: str, high: int
) -> None:
    await migrate_database(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(WAITING, {"high": high})
        connection.execute("ANALYZE tasks")
        with connection.transaction(force_rollback=True):
            row = connection.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {CLAIM_NEXT_TASK}", PARAMS
            ).fetchone()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    nodes = plan_nodes(document[0]["Plan"])
    top, walk = [n for n in nodes if n.get("Index Name") == INDEX]
    assert top["Actual Rows"] == 1 and buffers(top) <= 4, top  # the highest priority used
    assert walk["Actual Loops"] == high + 1, walk  # one probe per priority from there to 0
    # Each probe that finds a due task reads the one entry it returns; the others find
    # none. Nothing is removed by a filter.
    assert round(walk["Actual Rows"] * walk["Actual Loops"]) <= 2, walk
    assert walk.get("Rows Removed by Filter", 0) == 0, walk
    # A descent of a three-level index per probe, not a walk of 200,000 entries.
    assert buffers(walk) <= 4 * (high + 1), walk
    update = next(n for n in nodes if n["Node Type"] == "ModifyTable")
    assert update["Actual Rows"] == 1, update


# Due before every task of FILL's 'default': jobs this claimer cannot run (ADR-0092).
UNRUNNABLE_AHEAD = """
INSERT INTO tasks (id, queue, status, claimable_at, needs)
SELECT 'elsewhere-' || n, 'default', 'ready', now() - interval '1 day' + n * interval '1 ms',
       ARRAY['jobs_nobody_offers']
  FROM generate_series(1, 300) n
"""


async def test_the_claim_skips_in_its_walk_the_rows_it_cannot_run(postgres_url: str) -> None:
    """The documented cost: what a task needs is not in the index, so the walk reads the
    due rows ahead that its claimer cannot run, and only those."""
    await migrate_database(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(UNRUNNABLE_AHEAD)
    nodes = explain(postgres_url, CLAIM_NEXT_TASK, OFFERING)
    walk = [n for n in nodes if n.get("Index Name") == INDEX][-1]
    assert walk["Rows Removed by Filter"] == 300 and walk["Actual Rows"] == 1, walk
    nodes = explain(postgres_url, CLAIM_NEXT_TASK, PARAMS, fill=False)  # runs anything
    walk = [n for n in nodes if n.get("Index Name") == INDEX][-1]
    assert walk.get("Rows Removed by Filter", 0) == 0 and walk["Actual Rows"] == 1, walk
