"""A worker's bookkeeping is per claim (task id and epoch): what it learns about epoch N
never touches epoch N+1 of the same task, which it may have claimed again meanwhile.

The worker runs in this process against a real PostgreSQL, so the test can hold one
renewal round back until the store has moved on: the delayed answer the issue saw.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.core.ports.store import Claim, ClaimKey, NewEvent, Store
from noeta.core.rules.task_id import workspace_folder
from noeta.plugins.toolbox import Toolbox
from noeta.worker.settings import WorkerSettings
from noeta.worker.worker import Worker

from .conftest import add_task, lapse_the_lease, log_types, status_of, until

# Renewed every 10 s; no round runs while the epoch-1 round is held, and epoch 2 must not
# lapse meanwhile (its first call is recorded well within it, even on a loaded machine).
LEASE = 30


class HeldStore:
    """The real store, except that a renewal round carrying one of `held` claims is held
    back (before it reaches the store) until `let_round_go` is set, and so is the append that
    records a tool's result under one of them, until `let_append_go` is set."""

    def __init__(self, store: Store, held: set[ClaimKey]) -> None:
        self._store = store
        self.held = held
        self.round_arrived = asyncio.Event()
        self.let_round_go = asyncio.Event()
        self.append_arrived = asyncio.Event()
        self.let_append_go = asyncio.Event()

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Any:
        if any(claim.key in self.held for claim in claims):
            self.round_arrived.set()
            await self.let_round_go.wait()
        return await self._store.renew(claims, lease_seconds)

    async def append(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], **more: Any
    ) -> int:
        if claim.key in self.held and any(e.type == "ToolFinished" for e in events):
            self.append_arrived.set()
            await self.let_append_go.wait()
        return await self._store.append(claim, expected_seq, events, **more)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def blocked(call_id: str, go: str) -> dict[str, Any]:
    """A Bash call that ends only once the test creates `go` in the task's workspace (its
    event, not a timer; the workspace is all of the test's files a sandboxed Bash sees)."""
    command = f"until [ -e {go} ]; do sleep 0.05; done"
    return {"id": call_id, "name": "Bash", "input": {"command": command}}


def let_go(tmp_path: Path, name: str) -> None:
    # Bash may not have made the folder yet: the test makes it too.
    workspace = tmp_path / "workspaces" / workspace_folder("t")
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / name).touch()


async def test_a_late_answer_for_the_old_epoch_leaves_the_new_claim_running(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    toolbox: Toolbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The worker's lease lapses right before it records a tool result: its append is
    # refused and it claims the task again at epoch 2. The renewal round it had begun
    # for epoch 1 is answered only then ("not renewed"): that must not cost epoch 2.
    replies = (
        {"tool_calls": [blocked("c1", "go1")]},
        {"tool_calls": [blocked("c2", "go2")]},
        {"text": "done"},
    )
    await add_task(store, tmp_path, "t", *replies)
    held = HeldStore(store, {("t", 1)})
    providers = ProviderRegistry()
    runner = toolbox.runner(held, providers)
    settings = WorkerSettings("w", concurrency=1, lease_seconds=LEASE, poll_seconds=0.2)
    worker = Worker(held, runner, settings)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    running = asyncio.create_task(worker.run(stop))
    try:
        # A round for epoch 1 is on its way (held) before the lapse: let the call end.
        await asyncio.wait_for(held.round_arrived.wait(), 60)
        let_go(tmp_path, "go1")
        # The result's append waits; the lease lapses (the store's doing, not a clock's
        # racing the worker); then the append goes on, and is refused.
        await asyncio.wait_for(held.append_arrived.wait(), 60)
        assert await lapse_the_lease(postgres_url, "t") == 1
        held.let_append_go.set()

        async def second_call_runs() -> bool:
            task = await store.get_task("t")
            return (
                task is not None
                and task.owner_epoch == 2
                and ((await log_types(store, "t")).count("ToolStarted") == 2)
            )

        await until(second_call_runs, "epoch 2 runs the second call")
        claimed = await store.get_task("t")
        assert claimed is not None and claimed.lease_until is not None
        first_lease = claimed.lease_until
        held.let_round_go.set()  # now the epoch-1 round reaches the store, and is refused

        async def renewed_after() -> bool:
            # Rounds run one after another: a later renewal of epoch 2 means the
            # epoch-1 answer has been dealt with.
            task = await store.get_task("t")
            assert task is not None and task.owner_epoch == 2, "epoch 2 was given up"
            return task.lease_until is not None and task.lease_until > first_lease

        await until(renewed_after, "epoch 2 is renewed after the late answer")
        let_go(tmp_path, "go2")

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the task finishes")
    finally:
        held.let_append_go.set()
        held.let_round_go.set()
        stop.set()
        await running
        await providers.close()
    task = await store.get_task("t")
    assert task is not None and task.owner_epoch == 2  # never cancelled, never taken over
    assert (await log_types(store, "t")).count("ModelCalled") == 3
    assert "taken over by another worker" not in caplog.text
    assert "conflict on task t" in caplog.text  # the epoch-1 append, lapsed, was refused
