"""A worker's bookkeeping is per claim (task id and epoch): what it learns about epoch N
never touches epoch N+1 of the same task, which it may have claimed again meanwhile.

The worker runs in this process against a real PostgreSQL, so the test can hold one
renewal round back until the store has moved on: the delayed answer the issue saw.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.config import Config
from noeta.core import failpoints
from noeta.core.store import Claim, ClaimKey, Store
from noeta.plugins.toolbox import Toolbox
from noeta.worker.worker import Worker, WorkerSettings

from .conftest import add_task, log_types, status_of, until


class HeldRenewals:
    """The real store, except that a renewal round carrying one of `held` claims is held
    back (before it reaches the store) until `release` is set."""

    def __init__(self, store: Store, held: set[ClaimKey]) -> None:
        self._store = store
        self.held = held
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Any:
        if any(claim.key in self.held for claim in claims):
            self.arrived.set()
            await self.release.wait()
        return await self._store.renew(claims, lease_seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def blocked(call_id: str, go: Path) -> dict[str, Any]:
    """A Bash call that ends only once the test creates `go` (its event, not a timer)."""
    command = f"until [ -e {go} ]; do sleep 0.05; done"
    return {"id": call_id, "name": "Bash", "input": {"command": command}}


@pytest.fixture
async def toolbox(tmp_path: Path) -> AsyncIterator[Toolbox]:
    box = await Toolbox.open(Config(workspaces=str(tmp_path / "ws")))
    yield box
    await box.close()


async def test_a_late_answer_for_the_old_epoch_leaves_the_new_claim_running(
    store: Store,
    tmp_path: Path,
    toolbox: Toolbox,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The worker freezes past its lease right before recording a tool result: its append
    # is refused and it claims the task again at epoch 2. The renewal round it had begun
    # for epoch 1 is answered only then ("not renewed"): that must not cost epoch 2.
    # In the task's workspace: the one place outside the test its sandboxed Bash can see.
    workspace = tmp_path / "ws" / "t"
    workspace.mkdir(parents=True)
    go1, go2 = workspace / "go1", workspace / "go2"
    replies = (
        {"tool_calls": [blocked("c1", go1)]},
        {"tool_calls": [blocked("c2", go2)]},
        {"text": "done"},
    )
    await add_task(store, tmp_path, "t", *replies)
    monkeypatch.setattr(
        failpoints, "_POINTS", failpoints.parse("tool.before_finished=stop(2500)@1")
    )
    held = HeldRenewals(store, {("t", 1)})
    providers = ProviderRegistry()
    runner = toolbox.runner(held, providers)  # type: ignore[arg-type]
    settings = WorkerSettings("w", concurrency=1, lease_seconds=1.5, poll_seconds=0.2)
    worker = Worker(held, runner, settings)  # type: ignore[arg-type]
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    running = asyncio.create_task(worker.run(stop))
    try:
        # A round for epoch 1 is on its way (held) before the freeze: let the call end.
        await asyncio.wait_for(held.arrived.wait(), 30)
        go1.touch()

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
        held.release.set()  # now the epoch-1 round reaches the store, and is refused

        async def renewed_after() -> bool:
            # Rounds run one after another: a later renewal of epoch 2 means the
            # epoch-1 answer has been dealt with.
            task = await store.get_task("t")
            assert task is not None and task.owner_epoch == 2, "epoch 2 was given up"
            return task.lease_until is not None and task.lease_until > first_lease

        await until(renewed_after, "epoch 2 is renewed after the late answer")
        go2.touch()

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the task finishes")
    finally:
        stop.set()
        await running
        await providers.close()
    task = await store.get_task("t")
    assert task is not None and task.owner_epoch == 2  # never cancelled, never taken over
    assert (await log_types(store, "t")).count("ModelCalled") == 3
    assert "taken over by another worker" not in caplog.text
    assert "conflict on task t" in caplog.text  # the frozen epoch-1 append was refused
