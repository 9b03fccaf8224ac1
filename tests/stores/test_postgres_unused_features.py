"""Features cost nothing where they are unused: a claim or an append of a task that is not
finishing runs no finishing trigger, and a model call no limit applies to sends no token
correction. Counted with track_functions in the test's own transaction."""

from __future__ import annotations

from typing import Any

import psycopg

from noeta.backends.stores.postgres import migrate_database

# A move to `status` as the stores make it: a claimed task has an owner and a lease.
MOVE = """
UPDATE tasks SET status = %(status)s, claimable_at = NULL,
       owner = CASE WHEN %(status)s IN ('running', 'holding') THEN 'w' END,
       lease_until = CASE WHEN %(status)s IN ('running', 'holding') THEN now() END
 WHERE id = 't'
"""
CALLS = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = %s
"""


async def calls(conn: psycopg.AsyncConnection[Any], function: str) -> int:
    return int((await (await conn.execute(CALLS, (function,))).fetchone() or (0,))[0])


async def test_the_finishing_trigger_runs_only_when_a_task_finishes_or_leaves_finished(
    postgres_url: str,
) -> None:
    await migrate_database(postgres_url)
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        await conn.execute("SET track_functions = 'all'")
        await conn.execute("INSERT INTO tasks (id, queue, status) VALUES ('t', 'q', 'ready')")
        for status in ("running", "waiting", "ready", "running"):  # claims, waits, hand-backs
            await conn.execute(MOVE, {"status": status})
        assert await calls(conn, "noeta_mark_finished") == 0
        await conn.execute(MOVE, {"status": "done"})
        assert await calls(conn, "noeta_mark_finished") == 1
        finished = "SELECT finished_at IS NOT NULL FROM tasks WHERE id = 't'"
        assert (await (await conn.execute(finished)).fetchone()) == (True,)
        # Leaving a finished state (a task resumed) clears it, by the same trigger.
        await conn.execute(MOVE, {"status": "ready"})
        assert await calls(conn, "noeta_mark_finished") == 2
        assert (await (await conn.execute(finished)).fetchone()) == (False,)
