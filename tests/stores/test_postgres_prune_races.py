"""PostgreSQL's pruning statement: beside the writers it overlaps (a prune held open while
another session writes the same ids, ordered by which statement waits on which lock),
and the bound on what one batch deletes."""

from __future__ import annotations

import asyncio

import psycopg

from noeta.backends.stores import open_store
from noeta.core.ports.store import Finish, NewEvent
from noeta.testing.store_contract.fixtures import created
from noeta.testing.store_contract.retention import finish

# The prune's statement, with a cutoff in the future: every finished task is old enough.
PRUNE_EVERYTHING_FINISHED = """
SELECT tasks_pruned FROM noeta_prune_finished(
    clock_timestamp() + interval '1 hour', NULL, 100, true)
"""
WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %(like)s
"""


async def waiting_on_a_lock(url: str, like: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        row = await (await connection.execute(WAITING_ON_A_LOCK, {"like": like})).fetchone()
        return bool(row and row[0])


async def test_a_resubmit_while_a_prune_deletes_the_id_creates_nothing(postgres_url: str) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        assert await store.create_task(created("once"))
        await finish(store, "once")
        async with await psycopg.AsyncConnection.connect(postgres_url) as prune:
            # The prune has deleted the task and kept its id, and not yet committed.
            rows = await (await prune.execute(PRUNE_EVERYTHING_FINISHED)).fetchall()
            assert rows == [(1,)]
            resubmit = asyncio.create_task(store.create_task(created("once")))
            # The insert waits for the prune's row lock (only the server knows it waits).
            while not resubmit.done() and not await waiting_on_a_lock(  # noqa: ASYNC110
                postgres_url, "%noeta_create_task%"
            ):
                await asyncio.sleep(0.01)
            await prune.commit()
        assert await resubmit is False
        assert await store.get_task("once") is None
    finally:
        await store.close()


# One batch with at most 250 tasks and 10 events.
PRUNE_A_BATCH = """
SELECT tasks_pruned, events_pruned, more FROM noeta_prune_finished(
    clock_timestamp() + interval '1 hour', NULL, 250, true, 10)
"""


async def test_a_batch_deletes_at_most_its_events_even_of_one_huge_task(postgres_url: str) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        steps = [NewEvent("step", {"n": n}) for n in range(24)]
        assert await store.create_task(created("huge"))
        claim = await store.claim_task("w", "huge", 30.0)
        assert claim is not None
        finished = [*steps, NewEvent("finished", {})]
        await store.append(claim, 1, finished, next_state=Finish())  # 26 events
        for small in ("a", "b"):
            assert await store.create_task(created(small))
            await finish(store, small)  # 2 events each
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as prune:
            batches = [(await (await prune.execute(PRUNE_A_BATCH)).fetchall())[0] for _ in range(4)]
        # The huge task's log goes ten events at a time from the top, its row with the
        # last part; then the small ones together.
        assert batches == [(0, 10, True), (0, 10, True), (1, 6, True), (2, 4, False)]
        assert await store.get_task("huge") is None
        assert await store.read_log("a") == []
    finally:
        await store.close()
