"""A batch item's fence is its write's own WHERE (ADR-0146): every item the fence refuses,
continuing or finishing, is told what `noeta_fence` raises for it, in the fence's order,
and leaves its row and log as they were; a model call a fleet budget applies to is told
`limited` only once the fence has passed it; the items beside a refused one are written."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.testing.store_contract import LEASE, created

BATCH = "SELECT item, appended_seq, refusal_code, refusal_message FROM noeta_append_batch(%s)"
ROW = "SELECT owner_epoch, status, last_seq, finished_at FROM tasks WHERE id = %s"
EVENTS = [["Noted", '{"v":1}']]

# How each task is left wrong, by another writer, after its claim (epoch 1, log at seq 1).
Spoil = Callable[[psycopg.Connection[Any], str], None]


def _taken_over(connection: psycopg.Connection[Any], task_id: str) -> None:
    connection.execute("UPDATE tasks SET owner_epoch = 2 WHERE id = %s", [task_id])


def _released(connection: psycopg.Connection[Any], task_id: str) -> None:
    connection.execute(
        "UPDATE tasks SET status = 'ready', claimable_at = clock_timestamp() WHERE id = %s",
        [task_id],
    )


def _lapsed(connection: psycopg.Connection[Any], task_id: str) -> None:
    connection.execute(
        "UPDATE tasks SET lease_until = now() - interval '1 second',"
        " claimable_at = now() - interval '1 second' WHERE id = %s",
        [task_id],
    )


def _appended_past(connection: psycopg.Connection[Any], task_id: str) -> None:
    connection.execute("UPDATE tasks SET last_seq = 3 WHERE id = %s", [task_id])


def _lapsed_and_appended_past(connection: psycopg.Connection[Any], task_id: str) -> None:
    _appended_past(connection, task_id)
    _lapsed(connection, task_id)


SPOILS: dict[str, Spoil] = {
    "taken over": _taken_over,
    "released": _released,
    "lapsed": _lapsed,
    "appended past": _appended_past,
    "lapsed and appended past": _lapsed_and_appended_past,  # the lease is told first
}


@pytest.fixture
async def store(postgres_url: str) -> Any:
    await migrate_database(postgres_url)
    opened = await PostgresStore.open(postgres_url, max_connections=2)
    yield opened
    await opened.close()


async def _claimed(store: PostgresStore, ids: list[str]) -> None:
    for task_id in ids:
        await store.create_task(created(task_id))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None and claim.task_id == task_id and claim.epoch == 1


def _item(task_id: str, finishing: bool, model_call: bool = False) -> dict[str, Any]:
    item: dict[str, Any] = {"task": task_id, "epoch": 1, "expected_seq": 1, "events": EVENTS}
    if finishing:
        item["status"] = "done"
    if model_call:
        item["model_keys"] = ["anthropic:a-model"]
    return item


def _fence_says(connection: psycopg.Connection[Any], task_id: str) -> tuple[str, str]:
    """What noeta_fence raises for the item's claim (epoch 1, log at seq 1)."""
    with pytest.raises(psycopg.Error) as raised, connection.transaction():
        connection.execute("SELECT noeta_fence(%s, 1, 1)", [task_id])
    error = raised.value.diag
    assert error.sqlstate is not None and error.message_primary is not None
    return error.sqlstate, error.message_primary


@pytest.mark.parametrize("finishing", [False, True], ids=["continuing", "finishing"])
async def test_each_refused_item_is_told_what_the_fence_says_and_left_alone(
    store: PostgresStore, postgres_url: str, finishing: bool
) -> None:
    ids = [f"t-{n}" for n in range(len(SPOILS) + 1)]
    await _claimed(store, ids)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for task_id, spoil in zip(ids[1:], SPOILS.values(), strict=True):
            spoil(connection, task_id)
        rows_before = {i: connection.execute(ROW, [i]).fetchone() for i in ids}
        expected = {i: _fence_says(connection, i) for i in ids[1:]}
        expected["nowhere"] = ("NT404", "nowhere")
        items = [_item(i, finishing) for i in [*ids, "nowhere"]]
        told = connection.execute(BATCH, [json.dumps(items)]).fetchall()
        by_task = {
            items[item - 1]["task"]: (seq, code, message) for item, seq, code, message in told
        }
        assert by_task.pop(ids[0])[:2] == (2, None)  # the one item the fence lets through
        assert {i: (code, message) for i, (_, code, message) in by_task.items()} == expected
        assert all(seq is None for seq, _, _ in by_task.values())
        for task_id in ids[1:]:
            assert connection.execute(ROW, [task_id]).fetchone() == rows_before[task_id]
            logged = connection.execute(
                "SELECT count(*) FROM events WHERE task_id = %s AND type = 'Noted'", [task_id]
            ).fetchone()
            assert logged == (0,)
        written = connection.execute(ROW, [ids[0]]).fetchone()
        assert written is not None and written[1:3] == ("done" if finishing else "running", 2)


async def test_a_model_call_under_a_fleet_budget_is_limited_only_once_its_fence_passes(
    store: PostgresStore, postgres_url: str
) -> None:
    ids = ["m-held", "m-lapsed"]
    await _claimed(store, ids)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO fleet_budgets (queue, period, amount) VALUES ('default', 'day', 1)"
        )
        _lapsed(connection, "m-lapsed")
        items = [_item(i, finishing=False, model_call=True) for i in ids]
        told = connection.execute(BATCH, [json.dumps(items)]).fetchall()
        assert [(seq, code, message) for _, seq, code, message in told] == [
            (None, "limited", None),
            (None, "NT409", "the lease has expired"),
        ]
        for task_id in ids:
            assert connection.execute(ROW, [task_id]).fetchone()[2] == 1  # type: ignore[index]
