"""A mixed fleet (issue 29 item 1, ADR-0092): three real workers with different job
modules. Each job runs on a worker that has its module and none fails plugin_missing; a
job no worker can run waits, never claimed, and `noeta tasks` / `noeta show` say so; it
runs once a worker that has its module starts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import examples.jobs
import tests.client.jobs_elsewhere
import tests.client.jobs_for_tests
from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.ports.store import Store
from tests.worker.conftest import WorkerProcess, until

assert examples.jobs and tests.client.jobs_elsewhere and tests.client.jobs_for_tests
OURS = "tests.client.jobs_for_tests"
EXAMPLES = "examples.jobs"
ELSEWHERE = "tests.client.jobs_elsewhere"


@pytest.fixture
def fleet(tmp_path: Path, ledger: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a `noeta worker` with exactly these plugins."""
    started: list[WorkerProcess] = []

    def start(url: str, name: str, *plugins: str, **options: Any) -> WorkerProcess:
        config = tmp_path / f"{name}.yaml"
        config.write_text("plugins:\n" + "".join(f"  - {plugin}\n" for plugin in plugins))
        env = {"NOETA_TEST_LEDGER": str(ledger), "EXAMPLES_OUTBOX": str(tmp_path / "outbox")}
        worker = WorkerProcess(url, name, tmp_path, env=env, config=config, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def noeta_command(url: str, folder: Path, *arguments: str) -> str:
    environment = {**os.environ, "NOETA_STORE": url, "NOETA_HOME": str(folder / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "noeta", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=True,
    )
    return done.stdout


async def live_workers(store: Store) -> set[str]:
    registry = store.capabilities.workers
    assert registry is not None
    return {worker.id for worker in await registry.live_workers()}


async def ran_on(store: Store, task_id: str) -> str | None:
    """The worker that started the job's call (its ToolStarted event's claim)."""
    started = [e for e in await store.read_log(task_id) if e.type == "ToolStarted"]
    return started[0].owner if started else None


async def test_jobs_go_only_to_workers_that_can_run_them(
    postgres_url: str, fleet: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        async with AsyncClient(postgres_url) as client:
            images = []
            for n in range(6):
                image = tmp_path / f"image{n}.png"
                image.write_bytes(b"x" * 4096)
                images.append(image)
            emails = [await client.enqueue("send_email", {"to": f"a{n}"}) for n in range(6)]
            thumbnails = [
                await client.enqueue("make_thumbnail", {"path": str(image)}) for image in images
            ]
            # The worker with no job module is started first: before, it claimed them all.
            fleet(postgres_url, "bare", "core", poll=0.2)
            fleet(postgres_url, "ours", f"module: {OURS}", poll=0.2)
            fleet(postgres_url, "examples", f"module: {EXAMPLES}", poll=0.2)
            for task in emails + thumbnails:
                await client.result(task, timeout=120)  # raises if it failed
            for task in emails:
                assert await ran_on(store, task.id) == "ours"
            for task in thumbnails:
                assert await ran_on(store, task.id) == "examples"

            async def all_live() -> bool:
                return await live_workers(store) == {"bare", "ours", "examples"}

            await until(all_live, "the three workers are in the registry")
            nobody = await client.enqueue("archive", {"path": "a.txt"})
            # Due after it, in the same queue: once it is done, every worker's claim
            # has walked past the job nobody can run.
            after = await client.enqueue("send_email", {"to": "after"})
            await client.result(after, timeout=120)
            record = await store.get_task(nobody.id)
            assert record is not None and record.status.value == "ready"
            assert record.owner_epoch == 0, "claimed by a worker that cannot run it"
            listed = await asyncio.to_thread(noeta_command, postgres_url, tmp_path, "tasks")
            line = next(line for line in listed.splitlines() if line.startswith(nobody.id))
            assert f"ready (no worker offers {ELSEWHERE})" in line
            shown = await asyncio.to_thread(
                noeta_command, postgres_url, tmp_path, "show", nobody.id
            )
            assert f"no worker offers {ELSEWHERE}" in shown.splitlines()[0]

            fleet(postgres_url, "elsewhere", f"module: {ELSEWHERE}", poll=0.2)
            assert await client.result(nobody, timeout=120) == '"a.txt"'
            assert await ran_on(store, nobody.id) == "elsewhere"
            listed = await asyncio.to_thread(noeta_command, postgres_url, tmp_path, "tasks")
            assert "no worker offers" not in listed
    finally:
        await store.close()
