"""The claim loop fills every free slot with one claim (ADR-0060), but a claim that starts
jobs takes at most half the slots and the next is sent before its runs begin (ADR-0124);
each run starts from the task as its claim read it: no load of its own.

The worker runs in this process against a real PostgreSQL; the store is wrapped only to
record which calls the worker made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import noeta
from noeta.backends.models.registry import ProviderRegistry
from noeta.client.job_tasks import job_task
from noeta.core.ports.store import Claim, ClaimedTask, Finish, JobStarts, LoadedTask, Store
from noeta.core.runner.task import RunResult, TaskRunner
from noeta.plugins.loading import module_pin
from noeta.plugins.toolbox import Toolbox
from noeta.worker.settings import WorkerSettings
from noeta.worker.worker import Worker

from .conftest import add_task, status_of, until


class RecordedCalls:
    """The real store; its claims (limit asked, tasks claimed) and loads are recorded, and
    the order of the claims sent and the appends sent."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.claims: list[tuple[int, int]] = []
        self.loads: list[str] = []
        self.sent: list[str] = []  # "claim", or "run <task id>" as a run begins
        self.started = 0  # jobs their claim started (ADR-0101)

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
        self.sent.append("claim")
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
        self.claims.append((limit, len(claimed)))
        self.started += sum(1 for each in claimed if each.loaded and each.loaded.started_by_claim)
        return claimed

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        self.loads.append(task_id)
        return await self._store.load(task_id, snapshot_version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def recording_runs(runner: TaskRunner, recorded: RecordedCalls) -> None:
    """Each run, as it begins, is written down in `recorded.sent`."""
    run = runner.run

    async def recorded_run(claim: Claim, loaded: LoadedTask | None = None) -> RunResult:
        recorded.sent.append(f"run {claim.task_id}")
        return await run(claim, loaded)

    runner.run = recorded_run  # type: ignore[method-assign]


async def run_until_done(worker: Worker, store: Store, ids: list[str]) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:

        async def all_done() -> bool:
            return all([await status_of(store, task_id) == "done" for task_id in ids])

        await until(all_done, f"the {len(ids)} tasks finish")
    finally:
        stop.set()
        await running


async def test_free_slots_are_filled_by_one_claim_that_reads_the_tasks(
    store: Store, tmp_path: Path, toolbox: Toolbox
) -> None:
    ids = [f"t{n}" for n in range(4)]
    for task_id in ids:
        await add_task(store, tmp_path, task_id, {"text": "done"})
    recorded = RecordedCalls(store)
    runner = toolbox.runner(recorded, ProviderRegistry())
    runner.pins = None  # a runner that starts no job by its claim (ADR-0101)
    settings = WorkerSettings("w", concurrency=4, lease_seconds=30, poll_seconds=0.2)
    await run_until_done(Worker(recorded, runner, settings), store, ids)
    assert recorded.claims[0] == (4, 4)  # four free slots, one claim statement
    assert recorded.loads == []  # each run started from what its claim read


@noeta.tool(retry_safe=True)
async def batch_claims_noop() -> None:
    """A no-op job: what is observed is the claim loop around it."""


async def test_jobs_are_claimed_half_the_slots_at_a_time_the_next_before_their_runs(
    store: Store,
) -> None:
    """Four free slots and four fresh jobs: a claim of two that starts them, and the next
    claim of two is sent before the first two runs begin, so the store works on it while
    they run (ADR-0124)."""
    ids = [f"j{n}" for n in range(4)]
    for task_id in ids:
        await store.create_task(job_task(task_id, batch_claims_noop, {}, "default", None))
    recorded = RecordedCalls(store)
    runner = TaskRunner(
        recorded,  # type: ignore[arg-type]
        ProviderRegistry(),
        tools={batch_claims_noop.name: batch_claims_noop},
        pins=(module_pin(batch_claims_noop.module),),
    )
    recording_runs(runner, recorded)
    settings = WorkerSettings("w", concurrency=4, lease_seconds=30, poll_seconds=0.2)
    await run_until_done(Worker(recorded, runner, settings), store, ids)
    assert recorded.claims[:2] == [(2, 2), (2, 2)]  # half the slots a claim
    assert recorded.sent[:2] == ["claim", "claim"]  # the second before the first's runs
    assert recorded.started == 4  # each started by its claim
    assert recorded.loads == []


class GatedFinish:
    """The real store; the finishing append of one task waits for `opened` before it is
    sent, and every claim is recorded (ADR-0116)."""

    def __init__(self, store: Store, task_id: str) -> None:
        self._store = store
        self._task_id = task_id
        self.opened = asyncio.Event()
        self.finishing = asyncio.Event()
        self.claimed: list[str] = []

    async def append(self, claim: Claim, *args: Any, **kwargs: Any) -> int:
        if claim.task_id == self._task_id and isinstance(kwargs.get("next_state"), Finish):
            self.finishing.set()
            await self.opened.wait()
        return await self._store.append(claim, *args, **kwargs)

    async def claim_and_load(self, *args: Any, **kwargs: Any) -> list[ClaimedTask]:
        claimed = await self._store.claim_and_load(*args, **kwargs)
        self.claimed += [each.claim.task_id for each in claimed]
        return claimed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_runs_slot_is_free_once_it_sends_its_finish(
    store: Store, tmp_path: Path, toolbox: Toolbox
) -> None:
    """With one slot, the next task is claimed while the first one's finish is still on
    its way: the claim that fills the slot can share the finish's round trip."""
    await add_task(store, tmp_path, "a", {"text": "done"})
    gated = GatedFinish(store, "a")
    runner = toolbox.runner(gated, ProviderRegistry())
    settings = WorkerSettings("w", concurrency=1, lease_seconds=30, poll_seconds=0.2)
    worker = Worker(gated, runner, settings)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(gated.finishing.wait(), 30)
        await add_task(store, tmp_path, "b", {"text": "done"})
        worker.wake()

        async def b_claimed() -> bool:
            return "b" in gated.claimed

        await until(b_claimed, "b is claimed while a's finish waits")
        assert await status_of(store, "a") == "running"
        gated.opened.set()

        async def both_done() -> bool:
            return [await status_of(store, t) for t in "ab"] == ["done", "done"]

        await until(both_done, "both tasks finish")
    finally:
        gated.opened.set()
        stop.set()
        await running
