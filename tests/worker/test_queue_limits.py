"""Queue limits with real `noeta worker` processes (issue 20): six workers under a limit of
three, some SIGKILLed; two tenants under a per-key limit of one; priorities.

Two witnesses: the tasks table sampled while the workers run (live claims: running or
holding, lease not lapsed), and each task's log, whose events record the claim (epoch)
they were written under (ADR-0042): the span from an epoch's first to its last event
lies inside that claim, so more spans overlapping than the limit is an overshoot."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import NewEvent, NewTask, Store, TaskStatus
from noeta.core.rules import events

from .conftest import WorkerProcess, status_of, until

LIVE_CLAIMS = """
SELECT coalesce(sum(n), 0)::int, coalesce(max(n), 0)::int FROM (
    SELECT count(*) AS n FROM tasks
     WHERE status IN ('running', 'holding') AND lease_until > clock_timestamp()
     GROUP BY concurrency_key) AS per_key
"""
WORK = "sleep 0.4; echo worked"


async def add_working_task(
    store: Store, folder: Path, task_id: str, *, key: str | None = None, priority: int = 0
) -> None:
    """A task that runs one Bash command (real work, under its claim), then answers."""
    call = {"id": "c1", "name": "Bash", "input": {"command": WORK}}
    script = folder / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": [{"tool_calls": [call]}, {"text": "done"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Bash",))
    first = [NewEvent(*events.encode(created))]
    assert await store.create_task(NewTask(task_id, first, concurrency_key=key, priority=priority))


class Sampler:
    """Samples live claims in the tasks table, on its own connection, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.most, self.most_per_key, self.samples = 0, 0, 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as db:
            while not self._stop.is_set():
                row = await (await db.execute(LIVE_CLAIMS)).fetchone()
                assert row is not None
                self.most = max(self.most, row[0])
                self.most_per_key = max(self.most_per_key, row[1])
                self.samples += 1
                await asyncio.sleep(0.005)  # a sampling period, not a synchronisation

    def stop(self) -> None:
        self._stop.set()


async def claim_spans(
    store: Store, task_ids: Sequence[str]
) -> list[tuple[datetime, datetime, str, str]]:
    """(first event, last event, task, its key) per claim (task, epoch) that wrote."""
    spans = []
    for task_id in task_ids:
        by_epoch: dict[int, list[datetime]] = defaultdict(list)
        for event in await store.read_log(task_id):
            if event.epoch:
                by_epoch[event.epoch].append(event.created_at)
        task = await store.get_task(task_id)
        assert task is not None
        for times in by_epoch.values():
            spans.append((min(times), max(times), task_id, task_id.split("-")[0]))
    return spans


def most_at_once(spans: Sequence[tuple[datetime, datetime, Any, Any]]) -> int:
    """The most spans open at one moment (an end before a start at the same time)."""
    edges = sorted([(s, 1) for s, _, _, _ in spans] + [(e, -1) for _, e, _, _ in spans])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


async def run_until_done(
    store: Store, url: str, task_ids: Sequence[str], during: Callable[[], Any] | None = None
) -> Sampler:
    sampler = Sampler(url)
    sampling = asyncio.create_task(sampler.run())

    async def all_done() -> bool:
        if during is not None:
            await during()
        return all([await status_of(store, t) == "done" for t in task_ids])

    try:
        await until(all_done, "every task is done", within=120)
    finally:
        sampler.stop()
        await sampling
    return sampler


ACTIVE = """
SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active'
"""


async def holds_a_claim_frozen(store: Store, url: str, worker: WorkerProcess) -> bool:
    """Whether `worker`, stopped (SIGSTOP) and its statements sent run out, holds a running
    task: nothing it does can change that now (only its lease lapsing). One that holds
    none goes on (SIGCONT)."""
    worker.signal(signal.SIGSTOP)
    await until(worker.paused, f"{worker.name} is stopped")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:

        async def sent_run_out() -> bool:
            row = await (await db.execute(ACTIVE, (f"noeta-worker:{worker.name}",))).fetchone()
            return row is not None and row[0] == 0

        await until(sent_run_out, f"the statements {worker.name} sent are done")
    live = await store.list_tasks(queue="default", status=TaskStatus.RUNNING)
    if any(t.owner == worker.name for t in live):
        return True
    worker.signal(signal.SIGCONT)
    return False


