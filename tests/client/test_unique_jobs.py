"""Unique and debounced jobs (issue 29 item 8, ADR-0093): `unique_key=` with `unique_for=`
returns the job holding the key within its window and writes nothing; `debounce=`
replaces a job not yet started, so only the last runs. The database holds the key, so
racing producers get one job. A real PostgreSQL; real worker processes where jobs run."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient, Client, use_client
from noeta.core.errors import ConfigError, TaskCancelled
from noeta.core.rules import events
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

HOUR = 3600.0
ROWS = """
SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM events),
       (SELECT count(*) FROM job_unique_keys)
"""


async def _migrate(url: str) -> None:
    await (await open_store(url, migrate=True)).close()


async def rows(url: str) -> tuple[int, ...]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        row = await (await connection.execute(ROWS)).fetchone()
    assert row is not None
    return tuple(row)


async def test_a_second_enqueue_in_the_window_gets_the_first_handle_and_writes_nothing(
    client: AsyncClient, postgres_url: str
) -> None:
    first = await client.enqueue(
        "resize", {"image": "a.png", "width": 1}, unique_key="a.png", unique_for=HOUR
    )
    before = await rows(postgres_url)
    second = await client.enqueue(
        "resize", {"image": "a.png", "width": 2}, unique_key="a.png", unique_for=HOUR
    )
    assert second.id == first.id
    assert await rows(postgres_url) == before
    # Another job's key space, and another key, are other jobs.
    other_key = await client.enqueue(
        "resize", {"image": "b.png", "width": 1}, unique_key="b.png", unique_for=HOUR
    )
    other_job = await client.enqueue(
        "send_email", {"to": "ada@example.com"}, unique_key="a.png", unique_for=HOUR
    )
    assert len({first.id, other_key.id, other_job.id}) == 3


async def test_after_the_window_a_new_job_is_made(client: AsyncClient, postgres_url: str) -> None:
    first = await client.enqueue(
        "resize", {"image": "a.png", "width": 1}, unique_key="k", unique_for=0.05, delay=HOUR
    )
    store = await client.store()
    created = (await client.get(first)).created_at
    # Waiting on a condition, the database clock past the window, not on a duration.
    while await store.clock() <= created + timedelta(seconds=0.05):  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    second = await client.enqueue(
        "resize", {"image": "a.png", "width": 2}, unique_key="k", unique_for=HOUR, delay=HOUR
    )
    assert second.id != first.id
    third = await client.enqueue(
        "resize", {"image": "a.png", "width": 3}, unique_key="k", unique_for=HOUR, delay=HOUR
    )
    assert third.id == second.id


async def test_a_finished_first_job_holds_its_window_a_failed_or_cancelled_one_does_not(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    done = await client.enqueue(
        "resize", {"image": "a.png", "width": 1}, unique_key="done", unique_for=HOUR
    )
    cancelled = await client.enqueue(
        "send_email", {"to": "ada@example.com"}, unique_key="cancel", unique_for=HOUR
    )
    assert await client.cancel(cancelled)
    job_workers(postgres_url, "w", poll=0.1)
    await client.job_result(done, timeout=60)
    with pytest.raises(TaskCancelled):
        await client.result(cancelled, timeout=60)
    again = await client.enqueue(
        "resize", {"image": "a.png", "width": 1}, unique_key="done", unique_for=HOUR
    )
    assert again.id == done.id
    replaced = await client.enqueue(
        "send_email", {"to": "ada@example.com"}, unique_key="cancel", unique_for=HOUR
    )
    assert replaced.id != cancelled.id


def race(url: str, producers: int, **unique: Any) -> tuple[list[str], list[Client]]:
    """`producers` threads, each with a client (a connection) of its own, enqueue one key
    at once (a barrier lets them go together): the ids they got back, and the clients."""
    asyncio.run(_migrate(url))
    clients = [Client(url) for _ in range(producers)]
    for client in clients:
        client.tasks(limit=1)  # connected before the race
    start = threading.Barrier(producers)
    made: list[str] = []

    def produce(client: Client, number: int) -> None:
        start.wait()
        handle = client.enqueue(
            "resize", {"image": "x.png", "width": number}, unique_key="x.png", **unique
        )
        made.append(handle.id)

    threads = [
        threading.Thread(target=produce, args=(client, number))
        for number, client in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return made, clients


def test_racing_producers_get_one_job(postgres_url: str) -> None:
    made, clients = race(postgres_url, 8, unique_for=HOUR, delay=HOUR)
    try:
        assert len(made) == 8
        assert len(set(made)) == 1
        assert [record.id for record in clients[0].tasks(limit=100)] == made[:1]
    finally:
        for client in clients:
            client.close()


def test_racing_debounced_producers_leave_one_job_pending(postgres_url: str) -> None:
    made, clients = race(postgres_url, 8, debounce=HOUR)
    try:
        assert len(set(made)) == 8  # each made its job, and replaced the one before
        pending = clients[0].tasks(status="ready", limit=100)
        assert len(pending) == 1
        assert len(clients[0].tasks(status="cancelled", limit=100)) == 7
    finally:
        for client in clients:
            client.close()


async def test_three_quick_debounced_enqueues_run_once_with_the_last_input(
    client: AsyncClient,
    postgres_url: str,
    job_workers: Callable[..., WorkerProcess],
    ledger: Path,
) -> None:
    # No worker yet: nothing can start between the enqueues, however slow the machine.
    handles = []
    for width in (1, 2, 3):
        before = await (await client.store()).clock()
        handles.append(
            await client.enqueue(
                "resize", {"image": "d.png", "width": width}, unique_key="d.png", debounce=0.2
            )
        )
    last = await client.get(handles[-1])
    assert last.ready_at is not None
    assert last.ready_at >= before + timedelta(seconds=0.2)  # debounce after the last
    job_workers(postgres_url, "w", poll=0.1)
    assert await client.job_result(handles[-1], timeout=60) == {"image": "d.png", "width": 3}
    for replaced, by in itertools.pairwise(handles):
        with pytest.raises(TaskCancelled, match=f"superseded by {by.id}"):
            await client.result(replaced, timeout=60)
        logged = [tailed.event async for tailed in client.tail(replaced, follow=False)]
        assert not any(isinstance(event, events.ToolStarted) for event in logged)
    ran = (await asyncio.to_thread(ledger.read_text)).splitlines()
    assert ran == [f"resize {handles[-1].id}:job"]


async def test_a_debounce_after_the_job_started_makes_a_new_job(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    job_workers(postgres_url, "w", poll=0.1)
    first = await client.enqueue(
        "resize", {"image": "e.png", "width": 1}, unique_key="e.png", debounce=0
    )
    await client.job_result(first, timeout=60)
    second = await client.enqueue(
        "resize", {"image": "e.png", "width": 2}, unique_key="e.png", debounce=0
    )
    assert second.id != first.id
    assert await client.job_result(second, timeout=60) == {"image": "e.png", "width": 2}
    assert await client.job_result(first, timeout=60) == {"image": "e.png", "width": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": "k", "unique_for": 0}, "unique_for must be more than 0 seconds"),
        ({"unique_key": "k", "unique_for": -1}, "unique_for must be more than 0 seconds"),
        ({"unique_key": "k", "unique_for": float("nan")}, "unique_for must be more than 0"),
        ({"unique_key": "k", "unique_for": 1e300}, "unique_for must be more than 0"),
        ({"unique_key": "k", "debounce": float("inf")}, "debounce must be zero or more"),
        ({"unique_key": "k", "debounce": -1}, "debounce must be zero or more seconds"),
        ({"unique_for": 60}, "unique_for needs a unique_key"),
        ({"debounce": 60}, "debounce needs a unique_key"),
        ({"unique_key": "k"}, "unique_key needs unique_for=SECONDS or debounce=SECONDS"),
        ({"unique_key": "k", "unique_for": 1, "debounce": 1}, "unique_for or debounce, not both"),
        ({"unique_key": "k", "debounce": 1, "delay": 5}, "debounce sets when the job starts"),
        ({"unique_key": "k", "unique_for": 1, "id": "mine"}, "give id or unique_key, not both"),
        ({"unique_key": "", "unique_for": 1}, "unique key"),
    ],
)
async def test_bad_unique_options_are_refused_before_anything_is_written(
    client: AsyncClient, postgres_url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        await client.enqueue("resize", {"image": "a.png", "width": 1}, **options)
    assert await rows(postgres_url) == (0, 0, 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_keys": ["k"], "unique_for": 0}, "unique_for must be more than 0 seconds"),
        ({"unique_keys": ["k"], "debounce": -1}, "debounce must be zero or more seconds"),
        ({"unique_for": 60}, "unique_for needs unique_keys"),
        ({"unique_keys": ["k"]}, "unique_keys needs unique_for=SECONDS or debounce=SECONDS"),
        ({"unique_keys": ["k", "l"], "unique_for": 1}, "unique_keys has 2 keys for 1 jobs"),
    ],
)
async def test_bad_unique_options_of_a_batch_are_refused_before_anything_is_written(
    client: AsyncClient, postgres_url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        await client.enqueue_many("resize", [{"image": "a.png", "width": 1}], **options)
    assert await rows(postgres_url) == (0, 0, 0)


async def test_a_batch_acts_as_its_jobs_enqueued_in_order(
    client: AsyncClient, postgres_url: str
) -> None:
    inputs = [{"image": f"{n}.png", "width": n} for n in range(4)]
    unique = await client.enqueue_many(
        "resize", inputs, unique_keys=["a", "b", "a", "c"], unique_for=HOUR, delay=HOUR
    )
    assert unique[2].id == unique[0].id
    assert len({handle.id for handle in unique}) == 3
    again = await client.enqueue_many(
        "resize", inputs[:1], unique_keys=["b"], unique_for=HOUR, delay=HOUR
    )
    assert again[0].id == unique[1].id
    debounced = await client.enqueue_many(
        "send_email",
        [{"to": "a@example.com"}, {"to": "b@example.com"}],
        unique_keys=["mail", "mail"],
        debounce=HOUR,
    )
    assert debounced[0].id != debounced[1].id
    with pytest.raises(TaskCancelled, match=f"superseded by {debounced[1].id}"):
        await client.result(debounced[0], timeout=60)
    assert (await client.get(debounced[1])).status == "ready"


def test_apply_async_takes_a_unique_key(postgres_url: str) -> None:
    resize: Any = jobs_for_tests.resize
    asyncio.run(_migrate(postgres_url))
    with Client(postgres_url) as client:
        client.tasks(limit=1)
        use_client(client)
        try:
            first = resize.apply_async(
                kwargs={"image": "f.png", "width": 1}, unique_key="f", unique_for=HOUR
            )
            second = resize.apply_async(
                ("f.png", 2), countdown=HOUR, unique_key="f", unique_for=HOUR
            )
            assert second.id == first.id
            with pytest.raises(ConfigError, match="unique_for must be more than 0"):
                resize.apply_async(("f.png", 3), unique_key="g", unique_for=0)
        finally:
            use_client(None)


async def test_the_sqlite_store_keeps_unique_and_debounced_jobs_too(tmp_path: Path) -> None:
    async with AsyncClient(f"sqlite:///{tmp_path / 'noeta.db'}") as client:
        first = await client.enqueue(
            "resize", {"image": "a.png", "width": 1}, unique_key="k", unique_for=HOUR
        )
        again = await client.enqueue(
            "resize", {"image": "a.png", "width": 2}, unique_key="k", unique_for=HOUR
        )
        assert again.id == first.id
        debounced = [
            await client.enqueue("send_email", {"to": to}, unique_key="m", debounce=HOUR)
            for to in ("a@example.com", "b@example.com")
        ]
        with pytest.raises(TaskCancelled, match=f"superseded by {debounced[1].id}"):
            await client.result(debounced[0], timeout=60)
        assert {record.id for record in await client.tasks(status="ready")} == {
            first.id,
            debounced[1].id,
        }
