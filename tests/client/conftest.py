"""Real workers configured with the test jobs, and a client on a fresh store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from tests.worker.conftest import WorkerProcess


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture
def job_workers(tmp_path: Path, ledger: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `noeta worker` processes that have tests/client/jobs_for_tests.py as a plugin."""
    config = tmp_path / "noeta.yaml"
    config.write_text("plugins:\n  - module: tests.client.jobs_for_tests\n")
    started: list[WorkerProcess] = []

    def start(url: str, name: str, *, die: bool = False, **options: Any) -> WorkerProcess:
        env = {"NOETA_CONFIG": str(config), "NOETA_TEST_LEDGER": str(ledger)}
        if die:
            env["NOETA_TEST_DIE"] = "1"
        worker = WorkerProcess(url, name, tmp_path, env=env, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
async def client(postgres_url: str) -> AsyncIterator[AsyncClient]:
    store = await open_store(postgres_url, migrate=True)
    await store.close()
    async with AsyncClient(postgres_url) as client:
        yield client
