"""`noeta retry` (and `Client.retry`): a failed or cancelled job runs again as a new task
whose log names the one it retries; anything else is refused in one line (issue 29
item 6, ADR-0094). Real `noeta` processes and a real worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from noeta.core.errors import TaskFailed
from tests.cli.test_run import noeta, one_line_error
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess, until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name


async def gated_job_started(ledger: Path) -> bool:
    text = await asyncio.to_thread(lambda: ledger.read_text() if ledger.exists() else "")
    return "start 1 " in text


async def test_a_failed_job_runs_again_as_a_new_task(
    tmp_path: Path, job_workers: Callable[..., WorkerProcess]
) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    async with AsyncClient(store) as client:
        await client.enqueue("fails_the_first_time", id="f1")
        job_workers(store, "w", poll=0.1)
        with pytest.raises(TaskFailed, match="RuntimeError: the first run fails"):
            await client.result("f1", timeout=60)
        retried = await asyncio.to_thread(noeta, "retry", "f1", "--id", "f2", store=store)
        assert (retried.returncode, retried.stdout.strip()) == (0, "f2"), retried.stderr
        assert await client.job_result("f2", timeout=60) == 2
        again = await client.retry("f1")  # the client's own call, with the id of a retry
        assert again.id == "f1.retry-1"
        assert await client.job_result(again, timeout=60) == 3
        assert (await client.get("f1")).status == "failed"  # it stays as it ended
    shown = json.loads(noeta("show", "f2", "--json", store=store).stdout)
    assert shown["log"][1]["type"] == "CallRequested"
    assert shown["log"][1]["data"]["retry_of"] == "f1"


async def test_retry_refuses_what_is_not_a_failed_or_cancelled_job(
    tmp_path: Path, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    async with AsyncClient(store) as client:
        await client.enqueue("waits_for_its_gate", {"n": 1}, id="running")
        await client.enqueue("resize", {"image": "a.png", "width": 1}, id="done")
        worker = job_workers(store, "w", poll=0.1, queues="default")
        assert await client.job_result("done", timeout=60) == {"image": "a.png", "width": 1}

        await until(lambda: gated_job_started(ledger), "the gated job runs", within=60)
        refusals = {
            "running": "task running is running: it has not ended; only a failed or cancelled",
            "done": "task done is done: it ran to its end; only a failed or cancelled job",
            "nobody": "no task with id 'nobody'",
        }
        for task_id, message in refusals.items():
            refused = await asyncio.to_thread(noeta, "retry", task_id, store=store)
            assert message in one_line_error(refused), task_id
        bad_id = await asyncio.to_thread(noeta, "retry", "done", "--id", "../x", store=store)
        assert "task id" in one_line_error(bad_id)
        gate = jobs_for_tests.gate_of(ledger, worker.process.pid)
        await asyncio.to_thread(gate.touch)
        assert await client.job_result("running", timeout=60) == 1
        assert len(await client.tasks()) == 2  # no retry was made


async def test_force_runs_a_done_job_again_but_never_a_running_one(
    tmp_path: Path, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    async with AsyncClient(store) as client:
        await client.enqueue("waits_for_its_gate", {"n": 1}, id="running")
        await client.enqueue("resize", {"image": "a.png", "width": 2}, id="done")
        worker = job_workers(store, "w", poll=0.1, queues="default")
        assert await client.job_result("done", timeout=60) == {"image": "a.png", "width": 2}

        await until(lambda: gated_job_started(ledger), "the gated job runs", within=60)
        forced = await asyncio.to_thread(noeta, "retry", "done", "--force", store=store)
        assert (forced.returncode, forced.stdout.strip()) == (0, "done.retry-1"), forced.stderr
        assert await client.job_result("done.retry-1", timeout=60) == {"image": "a.png", "width": 2}
        refused = await asyncio.to_thread(noeta, "retry", "running", "--force", store=store)
        assert "task running is running: it has not ended" in one_line_error(refused)
        gate = jobs_for_tests.gate_of(ledger, worker.process.pid)
        await asyncio.to_thread(gate.touch)
        assert await client.job_result("running", timeout=60) == 1
        assert len(await client.tasks()) == 3  # the done job's retry only
    shown = json.loads(noeta("show", "done.retry-1", "--json", store=store).stdout)
    assert shown["log"][1]["data"]["retry_of"] == "done"
