"""An idle worker's pickup sends its task's first write before the claim loop's next
statement (ADR-0125): the write waits out one turn of the loop for company, and the claim
loop of a worker that was idle gives it that turn, so the registration the worker sends
once the claim found no more work goes after it, not in front of it; and the claim's log
line is written after it too (ADR-0131).

In-process, on the real PostgreSQL; the order is written down where each statement is
handed to the driver (a lone append, a batch, a registration)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import psycopg
from pytest import MonkeyPatch

import noeta
from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.held_claim import HeldClaim
from noeta.client.job_tasks import job_task
from noeta.core.ports.lone_run import lone_run
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.plugins.loading import module_pin
from noeta.plugins.toolbox import Toolbox
from noeta.worker.worker import Worker, WorkerSettings

from .conftest import status_of, until


class ClaimLines(logging.Handler):
    """Writes down, among the sends, the worker's "claimed task" line as it is logged."""

    def __init__(self, sent: list[str]) -> None:
        super().__init__(logging.INFO)
        self.sent = sent

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("claimed task"):
            self.sent.append("logged")


def one_shot(task_id: str, script: Path) -> NewTask:
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=())
    return NewTask(task_id, [NewEvent(*events.encode(created))])


def record_sends(store: PostgresStore, sent: list[str], lone: list[bool] | None = None) -> None:
    """Write down, in order, each append and each registration as it goes to the driver;
    in `lone`, whether each lone ModelCalled append came from a worker's only run."""
    alone, wait_idle = store._append_alone, store.wait_idle
    model_called = store._append_model_called_alone
    group = store._group_commit
    batch, with_claim = group._run_batch, group._run_with_claim

    async def append_alone(*args: Any) -> Any:
        sent.append("append")
        return await alone(*args)

    async def append_model_called_alone(*args: Any) -> Any:
        sent.append("append")
        if lone is not None:
            lone.append(lone_run())
        return await model_called(*args)

    async def run_batch(*args: Any) -> Any:
        sent.append("append")
        return await batch(*args)

    async def run_with_claim(*args: Any) -> Any:
        sent.append("append")
        assert with_claim is not None
        return await with_claim(*args)

    async def registration(*args: Any, **kwargs: Any) -> Any:
        sent.append("register")
        return await wait_idle(*args, **kwargs)

    store._append_alone = append_alone  # type: ignore[method-assign]
    store._append_model_called_alone = append_model_called_alone  # type: ignore[method-assign]
    store.wait_idle = registration  # type: ignore[method-assign]
    group._run_batch, group._run_with_claim = run_batch, run_with_claim


async def picked_up_idle(
    store: Store, runner: TaskRunner, postgres_url: str, sent: list[str], tasks: list[NewTask]
) -> int:
    """A worker (its claim lines noted in `sent`) picks up each task in turn, created only
    once it waits idle (registered), each run to done; `sent`'s length before the last."""
    settings = WorkerSettings("w", concurrency=4, lease_seconds=600, poll_seconds=600)
    stop = asyncio.Event()
    lines, logger = ClaimLines(sent), logging.getLogger("noeta.worker")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    running = asyncio.create_task(Worker(store, runner, settings).run(stop))
    before = 0
    try:
        for task in tasks:
            await until(lambda: _registered(postgres_url), "the worker waits idle", within=60)
            before = len(sent)
            await store.create_task(task)

            async def done(task_id: str = task.id) -> bool:
                return await status_of(store, task_id) == "done"

            await until(done, f"{task.id} is done", within=60)
    finally:
        stop.set()
        await running
        logger.removeHandler(lines)
        logger.setLevel(level)
    return before


