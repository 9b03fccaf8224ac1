"""LISTEN/NOTIFY wake-ups: a task that becomes claimable now is announced, by queue only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.store import Delivery, NewEvent, NewTask, Wait
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
