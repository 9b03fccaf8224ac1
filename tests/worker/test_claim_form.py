"""A worker asks its claim to start fresh jobs (ADR-0101) only while its claims find jobs:
agent tasks alone get the plain claim after the first, and a job a plain claim takes
brings the starting claim back. Real PostgreSQL, the real worker loop and runner; the
store is wrapped only to record what each claim was asked and what it took."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import noeta
from noeta.backends.models.registry import ProviderRegistry
from noeta.client.job_tasks import job_task
from noeta.core.ports.store import (
    ClaimedTask,
    JobStarts,
    LoadedTask,
    NewEvent,
    NewTask,
    Snapshot,
    Store,
    StoredEvent,
)
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.plugins.loading import module_pin
from noeta.worker.claim_form import ClaimForm, fresh_job
from noeta.worker.worker import Worker, WorkerSettings

from .conftest import status_of, until


@noeta.tool(retry_safe=True)
async def idle_job() -> None:
    """A plain job that does nothing."""


class RecordedClaims:
    """The real store; each claim that took tasks: whether it was asked to start jobs,
    and which of its tasks it started."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.claims: list[tuple[bool, list[bool]]] = []

    async def claim_and_load(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        limit: int = 1,
        snapshot_version: str,
        excluding: Collection[str] = (),
        offers: Collection[str] | None = None,
        job_starts: JobStarts | None = None,
        hold: bool = False,
        ahead: bool = False,
    ) -> list[ClaimedTask]:
        claimed = await self._store.claim_and_load(
            worker,
            queues,
            lease_seconds,
            limit=limit,
            snapshot_version=snapshot_version,
            excluding=excluding,
            offers=offers,
            job_starts=job_starts,
            hold=hold,
            ahead=ahead,
        )
        if claimed:
            started = [bool(each.loaded and each.loaded.started_by_claim) for each in claimed]
            self.claims.append((job_starts is not None, started))
        return claimed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def add_agent_task(store: Store, folder: Path, task_id: str) -> None:
    script = folder / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": [{"text": "done"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go")
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def finished(store: Store, task_id: str) -> None:
    async def done() -> bool:
        return await status_of(store, task_id) == "done"

    await until(done, f"{task_id} finishes")


async def test_agent_tasks_get_the_plain_claim_and_a_job_brings_the_starting_one_back(
    store: Store, tmp_path: Path
) -> None:
    for n in range(3):
        await add_agent_task(store, tmp_path, f"a{n}")
    recorded = RecordedClaims(store)
    runner = TaskRunner(
        recorded,
        ProviderRegistry(),
        tools={idle_job.name: idle_job},
        pins=(module_pin(idle_job.module),),
    )
    assert runner.job_starts is not None  # this runner's claims may start jobs
    settings = WorkerSettings("w", concurrency=4, lease_seconds=600, poll_seconds=0.2)
    worker = Worker(recorded, runner, settings)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        for n in range(3):
            await finished(store, f"a{n}")
        await store.create_task(job_task("j1", idle_job, {}, "default", None))
        worker.wake()
        await finished(store, "j1")
        await store.create_task(job_task("j2", idle_job, {}, "default", None))
        worker.wake()
        await finished(store, "j2")
    finally:
        stop.set()
        await running
    asked = [each[0] for each in recorded.claims]
    # The first claim asks (a backlog may be jobs) and finds agent tasks; the next, plain,
    # takes j1 without starting it; that brings back the claim that starts j2.
    assert asked[0] and recorded.claims[0][1] == [False] * len(recorded.claims[0][1])
    assert (False, [False]) in recorded.claims
    assert recorded.claims[-1] == (True, [True])
    j1 = [each.type for each in await store.read_log("j1")]
    assert j1.count("ToolStarted") == 1  # started by its run, once


def loaded(*types: str, snapshot: bool = False) -> LoadedTask:
    at = datetime.now(UTC)
    log = [StoredEvent("t", n + 1, kind, {}, at) for n, kind in enumerate(types)]
    return LoadedTask(Snapshot("t", "v", 2, b"") if snapshot else None, log, [])


def test_a_fresh_job_is_told_by_its_log_alone() -> None:
    assert fresh_job(loaded("TaskCreated", "CallRequested"))
    assert fresh_job(loaded("TaskCreated", "CallRequested", "PluginsPinned"))
    assert not fresh_job(loaded("TaskCreated"))  # an agent task
    assert not fresh_job(loaded("TaskCreated", "CallRequested", "ToolStarted"))  # begun
    assert not fresh_job(loaded("TaskCreated", "CallRequested", snapshot=True))
    assert not fresh_job(None)


def test_an_empty_claim_leaves_the_form_as_it_was() -> None:
    form, starts = ClaimForm(), JobStarts(())
    form.found([], starts)
    assert form.starts(starts) is starts
