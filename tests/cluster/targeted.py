"""Scenarios that force the windows random chaos rarely hits, run before the chaos.

The fence's window: the old owner is frozen right before an append (failpoint), its
lease lapses, a new owner takes over and is held before its first write (failpoint), the
old one wakes and appends. The expected seq is still right and no (task, seq) is taken,
so only the epoch check refuses it. The stale view: a client whose view of the log is
ahead of it (it took an append whose outcome was unknown for landed) appends at the
wrong seq; only the expected-seq check refuses it, as no key collides.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from noeta.core.errors import Conflict
from noeta.core.store import NewEvent
from tests.cluster.processes import Cluster
from tests.cluster.workload import Workload

QUEUE = "targeted"
OLD_FROZEN = "append.before_commit=stop(3000)@2"  # the second append: after the first step
NEW_HELD = "append.before_commit=sleep(4000)@1"  # its first write, after the takeover


async def until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"targeted scenario: {what} within {within:g} s")
        await asyncio.sleep(0.1)


async def run_targeted(cluster: Cluster, workload: Workload) -> None:
    await fence_window(cluster, workload)
    await stale_view(cluster, workload)


async def fence_window(cluster: Cluster, workload: Workload) -> None:
    store, task = cluster.store, "fence-000"
    workload.kinds[task] = "tools"

    async def owner_is(name: str) -> bool:
        record = await store.get_task(task)
        return record is not None and record.owner == name

    cluster.start_worker("fence-old", queues=QUEUE, failpoints=OLD_FROZEN)
    await workload.create(task, queue=QUEUE)
    await until(lambda: owner_is("fence-old"), 30, "fence-old claims the task")
    cluster.note(f"fence window: fence-old will freeze before its 2nd append ({OLD_FROZEN})")
    cluster.start_worker("fence-new", queues=QUEUE, failpoints=NEW_HELD)
    await until(lambda: owner_is("fence-new"), 30, "fence-new takes the task over")
    cluster.note("fence window: fence-new took over, held before its first write")
    await until(lambda: _finished(cluster, task), 60, "the fence task finishes")
    for name in ("fence-old", "fence-new"):
        cluster.kill(cluster.workers.pop(name))


async def stale_view(cluster: Cluster, workload: Workload) -> None:
    store, task = cluster.store, "stale-000"
    workload.kinds[task] = "tools"
    await workload.create(task, queue=QUEUE)
    claim = await store.claim("stale-client", [QUEUE], 30.0)
    assert claim is not None and claim.task_id == task
    try:
        await store.append(claim, 2, [NewEvent("ModelCalled", {})])  # the log ends at 1
        cluster.note("stale view: an append at the wrong seq landed")
    except Conflict:
        cluster.note("stale view: an append at the wrong seq was refused")
    await store.release(claim)
    cluster.start_worker("stale-finisher", queues=QUEUE)
    await until(lambda: _finished(cluster, task), 60, "the stale-view task finishes")
    cluster.kill(cluster.workers.pop("stale-finisher"))


async def _finished(cluster: Cluster, task: str) -> bool:
    record = await cluster.store.get_task(task)
    return record is not None and record.status.finished
