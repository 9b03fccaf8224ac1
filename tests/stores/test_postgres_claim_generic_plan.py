"""The claims that load run one cached generic plan per connection (ADR-0108): that plan
never hashes or scans `tasks` or `events` whole, whatever its parameters, and the store
really runs it (no custom plan, planned anew at every claim)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.claim_sql import (
    CLAIM_AND_LOAD,
    CLAIM_AND_START_JOBS,
    CLAIM_NAMED_AND_LOAD,
    CLAIM_NAMED_AND_START_JOBS,
    LEAN_CLAIM_AND_LOAD,
    LEAN_CLAIM_AND_START_JOBS,
)
from noeta.core.ports.store import JobStarts, NewEvent, NewTask
from noeta.testing.generic_plans import NESTED_LOOPS_ONLY, executed_generic_plan
from tests.stores.test_postgres_claim_plan import FILL

# Every done task of FILL with a log of five events: the events table is as big as the
# tasks table's share of it, so a plan that hashes it would read it whole at every claim.
EVENTS = """
INSERT INTO events (task_id, seq, type, data, epoch, owner)
SELECT t.id, s, 'TaskCreated', '{"v":1}', 1, 'w' FROM tasks t, generate_series(1, 5) s
 WHERE t.id LIKE 'done-%';
ANALYZE events;
"""
VALUES = {
    "queues": ["default"],
    "excluding": [],
    "offers": None,
    "limit": 3,
    "lease": 30.0,
    "worker": "w",
    "version": "v",
    "pinned": '{"pins":[]}',
    "needs": [],
    "only": ["ready-2", "ready-4", "ready-6"],  # a continuation's named tasks (ADR-0109)
    # The log its claimer holds of one of them (ADR-0122): read after it, by key too.
    "known_id": "ready-2",
    "known_epoch": 0,
    "known_seq": 0,
}
WHOLE_TABLES = {"tasks", "events", "snapshots", "inbox"}


def generic_plan(connection: psycopg.Connection[Any], statement: str) -> list[dict[str, Any]]:
    """The executed generic plan's nodes (rolled back: nothing is claimed)."""
    return executed_generic_plan(connection, statement, VALUES)


@pytest.mark.parametrize(
    "statement",
    [
        CLAIM_AND_LOAD,
        CLAIM_AND_START_JOBS,
        CLAIM_NAMED_AND_LOAD,
        CLAIM_NAMED_AND_START_JOBS,
        LEAN_CLAIM_AND_LOAD,
        LEAN_CLAIM_AND_START_JOBS,
    ],
    ids=["load", "start", "named-load", "named-start", "lean-load", "lean-start"],
)
async def test_the_generic_plan_reads_rows_by_key_only(postgres_url: str, statement: str) -> None:
    store = await PostgresStore.open(postgres_url, migrate=True)
    await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(FILL)
        connection.execute(EVENTS)
        nodes = generic_plan(connection, statement)
    scans = [n for n in nodes if n.get("Relation Name") in WHOLE_TABLES]
    kinds = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in scans]
    # Each read of a big table goes by a key: an index condition, never a whole scan to
    # hash (the 100,000 events, the 65,000 tasks).
    keyed = [n for n in scans if n.get("Index Cond") or n.get("Recheck Cond")]
    assert keyed == [n for n in scans if n["Node Type"] != "ModifyTable"], kinds
    assert sum(n.get("Rows Removed by Filter", 0) for n in scans) == 0, kinds
    claimed = next(n for n in nodes if n["Node Type"] == "ModifyTable")
    assert claimed["Actual Rows"] == 3, claimed


# FILL's ready tasks of 'default' made fresh plain jobs: TaskCreated, CallRequested and a
# pin that is the claimer's own (VALUES' `pinned`), so each claim above starts the three it
# takes.
FRESH_JOBS = """
INSERT INTO events (task_id, seq, type, data, epoch, owner)
SELECT t.id, e.seq, e.type, e.data, 0, NULL
  FROM tasks t,
       (VALUES (1, 'TaskCreated', '{"v":1}'),
               (2, 'CallRequested', '{"id":"job","name":"send","input":{}}'),
               (3, 'PluginsPinned', '{"pins":[]}')) AS e(seq, type, data)
 WHERE t.queue = 'default' AND t.id LIKE 'ready-%';
UPDATE tasks SET last_seq = 3 WHERE queue = 'default' AND id LIKE 'ready-%';
ANALYZE events;
"""


