"""A background job lives only as long as the claim it runs under (SPEC §3): a refused
append, an unknown commit or `noeta cancel` ends it, and the log accounts for it once."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noeta.core.ports.store import Store
from noeta.testing.command_line import run_in_process

from .conftest import (
    WorkerProcess,
    add_task,
    lapse_the_lease,
    log_types,
    status_of,
    until,
    workspace_of,
)

# Longer than any test here runs: no renewal round comes and no lease lapses by itself on a
# loaded machine; the test lapses one (lapse_the_lease) when its step needs it.
LONG_LEASE = 600


def job_writing_its_pid(name: str) -> dict[str, Any]:
    """A background job, then a foreground call that returns once the job has written its
    pid: the next model call (where the failpoints strike) never comes before the pid.

    The job's sandbox numbers it in a PID namespace of its own, so the pid it writes is not
    the one this test sees: the job also carries `name` as its argv[0], from before it
    writes the pid (one `exec -a` into a shell, one into the sleep), and the test looks
    for that name."""
    command = f"exec -a {name} bash -c 'echo $$ > job.pid; exec -a {name} sleep 120'"
    job = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    started = "until [ -s job.pid ]; do sleep 0.01; done"
    wait = {"id": "wait1", "name": "Bash", "input": {"command": started}}
    return {"tool_calls": [job, wait]}


def job_name(tmp_path: Path) -> str:
    return f"noeta-test-job-{tmp_path.name}-{os.getpid()}"


def running(name: str) -> bool:
    """A process named `name` runs (a zombie waiting to be reaped does not count)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if argv0 == name.encode() and state != "Z":
            return True
    return False


def pid_written(pidfile: Path) -> bool:
    return pidfile.exists() and pidfile.read_text().strip().isdigit()


async def job_started(pidfile: Path) -> None:
    async def written() -> bool:
        return await asyncio.to_thread(pid_written, pidfile)

    await until(written, "the job writes its pid")


async def job_running(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    failpoint: str,
) -> tuple[WorkerProcess, str]:
    """Task "t" starts a background job (it writes its pid, then waits) on a worker with
    `failpoint`; returns the worker and the job's process name."""
    pidfile, name = workspace_of(tmp_path, "t") / "job.pid", job_name(tmp_path)
    replies = (job_writing_its_pid(name), {"text": "Waiting."}, {"text": "Lost; I'll check."})
    await add_task(store, tmp_path, "t", *replies)
    worker = workers(postgres_url, "w", lease=LONG_LEASE, failpoints=failpoint)
    await job_started(pidfile)
    return worker, name


async def test_a_job_is_stopped_when_its_append_is_refused_and_recorded_lost_once(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # Frozen right after the next model call is recorded, until this test lets it go.
    failpoint = "model.after_called=pause@2"
    worker, name = await job_running(store, postgres_url, tmp_path, workers, failpoint)
    await until(worker.paused, "the worker freezes after its second model call")
    assert running(name)  # the test sees the job: it can see it stop
    # Its lease lapses while it is frozen; another claimer takes the task over (epoch 2)
    # and hands it back, so the frozen worker's claim is stale whichever of its renewal or
    # its append runs first.
    assert await lapse_the_lease(postgres_url, "t") == 1
    claim = await store.claim_task("thief", "t", 30)
    assert claim is not None and claim.epoch == 2
    assert await store.release(claim)
    worker.signal(signal.SIGCONT)
    await job_stopped_and_task_finished(store, worker, name, epoch=3)


async def test_a_job_is_stopped_when_its_claim_ends_in_an_unknown_commit_and_recorded_lost_once(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # The second model call's record landed, but the worker cannot know it did.
    failpoint = "model.after_called=raise(CommitUnknown)@2"
    worker, name = await job_running(store, postgres_url, tmp_path, workers, failpoint)
    await job_stopped(worker, name)
    # The worker gave the claim up; the store still records it until its lease lapses.
    assert await lapse_the_lease(postgres_url, "t") == 1
    await task_finished(store, epoch=2)


async def job_stopped_and_task_finished(
    store: Store, worker: WorkerProcess, name: str, epoch: int
) -> None:
    await job_stopped(worker, name)
    await task_finished(store, epoch)


async def job_stopped(worker: WorkerProcess, name: str) -> None:
    async def stopped() -> bool:
        return not await asyncio.to_thread(running, name)

    await until(stopped, "the job is stopped with the claim it ran under")
    # Its claim ended ("its claim ended", after a refused append or an unknown commit) or
    # was found lost by the renewer first ("claim lost"): either way, the job went with it.
    assert re.search(r"stopping background job job1 \((its claim ended|claim lost)\)", worker.log())


async def task_finished(store: Store, epoch: int) -> None:
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
    pidfile, name = workspace_of(tmp_path, "t") / "job.pid", job_name(tmp_path)
    await add_task(store, tmp_path, "t", job_writing_its_pid(name), {"text": "Waiting."})
    # A cancel reaches a holding task at the worker's next look, a third of its lease.
    worker = workers(postgres_url, "w", lease=30)
    await job_started(pidfile)

    async def holding() -> bool:
        return await status_of(store, "t") == "holding"

    await until(holding, "the task holds its claim while the job runs")
    assert running(name)  # the test sees the job: it can see it stop
    cancel = await asyncio.to_thread(
        run_in_process, ["cancel", "t", "--store", postgres_url], os.environ
    )
    assert cancel.returncode == 0 and "cancel requested" in cancel.stdout, cancel.stderr

    async def cancelled() -> bool:
        return await status_of(store, "t") == "cancelled"

    # Well before the job's two minutes: the cancel did not wait for the job to end.
    await until(cancelled, "the holding task takes the cancel", within=60)

    async def job_stopped() -> bool:
        return not await asyncio.to_thread(running, name)

    await until(job_stopped, "the job is stopped with the task")
    types = await log_types(store, "t")
    assert types[-2:] == ["JobStopped", "TaskFinished"]
    assert "JobLost" not in types and "JobFinished" not in types  # accounted for once
    assert "resuming under its held claim" in worker.log()
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code() == 0
