"""The claim query walks the partial claim index, with many rows of every kind present."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from noeta.backends.stores.postgres import CLAIM_NEXT_TASK, migrate_database

# Rows of every kind, in the proportions of a busy deployment: few claimable, many idle.
FILL = """
INSERT INTO tasks (id, queue, status, claimable_at, ready_at)
SELECT 'waiting-' || n, 'default', 'waiting', NULL, NULL FROM generate_series(1, 20000) n;
INSERT INTO tasks (id, queue, status, claimable_at, ready_at)
SELECT 'timer-' || n, 'default', 'waiting', now() + interval '1 day', now() + interval '1 day'
  FROM generate_series(1, 5000) n;
INSERT INTO tasks (id, queue, status, claimable_at)
SELECT 'done-' || n, 'default', 'done', NULL FROM generate_series(1, 20000) n;
INSERT INTO tasks (id, queue, status, owner, lease_until, claimable_at)
SELECT 'running-' || n, 'default', 'running', 'w', now() + interval '1 min',
       now() + interval '1 min' FROM generate_series(1, 50) n;
INSERT INTO tasks (id, queue, status, claimable_at)
SELECT 'ready-' || n, CASE WHEN n % 2 = 0 THEN 'default' ELSE 'mail' END, 'ready',
       now() - n * interval '1 second' FROM generate_series(1, 200) n;
ANALYZE tasks;
"""


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


async def test_the_claim_uses_the_partial_claim_index(postgres_url: str) -> None:
    await migrate_database(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(FILL)
        params = {"queues": ["default"], "lease": 30.0, "worker": "w"}
        with connection.transaction(force_rollback=True):
            row = connection.execute(f"EXPLAIN (FORMAT JSON) {CLAIM_NEXT_TASK}", params).fetchone()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    nodes = plan_nodes(document[0]["Plan"])
    scans = [(n["Node Type"], n.get("Index Name")) for n in nodes if "Scan" in n["Node Type"]]
    assert ("Index Scan", "tasks_claimable") in scans or (
        "Index Only Scan",
        "tasks_claimable",
    ) in scans, scans
    assert not any(node_type == "Seq Scan" for node_type, _ in scans), scans
    claim_scan = next(n for n in nodes if n.get("Index Name") == "tasks_claimable")
    # The due-time bound is an index condition, not a filter applied row by row.
    assert "claimable_at <= now()" in claim_scan.get("Index Cond", ""), claim_scan
