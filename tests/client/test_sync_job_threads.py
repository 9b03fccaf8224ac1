"""A worker runs as many sync functions at once as its concurrency: each call gets a
thread, beyond asyncio's default pool of min(32, CPUs + 4) (6 on 2 cores), which used
to hold the rest back. A real worker process; the calls meet at a barrier, no clock."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from noeta.client import AsyncClient
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name


async def test_every_run_of_a_worker_calls_its_sync_function_at_once(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    parties = min(32, (os.cpu_count() or 1) + 4) + 1  # one more than asyncio's default
    handles = [
        await client.enqueue("meets_the_others", {"parties": parties}) for _ in range(parties)
    ]
    job_workers(postgres_url, "w", lease=600, concurrency=parties)
    met = await asyncio.gather(*(client.job_result(h.id, timeout=120) for h in handles))
    assert sorted(met) == list(range(parties))  # each waited at the barrier, all at once
