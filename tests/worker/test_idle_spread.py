"""An idle fleet takes a burst together (issue 28 item 4, ADR-0122): three idle workers of
two slots each, six jobs that block until the test releases them, created in one bulk
create or in six creates: every worker holds two before any is released. The poll is 600
s, so only calls spread the work: a woken claimer that fills every slot it asked for and
leaves claimable tasks behind calls the next idle worker.

In-process workers, each on its own store (its own connections and LISTEN), on the real
PostgreSQL; the jobs run in this process and wait on an event the test sets."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest

import noeta
from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.client.job_tasks import job_task
from noeta.core.ports.store import NewTask, Store
from noeta.core.runner.task import TaskRunner
from noeta.plugins.loading import module_pin
from noeta.worker.worker import Worker, WorkerSettings

from .conftest import status_of, until

WORKERS = ("a", "b", "c")
SLOTS = 2
JOBS = len(WORKERS) * SLOTS
RELEASED: dict[str, asyncio.Event] = {}  # per test, set once every worker holds its jobs


@noeta.tool(retry_safe=True)
async def held_job(n: int) -> int:
    """A job that returns once the test releases it."""
    await RELEASED["now"].wait()
    return n


async def value(url: str, query: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        row = await (await admin.execute(query)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
async def fleet(postgres_url: str) -> AsyncIterator[None]:
    """Three idle workers, each registered in the idle registry (no poll will come)."""
    RELEASED["now"] = asyncio.Event()
    stores = [await open_store(postgres_url) for _ in WORKERS]
    stop = asyncio.Event()
    runs = []
    for name, store in zip(WORKERS, stores, strict=True):
        runner = TaskRunner(
            store,
            ProviderRegistry(),
            tools={held_job.name: held_job},
            pins=(module_pin(held_job.module),),
        )
        settings = WorkerSettings(name, concurrency=SLOTS, lease_seconds=600, poll_seconds=600)
        runs.append(asyncio.create_task(Worker(store, runner, settings).run(stop)))

    async def registered() -> bool:
        return await value(postgres_url, "SELECT count(*) FROM idle_workers") == len(WORKERS)

    try:
        await until(registered, "every worker waits idle", within=60)
        yield
    finally:
        RELEASED["now"].set()
        stop.set()
        await asyncio.gather(*runs)
        for store in stores:
            await store.close()


def jobs() -> list[NewTask]:
    return [job_task(f"j{n}", held_job, {"n": n}, "default", None) for n in range(JOBS)]


async def every_worker_holds_its_slots(store: Store, postgres_url: str) -> None:
    async def spread() -> bool:
        owners = await owners_of_running(postgres_url)
        return owners == Counter(dict.fromkeys(WORKERS, SLOTS))

    # Not a timing bound: on main the last worker never gets a call, and its poll is 600 s.
    await until(spread, "every worker holds two jobs", within=60)
    RELEASED["now"].set()

    async def all_done() -> bool:
        return all([await status_of(store, t.id) == "done" for t in jobs()])

    await until(all_done, "every job finishes", within=60)


async def owners_of_running(url: str) -> Counter[str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        cursor = await admin.execute("SELECT owner FROM tasks WHERE status = 'running'")
        return Counter(row[0] for row in await cursor.fetchall())


Create = Callable[[Store], Awaitable[None]]


async def in_one_bulk_create(store: Store) -> None:
    await store.create_tasks(jobs())


async def one_at_a_time(store: Store) -> None:
    for task in jobs():
        await store.create_task(task)


@pytest.mark.parametrize("create", [in_one_bulk_create, one_at_a_time])
@pytest.mark.usefixtures("fleet")
async def test_an_idle_fleet_takes_a_burst_together(
    store: Store, postgres_url: str, create: Create
) -> None:
    await create(store)
    await every_worker_holds_its_slots(store, postgres_url)
