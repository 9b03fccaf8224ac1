"""`cancel` reaches a running job (issue 29 item 4): an async function is cancelled; a
sync one, in a thread nothing can stop, runs to its end and the log says so. Real worker
processes; the test waits on the ledger and the worker's log, never on a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.core.errors import TaskCancelled
from noeta.core.rules import events
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess, until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name


async def ledger_lines(ledger: Path) -> list[str]:
    if not await asyncio.to_thread(ledger.exists):
        return []
    return (await asyncio.to_thread(ledger.read_text)).splitlines()


async def finished_events(client: AsyncClient, task: str) -> tuple[str, str]:
    """The cancelled call's recorded result and the task's finish, from the log."""
    logged = [tailed.event async for tailed in client.tail(task, follow=False)]
    tool = [e for e in logged if isinstance(e, events.ToolFinished)]
    finish = [e for e in logged if isinstance(e, events.TaskFinished)]
    assert len(tool) == 1 and len(finish) == 1
    assert finish[0].status == "cancelled"
    return tool[0].content, finish[0].error


async def test_a_running_async_job_is_stopped(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("waits_until_stopped", {"n": 1})).id
    job_workers(postgres_url, "w", lease=600)
    await until(lambda: ledger_lines(ledger), "the function runs")
    assert await client.cancel(task)
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=60)
    content, error = await finished_events(client, task)
    assert error == "cancelled while running: stopped"
    assert "stopped" in content


async def test_a_running_sync_job_cannot_be_stopped_and_says_it_finished(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("waits_for_its_gate", {"n": 7})).id
    worker = job_workers(postgres_url, "w", lease=600)
    await until(lambda: ledger_lines(ledger), "the function runs")
    assert await client.cancel(task)

    async def cancel_seen() -> bool:
        return "cannot be stopped" in await asyncio.to_thread(worker.log)

    await until(cancel_seen, "the worker sees the cancel while the function runs")
    await asyncio.to_thread(jobs_for_tests.gate_of(ledger, worker.process.pid).touch)
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=60)
    content, error = await finished_events(client, task)
    assert error == "cancelled while running: it had finished"
    assert content == "7"  # what it did is in the log
    assert [line.split()[0] for line in await ledger_lines(ledger)] == ["start", "done"]


async def test_a_running_sync_job_with_a_time_limit_is_stopped_in_its_process(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("sleeps_in_its_process", {"n": 1})).id
    worker = job_workers(postgres_url, "w", lease=600)
    await until(lambda: ledger_lines(ledger), "the function runs")
    (started,) = await ledger_lines(ledger)
    pid = int(started.split()[1])
    assert pid != worker.process.pid  # a process of its own
    assert await client.cancel(task)
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=60)
    _, error = await finished_events(client, task)
    assert error == "cancelled while running: stopped"
    assert not await asyncio.to_thread(Path(f"/proc/{pid}").exists)  # stopped and reaped
