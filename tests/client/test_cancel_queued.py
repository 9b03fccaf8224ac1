"""`cancel` stops a job that has not run yet (Celery's `revoke`): its function never runs,
and a task due later (a delay) is woken by the cancel and ends at once, not at its due
time. A real worker process; the store-level wake on both stores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import TaskCancelled
from noeta.core.ports.store import CANCEL_KEY, Delivery, NewEvent, NewTask, Store
from noeta.core.rules import events
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

HOUR = 3600.0


async def test_a_cancelled_queued_job_ends_cancelled_without_running(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = await client.enqueue("send_email", {"to": "ada@example.com"}, id="mail-1")
    assert await client.cancel(task)
    job_workers(postgres_url, "w")
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=60)
    assert not await asyncio.to_thread(ledger.exists)  # the function never ran
    logged = [tailed.event async for tailed in client.tail(task, follow=False)]
    assert not any(isinstance(event, events.ToolStarted) for event in logged)


async def test_a_cancel_wakes_a_delayed_job_at_once(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    job_workers(postgres_url, "w")
    task = await client.enqueue("send_email", {"to": "ada@example.com"}, delay=HOUR)
    assert await client.cancel(task)
    # Due in an hour: a minute's wait can only end because the cancel woke it.
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=60)
    assert not await asyncio.to_thread(ledger.exists)


@pytest.fixture
async def any_store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


async def test_a_cancel_makes_a_task_due_later_claimable_now(any_store: Store) -> None:
    store = any_store
    created = events.TaskCreated(model="scripted:none", prompt="go")
    later = await store.clock() + timedelta(hours=1)
    task = NewTask("later", [NewEvent(*events.encode(created))], ready_at=later)
    assert await store.create_task(task)
    assert await store.claim("w", ["default"], 30) is None  # not due yet
    assert await store.deliver(Delivery("later", {"kind": "message", "text": "hi"}, "m1"))
    assert await store.claim("w", ["default"], 30) is None  # a message does not wake it
    assert await store.deliver(Delivery("later", {"kind": "cancel"}, CANCEL_KEY))
    claim = await store.claim("w", ["default"], 30)
    assert claim is not None and claim.task_id == "later"
