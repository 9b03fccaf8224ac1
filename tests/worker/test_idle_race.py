"""A worker back from a run registers as idle without claiming first (ADR-0087): a task
made claimable while it ran, when nobody was registered to be called, is still claimed at
once, told by the registration's report. The poll is 300 s here: only the report can."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres.appends import CREATE_TASK, create_params
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from tests.worker.conftest import WorkerProcess, add_task, status_of, until

IDLE_ROWS = "SELECT count(*) FROM idle_workers"
WAITING_ON_THE_WAKE_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()
   AND application_name LIKE 'noeta-worker:%%'
"""


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


async def value(url: str, query: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        row = await (await admin.execute(query)).fetchone()
    assert row is not None
    return int(row[0])


def scripted_task(folder: Path, task_id: str) -> NewTask:
    script = folder / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": [{"text": "done"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Bash",))
    return NewTask(task_id, [NewEvent(*events.encode(created))])


async def paused_in_its_first_run(
    url: str, store: Store, folder: Path, workers: Callable[..., WorkerProcess]
) -> WorkerProcess:
    """One worker, called for task "first", stopped (SIGSTOP) after that run's first
    append: mid-run, called, so in no registry row."""
    worker = workers(
        url, "w", lease=30, poll=300.0, concurrency=1, failpoints="append.after_commit=pause@1"
    )

    async def registered() -> bool:
        return await value(url, IDLE_ROWS) == 1

    await until(registered, "the worker waits idle")
    await add_task(store, folder, "first", {"text": "done"})
    await until(worker.paused, "the worker stops in its first run")
    assert await value(url, IDLE_ROWS) == 0  # the call took its row: nobody to call now
    return worker


async def test_a_task_created_while_the_worker_ran_is_claimed_from_its_registration(
    postgres_url: str, store: Store, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    worker = await paused_in_its_first_run(postgres_url, store, tmp_path, workers)
    await add_task(store, tmp_path, "meanwhile", {"text": "done"})  # nobody is called

    worker.signal(signal.SIGCONT)

    async def both_done() -> bool:
        statuses = {await status_of(store, "first"), await status_of(store, "meanwhile")}
        return statuses == {"done"}

    await until(both_done, "both tasks ran, the second without waiting for the poll")
    record = await store.get_task("meanwhile")
    assert record is not None and record.owner == "w"


async def test_a_creator_that_commits_during_the_registration_is_reported_to_it(
    postgres_url: str, store: Store, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    """The creator looked for idle workers (none) before the worker registered, and
    commits only while the registration waits on the wake-up lock it holds."""
    worker = await paused_in_its_first_run(postgres_url, store, tmp_path, workers)
    async with await psycopg.AsyncConnection.connect(postgres_url) as creator:
        await creator.execute(CREATE_TASK, create_params(scripted_task(tmp_path, "raced")))
        worker.signal(signal.SIGCONT)

        async def registration_waits() -> bool:
            return await value(postgres_url, WAITING_ON_THE_WAKE_LOCK) == 1

        await until(registration_waits, "the worker's registration waits for the creator")
        await creator.commit()

    async def raced_done() -> bool:
        return await status_of(store, "raced") == "done"

    await until(raced_done, "the raced task ran without waiting for the poll")
    assert await status_of(store, "first") == "done"
    assert worker.process.poll() is None
