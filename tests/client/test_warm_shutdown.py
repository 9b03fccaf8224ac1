"""Warm shutdown (issue 29 item 2): SIGTERM stops claiming and lets running jobs finish
within the grace, their results recorded; a second SIGTERM or the grace's end hands back
what is left at once. Real worker processes, SIGTERMed mid-job, counted not timed."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.client.handles import TaskHandle
from noeta.core.errors import TaskFailed
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess, until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

LONG_LEASE = 600  # never lapses during a test: a lapse would hide a claim not handed back
LONG_GRACE = 600  # never ends during a test: the drain ends because the functions did
JOBS = 12
CONCURRENCY = 3


def started_in(ledger: Path, worker: WorkerProcess) -> list[str]:
    if not ledger.exists():
        return []
    return [
        line
        for line in ledger.read_text().splitlines()
        if line.startswith("start ") and line.endswith(f" {worker.process.pid}")
    ]


async def all_ended(client: AsyncClient, handles: list[TaskHandle]) -> bool:
    return all([(await client.get(handle.id)).status.finished for handle in handles])


async def started_or_all_ended(
    ledger: Path, worker: WorkerProcess, client: AsyncClient, handles: list[TaskHandle]
) -> bool:
    started = await asyncio.to_thread(started_in, ledger, worker)
    return bool(started) or await all_ended(client, handles)


async def stopping(worker: WorkerProcess) -> bool:
    return "stopping" in await asyncio.to_thread(worker.log)


async def sigterm_mid_job(
    worker: WorkerProcess, ledger: Path, client: AsyncClient, handles: list[TaskHandle]
) -> None:
    """SIGTERM `worker` while one of its functions runs, held by the gate the test opens
    once the worker took the signal (or once every job ended: on a worker that threw
    results away, as "outcome unknown"); it must exit 0."""
    await until(
        lambda: started_or_all_ended(ledger, worker, client, handles),
        "a job started in this worker",
        within=60,
    )
    worker.signal(signal.SIGTERM)
    await until(lambda: stopping(worker), "the worker took the SIGTERM")
    await asyncio.to_thread(jobs_for_tests.gate_of(ledger, worker.process.pid).touch)
    assert await worker.exit_code(within=60) == 0


async def test_sigterms_during_a_drain_lose_no_result(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    handles = await client.enqueue_many("waits_for_its_gate", [{"n": n} for n in range(JOBS)])
    sigterms = 0
    while not await all_ended(client, handles):
        worker = job_workers(
            postgres_url,
            f"w{sigterms}",
            concurrency=CONCURRENCY,
            lease=LONG_LEASE,
            grace=LONG_GRACE,
        )
        await sigterm_mid_job(worker, ledger, client, handles)
        sigterms += 1
    # A worker stops claiming at the SIGTERM: at most CONCURRENCY jobs end per round.
    assert sigterms >= JOBS // CONCURRENCY
    for n, handle in enumerate(handles):
        assert await client.job_result(handle.id, timeout=60) == n
    lines = (await asyncio.to_thread(ledger.read_text)).splitlines()
    for n in range(JOBS):  # every function ran once, to its end: none cut off, none again
        assert [line.split()[0] for line in lines if line.split()[1] == str(n)] == [
            "start",
            "done",
        ]


@pytest.mark.parametrize("how", ["a second SIGTERM", "the grace's end"])
async def test_a_function_running_on_is_handed_back(
    how: str,
    client: AsyncClient,
    postgres_url: str,
    job_workers: Callable[..., WorkerProcess],
    ledger: Path,
) -> None:
    handle = await client.enqueue("waits_for_its_gate", {"n": 1}, id="stuck")
    grace = LONG_GRACE if how == "a second SIGTERM" else 0.2
    worker = job_workers(postgres_url, "w", lease=LONG_LEASE, grace=grace)
    await until(
        lambda: asyncio.to_thread(lambda: bool(started_in(ledger, worker))), "the job started"
    )
    worker.signal(signal.SIGTERM)
    if how == "a second SIGTERM":
        await until(lambda: stopping(worker), "the worker took the first SIGTERM")
        worker.signal(signal.SIGTERM)
    # Its gate never opens: the worker exits without waiting for the function's thread.
    assert await worker.exit_code(within=60) == 0
    assert (await client.get(handle.id)).status is TaskStatus.READY  # handed back
    assert "handed back" in worker.log()
    # The next claimer records the cut-off call as it always has (not retry-safe).
    job_workers(postgres_url, "next", lease=LONG_LEASE)
    with pytest.raises(TaskFailed) as failed:
        await client.result(handle.id, timeout=60)
    assert failed.value.error == OUTCOME_UNKNOWN
    ran = (await asyncio.to_thread(ledger.read_text)).splitlines()
    assert [line.split()[0] for line in ran] == ["start"]  # once, never to its end
