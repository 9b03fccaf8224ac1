"""`noeta retry` of a plain job keeps what the job was given: its priority and concurrency
key, and its queue unless `--queue` says; a retry that lands in `noeta-run` (where `noeta
run` puts its tasks) says how it will run, since no worker serves that queue unasked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import TaskFailed
from tests.cli.test_run import noeta
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests

RUN_HINT = (
    "queued in noeta-run, which only a worker serving it runs: `noeta worker --queues "
    "noeta-run`, or retry it with --queue default"
)


async def test_a_retried_job_keeps_its_priority_key_and_queue(
    tmp_path: Path, job_workers: Callable[..., WorkerProcess]
) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    async with AsyncClient(store) as client:
        await client.enqueue(
            "fails_the_first_time", id="f1", key="tenant-a", priority=6, queue="noeta-run"
        )
        job_workers(store, "w", poll=0.1, queues="noeta-run")
        with pytest.raises(TaskFailed):
            await client.result("f1", timeout=60)
    kept = await asyncio.to_thread(noeta, "retry", "f1", "--id", "f2", store=store)
    assert (kept.returncode, kept.stdout.strip()) == (0, "f2"), kept.stderr
    assert await made(store, "f2") == ("noeta-run", 6, "tenant-a")
    assert kept.stderr.strip() == RUN_HINT
    moved = await asyncio.to_thread(
        noeta, "retry", "f1", "--id", "f3", "--queue", "default", store=store
    )
    assert (moved.returncode, moved.stdout.strip()) == (0, "f3"), moved.stderr
    assert moved.stderr.strip() == "queued in default"
    assert await made(store, "f3") == ("default", 6, "tenant-a")
    # A bulk retry (`--status`) keeps them too: the same build of a retry.
    bulk = await asyncio.to_thread(noeta, "retry", "--status", "failed", store=store)
    assert bulk.returncode == 0, bulk.stderr
    assert await made(store, "f1.retry-1") == ("noeta-run", 6, "tenant-a")


async def made(store: str, task_id: str) -> tuple[str, int, str | None]:
    """The queue, priority and concurrency key of task `task_id`'s row."""
    opened = await open_store(store)
    try:
        row = await opened.get_task(task_id)
    finally:
        await opened.close()
    assert row is not None
    return row.queue, row.priority, row.concurrency_key
