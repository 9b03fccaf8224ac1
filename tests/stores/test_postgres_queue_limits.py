"""PostgreSQL's queue limit holds between claimers whose statements overlap: a second
claimer of a limited queue waits for the first's lock, and then counts its claim."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import CLAIM_NEXT_TASK
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import TaskStatus
from noeta.testing.store_contract.fixtures import LEASE, created

# (The start of the claim statement: pg_stat_activity keeps only its first kilobyte.)
WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE '%WITH due AS MATERIALIZED%'
"""


async def waiting_on_a_lock(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        row = await (await connection.execute(WAITING_ON_A_LOCK)).fetchone()
        return bool(row and row[0])


@pytest.mark.parametrize("limits", [QueueChange(concurrency=1), QueueChange(per_key_concurrency=1)])
async def test_a_claim_in_flight_is_counted_by_the_next_claimer(
    postgres_url: str, limits: QueueChange
) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        await queue_settings_store(store).set_queue("q", limits)
        for task_id in ("t0", "t1"):
            assert await store.create_task(created(task_id, "q", concurrency_key="k"))
        params = {
            "queues": ["q"],
            "lease": LEASE,
            "worker": "first",
            "limit": 1,
            "excluding": [],
            "offers": None,
        }
        async with await psycopg.AsyncConnection.connect(postgres_url) as first:
            # The first claim is made and not yet committed: it holds the queue's lock.
            rows = await (await first.execute(CLAIM_NEXT_TASK, params)).fetchall()
            assert [row[0] for row in rows] == ["t0"]
            second = asyncio.create_task(store.claim("second", ["q"], LEASE))
            # The second claimer must wait for that lock (without it, it would count no
            # live claim, skip the locked t0 and take t1: two at once with a limit of 1).
            # (Only the server knows a statement waits on a lock: no event says so.)
            while not second.done() and not await waiting_on_a_lock(postgres_url):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            await first.commit()
        assert await second is None
        running = await store.list_tasks(status=TaskStatus.RUNNING, queue="q")
        assert [task.id for task in running] == ["t0"]
    finally:
        await store.close()
