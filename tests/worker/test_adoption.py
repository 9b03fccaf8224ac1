"""Adopting after a lost claim reply (SPEC §3) when the store records more tasks as the
worker's than it has free slots: the ones that wait for a slot stay renewed."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noeta.core.store import Store

from .conftest import WorkerProcess, add_task, log_types, status_of, until, workspace_of

TASKS = ("t1", "t2", "t3", "t4")


def blocked(call_id: str, go: str) -> dict[str, Any]:
    """A Bash call that ends only once the test creates `go` in the task's workspace (its
    event, not a timer; the workspace is all its sandbox sees of the test's files)."""
    command = f"until [ -e {go} ]; do sleep 0.05; done"
    return {"tool_calls": [{"id": call_id, "name": "Bash", "input": {"command": command}}]}


async def test_adopted_claims_waiting_for_a_slot_do_not_lapse(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    for task_id in TASKS:
        await add_task(
            store, tmp_path, task_id, blocked("c1", "go1"), blocked("c2", "go2"), {"text": "done"}
        )

    def go(name: str) -> None:
        for task_id in TASKS:
            workspace = workspace_of(tmp_path, task_id)
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / name).touch()

    # A first "w" runs three tasks and dies: the store still records them as w's.
    first = workers(postgres_url, "w", lease=30, concurrency=3)

    async def three_started() -> bool:
        return sum(["ToolStarted" in await log_types(store, t) for t in TASKS]) == 3

    await until(three_started, "the first worker runs three tasks")
    first.signal(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL
    go("go1")
    # The next "w" loses the reply of its first claim: it adopts four tasks, two slots.
    second = workers(
        postgres_url,
        "w",
        lease=1,
        concurrency=2,
        failpoints="claim.after_commit=raise(CommitUnknown)@1",
    )

    async def adopted() -> bool:
        # All four renewed at the second worker's 1 s lease (the first's was 30 s).
        now = await store.clock()
        tasks = [await store.get_task(t) for t in TASKS]
        return all(
            t is not None
            and t.lease_until is not None
            and t.owner_epoch == 1
            and (t.lease_until - now).total_seconds() < 2
            for t in tasks
        )

    await until(adopted, "the second worker adopts all four")
    leases = [(await store.get_task(t)).lease_until for t in TASKS]  # type: ignore[union-attr]
    latest = max(lease for lease in leases if lease is not None)

    async def a_lease_has_passed() -> bool:
        return await store.clock() > latest

    # Two run (blocked on go2); two wait for a slot for longer than their lease.
    await until(a_lease_has_passed, "the adoption's leases would have lapsed")
    go("go2")

    async def all_done() -> bool:
        return all([await status_of(store, t) == "done" for t in TASKS])

    await until(all_done, "every adopted task finishes")
    assert "conflict on task" not in second.log()
    for task_id in TASKS:
        task = await store.get_task(task_id)
        assert task is not None and task.owner_epoch == 1, task  # adopted, never re-claimed
