"""A background job lives only as long as the claim it runs under (SPEC §3): a refused
append, an unknown commit or `noeta cancel` ends it, and the log accounts for it once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noeta.core.store import Store

from .conftest import WorkerProcess, add_task, log_types, status_of, until, workspace_of


def job_writing_its_pid() -> dict[str, Any]:
    """A background job, then a foreground call that returns once the job has written its
    pid: the next model call (where the failpoints strike) never comes before the pid."""
    command = "echo $$ > job.pid; exec sleep 120"
    job = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    started = "until [ -s job.pid ]; do sleep 0.01; done"
    wait = {"id": "wait1", "name": "Bash", "input": {"command": started}}
    return {"tool_calls": [job, wait]}


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pid_in(pidfile: Path) -> int | None:
    text = pidfile.read_text().strip() if pidfile.exists() else ""
    return int(text) if text.isdigit() else None


async def job_pid(pidfile: Path) -> int:
    async def written() -> bool:
        return pid_in(pidfile) is not None

    await until(written, "the job writes its pid")
    pid = pid_in(pidfile)
    assert pid is not None
    return pid


@pytest.mark.parametrize(
    "failpoint",
    [
        # Frozen past the lease in the next model call: its reply's append is refused.
        "model.after_called=stop(2500)@2",
        # The second model call's record landed, but the worker cannot know it did.
        "model.after_called=raise(CommitUnknown)@2",
    ],
    ids=["conflict", "commit-unknown"],
)
async def test_a_job_is_stopped_when_its_claim_ends_and_recorded_lost_once(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    failpoint: str,
) -> None:
    pidfile = workspace_of(tmp_path, "t") / "job.pid"
    replies = (job_writing_its_pid(), {"text": "Waiting."}, {"text": "Lost; I'll check."})
    await add_task(store, tmp_path, "t", *replies)
    worker = workers(postgres_url, "w", lease=1, failpoints=failpoint)
    pid = await job_pid(pidfile)

    async def job_stopped() -> bool:
        return not alive(pid)

    await until(job_stopped, "the job is stopped with the claim it ran under")
    assert "stopping background job job1 (its claim ended)" in worker.log()

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task is claimed again and finishes")
    types = await log_types(store, "t")
    assert types.count("JobLost") == 1 and "JobFinished" not in types  # the model told once
    assert (await store.get_task("t")).owner_epoch == 2  # type: ignore[union-attr]


async def test_a_cancel_reaches_a_task_holding_its_claim_for_a_job(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    pidfile = workspace_of(tmp_path, "t") / "job.pid"
    await add_task(store, tmp_path, "t", job_writing_its_pid(), {"text": "Waiting."})
    worker = workers(postgres_url, "w", lease=1)
    pid = await job_pid(pidfile)

    async def holding() -> bool:
        return await status_of(store, "t") == "holding"

    await until(holding, "the task holds its claim while the job runs")
    cancel = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "noeta", "cancel", "t", "--store", postgres_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cancel.returncode == 0 and "cancel requested" in cancel.stdout, cancel.stderr

    async def cancelled() -> bool:
        return await status_of(store, "t") == "cancelled"

    # Well before the job's two minutes: the cancel did not wait for the job to end.
    await until(cancelled, "the holding task takes the cancel", within=20)

    async def job_stopped() -> bool:
        return not alive(pid)

    await until(job_stopped, "the job is stopped with the task")
    types = await log_types(store, "t")
    assert types[-2:] == ["JobStopped", "TaskFinished"]
    assert "JobLost" not in types and "JobFinished" not in types  # accounted for once
    assert "resuming under its held claim" in worker.log()
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code() == 0
