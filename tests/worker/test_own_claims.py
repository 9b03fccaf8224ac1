"""A worker never claims a task it is still running: when its own claim lapsed in the
store (its renewal held up), it renews it late rather than claim the task again and send
the same model request twice from one process (issue 26, item 4).

The worker runs in this process against a real PostgreSQL, so the test can hold every
renewal of the claim back until the store shows its lease lapsed: no lease raced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from noeta.backends.models.registry import ProviderRegistry
from noeta.core.ports.store import Claim, ClaimedTask, ClaimKey, Store
from noeta.core.rules.task_id import workspace_folder
from noeta.plugins.toolbox import Toolbox
from noeta.worker.settings import WorkerSettings
from noeta.worker.worker import Worker

from .conftest import add_task, log_types, status_of, until


class HeldClaim:
    """The real store, except that every renewal round carrying `held` waits (before it
    reaches the store) until `renew_again` is set; claims answered after `mark` counted."""

    def __init__(self, store: Store, held: ClaimKey) -> None:
        self._store = store
        self.held = held
        self.holding = asyncio.Event()
        self.renew_again = asyncio.Event()
        self.marked = False
        self.answered_since_mark = 0

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Any:
        if any(claim.key == self.held for claim in claims):
            self.holding.set()
            await self.renew_again.wait()
        return await self._store.renew(claims, lease_seconds)

    async def claim_and_load(self, *args: Any, **options: Any) -> list[ClaimedTask]:
        counts = self.marked
        claimed: list[ClaimedTask] = await self._store.claim_and_load(*args, **options)
        if counts:
            self.answered_since_mark += 1
        return claimed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def blocked(call_id: str) -> dict[str, Any]:
    """A Bash call that ends only once the test creates `go` in the task's workspace
    (the only folder of the test's that a sandboxed command sees): its event, no timer."""
    return {
        "id": call_id,
        "name": "Bash",
        "input": {"command": "until [ -e go ]; do sleep 0.05; done"},
    }


async def test_a_worker_does_not_claim_its_own_running_task_again(
    store: Store, tmp_path: Path, toolbox: Toolbox
) -> None:
    go = tmp_path / "workspaces" / workspace_folder("t") / "go"
    await add_task(store, tmp_path, "t", {"tool_calls": [blocked("c1")]}, {"text": "done"})
    counted = HeldClaim(store, ("t", 1))
    providers = ProviderRegistry()
    runner = toolbox.runner(counted, providers)
    settings = WorkerSettings("w", concurrency=2, lease_seconds=1.5, poll_seconds=0.2)
    worker = Worker(counted, runner, settings)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(counted.holding.wait(), 30)  # a renewal of epoch 1 is held

        async def lapsed() -> bool:
            task = await store.get_task("t")
            assert task is not None
            if task.owner_epoch > 1:
                return True  # claimed again already: the assertion below says so
            return task.lease_until is not None and task.lease_until < await store.clock()

        await until(lapsed, "the held claim's lease lapses in the store")
        counted.marked = True

        async def claimed_since() -> bool:
            return counted.answered_since_mark >= 2

        # The task is claimable now; the worker, with a free slot, claims after the lapse.
        await until(claimed_since, "the worker claims after the lapse")
        task = await store.get_task("t")
        assert task is not None and task.owner_epoch == 1  # not claimed again by its runner
        counted.renew_again.set()  # the late renewal lands: nobody else took the task

        async def renewed() -> bool:
            task = await store.get_task("t")
            assert task is not None and task.owner_epoch == 1
            return task.lease_until is not None and task.lease_until > await store.clock()

        await until(renewed, "the late renewal lands")
        go.touch()

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the task finishes under its first claim")
    finally:
        counted.renew_again.set()
        stop.set()
        await running
        await providers.close()
    task = await store.get_task("t")
    assert task is not None and task.owner_epoch == 1
    assert (await log_types(store, "t")).count("ModelCalled") == 2