async def test_six_workers_never_run_more_than_three_even_when_killed(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await queue_settings_store(store).set_queue("default", QueueChange(concurrency=3))
    task_ids = [f"t-{n}" for n in range(24)]
    for task_id in task_ids:
        await add_working_task(store, tmp_path, task_id)
    # Four slots each and a fast poll: without the limit they would run 24 at once, and
    # idle workers claim every 50 ms, so racing claims are the rule, not the exception.
    fleet = [workers(postgres_url, f"w{n}", lease=1.0, poll=0.05, concurrency=4) for n in range(6)]
    killed: list[WorkerProcess] = []

    async def kill_two_holding_claims() -> None:
        if len(killed) == 2 or sum([await status_of(store, t) == "done" for t in task_ids]) < 3:
            return
        # Workers holding a claim now (a finished task keeps its last owner: killing a worker
        # that holds nothing would leave nothing to take over). Read with the worker frozen:
        # a listing read while it runs is stale by the kill (its tasks may finish, and its
        # next claim, held for its runs' first writes, is undone by the kill, ADR-0147).
        live = await store.list_tasks(queue="default", status=TaskStatus.RUNNING)
        holders = {t.owner for t in live if t.owner}
        for worker in [w for w in fleet if w.name in holders and w not in killed]:
            if len(killed) < 2 and await holds_a_claim_frozen(store, postgres_url, worker):
                worker.signal(signal.SIGKILL)  # its claims stay until the lease lapses
                killed.append(worker)

    sampler = await run_until_done(store, postgres_url, task_ids, kill_two_holding_claims)
    assert len(killed) == 2
    assert sampler.samples > 100 and sampler.most == 3, (sampler.samples, sampler.most)
    spans = await claim_spans(store, task_ids)
    assert most_at_once(spans) <= 3
    taken_over = [t for t in task_ids if (await store.get_task(t)).owner_epoch > 1]  # type: ignore[union-attr]
    assert taken_over, "the killed workers' tasks were taken over once their leases lapsed"


async def test_two_tenants_with_a_per_key_limit_of_one_share_the_queue(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await queue_settings_store(store).set_queue("default", QueueChange(per_key_concurrency=1))
    # Tenant a submits its whole backlog first: oldest first alone would run a's six
    # before any of b's.
    task_ids = [f"a-{n}" for n in range(6)] + [f"b-{n}" for n in range(6)]
    for task_id in task_ids:
        await add_working_task(store, tmp_path, task_id, key=task_id.split("-")[0])
    for n in range(3):
        workers(postgres_url, f"w{n}", lease=1.0, poll=0.05, concurrency=4)
    sampler = await run_until_done(store, postgres_url, task_ids)
    assert sampler.most_per_key == 1 and sampler.most == 2, (sampler.most, sampler.most_per_key)
    spans = await claim_spans(store, task_ids)
    for tenant in ("a", "b"):
        assert most_at_once([s for s in spans if s[3] == tenant]) == 1
    # Both progress together: b's first claim starts before a's last ends.
    first_b = min(s[0] for s in spans if s[3] == "b")
    last_a = max(s[1] for s in spans if s[3] == "a")
    assert first_b < last_a


async def test_priorities_order_the_claims_of_a_resumed_queue(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    queues = queue_settings_store(store)
    await queues.set_queue("default", QueueChange(paused=True))
    # Submitted lowest first: due-time order alone would run them in this order.
    order = [("low", 0), ("mid", 4), ("high", 9), ("mid2", 4)]
    for task_id, priority in order:
        await add_working_task(store, tmp_path, task_id, priority=priority)
    worker = workers(postgres_url, "only", lease=5.0, poll=0.05, concurrency=1)

    async def up() -> bool:
        return "worker only:" in worker.log()

    await until(up, "the worker is up")
    assert all([await status_of(store, t) == "ready" for t, _ in order])  # paused: none taken
    await queues.set_queue("default", QueueChange(paused=False))
    ids = [t for t, _ in order]
    await run_until_done(store, postgres_url, ids)
    spans = sorted(await claim_spans(store, ids))
    assert [s[2] for s in spans] == ["high", "mid", "mid2", "low"]
