"""Features cost nothing where they are unused: a claim, a hand-back or a finish runs no
trigger function, and a model call no limit (no fleet budget) applies
to sends no token (no cost) correction. Counted with track_functions in the test's own
transaction."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.ports.fleet_budgets import FleetBudget
from noeta.core.ports.model import Usage
from noeta.core.ports.model_limits import ModelBudget, limit_keys
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.runner import model_budget

# A move to `status` as the stores make it: a claimed task has an owner and a lease.
MOVE = """
UPDATE tasks SET status = %(status)s, claimable_at = NULL,
       owner = CASE WHEN %(status)s IN ('running', 'holding') THEN 'w' END,
       lease_until = CASE WHEN %(status)s IN ('running', 'holding') THEN now() END,
       finished_at = CASE WHEN %(status)s IN ('done', 'failed', 'cancelled') THEN now() END
 WHERE id = 't'
"""
CALLED = [NewEvent("ModelCalled", {"request_hash": "h"})]
CALLS = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = %s
"""


async def calls(conn: psycopg.AsyncConnection[Any], function: str) -> int:
    return int((await (await conn.execute(CALLS, (function,))).fetchone() or (0,))[0])


async def test_no_function_runs_for_a_claim_a_wait_a_hand_back_or_a_finish(
    postgres_url: str,
) -> None:
    # Since 0040 no trigger sets finished_at (ADR-0143): its writer does, in the update.
    await migrate_database(postgres_url)
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        await conn.execute("SET track_functions = 'all'")
        await conn.execute("INSERT INTO tasks (id, queue, status) VALUES ('t', 'q', 'ready')")
        for status in ("running", "waiting", "ready", "running"):  # claims, waits, hand-backs
            await conn.execute(MOVE, {"status": status})
        await conn.execute(MOVE, {"status": "done"})
        ran = "SELECT funcname, calls FROM pg_stat_xact_user_functions"
        # The create's statement trigger, and nothing for the moves.
        assert await (await conn.execute(ran)).fetchall() == [("noeta_notify_created", 1)]


class CountedCorrections(PostgresStore):
    """The real store, counting the token corrections the runner sends it."""

    corrections = 0
    cost_corrections = 0

    async def model_call_used(self, budget: ModelBudget, tokens: int) -> None:
        self.corrections += 1
        await super().model_call_used(budget, tokens)

    async def fleet_budget_used(self, task_id: str, budget: ModelBudget, cost: Decimal) -> None:
        self.cost_corrections += 1
        await super().fleet_budget_used(task_id, budget, cost)


async def test_a_reply_no_limit_applied_to_sends_no_token_correction(postgres_url: str) -> None:
    await migrate_database(postgres_url)
    store = await CountedCorrections.open(postgres_url)
    try:
        usage = Usage(input_tokens=7, output_tokens=5)  # not the estimate: 12 != 100
        for task_id, limited in (("a", False), ("b", True)):
            if limited:  # the control: a limit on the call, its correction is sent
                await store.set_model_limit("fake/*", None, 1_000_000)
                await store.set_fleet_budget(FleetBudget("default", "", "day", Decimal(5)))
            await store.create_task(NewTask(task_id, [NewEvent("created", {})]))
            claim = await store.claim_task("w", task_id, 60.0)
            assert claim is not None
            budget = ModelBudget(limit_keys("fake", "m1"), 100, cost=Decimal("0.0001"))
            await model_budget.writer(store, budget)(claim, 1, CALLED)
            await model_budget.replied(store, task_id, budget, usage, "anthropic:claude-haiku-4-5")
            assert store.corrections == (1 if limited else 0)
            assert store.cost_corrections == (1 if limited else 0)
    finally:
        await store.close()


async def test_creating_a_task_runs_no_pruned_id_check_until_ids_are_kept(
    postgres_url: str,
) -> None:
    await migrate_database(postgres_url)
    insert = "INSERT INTO tasks (id, queue, status) VALUES (%s, 'q', 'ready')"
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute("SET track_functions = 'all'")
        async with conn.transaction():
            await conn.execute(insert, ("never-pruned",))
            assert await calls(conn, "noeta_skip_pruned_id") == 0
        # The control: once a prune keeps a pruned id, every create checks it again.
        await conn.execute(MOVE.replace("'t'", "'never-pruned'"), {"status": "done"})
        prune = "SELECT tasks_pruned FROM noeta_prune_finished(clock_timestamp(), NULL, 10, true)"
        assert (await (await conn.execute(prune)).fetchone()) == (1,)
        async with conn.transaction():
            await conn.execute(insert, ("never-pruned",))  # taken: skipped, not created
            await conn.execute(insert, ("new",))
            assert await calls(conn, "noeta_skip_pruned_id") == 2
        ids = await (await conn.execute("SELECT id FROM tasks ORDER BY id")).fetchall()
        assert ids == [("new",)]


# The relation locks this backend holds on model_limits, in its own transaction.
LIMIT_LOCKS = """
SELECT array_agg(mode ORDER BY mode) FROM pg_locks
 WHERE pid = pg_backend_pid() AND relation = 'model_limits'::regclass
"""
APPEND_MODEL_CALLED = """
SELECT seq FROM noeta_append_model_called(
    't', %(epoch)s, %(seq)s, '[["ModelCalled", "{}"]]'::jsonb, '{fake,fake/m1}'::text[],
    100, NULL)
"""


async def test_a_model_call_no_limit_applies_to_locks_no_limit_row(postgres_url: str) -> None:
    """The ModelCalled append opens its locking loop over the limits' rows (FOR UPDATE: a
    RowShareLock on the table) only where a limit names one of its keys (ADR-0135);
    without one, it looks (EXISTS: an AccessShareLock) and goes on to write."""
    await migrate_database(postgres_url)
    store = await PostgresStore.open(postgres_url)
    try:
        await store.create_task(NewTask("t", [NewEvent("created", {})]))
        claim = await store.claim_task("w", "t", 60.0)
        assert claim is not None
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        params = {"epoch": claim.epoch, "seq": 1}
        assert await (await conn.execute(APPEND_MODEL_CALLED, params)).fetchone() == (2,)
        modes = (await (await conn.execute(LIMIT_LOCKS)).fetchone() or (None,))[0]
        assert modes == ["AccessShareLock"]
        await conn.commit()
        # The control: with a limit on one of the keys, the loop locks its row.
        await conn.execute("INSERT INTO model_limits (key, rpm) VALUES ('fake', 1000)")
        await conn.commit()
        params["seq"] = 2
        assert await (await conn.execute(APPEND_MODEL_CALLED, params)).fetchone() == (3,)
        modes = (await (await conn.execute(LIMIT_LOCKS)).fetchone() or (None,))[0]
        assert "RowShareLock" in modes
        await conn.rollback()
