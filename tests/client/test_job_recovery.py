"""A job whose worker is SIGKILLed mid-run (after its side effect) is settled by each of
the three recovery paths, by another real worker process (SPEC §4, issue 16)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.core.errors import TaskFailed
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from noeta.core.rules import events
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess, lapse_the_lease

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

LONG_LEASE = 600  # never lapses during a test: the test lapses it


async def killed_then_recovered(
    client: AsyncClient,
    url: str,
    job_workers: Callable[..., WorkerProcess],
    job: str,
    **input: object,
) -> str:
    handle = await client.enqueue(job, input, id=f"{job}-1")
    # A lease that cannot lapse while the first runs on a loaded machine (it would claim its
    # own task again and run the job twice); once it is dead the test lapses it.
    first = job_workers(url, "first", die=True, lease=LONG_LEASE)
    assert await first.exit_code() == -signal.SIGKILL  # died mid-run, by its own hand
    assert await lapse_the_lease(url, handle.id) == 1
    job_workers(url, "second", lease=LONG_LEASE)
    return handle.id


async def recoveries(client: AsyncClient, task_id: str) -> list[str]:
    return [
        tailed.event.recovery
        async for tailed in client.tail(task_id, follow=False)
        if isinstance(tailed.event, events.ToolFinished)
    ]


def lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines()


async def test_a_retry_safe_job_runs_again(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = await killed_then_recovered(
        client, postgres_url, job_workers, "resize", image="a.png", width=64
    )
    assert await client.job_result(task, timeout=60) == {"image": "a.png", "width": 64}
    assert lines(ledger) == ["resize resize-1:job"] * 2
    assert await recoveries(client, task) == ["rerun"]


async def test_a_job_with_recover_is_found_not_run_again(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = await killed_then_recovered(
        client, postgres_url, job_workers, "charge", customer="ada", cents=500
    )
    assert await client.job_result(task, timeout=60) == {"charged": 500, "found": True}
    assert lines(ledger) == ["charge charge-1:job ada 500"]
    assert await recoveries(client, task) == ["recover"]


async def test_any_other_job_fails_with_its_outcome_unknown(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = await killed_then_recovered(
        client, postgres_url, job_workers, "send_email", to="ada@example.com"
    )
    with pytest.raises(TaskFailed) as failed:
        await client.result(task, timeout=60)
    assert failed.value.error == OUTCOME_UNKNOWN
    assert lines(ledger) == ["email send_email-1:job ada@example.com"]  # never twice
    assert await recoveries(client, task) == ["unknown"]
