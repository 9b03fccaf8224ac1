"""A model call refused for its budget by a task whose background job runs waits for the
budget inside its claim: the job is not stopped (its JobFinished comes with its real
output) and the call still waits for its slot. A real `noeta worker` process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, log_types, status_of, until, workspace_of

RPM = 12  # a call every 5 s: each call after the first waits for its slot


def limit_set(url: str, key: str, rpm: int) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "noeta", "--store", url, "limit", "set", key, "--rpm", str(rpm)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


async def test_a_budget_wait_keeps_the_claim_and_its_background_job(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await asyncio.to_thread(limit_set, postgres_url, "scripted/*", RPM)
    release = workspace_of(tmp_path, "t") / "release"
    command = "until [ -e release ]; do sleep 0.05; done; echo job-output"
    job = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    replies = ({"tool_calls": [job]}, {"text": "Waiting."}, {"text": "Done."})
    await add_task(store, tmp_path, "t", *replies)
    worker = workers(postgres_url, "w", lease=10)  # renewed all along: never lapses here

    async def refused_with_its_job_running() -> bool:
        assert isinstance(store, ModelLimiter)
        limits = await store.model_limits()
        return bool(limits) and limits[0].handbacks >= 1

    await until(refused_with_its_job_running, "the second model call waits for its budget")
    assert (await log_types(store, "t")).count("JobStarted") == 1

    async def second_call_made() -> bool:
        return (await log_types(store, "t")).count("ModelCalled") == 2

    await until(second_call_made, "the call is made at its slot, under the same claim")
    await asyncio.to_thread(release.touch)  # only now may the job end

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the job's result comes back and the task finishes")
    logged = [(e.type, cast(dict[str, Any], e.data)) for e in await store.read_log("t")]
    kinds = [kind for kind, _ in logged]
    assert "JobStopped" not in kinds and "JobLost" not in kinds, kinds
    (finished,) = [data for kind, data in logged if kind == "JobFinished"]
    assert "job-output" in str(finished), finished
    (limit,) = await store.model_limits()  # type: ignore[attr-defined]
    assert limit.calls == 3 and limit.handbacks >= 1 and limit.waited_seconds > 0
    assert "keeping its claim for its jobs" in worker.log()
