"""An idle fleet takes a burst together (issue 28 item 4, ADR-0123): three idle workers of
two slots each, six jobs that block until the test releases them, created in one bulk
create, in six creates, or in six each made once the one before is claimed: every
worker holds two before any is released. The poll is 600 s, so only calls spread the
work: each task made claimable calls a registered worker (a bulk create up to as many as
it made), and a called worker with a slot left registers again. A bulk create that
called one worker fails it, and so does a worker that never registers again after a call
(every time when each job is claimed before the next is made; in one run of two when
they are made close together).

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

    # Not a timing bound: a worker left out gets no call, and its poll is 600 s away.
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


async def each_claimed_before_the_next(store: Store) -> None:
    """Each job created once the one before it is claimed: whoever took it had a slot left
    and must be called again (not only whoever has not been called yet)."""
    for task in jobs():
        await store.create_task(task)

        async def claimed(task_id: str = task.id) -> bool:
            return await status_of(store, task_id) == "running"

        await until(claimed, f"{task.id} is claimed", within=60)


@pytest.mark.parametrize(
    "create", [in_one_bulk_create, one_at_a_time, each_claimed_before_the_next]
)
@pytest.mark.usefixtures("fleet")
async def test_an_idle_fleet_takes_a_burst_together(
    store: Store, postgres_url: str, create: Create
) -> None:
    await create(store)
    await every_worker_holds_its_slots(store, postgres_url)
