"""A process that runs every claimable task until one task finishes; the subtask crash
tests kill it at failure points and start it again.

    python -m tests.core.runner.subtask_worker STORE_URL WORKSPACES TASK_ID
"""

from __future__ import annotations

import asyncio
import sys

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.tool import Tool
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import Agent, Write
from tests.core.runner.predecessor import LEASE, free_the_dead_predecessors_claims

POLL_SECONDS = 0.05


async def main(url: str, workspaces: str, task_id: str) -> None:
    store = await open_store(url)
    tools: dict[str, Tool] = {"Agent": Agent(), "Write": Write()}
    runner = TaskRunner(
        store, ProviderRegistry(), tools, workspaces=workspaces, subagent_models=("scripted:*",)
    )
    try:
        await free_the_dead_predecessors_claims(store, "subtask-worker")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            record = await store.get_task(task_id)
            if record is not None and record.status.finished:
                print("finished", record.status.value)
                return
            if loop.time() > deadline:
                raise SystemExit(f"task {task_id} did not finish")
            claim = await store.claim("subtask-worker", ["default"], LEASE)
            if claim is None:
                await asyncio.sleep(POLL_SECONDS)
                continue
            await runner.run(claim)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
