"""A background job lives only as long as the claim it runs under (SPEC §3): a refused
append, an unknown commit or `noeta cancel` ends it, and the log accounts for it once."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noeta.core.store import Store

from .conftest import WorkerProcess, add_task, log_types, status_of, until, workspace_of

# The job's sleep, found by this argument in the host's /proc: inside its sandbox's PID
# namespace the job's own $$ means nothing out here.
MARK = f"120.{uuid.uuid4().int % 10**9:09d}"


def job_writing_its_pid() -> dict[str, Any]:
    """A background job, then a foreground call that returns once the job has started:
    the next model call (where the failpoints strike) never comes before it."""
    command = f"echo started > job.pid; exec sleep {MARK}"
    job = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    started = "until [ -s job.pid ]; do sleep 0.01; done"
    wait = {"id": "wait1", "name": "Bash", "input": {"command": started}}
    return {"tool_calls": [job, wait]}


def pid_of_job() -> int | None:
    """The host's pid of the job's `sleep MARK`, if it runs."""
    wanted = f"sleep\0{MARK}\0".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == wanted:
                    return int(entry.name)
            except OSError:
                continue
    return None


async def job_started(pidfile: Path) -> None:
    async def started() -> bool:
        return await asyncio.to_thread(pidfile.exists)

    await until(started, "the job starts")


async def test_a_job_is_stopped_when_its_append_is_refused_and_recorded_lost_once(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    pidfile = workspace_of(tmp_path, "t") / "job.pid"
    replies = (job_writing_its_pid(), {"text": "Waiting."}, {"text": "Lost; I'll check."})
    await add_task(store, tmp_path, "t", *replies)
    # Frozen right after the next model call is recorded, until this test lets it go.
    worker = workers(postgres_url, "w", lease=1, failpoints="model.after_called=pause@2")
    await job_started(pidfile)
    await until(worker.paused, "the worker freezes after its second model call")

    # Another claimer takes the lapsed task over (epoch 2) and hands it back, so the
    # frozen worker's claim is stale whichever of its renewal or its append runs first.
    async def taken_over() -> bool:
        claim = await store.claim_task("thief", "t", 30)
        if claim is not None:
            assert await store.release(claim)
        return claim is not None

    await until(taken_over, "the lease lapses and another claimer takes the task")
    worker.signal(signal.SIGCONT)
    await job_stopped_and_task_finished(store, worker, epoch=3)


async def test_a_job_is_stopped_when_its_claim_ends_in_an_unknown_commit_and_recorded_lost_once(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    pidfile = workspace_of(tmp_path, "t") / "job.pid"
    replies = (job_writing_its_pid(), {"text": "Waiting."}, {"text": "Lost; I'll check."})
    await add_task(store, tmp_path, "t", *replies)
    # The second model call's record landed, but the worker cannot know it did.
    failpoint = "model.after_called=raise(CommitUnknown)@2"
    worker = workers(postgres_url, "w", lease=1, failpoints=failpoint)
    await job_started(pidfile)
    await job_stopped_and_task_finished(store, worker, epoch=2)


async def job_stopped_and_task_finished(store: Store, worker: WorkerProcess, epoch: int) -> None:
    async def job_stopped() -> bool:
        return await asyncio.to_thread(pid_of_job) is None

    await until(job_stopped, "the job is stopped with the claim it ran under")
    # Its claim ended ("its claim ended", after a refused append or an unknown commit) or
    # was found lost by the renewer first ("claim lost"): either way, the job went with it.
    assert re.search(r"stopping background job job1 \((its claim ended|claim lost)\)", worker.log())

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task is claimed again and finishes")
    types = await log_types(store, "t")
    assert types.count("JobLost") == 1 and "JobFinished" not in types  # the model told once
    assert (await store.get_task("t")).owner_epoch == epoch  # type: ignore[union-attr]


async def test_a_cancel_reaches_a_task_holding_its_claim_for_a_job(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    pidfile = workspace_of(tmp_path, "t") / "job.pid"
    await add_task(store, tmp_path, "t", job_writing_its_pid(), {"text": "Waiting."})
    worker = workers(postgres_url, "w", lease=1)
    await job_started(pidfile)

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
        return await asyncio.to_thread(pid_of_job) is None

    await until(job_stopped, "the job is stopped with the task")
    types = await log_types(store, "t")
    assert types[-2:] == ["JobStopped", "TaskFinished"]
    assert "JobLost" not in types and "JobFinished" not in types  # accounted for once
    assert "resuming under its held claim" in worker.log()
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code() == 0
