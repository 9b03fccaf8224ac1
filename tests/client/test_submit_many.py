"""`submit_many` on both stores: one batch, checked task by task as `submit` checks,
written whole or not at all, the bad task named by its index and id; and run by a real
worker like any submitted task."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient, Client, Submission
from noeta.core.errors import ConfigError, PayloadError
from noeta.core.rules import events
from tests.worker.conftest import WorkerProcess


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[AsyncClient]:
    await migrated(store_url)
    async with AsyncClient(store_url) as client:
        yield client


def script(folder: Path, text: str) -> str:
    path = folder / "model.yaml"
    path.write_text(json.dumps({"replies": [{"text": text}]}))
    return f"scripted:{path}"


async def migrated(store_url: str) -> None:
    await (await open_store(store_url, migrate=True)).close()


async def created_event(client: AsyncClient, task_id: str) -> events.TaskCreated:
    (first,) = (await (await client.store()).read_log(task_id))[:1]
    created = events.decode(first.type, first.data)
    assert isinstance(created, events.TaskCreated)
    return created


async def test_a_batch_runs_like_submitted_tasks(
    client: AsyncClient,
    store_url: str,
    job_workers: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    model = script(tmp_path, "done")
    batch = [f"task {n}" for n in range(20)] + [Submission("named", id="mine", tools=["Read"])]
    handles = await client.submit_many(batch, model=model, queue="bulk")
    assert len(handles) == 21 and handles[-1].id == "mine"
    assert (await created_event(client, "mine")).tools == ("Read",)
    job_workers(store_url, "w", queues="bulk", poll=0.1)
    for handle in handles:
        assert await client.result(handle, timeout=60) == "done"


@pytest.mark.parametrize(
    ("bad", "error", "says"),
    [
        (Submission("", id="b2"), ConfigError, "needs a prompt"),
        (Submission("hi", id="../escape"), PayloadError, "task id '../escape'"),
        (Submission("hi", id="b2", queue="q\x00"), PayloadError, "NUL"),
        (Submission("hi", id="b2", queue=""), PayloadError, "must not be empty"),
        (Submission("hi", id="b2", model="gpt-4"), ConfigError, "model spec"),
        (Submission("hi", id="b0"), PayloadError, "has the id of task 0"),
    ],
)
async def test_one_bad_task_writes_nothing_and_is_named(
    client: AsyncClient, bad: Submission, error: type[Exception], says: str
) -> None:
    good = [Submission("hi", id="b0", tools=[]), Submission("hi", id="b1", tools=[])]
    with pytest.raises(error, match=r"task 2 of the batch \(id '.*'\)") as refused:
        await client.submit_many([*good, bad])
    assert says in str(refused.value) and "nothing of the batch was written" in str(refused.value)
    assert await client.tasks() == []


async def test_a_taken_id_writes_nothing_and_is_named(client: AsyncClient) -> None:
    await client.submit("first", id="taken", tools=[])
    batch = [Submission("hi", id="new", tools=[]), Submission("again", id="taken", tools=[])]
    with pytest.raises(ConfigError, match=r"task 1 of the batch \(id 'taken'\).*exists already"):
        await client.submit_many(batch)
    assert [record.id for record in await client.tasks()] == ["taken"]


async def test_a_relative_script_is_made_absolute_and_tools_are_the_workers(
    client: AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (handle,) = await client.submit_many(["hi"], model="scripted:model.yaml")
    created = await created_event(client, handle.id)
    assert created.model == f"scripted:{tmp_path / 'model.yaml'}"
    assert created.tools is None  # every tool its worker's plugins offer


def test_the_sync_client_submits_a_batch(store_url: str) -> None:
    asyncio.run(migrated(store_url))
    with Client(store_url) as client:
        handles = client.submit_many(["a", "b"], model="openai:m", queue="q")
        assert [client.get(handle).queue for handle in handles] == ["q", "q"]
        with pytest.raises(ConfigError, match="task 1 of the batch"):
            client.submit_many(["a", " "])


async def test_a_submission_carries_its_key_and_priority(client: AsyncClient) -> None:
    store = await client.store()
    await client.set_queue("q", per_key=1)
    batch = [
        Submission("a", id="k1", key="tenant"),
        Submission("b", id="k2", key="tenant"),
        Submission("c", id="urgent", priority=9),
    ]
    await client.submit_many(batch, model="scripted:/none.yaml", queue="q", key="other")
    first = await store.claim_and_load("w", ["q"], 30.0, limit=1, snapshot_version="v")
    assert [each.claim.task_id for each in first] == ["urgent"]
    rest = await store.claim_and_load("w", ["q"], 30.0, limit=5, snapshot_version="v")
    assert {each.claim.task_id for each in rest} == {"k1"}  # tenant's one slot; urgent: other's
