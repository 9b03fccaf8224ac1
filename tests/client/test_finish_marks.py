"""A waiting call marks its task awaited once its LISTEN is in force, and the finish's
notice (not the poll) ends the wait: only awaited finishes are announced (ADR-0087)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.client import waiting
from noeta.client.waiting import FinishWatcher
from noeta.core.errors import UnknownTask
from noeta.core.ports.store import Finish, TaskStatus
from noeta.testing.store_contract import created
from tests.worker.conftest import until


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(postgres_url, migrate=True)
    yield store
    await store.close()


async def marked(url: str, task_id: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        cursor = await admin.execute("SELECT 1 FROM finish_waiters WHERE task_id = %s", (task_id,))
        return await cursor.fetchone() is not None


async def test_the_finish_notice_ends_a_marked_wait(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "POLL_SECONDS_WITH_NOTICES", 3600.0)  # only a notice ends it
    watcher = FinishWatcher(store)
    await store.create_task(created("t"))
    wait = asyncio.create_task(watcher.wait_finished("t", None))
    await until(lambda: marked(postgres_url, "t"), "the wait marked its task")
    claim = await store.claim_task("w", "t", 30)
    assert claim is not None
    await store.append(claim, 1, [], next_state=Finish(TaskStatus.DONE))
    record = await asyncio.wait_for(wait, 60)  # a hang guard, not a timing
    assert record.status is TaskStatus.DONE
    assert not await marked(postgres_url, "t")  # the finish took the mark
    assert watcher.waiting == 0
    await watcher.close()


async def test_a_wait_on_a_task_that_never_existed_is_the_typed_error(
    store: PostgresStore,
) -> None:
    watcher = FinishWatcher(store)
    with pytest.raises(UnknownTask):
        await watcher.wait_finished("never-was", 30)
    assert watcher.waiting == 0
    await watcher.close()
