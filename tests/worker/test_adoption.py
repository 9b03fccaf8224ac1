"""Adopting after a lost claim reply (SPEC §3) when the store records more tasks as the
worker's than it has free slots: the ones that wait for a slot stay renewed."""

from __future__ import annotations

import signal
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, log_types, status_of, until, workspace_of

TASKS = ("t1", "t2", "t3", "t4")
FIRST_LEASE = 600  # never lapses during the test: only the second worker's renewals count
SECOND_LEASE = 6  # renewed every 2 s: a loaded machine does not stall a worker that long


def blocked(call_id: str, go: str) -> dict[str, Any]:
    """A Bash call that ends only once the test creates `go` in the task's workspace (its
    event, not a timer; the workspace is all of the test's files a sandboxed Bash sees)."""
    command = f"until [ -e {go} ]; do sleep 0.05; done"
    return {"tool_calls": [{"id": call_id, "name": "Bash", "input": {"command": command}}]}


def let_go(tmp_path: Path, name: str) -> None:
    for task_id in TASKS:
        workspace = workspace_of(tmp_path, task_id)
        workspace.mkdir(parents=True, exist_ok=True)  # Bash may not have made it yet
        (workspace / name).touch()


async def test_adopted_claims_waiting_for_a_slot_do_not_lapse(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    for task_id in TASKS:
        await add_task(
            store, tmp_path, task_id, blocked("c1", "go1"), blocked("c2", "go2"), {"text": "done"}
        )
    # A first "w" runs three tasks and dies: the store still records them as w's.
    first = workers(postgres_url, "w", lease=FIRST_LEASE, concurrency=3)

    async def three_started() -> bool:
        return sum(["ToolStarted" in await log_types(store, t) for t in TASKS]) == 3

    await until(three_started, "the first worker runs three tasks")
    first.signal(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL
    let_go(tmp_path, "go1")
    # The next "w" loses the reply of its first claim: it adopts four tasks, two slots.
    second = workers(
        postgres_url,
        "w",
        lease=SECOND_LEASE,
        concurrency=2,
        failpoints="claim.after_commit=raise(CommitUnknown)@1",
    )

    async def leases() -> dict[str, datetime | None]:
        tasks = [await store.get_task(t) for t in TASKS]
        return {t.id: t.lease_until for t in tasks if t is not None and t.owner_epoch == 1}

    async def adopted() -> bool:
        # All four renewed at the second worker's lease (the first's was ten minutes).
        now = await store.clock()
        held = await leases()
        return len(held) == len(TASKS) and all(
            lease is not None and (lease - now).total_seconds() <= SECOND_LEASE
            for lease in held.values()
        )

    await until(adopted, "the second worker adopts all four")
    adoption = await leases()
    latest = max(lease for lease in adoption.values() if lease is not None)

    async def renewed_past_the_adoptions_lease() -> bool:
        # Two run (blocked on go2); two wait for a slot. Each is renewed after the
        # adoption, and the adoption's leases are over: unrenewed, they would have lapsed.
        now, held = await store.clock(), await leases()
        assert held.keys() == adoption.keys(), f"an adopted claim was lost: {held}"
        return now > latest and all(
            lease is not None and lease > adoption[task_id]  # type: ignore[operator]
            for task_id, lease in held.items()
        )

    await until(renewed_past_the_adoptions_lease, "every adopted claim is renewed")
    let_go(tmp_path, "go2")

    async def all_done() -> bool:
        return all([await status_of(store, t) == "done" for t in TASKS])

    await until(all_done, "every adopted task finishes")
    assert "conflict on task" not in second.log()
    for task_id in TASKS:
        task = await store.get_task(task_id)
        assert task is not None and task.owner_epoch == 1, task  # adopted, never re-claimed
