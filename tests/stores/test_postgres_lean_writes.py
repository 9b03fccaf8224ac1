"""A task's writes pay for no check its writers already make (issue 28, ADR-0095,
ADR-0143): every finishing writer sets `finished_at` and drops the task's model-limit hold
itself (no trigger does; the table refuses a finish without the time), and an event row
carries no foreign-key check, the writers keeping every event's task."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import migrate_database

AWAITED = "INSERT INTO finish_waiters (task_id) VALUES (%(task)s)"
HOLD = """
INSERT INTO model_limit_holds (task_id, until, limit_key)
VALUES (%(task)s, clock_timestamp(), 'fake/*')
"""
# The function a finish used to call besides the append: the announcement.
CALLED_BESIDES = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
 WHERE funcname = 'noeta_announce_finish'
"""
TASK_TRIGGERS = "SELECT tgname FROM pg_trigger WHERE tgrelid = 'tasks'::regclass ORDER BY 1"
FINISHED = """
SELECT status, finished_at IS NOT NULL AND finished_at = updated_at,
       EXISTS (SELECT 1 FROM model_limit_holds WHERE task_id = %(task)s)
  FROM tasks WHERE id = %(task)s
"""
EVENTS = '[["Finished", "{}"]]'
ORPHANS = """
SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = e.task_id)
"""


async def claimed_task(conn: psycopg.AsyncConnection[Any], task: str) -> None:
    await conn.execute(
        "INSERT INTO tasks (id, queue, status, owner, owner_epoch, lease_until, claimable_at)"
        " VALUES (%(task)s, 'q', 'running', 'w', 1, now() + interval '1 hour',"
        " now() + interval '1 hour')",
        {"task": task},
    )
    await conn.execute(HOLD, {"task": task})


async def announced(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """Commit, then what the commit announced to clients awaiting a finish."""
    await conn.commit()
    await conn.execute("SELECT 1")  # a round trip: notices sent at the commit are read
    await conn.commit()
    return [notice.payload async for notice in conn.notifies(timeout=0)]


async def one(conn: psycopg.AsyncConnection[Any], query: str, **params: Any) -> tuple[Any, ...]:
    row = await (await conn.execute(query, params)).fetchone()
    assert row is not None
    return tuple(row)


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    await migrate_database(postgres_url)
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        await connection.execute("SET track_functions = 'pl'")
        await connection.execute("LISTEN noeta_finished")
        yield connection


async def test_a_lone_finish_sets_finished_at_and_drops_the_hold_calling_no_other_function(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    await claimed_task(conn, "t")
    await conn.execute(AWAITED, {"task": "t"})
    await conn.execute("SELECT noeta_append_and_finish('t', 1, 0, %s::jsonb, 'done')", (EVENTS,))
    assert await one(conn, FINISHED, task="t") == ("done", True, False)
    assert await one(conn, CALLED_BESIDES) == (0,)
    assert await announced(conn) == ["t"]


async def test_a_batched_finish_sets_finished_at_and_drops_the_hold_calling_no_other_function(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    for task in ("a", "b"):
        await claimed_task(conn, task)
        await conn.execute(AWAITED, {"task": task})
    items = [
        {
            "task": "a",
            "epoch": 1,
            "expected_seq": 0,
            "events": [["Finished", "{}"]],
            "status": "failed",
        },
        {"task": "b", "epoch": 1, "expected_seq": 0, "events": [["Stepped", "{}"]]},
    ]
    refusals = await (
        await conn.execute(
            "SELECT refusal_code FROM noeta_append_batch(%s::jsonb) ORDER BY item",
            (json.dumps(items),),
        )
    ).fetchall()
    assert refusals == [(None,), (None,)]
    assert await one(conn, FINISHED, task="a") == ("failed", True, False)
    # The one that keeps running keeps its hold and has no finished_at.
    assert await one(conn, FINISHED, task="b") == ("running", False, True)
    assert await one(conn, CALLED_BESIDES) == (0,)
    assert await announced(conn) == ["a"]  # a client awaits both; one finished


async def test_noeta_appends_finishing_form_sets_finished_at_and_drops_the_hold(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    await claimed_task(conn, "t")
    await conn.execute(
        "SELECT noeta_append('t', 1, 0, ARRAY['Finished'], ARRAY['{}'], '{}', 'cancelled',"
        " NULL, NULL, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')"
    )
    assert await one(conn, FINISHED, task="t") == ("cancelled", True, False)


async def test_the_table_refuses_a_finish_without_its_time_and_a_live_task_with_one(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    # No trigger sets finished_at any more (ADR-0143): a writer that forgets it fails
    # loudly, on every path the suites run, instead of leaving the prune a task it skips.
    assert "tasks_mark_finished" not in [
        row[0] for row in await (await conn.execute(TASK_TRIGGERS)).fetchall()
    ]
    await claimed_task(conn, "t")
    await conn.commit()
    refused = (
        "UPDATE tasks SET status = 'done', claimable_at = NULL, lease_until = NULL WHERE id = 't'",
        "UPDATE tasks SET finished_at = now() WHERE id = 't'",
        "INSERT INTO tasks (id, queue, status) VALUES ('old', 'q', 'failed')",
    )
    for statement in refused:
        with pytest.raises(psycopg.errors.CheckViolation):
            await conn.execute(statement)
        await conn.rollback()
    await conn.execute(
        "UPDATE tasks SET status = 'done', claimable_at = NULL, lease_until = NULL,"
        " finished_at = now() WHERE id = 't'"
    )
    with pytest.raises(psycopg.errors.CheckViolation):  # a finished task left, time kept
        await conn.execute("UPDATE tasks SET status = 'ready', claimable_at = now() WHERE id = 't'")


async def test_an_event_row_costs_no_foreign_key_check(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    keys = (
        "SELECT count(*) FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype = 'f'"
    )
    assert await one(conn, keys) == (0,)


async def test_no_writer_leaves_an_event_without_its_task(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    # What the foreign key checked, each writer checks itself: a missing task is refused
    # before any event is written.
    with pytest.raises(psycopg.Error) as refused:
        await conn.execute(
            "SELECT noeta_append_and_continue('missing', 1, 0, %s::jsonb)", (EVENTS,)
        )
    assert refused.value.sqlstate == "NT404"
    await conn.rollback()
    batch = [{"task": "missing", "epoch": 1, "expected_seq": 0, "events": [["E", "{}"]]}]
    assert await one(
        conn,
        "SELECT refusal_code FROM noeta_append_batch(%(items)s::jsonb)",
        items=json.dumps(batch),
    ) == ("NT404",)
    # A create whose id is taken writes none of its events.
    create = "SELECT noeta_create_task(%(id)s, 'q', NULL, %(types)s, %(data)s)"
    assert await one(conn, create, id="t", types=["A"], data=["{}"]) == (True,)
    assert await one(conn, create, id="t", types=["B", "C"], data=["{}", "{}"]) == (False,)
    assert await one(conn, "SELECT array_agg(type) FROM events WHERE task_id = 't'") == (["A"],)
    assert await one(conn, ORPHANS) == (0,)
