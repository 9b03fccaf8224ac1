"""An agent task's first pin costs nothing beyond its append (issue 28, 0025): each append
function writes `needs` in the update of the task row it makes anyway. Counted in the
test's own transaction (pg_stat_xact_*), not timed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import migrate_database
from noeta.backends.stores.postgres.appends import APPEND_EVENTS, encode_event, events_json
from noeta.backends.stores.postgres.group_commit import LeanAppend, batch_params
from noeta.core.ports.store import NewEvent
from noeta.testing.store_contract.capabilities import pinned

CREATE = "SELECT noeta_create_task('t', 'q', NULL, ARRAY['created'], ARRAY['{}'])"
# A claim as the stores make it (epoch 1, a lease an hour long), in this transaction.
CLAIM = """
UPDATE tasks SET status = 'running', owner = 'w', owner_epoch = 1,
       lease_until = now() + interval '1 hour', claimable_at = now() + interval '1 hour'
 WHERE id = 't'
"""
# This test's schema's: the database keeps other tests' schemas.
TASK_UPDATES = """
SELECT n_tup_upd FROM pg_stat_xact_user_tables
 WHERE schemaname = current_schema() AND relname = 'tasks'
"""
FUNCTION_RUNS = (
    "SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE schemaname = current_schema()"
)
NEEDS = "SELECT needs FROM tasks WHERE id = 't'"

EVENTS = [
    pinned("first"),
    pinned("extra", "core", "extra"),
    NewEvent("ModelCalled", {"request_hash": "h"}),
]
NO_MORE: dict[str, list[Any]] = {
    key: []
    for key in (
        "take",
        "new_ids",
        "new_queues",
        "new_ready",
        "new_counts",
        "new_types",
        "new_data",
        "deliver_tasks",
        "deliver_keys",
        "deliver_payloads",
    )
}
# Each append function an agent task's first pin can go through, and its statement.
APPENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "noeta_append_and_continue": (
        "SELECT noeta_append_and_continue('t', 1, 1, %(events)s::jsonb)",
        {"events": events_json(EVENTS)},
    ),
    "noeta_append_and_finish": (
        "SELECT noeta_append_and_finish('t', 1, 1, %(events)s::jsonb, 'done')",
        {"events": events_json(EVENTS)},
    ),
    "noeta_append_batch": (
        "SELECT refusal_code FROM noeta_append_batch(%(items)s::jsonb)",
        batch_params([LeanAppend("t", 1, 1, events_json(EVENTS))]),
    ),
    "noeta_append_model_called": (
        "SELECT limited FROM noeta_append_model_called("
        "'t', 1, 1, %(events)s::jsonb, ARRAY['fake/*'], 100, 0.01)",
        {"events": events_json(EVENTS)},
    ),
    "noeta_append": (
        APPEND_EVENTS,
        {
            **NO_MORE,
            "task": "t",
            "epoch": 1,
            "expected_seq": 1,
            "types": [encode_event(event)[0] for event in EVENTS],
            "data": [encode_event(event)[1] for event in EVENTS],
            "next": "wait",
            "until": None,
            "wake_prefix": None,
        },
    ),
}


async def function_runs(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    return dict(await (await conn.execute(FUNCTION_RUNS)).fetchall())


@pytest.mark.parametrize("append", sorted(APPENDS))
async def test_a_first_pin_costs_no_task_row_update_and_no_function_beyond_its_append(
    postgres_url: str, append: str
) -> None:
    await migrate_database(postgres_url)
    statement, params = APPENDS[append]
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        await conn.execute("SET track_functions = 'all'")
        await conn.execute(CREATE)
        await conn.execute(CLAIM)
        updates = (await (await conn.execute(TASK_UPDATES)).fetchone() or (0,))[0]
        runs = await function_runs(conn)
        row = await (await conn.execute(statement, params)).fetchone()
        assert row is not None and row[0] in (4, None, False)  # appended, not refused
        assert (await (await conn.execute(NEEDS)).fetchone()) == (["core", "extra"],)
        after = (await (await conn.execute(TASK_UPDATES)).fetchone() or (0,))[0]
        assert after - updates == 1  # the append's own update of the row
        ran = {
            name for name, calls in (await function_runs(conn)).items() if calls > runs.get(name, 0)
        }
        assert ran <= {append, "noeta_fence"}, ran
