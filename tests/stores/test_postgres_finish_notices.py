"""LISTEN noeta_finished: the append that finishes an awaited task announces its id (what
the client's `result` waits on); a finish nobody awaits, other appends, and a refused
finish say nothing (ADR-0087). The mark and the finish take the task row's lock, so a
mark racing a finish either sees it finished or is seen by it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import Conflict
from noeta.core.ports.store import Finish, NewEvent, NewTask, TaskStatus
from noeta.testing.store_contract import created
from tests.stores.test_postgres_wakeups import Channels


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(postgres_url, migrate=True)
    yield store
    await store.close()


async def test_only_an_awaited_finish_is_announced(store: PostgresStore, postgres_url: str) -> None:
    channels = await Channels.listening(postgres_url, "noeta_finished")
    try:
        for task_id in ("a", "b", "c", "quiet"):
            await store.create_task(created(task_id))
        assert await store.await_finish("a") is False  # not finished: from now on, told
        assert await store.await_finish("b") is False
        assert await store.await_finish("c") is False
        claims = {t: await store.claim_task("w", t, 30) for t in ("a", "b", "c", "quiet")}
        first, other, full, quiet = claims["a"], claims["b"], claims["c"], claims["quiet"]
        assert first and other and full and quiet
        await store.append(first, 1, [NewEvent("turn", {})])  # not a finish: silent
        with pytest.raises(Conflict):  # a refused finish (stale seq) is not announced
            await store.append(other, 7, [], next_state=Finish(TaskStatus.DONE))
        await store.append(first, 2, [NewEvent("end", {})], next_state=Finish(TaskStatus.DONE))
        await store.append(other, 1, [], next_state=Finish(TaskStatus.FAILED))
        await store.append(quiet, 1, [], next_state=Finish(TaskStatus.DONE))  # nobody waits
        child = NewTask("child", [NewEvent("created", {})])  # the full append function
        await store.append(full, 1, [], next_state=Finish(TaskStatus.DONE), new_tasks=[child])
        heard = await channels.heard("noeta_finished")
    finally:
        await channels.connection.close()
    assert heard == {"noeta_finished": ["a", "b", "c"]}
    assert await store.await_finish("a") is True  # finished already: nothing to announce
    assert await store.await_finish("never-existed") is None


WAITING_ON_A_ROW = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')
   AND datname = current_database()
"""


async def test_a_mark_racing_a_finish_sees_it_finished(
    store: PostgresStore, postgres_url: str
) -> None:
    await store.create_task(created("raced"))
    claim = await store.claim_task("w", "raced", 30)
    assert claim is not None
    async with await psycopg.AsyncConnection.connect(postgres_url) as finisher:
        await finisher.execute(  # the finish, not yet committed: it holds the row
            "SELECT noeta_append_and_finish(%s, %s, 1, '[]'::jsonb, 'done')",
            (claim.task_id, claim.epoch),
        )
        marking = asyncio.create_task(store.await_finish("raced"))
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            for _ in range(600):  # the mark waits for the finisher's row lock: a state
                row = await (await admin.execute(WAITING_ON_A_ROW)).fetchone()
                if row is not None and row[0] >= 1:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the mark never waited for the finish")
        await finisher.commit()
    assert await marking is True  # it read the finished row, not the one before
