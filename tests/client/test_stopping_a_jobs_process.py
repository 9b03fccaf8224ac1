"""A sync job in a process of its own (a time limit is set) is stopped for real whatever
happens to it (issue 29 items 2-4, bad input): a cancel or a hand-back sends SIGTERM, then
SIGKILL after a grace to a function that ignores SIGTERM; SIGTERM twice to its worker
stops it and hands the task back; a SIGKILLed worker takes it along. Real worker
processes; the tests wait on the ledger, the log and /proc, never on a time."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.core.errors import TaskCancelled, TaskFailed
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from tests.client import jobs_for_tests
from tests.client.test_cancel_running import finished_events, ledger_lines
from tests.worker.conftest import WorkerProcess, until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

LONG_LEASE = 600  # never lapses during a test: a takeover would hide what the worker did
LONG_GRACE = 600  # never ends during a test: the second SIGTERM is what cuts it off


def running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie does not: it ended, unreaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def gone(pid: int) -> bool:
    return not await asyncio.to_thread(running, pid)


async def function_started(ledger: Path, worker: WorkerProcess) -> int:
    """The pid of the function's own process, once it runs (and ignores SIGTERM)."""
    await until(lambda: ledger_lines(ledger), "the function runs", within=60)
    (started,) = await ledger_lines(ledger)
    pid = int(started.split()[1])
    assert pid != worker.process.pid  # a process of its own
    return pid


async def test_a_cancelled_function_that_ignores_sigterm_is_killed(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("ignores_sigterm", {"n": 1})).id
    worker = job_workers(postgres_url, "w", lease=LONG_LEASE)
    pid = await function_started(ledger, worker)
    assert await client.cancel(task)
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=120)
    content, error = await finished_events(client, task)
    assert error == "cancelled while running: stopped"  # the outcome, recorded
    assert "was stopped" in content
    assert await gone(pid)  # SIGTERM did nothing: SIGKILL after the grace did


async def test_sigterm_twice_stops_the_jobs_process_and_hands_the_task_back(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("ignores_sigterm", {"n": 2})).id
    worker = job_workers(postgres_url, "w", lease=LONG_LEASE, grace=LONG_GRACE)
    pid = await function_started(ledger, worker)
    worker.signal(signal.SIGTERM)

    async def stopping() -> bool:
        return "stopping" in await asyncio.to_thread(worker.log)

    await until(stopping, "the worker took the first SIGTERM")
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code(within=120) == 0
    assert await gone(pid)  # not left running on, an orphan, beside the next attempt
    assert (await client.get(task)).status is TaskStatus.READY  # handed back
    job_workers(postgres_url, "next", lease=LONG_LEASE)
    with pytest.raises(TaskFailed) as failed:
        await client.result(task, timeout=60)
    assert failed.value.error == OUTCOME_UNKNOWN  # not retry-safe: cut off, recorded so
    assert len(await ledger_lines(ledger)) == 1  # it ran once


async def test_a_sigkilled_worker_takes_its_jobs_process_along(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    await client.enqueue("ignores_sigterm", {"n": 3})
    worker = job_workers(postgres_url, "w", lease=LONG_LEASE)
    pid = await function_started(ledger, worker)
    worker.signal(signal.SIGKILL)
    assert await worker.exit_code(within=60) == -signal.SIGKILL
    # Left running, it would overlap the attempt the next claimer makes after recovery.
    await until(lambda: gone(pid), "the function's process is gone")
