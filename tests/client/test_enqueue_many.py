"""`enqueue_many` (issue 29 item 5): a batch of jobs in one statement, all or nothing, every
input checked against its function's schema first; run by a real worker like `enqueue`'s
jobs. And a client whose own pool is full says so, not "cannot reach PostgreSQL"."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import PostgresStore
from noeta.client import AsyncClient, Client
from noeta.core.errors import PayloadError, StoreUnavailable
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests

REPOSITORY = Path(__file__).parents[2]


async def test_a_batch_of_jobs_is_written_at_once_and_run(
    store_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    await (await open_store(store_url, migrate=True)).close()
    async with AsyncClient(store_url) as client:
        inputs = [{"image": f"{n}.png", "width": n} for n in range(1, 31)]
        handles = await client.enqueue_many("resize", inputs, queue="thumbs", priority=7)
        assert len({handle.id for handle in handles}) == 30
        queued = await client.tasks(queue="thumbs", limit=100)
        assert {record.id for record in queued} == {handle.id for handle in handles}
        job_workers(store_url, "w", queues="thumbs", poll=0.1)
        results = [await client.job_result(handle, timeout=60) for handle in handles]
    assert results == inputs


async def test_one_invalid_input_writes_nothing_and_is_named(store_url: str) -> None:
    await (await open_store(store_url, migrate=True)).close()
    async with AsyncClient(store_url) as client:
        inputs: list[dict[str, object]] = [{"image": "a.png", "width": 1}] * 5
        inputs[3] = {"image": "d.png", "width": "wide"}
        with pytest.raises(PayloadError, match=r"job 3 of the batch: .*width.*nothing"):
            await client.enqueue_many("resize", inputs, queue="bad")
        inputs[3] = {"image": "d.png", "width": 4, "height": 2}
        with pytest.raises(PayloadError, match=r"job 3 of the batch: .*height"):
            await client.enqueue_many("resize", inputs, queue="bad")
        assert await client.tasks(queue="bad") == []


def test_the_blocking_client_enqueues_a_batch_whose_handles_get_results(
    postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    asyncio.run(_migrate(postgres_url))
    with Client(postgres_url) as client:
        handles = client.enqueue_many("resize", [{"image": "x.png", "width": 2}] * 3)
        job_workers(postgres_url, "w", poll=0.1)
        assert [handle.get(timeout=60) for handle in handles] == [
            {"image": "x.png", "width": 2}
        ] * 3


async def test_a_full_pool_says_so_and_how_to_size_it(postgres_url: str) -> None:
    await _migrate(postgres_url)
    store = await PostgresStore.open(postgres_url, max_connections=1, deadline_seconds=0.5)
    try:
        took = asyncio.Event()
        release = asyncio.Event()

        async def hold_the_only_connection() -> None:
            async with store.holding():
                await store.clock()
                took.set()
                await release.wait()

        holder = asyncio.create_task(hold_the_only_connection())
        await took.wait()
        with pytest.raises(StoreUnavailable) as raised:
            await store.clock()
        release.set()
        await holder
    finally:
        await store.close()
    message = str(raised.value)
    assert "pool of 1 connection(s)" in message and "is full" in message
    assert "max_connections" in message and "cannot reach" not in message


async def _migrate(url: str) -> None:
    await (await open_store(url, migrate=True)).close()


async def test_closing_with_calls_in_flight_says_so_in_one_line(postgres_url: str) -> None:
    await _migrate(postgres_url)
    program = [sys.executable, "-m", "tests.client.closing_under_load", postgres_url]
    ran = await asyncio.to_thread(
        subprocess.run, program, capture_output=True, text=True, cwd=REPOSITORY, check=False
    )
    assert ran.returncode == 1
    lines = ran.stderr.splitlines()
    assert lines[-1].startswith("noeta.core.errors.PayloadError: ")  # the program's own error
    said = [line for line in lines if "call(s) in flight: cancelled them" in line]
    assert len(said) == 1, ran.stderr[-2000:]
    assert "during asyncio.run() shutdown" not in ran.stderr
    assert ran.stderr.count("Traceback") == 1 and len(lines) < 40, ran.stderr[-2000:]