@pytest.mark.parametrize(
    "statement",
    [CLAIM_AND_START_JOBS, LEAN_CLAIM_AND_START_JOBS, CLAIM_NAMED_AND_START_JOBS],
    ids=["start", "lean-start", "named-start"],
)
async def test_the_fresh_job_check_runs_once_for_the_claimed_jobs(
    postgres_url: str, statement: str
) -> None:
    """The fresh-job check probes each claimed job's log once, whatever join the generic
    plan makes. As a CTE of its own, inlined into the update's join, it ran again for
    every claimed row: a claim of 25 probed 625 times, 14-20 ms instead of about 1
    (ADR-0145)."""
    store = await PostgresStore.open(postgres_url, migrate=True)
    await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(FILL)
        connection.execute(EVENTS)
        connection.execute(FRESH_JOBS)
        plans = {"as planned": generic_plan(connection, statement)}
        connection.execute(NESTED_LOOPS_ONLY)
        plans["nested loops only"] = generic_plan(connection, statement)
    for joins, nodes in plans.items():
        started = [
            n["Actual Rows"]
            for n in nodes
            if n.get("Relation Name") == "events" and n["Node Type"] == "ModifyTable"
        ]
        assert started == [3], f"{joins}: the fixture's jobs were not all started"
        # The check's first probe (each job's CallRequested), then every read of a task's
        # rows: none runs more often than there are claimed jobs.
        [call_probe] = [n for n in nodes if "seq = 2" in n.get("Index Cond", "")]
        reads = [n for n in nodes if n.get("Relation Name") in WHOLE_TABLES - {"tasks"}]
        loops = [(n["Alias"], n.get("Index Cond"), n["Actual Loops"]) for n in reads]
        assert call_probe["Actual Loops"] == 3, (joins, loops)
        assert all(n["Actual Loops"] <= 3 for n in reads), (joins, loops)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(postgres_url, migrate=True, max_connections=1)
    yield opened
    await opened.close()


PLANS = """
SELECT generic_plans, custom_plans FROM pg_prepared_statements
 WHERE statement LIKE '%%owner_epoch = t.owner_epoch +%%'
"""


async def claims_connection(store: PostgresStore, query: str) -> list[tuple[Any, ...]]:
    """`query`'s rows on the claims' own connection (opened by a claim first)."""
    pool = store._generic_pool
    assert pool is not None, "no claim ran on a connection of its own"
    return (await store._run_all([(query, {})], write=False, pool=pool))[0]


@pytest.mark.parametrize("starting", [False, True], ids=["load", "start"])
async def test_the_store_runs_the_claims_generic_plan(store: PostgresStore, starting: bool) -> None:
    created = NewEvent("TaskCreated", {"v": 1, "model": "scripted:x"})
    await store.create_tasks([NewTask(f"t{n}", [created]) for n in range(12)])
    starts = JobStarts(()) if starting else None
    for _ in range(10):  # psycopg prepares a statement at its 6th run on a connection
        [claimed] = await store.claim_and_load(
            "w", ["default"], 30, snapshot_version="v", job_starts=starts
        )
        assert claimed.claim.epoch == 1
    [(generic, custom)] = await claims_connection(store, PLANS)
    assert custom == 0 and generic >= 4, (generic, custom)


async def test_only_the_claims_connection_forces_generic_plans(store: PostgresStore) -> None:
    await store.create_task(NewTask("t", [NewEvent("TaskCreated", {"v": 1, "model": "x"})]))
    await store.claim_and_load("w", ["default"], 30, snapshot_version="v")
    setting = "SELECT current_setting('plan_cache_mode')"
    assert await claims_connection(store, setting) == [("force_generic_plan",)]
    assert await store._read(setting, {}) == [("auto",)]  # every other statement's
