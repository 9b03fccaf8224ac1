"""A real worker confines its background jobs as it does Bash calls, and says at start
that it does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.core.ports.store import Store
from noeta.plugins.core.landlock import kernel_availability

from .conftest import WorkerProcess, add_task, status_of, until

KERNEL = kernel_availability()


@pytest.mark.skipif(not KERNEL.abi, reason=f"needs Landlock, which is missing: {KERNEL.reason}")
async def test_a_workers_background_job_is_confined_and_the_worker_says_so(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    home = tmp_path / "home"  # the worker's NOETA_HOME; its workspaces root is beside it
    home.mkdir()
    (home / "password").write_text("superuser-password-stand-in\n")
    other = tmp_path / "home-workspaces" / "other"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("task other's private notes\n")
    command = f"cat {home}/password {other}/notes.txt; echo mine > mine.txt && cat mine.txt"
    job = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    replies = ({"tool_calls": [job]}, {"text": "Waiting."}, {"text": "Read it."})
    await add_task(store, tmp_path, "t", *replies)
    worker = workers(postgres_url, "w")

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the job's result reaches the task and it finishes")
    [result] = [e.data for e in await store.read_log("t") if e.type == "JobFinished"]
    assert isinstance(result, dict)
    output = str(result["output"])
    assert "superuser-password-stand-in" not in output and "private notes" not in output
    # The job's view has no other workspace and no noeta home at all.
    missing = output.count("No such file or directory") + output.count("Permission denied")
    assert missing == 2 and "mine\n" in output, output
    said = "Bash commands are confined in namespaces (network: proxy) and by Landlock ABI"
    assert f"{said} {KERNEL.abi}" in worker.log()
