"""LISTEN/NOTIFY wake-ups: a task that becomes claimable now is announced, by queue only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.store import Delivery, NewEvent, NewTask, Wait
from noeta.testing.store_contract import created


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(postgres_url, migrate=True)
    yield store
    await store.close()


async def test_claimable_tasks_are_announced_by_queue(store: PostgresStore) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def listen() -> None:
        async for queue in store.wakeups():
            if queue != "*":  # "*": listening (re)started, look now
                await heard.put(queue)

    listener = asyncio.create_task(listen())
    try:
        # Until the LISTEN is in place nothing can be heard: repeat a first event until it is.
        for attempt in range(100):
            await store.create_task(created(f"warm-up-{attempt}", queue="warm-up"))
            try:
                assert await asyncio.wait_for(heard.get(), 0.1) == "warm-up"
                break
            except TimeoutError:
                continue
        while not heard.empty():
            heard.get_nowait()

        await store.create_task(created("a", queue="mail"))  # claimable now
        assert await asyncio.wait_for(heard.get(), 5) == "mail"
        later = (await store.clock()).replace(year=2999)
        await store.create_task(NewTask("b", [NewEvent("created", {})], "mail", ready_at=later))
        claim = await store.claim_task("w", "a", 30)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("turn", {})], next_state=Wait())
        await store.deliver(Delivery("a", "hello"))  # wakes it
        assert await asyncio.wait_for(heard.get(), 5) == "mail"
        assert heard.empty()  # the future task, the claim and the wait said nothing
    finally:
        listener.cancel()


async def test_wake_due_announces_a_task_when_its_time_comes(store: PostgresStore) -> None:
    listener = store.wakeups()
    try:
        assert await anext(listener) == "*"  # listening from here on
        start = await store.clock()
        due = start + timedelta(milliseconds=300)
        await store.create_task(created("timer", queue="timers", ready_at=due))
        clock, next_due = await store.wake_due(start)
        assert next_due == due or clock >= due
        while clock < due:  # the scheduler's loop, in small: look until the time has come
            await asyncio.sleep(0.05)
            clock, next_due = await store.wake_due(start)
        assert await asyncio.wait_for(anext(listener), 5) == "timers"
        # Announced once per window: from the time it fell due on, nothing more.
        clock, _ = await store.wake_due(clock)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(listener), 0.3)
    finally:
        await listener.aclose()


# How often each of this schema's trigger functions ran, as the server counts them.
TRIGGER_CALLS = """
SELECT funcname, calls FROM pg_stat_user_functions
 WHERE schemaname = current_schema() AND funcname LIKE 'noeta_notify%%' ORDER BY funcname
"""


async def test_a_batch_is_announced_once_per_queue_it_made_claimable(
    store: PostgresStore, postgres_url: str
) -> None:
    later = (await store.clock()).replace(year=2999)
    batch = [created(f"a{n}", queue="q1") for n in range(300)]
    batch += [created(f"b{n}", queue="q2") for n in range(300)]
    batch += [NewTask("c", [NewEvent("created", {})], "q3", ready_at=later)]
    listener = store.wakeups()
    options = conninfo_to_dict(postgres_url).get("options") or ""
    counted = make_conninfo(postgres_url, options=f"{options} -c track_functions=pl")
    try:
        assert await anext(listener) == "*"  # listening from here on
        producer = await PostgresStore.open(counted, max_connections=1)
        try:
            await producer.create_tasks(batch)
        finally:
            await producer.close()  # its session ends: its function counts are flushed
        heard = {await asyncio.wait_for(anext(listener), 5) for _ in range(2)}
        assert heard == {"q1", "q2"}  # q3's task is not due
        with pytest.raises(TimeoutError):  # and each queue was announced once
            await asyncio.wait_for(anext(listener), 0.3)
    finally:
        await listener.aclose()

    async def counts() -> list[tuple[str, int]]:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            return list(await (await admin.execute(TRIGGER_CALLS)).fetchall())

    for _ in range(100):  # the ended session's counts land shortly after it ends
        found = await counts()
        if found:
            break
        await asyncio.sleep(0.05)
    # The created-task trigger ran once for the one INSERT statement, not once a row.
    assert found == [("noeta_notify_created", 1)]
