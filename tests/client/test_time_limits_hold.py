"""A sync job past its `time_limit` is stopped for real, and the next attempt starts only
once the last is gone (issue 29 item 3): a real worker, a ledger of attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.core.errors import TaskFailed
from noeta.core.ports.tool import ToolContext
from tests.client import jobs_for_tests, slow_import_jobs
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name


async def test_attempts_past_the_limit_never_overlap(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("outlives_its_limit")).id
    job_workers(postgres_url, "w", lease=600)
    with pytest.raises(TaskFailed) as failed:
        await client.result(task, timeout=120)
    assert "after 3 attempt(s): ran past its time limit of 1s" in failed.value.error
    lines = (await asyncio.to_thread(ledger.read_text)).splitlines()
    assert [line.split()[0] for line in lines] == ["attempt"] * 3  # one copy at a time


async def test_a_jobs_own_process_is_not_dumpable(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    # It has the worker's environment (the store's password, the providers' keys): like
    # the worker, other processes of its user may not read it (SECURITY.md).
    task = (await client.enqueue("dumpable")).id
    job_workers(postgres_url, "w", lease=600)
    assert await client.job_result(task, timeout=60) == 0


async def test_a_job_in_its_own_process_may_print(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    task = (await client.enqueue("chatty", {"n": 21})).id
    job_workers(postgres_url, "w", lease=600)
    assert await client.job_result(task, timeout=60) == 42


async def test_the_limit_counts_from_the_call_not_the_processs_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under load an interpreter and a job's imports take seconds: a 2 s limit counted from
    # the process's start would fail a function that is done at once, every time.
    monkeypatch.setenv("NOETA_TEST_SLOW_IMPORT", "3")
    tool = slow_import_jobs.quick_after_a_slow_import
    output = await tool.run({}, ToolContext(task_id="t", call_id="c"))  # type: ignore[attr-defined]
    assert output.content == '"done"'
