"""A batch of alike tasks (an `enqueue_many`) is written by `noeta_create_tasks_alike`,
its shared parts sent once (issue 29's bulk target, migration 0026): the rows it makes are
the rows `noeta_create_tasks` makes of the same batch, and a taken or pruned id is named
as before, nothing of the batch written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.bulk import CREATE_TASKS, alike_params, any_params
from noeta.client.job_tasks import job_batch
from noeta.core.errors import Conflict
from noeta.core.ports.store import Finish, NewEvent, NewTask
from tests.client import jobs_for_tests

ROWS = """
SELECT t.queue, t.status, t.ready_at, t.claimable_at, t.last_seq, t.concurrency_key,
       t.priority, t.needs, array_agg(e.type || ' ' || e.data ORDER BY e.seq)
  FROM tasks t JOIN events e ON e.task_id = t.id
 WHERE t.id = ANY(%s) GROUP BY t.id ORDER BY t.id
"""
CALLS = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = %s
"""
LATER = datetime(2031, 1, 1, tzinfo=UTC)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(postgres_url, migrate=True)
    yield opened
    await opened.close()


def jobs(count: int, *, key: str | None = "tenant", priority: int = 4) -> list[NewTask]:
    inputs = [{"image": f"{n}.png", "width": n} for n in range(count)]
    tool = jobs_for_tests.resize
    return job_batch(tool, inputs, queue="alike", start=LATER, key=key, priority=priority)  # type: ignore[arg-type]


async def rows(url: str, ids: list[str]) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        return await (await conn.execute(ROWS, (ids,))).fetchall()


async def test_a_job_batch_is_written_by_the_alike_function_once(
    store: PostgresStore, postgres_url: str
) -> None:
    batch = jobs(50)
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        await conn.execute("SET track_functions = 'pl'")
        query, params = alike_params(batch) or (CREATE_TASKS, any_params(batch))
        await conn.execute(query, params)
        assert (await (await conn.execute(CALLS, ("noeta_create_tasks_alike",))).fetchone()) == (1,)
        assert (await (await conn.execute(CALLS, ("noeta_create_tasks",))).fetchone()) == (0,)
        await conn.commit()


async def test_its_rows_are_the_rows_the_general_create_makes(
    store: PostgresStore, postgres_url: str
) -> None:
    alike, general = jobs(40), jobs(40)
    assert store.capabilities.bulk is not None
    await store.capabilities.bulk.create_tasks(alike)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute(CREATE_TASKS, any_params(general))
    made = await rows(postgres_url, [task.id for task in alike])
    expected = await rows(postgres_url, [task.id for task in general])
    # Each batch's rows in its ids' order: compared as sets (claimable_at is ready_at).
    assert len(made) == 40
    assert sorted(made, key=repr) == sorted(expected, key=repr)
    needs = {tuple(row[7]) for row in made}
    assert needs == {("tests.client.jobs_for_tests",)}  # the pin, read once for the batch
    assert made[0][2] == LATER and made[0][5:7] == ("tenant", 4)


async def test_tasks_that_are_not_alike_take_the_general_create() -> None:
    first, second = jobs(1)[0], jobs(1)[0]
    other_queue = NewTask(second.id, second.events, queue="elsewhere")
    assert alike_params([first, other_queue]) is None
    own_pins = [
        NewTask(task.id, [*task.events[:2], NewEvent("PluginsPinned", {"v": 1, "pins": []})])
        for task in jobs(2)
    ]
    assert alike_params(own_pins) is None


async def test_a_taken_id_is_named_and_nothing_is_written(
    store: PostgresStore, postgres_url: str
) -> None:
    assert store.capabilities.bulk is not None
    first = jobs(3)
    await store.capabilities.bulk.create_tasks(first[1:2])
    second = jobs(3)
    taken = NewTask(first[1].id, second[1].events, "alike", LATER, "tenant", 4)
    clash = [second[0], taken, second[2]]
    with pytest.raises(Conflict) as refused:
        await store.capabilities.bulk.create_tasks(clash)
    assert refused.value.task_id == first[1].id
    assert await rows(postgres_url, [second[0].id, second[2].id]) == []


async def test_a_pruned_id_kept_taken_is_named_and_nothing_is_written(
    store: PostgresStore, postgres_url: str
) -> None:
    # The insert skips a kept id (tasks_keep_pruned_ids_taken) without an error: the row
    # count is what tells.
    assert store.capabilities.bulk is not None
    resize: Any = jobs_for_tests.resize  # the decorated function: a FunctionTool
    inputs = [{"image": "p.png", "width": 1}]
    pruned = job_batch(resize, inputs, queue="alike", start=None, key=None, priority=0)[0]
    await store.capabilities.bulk.create_tasks([pruned])
    claim = await store.claim_task("w", pruned.id, 60.0)
    assert claim is not None
    await store.append(claim, 3, [NewEvent("done", {})], next_state=Finish())
    assert (await store.prune_finished(timedelta(0))).tasks == 1
    later = jobs(3)
    again = NewTask(pruned.id, later[1].events, "alike", LATER, "tenant", 4)
    with pytest.raises(Conflict) as refused:
        await store.capabilities.bulk.create_tasks([later[0], again, later[2]])
    assert refused.value.task_id == pruned.id
    assert await rows(postgres_url, [later[0].id, later[2].id]) == []


async def test_a_batch_of_one_shares_everything(store: PostgresStore, postgres_url: str) -> None:
    one = jobs(1)
    query, params = alike_params(one) or ("", {})
    assert query and params["own_seq"] is None and params["own_data"] is None
    assert store.capabilities.bulk is not None
    await store.capabilities.bulk.create_tasks(one)
    made = await rows(postgres_url, [one[0].id])
    assert [len(row[8]) for row in made] == [3]
    assert made[0][8][1].startswith("CallRequested ")
