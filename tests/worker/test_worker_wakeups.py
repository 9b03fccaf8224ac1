"""A wake-up falls due while its task holds its claim for a background job: the worker
runs the task again at the due time, without waiting for the job."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from tests.worker.conftest import WorkerProcess, status_of, until


async def test_a_wakeup_due_while_a_job_runs_opens_its_turn_before_the_job_ends(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    job = {"id": "j1", "name": "Bash", "input": {"command": "sleep 6", "run_in_background": True}}
    wake = {"id": "w1", "name": "ScheduleWakeup", "input": {"prompt": "look", "delay_seconds": 1}}
    script = tmp_path / "script.yaml"
    replies = [
        {"tool_calls": [job, wake]},
        {"text": "Both are set."},
        {"text": "Woken while the job runs."},
        {"text": "The job ended."},
    ]
    script.write_text(json.dumps({"replies": replies}))
    created = events.TaskCreated(
        model=f"scripted:{script}", prompt="go", tools=("Bash", "ScheduleWakeup")
    )
    await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    workers(postgres_url, "w", lease=2, poll=30.0)

    async def woken() -> bool:
        return any(e.type == "WokenUp" for e in await store.read_log("t"))

    await until(woken, "the wake-up opened its turn")
    log = await store.read_log("t")
    assert "JobFinished" not in [e.type for e in log]  # the job is still running
    assert await status_of(store, "t") in ("running", "holding")  # under the same claim
    record = await store.get_task("t")
    assert record is not None and record.owner_epoch == 1

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the job's result ends the task")
    types = [e.type for e in await store.read_log("t")]
    assert types.index("WokenUp") < types.index("JobFinished")
    assert types.count("WokenUp") == 1 and types.count("JobFinished") == 1
