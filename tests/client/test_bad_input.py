"""Refused input to the client: a typed error, and nothing written (issue 16)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient, UnknownJob
from noeta.core.errors import ConfigError, PayloadError, ResultTimeout, TaskFailed, UnknownTask
from tests.client import jobs_elsewhere, jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests and jobs_elsewhere


@pytest.fixture
async def sqlite_client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"sqlite:///{tmp_path_factory.mktemp('s') / 'n.db'}") as client:
        yield client


SOON = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("job", "input", "options", "error", "message"),
    [
        ("refund", {}, {}, UnknownJob, "no job named 'refund'"),
        ("charge", {"customer": "ada"}, {}, PayloadError, "'cents' is a required property"),
        ("charge", {"customer": "ada", "cents": "5"}, {}, PayloadError, "cents: '5' is not"),
        ("charge", {"customer": "ada", "cents": 5, "x": 1}, {}, PayloadError, "Additional"),
        ("charge", {"customer": object(), "cents": 5}, {}, PayloadError, "not JSON"),
        ("charge", {"customer": "a", "cents": float("nan")}, {}, PayloadError, "not JSON"),
        ("send_email", {"to": "a"}, {"run_at": datetime(2030, 1, 1)}, ConfigError, "time zone"),
        ("send_email", {"to": "a"}, {"delay": -1}, ConfigError, "zero or more seconds"),
        ("send_email", {"to": "a"}, {"countdown": -1}, ConfigError, "countdown must be zero or"),
        ("send_email", {"to": "a"}, {"countdown": float("inf")}, ConfigError, "countdown must"),
        ("send_email", {"to": "a"}, {"eta": datetime(2030, 1, 1)}, ConfigError, "eta needs a time"),
        ("send_email", {"to": "a"}, {"countdown": 1, "eta": SOON}, ConfigError, "countdown or eta"),
        (
            "send_email",
            {"to": "a"},
            {"countdown": 1, "delay": 1},
            ConfigError,
            "countdown or delay",
        ),
        ("send_email", {"to": "a"}, {"eta": SOON, "run_at": SOON}, ConfigError, "eta or run_at"),
        ("send_email", {"to": "a"}, {"queue": ""}, PayloadError, "queue name"),
        ("send_email", {"to": "a"}, {"id": "../x"}, PayloadError, "task id"),
    ],
)
async def test_enqueue_refuses_bad_input_and_writes_nothing(
    sqlite_client: AsyncClient,
    job: str,
    input: dict[str, object],
    options: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        await sqlite_client.enqueue(job, input, **options)  # type: ignore[arg-type]
    assert await sqlite_client.tasks() == []


async def test_result_refuses_an_unknown_task_and_a_zero_timeout(
    sqlite_client: AsyncClient,
) -> None:
    with pytest.raises(UnknownTask):
        await sqlite_client.result("nobody", timeout=5)
    task = await sqlite_client.enqueue("send_email", {"to": "a"})
    with pytest.raises(ConfigError, match="more than 0 seconds"):
        await sqlite_client.result(task, timeout=0)
    with pytest.raises(ResultTimeout, match=f"task {task.id} did not finish within 0.2s"):
        await sqlite_client.result(task, timeout=0.2)  # no worker runs it


async def test_a_job_no_worker_has_fails_plugin_missing_when_told_to(
    postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    """Only a worker run with --unrunnable-after gives such a job up (ADR-0092): without
    it the job waits for a worker that has its module (tests/client/test_mixed_fleet.py)."""
    store = await open_store(postgres_url, migrate=True)
    await store.close()
    async with AsyncClient(postgres_url) as client:
        task = await client.enqueue("archive", {"path": "a.txt"})
        # It has jobs_for_tests, not jobs_elsewhere; 0: give such a task up at once.
        job_workers(postgres_url, "w", poll=0.1, unrunnable_after=0)
        with pytest.raises(TaskFailed, match="plugin_missing: this worker lacks "):
            await client.result(task, timeout=60)
        assert "ToolStarted" not in [tailed.stored.type async for tailed in client.tail(task)]