async def test_an_idle_workers_pickup_writes_before_it_registers_again(
    store: Store, tmp_path: Path, toolbox: Toolbox, postgres_url: str, monkeypatch: MonkeyPatch
) -> None:
    assert isinstance(store, PostgresStore)
    sent: list[str] = []
    lone: list[bool] = []
    record_sends(store, sent, lone)
    rode: list[bool] = []  # each held claim: committed with its run's first write (ADR-0136)
    write = HeldClaim.write

    async def riding(held: HeldClaim, *args: Any) -> Any:
        written = await write(held, *args)
        rode.append(written is not None)
        return written

    monkeypatch.setattr(HeldClaim, "write", riding)
    script = tmp_path / "one-shot.yaml"
    script.write_text(json.dumps({"replies": [{"text": "done"}, {"text": "done"}]}))
    runner = toolbox.runner(store, ProviderRegistry())
    runner.pins = None  # an agent task: its claim starts nothing (ADR-0101)
    tasks = [one_shot(task_id, script) for task_id in ("warm", "p")]  # "warm": a thread, once
    before = await picked_up_idle(store, runner, postgres_url, sent, tasks)
    after = sent[before:]
    assert "register" in after, after  # idle again, it registered
    assert after.index("append") < after.index("register"), after
    # The claim's log line is written, once, after the pickup's first write went (ADR-0131).
    assert after.count("logged") == 1, after
    assert after.index("append") < after.index("logged"), after
    # Each pickup's run was the worker's only one: its write went without company (ADR-0135).
    assert lone == [True, True], lone
    # and each claim committed with that write, in one commit (ADR-0136); the line after it.
    assert rode == [True, True], rode


# What the job below appends to as it starts: its call, among the worker's other steps.
_SENT: list[str] = []


@noeta.tool(retry_safe=True)
async def pickup_job() -> None:
    """A plain job that notes its start."""
    _SENT.append("called")


def record_listening(store: PostgresStore, sent: list[str]) -> None:
    """Write down each call the worker hears, each time its listener goes back for the
    next one, and each claim as the claim loop asks for it."""
    calls, claim_and_load = store.calls, store.claim_and_load

    def listening(channel: str) -> AsyncGenerator[str, None]:
        async def heard() -> AsyncGenerator[str, None]:
            async for each in calls(channel):
                sent.append("heard")
                yield each
                sent.append("listening")

        return heard()

    async def claim(*args: Any, **kwargs: Any) -> Any:
        sent.append("claim")
        return await claim_and_load(*args, **kwargs)

    store.calls = listening  # type: ignore[method-assign]
    store.claim_and_load = claim  # type: ignore[method-assign]


async def pick_up_a_job(store: Store, postgres_url: str) -> list[str]:
    """An idle worker woken by a fresh job's creation (after a first, to warm it): what
    `_SENT` got meanwhile."""
    _SENT.clear()
    runner = TaskRunner(
        store,
        ProviderRegistry(),
        tools={pickup_job.name: pickup_job},
        pins=(module_pin(pickup_job.module),),
    )
    assert runner.job_starts is not None  # its claims start fresh jobs (ADR-0101)
    tasks = [job_task(task_id, pickup_job, {}, "default", None) for task_id in ("warm", "j")]
    before = await picked_up_idle(store, runner, postgres_url, _SENT, tasks)
    logged = [each.type for each in await store.read_log("j")]
    assert logged.count("ToolStarted") == 1 and logged[-1] == "TaskFinished", logged
    return _SENT[before:]


async def test_an_idle_workers_job_runs_before_its_claim_is_logged(
    store: Store, postgres_url: str
) -> None:
    """A fresh job's claim starts it (ADR-0101): its function is called in the run's first
    turn, and the claim's line after it, as an agent's first write (ADR-0131); a line
    logged first costs the pickup its formatting, scrubbing and writing."""
    sent = await pick_up_a_job(store, postgres_url)
    assert sent == ["called", "logged"], sent


async def test_a_heard_call_is_claimed_before_the_listener_listens_again(
    store: Store, postgres_url: str
) -> None:
    """The claim loop, woken by a call, sends its claim before the listener goes back to
    its connection for the next call (ADR-0134): that way back (the driver's generators,
    its read armed again) ran ahead of the claim on an idle worker's pickup."""
    assert isinstance(store, PostgresStore)
    record_listening(store, _SENT)
    sent = await pick_up_a_job(store, postgres_url)
    assert sent[:3] == ["heard", "claim", "listening"], sent


async def _registered(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url) as admin:
        cursor = await admin.execute("SELECT count(*) FROM idle_workers")
        row = await cursor.fetchone()
    return row is not None and row[0] == 1
