"""A process that runs one task with the example notify plugin until it finishes (or,
given `waiting`, until it waits); the hook crash tests kill it at a failure point and
start it again.

    python -m tests.plugins.hooked_worker STORE_URL TASK_ID OUTBOX LEDGER [waiting]
"""

from __future__ import annotations

import asyncio
import sys

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.runner.task import TaskRunner
from noeta.plugins.loading import PluginSpec, load
from tests.core.runner.predecessor import LEASE, free_the_dead_predecessors_claims

POLL_SECONDS = 0.05


async def main(url: str, task_id: str, outbox: str, ledger: str, until: str = "") -> None:
    notify = load(PluginSpec("module", "notify_plugin", {"outbox": outbox, "ledger": ledger}))
    store = await open_store(url)
    runner = TaskRunner(store, ProviderRegistry(), plugins=[notify.plugin])
    try:
        await free_the_dead_predecessors_claims(store, "hooked-worker")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            record = await store.get_task(task_id)
            if record is not None and record.status.finished:
                print("finished", record.status.value)
                return
            if record is not None and until == record.status.value:
                print(until)
                return
            if loop.time() > deadline:
                raise SystemExit(f"task {task_id} did not finish")
            claim = await store.claim_task("hooked-worker", task_id, LEASE)
            if claim is None:
                await asyncio.sleep(POLL_SECONDS)
                continue
            await runner.run(claim)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
