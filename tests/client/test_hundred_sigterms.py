"""Issue 29's target: warm shutdown loses 0 results over 100 SIGTERMs during a drain,
counted, not timed. Workers are started and SIGTERMed in turn, SLOTS at a time, each
while a job runs in it (the drain); every job must end done exactly once, its result
recorded, none "outcome unknown". NOETA_TEST_SIGTERMS sets the count (100 by default).
The workers are forked from a process that made their imports (forked_workers.py)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.client.handles import TaskHandle
from tests.client import jobs_for_tests
from tests.client.forked_workers import ForkedWorker, Forks
from tests.worker.conftest import until

SIGTERMS = int(os.environ.get("NOETA_TEST_SIGTERMS") or 100)
SLOTS = 4  # workers alive at once: one starts while others drain
CONCURRENCY = 2
LONG_LEASE = 600  # never lapses during the test: a lapse would hide a claim not handed back
LONG_GRACE = 600  # never ends during the test: each drain ends because its functions did


class Turns:
    """The workers to start and SIGTERM, shared by the slots; the jobs they enqueued."""

    def __init__(self) -> None:
        self.left = SIGTERMS
        self.numbers = itertools.count()
        self.names = itertools.count()
        self.handles: dict[int, TaskHandle] = {}  # by the n each job returns
        self.sigterms_during_a_drain = 0

    def take(self) -> bool:
        if self.left == 0:
            return False
        self.left -= 1
        return True


async def sigterm_workers_in_turn(
    turns: Turns, client: AsyncClient, start: Start, ledger: Path
) -> None:
    while turns.take():
        # Each turn brings CONCURRENCY jobs: a worker that finishes at most CONCURRENCY
        # (it claims no more once SIGTERMed, and its functions end only after) always
        # finds one ready, so it always has a job running when the SIGTERM comes.
        numbers = [next(turns.numbers) for _ in range(CONCURRENCY)]
        handles = await client.enqueue_many("waits_for_its_gate", [{"n": n} for n in numbers])
        turns.handles.update(zip(numbers, handles, strict=True))
        await sigterm_during_a_drain(await start(f"w{next(turns.names)}"), ledger)
        turns.sigterms_during_a_drain += 1


async def sigterm_during_a_drain(worker: ForkedWorker, ledger: Path) -> None:
    """SIGTERM `worker` while a job runs in it; its functions end (their gate opens) once
    it drains them; it must exit 0."""
    await until(lambda: a_job_runs_in(worker, ledger), "a job runs in the worker", 300)
    worker.signal(signal.SIGTERM)
    await until(lambda: draining(worker), "the worker drains its running jobs", 300)
    await asyncio.to_thread(jobs_for_tests.gate_of(ledger, worker.process.pid).touch)
    assert await worker.exit_code(within=300) == 0


async def a_job_runs_in(worker: ForkedWorker, ledger: Path) -> bool:
    def started() -> bool:
        mine = f" {worker.process.pid}"
        return ledger.exists() and any(
            line.startswith("start ") and line.endswith(mine)
            for line in ledger.read_text().splitlines()
        )

    return await asyncio.to_thread(started)


async def draining(worker: ForkedWorker) -> bool:
    """The worker took the SIGTERM with jobs running: "stopping: N running task(s) may
    finish their step" (N >= 1), logged before it waits for them."""
    return "running task(s) may finish" in await asyncio.to_thread(worker.log)


Start = Callable[[str], Awaitable[ForkedWorker]]


@pytest.fixture
async def forks() -> AsyncIterator[Forks]:
    forks = await Forks.open()
    yield forks
    await forks.close()


@pytest.mark.timeout(900)  # about 2.5 min on the shared 2-core machine at load 15
async def test_a_hundred_sigterms_during_a_drain_lose_no_result(
    client: AsyncClient, postgres_url: str, forks: Forks, ledger: Path, tmp_path: Path
) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text("plugins:\n  - module: tests.client.jobs_for_tests\n")
    env = {
        "NOETA_STORE": postgres_url,
        "NOETA_CONFIG": str(config),
        "NOETA_TEST_LEDGER": str(ledger),
        "NOETA_HOME": str(tmp_path / "home"),
        "NOETA_FAILPOINTS": "",
    }

    async def start(name: str) -> ForkedWorker:
        argv = ["worker", "--name", name, "--lease", str(LONG_LEASE), "--grace", str(LONG_GRACE)]
        argv += ["--concurrency", str(CONCURRENCY), "--queues", "default"]
        return await forks.start(argv, env, tmp_path / f"{name}.log")

    turns = Turns()
    await asyncio.gather(
        *(sigterm_workers_in_turn(turns, client, start, ledger) for _ in range(SLOTS))
    )
    # Counted: SIGTERMS workers took a SIGTERM while draining running jobs, and exited 0.
    assert turns.sigterms_during_a_drain == SIGTERMS
    # What is left (handed back "not started", or never claimed) a last worker runs.
    last = await start("last")
    await asyncio.to_thread(jobs_for_tests.gate_of(ledger, last.process.pid).touch)
    for n, handle in turns.handles.items():  # every result recorded, its own
        assert await client.job_result(handle.id, timeout=300) == n
    lines = (await asyncio.to_thread(ledger.read_text)).splitlines()
    ran: dict[str, list[str]] = {}
    for line in lines:
        what, n, _ = line.split()
        ran.setdefault(n, []).append(what)
    # Every function ran once, to its end: none cut off ("outcome unknown"), none again.
    assert ran == {str(n): ["start", "done"] for n in range(len(turns.handles))}
