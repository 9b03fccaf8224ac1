"""The client on both stores, against a real `noeta worker`: results, typed errors, the
log followed live, listing, messages, cancelling (issue 16)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import NoetaError, TaskCancelled, TaskFailed
from noeta.core.rules import events
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests


@pytest.fixture
async def any_client(store_url: str) -> AsyncIterator[AsyncClient]:
    store = await open_store(store_url, migrate=True)
    await store.close()
    async with AsyncClient(store_url) as client:
        yield client


def script(folder: Path, *replies: dict[str, object]) -> str:
    path = folder / "model.yaml"
    path.write_text(json.dumps({"replies": list(replies)}))
    return f"scripted:{path}"


async def test_result_is_the_answer_and_tail_follows_to_the_end(
    any_client: AsyncClient,
    store_url: str,
    job_workers: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    model = script(tmp_path, {"text": "forty-two"})
    task = await any_client.submit("the answer?", model=model, tools=[], queue="q1")
    job_workers(store_url, "w", queues="q1", poll=0.1)
    assert await any_client.result(task, timeout=60) == "forty-two"
    kinds = [type(tailed.event).__name__ async for tailed in any_client.tail(task)]
    assert kinds[0] == "TaskCreated" and kinds[-1] == "TaskFinished"
    listed = await any_client.tasks(status="done", queue="q1")
    assert [record.id for record in listed] == [task.id]


async def test_a_failed_task_raises_task_failed_with_its_error(
    any_client: AsyncClient,
    store_url: str,
    job_workers: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    model = script(tmp_path, {"text": "never", "fail_first": [{"status": 400}]})
    task = await any_client.submit("fail", model=model, tools=[])
    job_workers(store_url, "w", poll=0.1)
    with pytest.raises(TaskFailed) as failed:
        await any_client.result(task, timeout=60)
    assert failed.value.task_id == task.id and "400" in failed.value.error


async def test_jobs_retry_by_their_policy_and_fail_with_their_error(
    any_client: AsyncClient, store_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    flaky = await any_client.enqueue("flaky", {"fails": 2})
    broken = await any_client.enqueue("broken", {"reason": "no such file"})
    slow = await any_client.enqueue("too_slow")
    job_workers(store_url, "w", poll=0.1)
    assert await any_client.job_result(flaky, timeout=60) == 3  # two refused, the third ran
    with pytest.raises(TaskFailed, match=r"after 1 attempt\(s\): ValueError: no such file"):
        await any_client.result(broken, timeout=60)  # ValueError is not in its retry_on
    with pytest.raises(TaskFailed, match=r"past its time limit of 0\.3s"):
        await any_client.result(slow, timeout=60)


async def test_an_interactive_task_takes_messages_and_is_cancelled(
    any_client: AsyncClient,
    store_url: str,
    job_workers: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    model = script(tmp_path, {"text": "hi there"})
    task = await any_client.submit("", model=model, tools=[], interactive=True)
    assert await any_client.send(task, "hello", key="m1")
    assert not await any_client.send(task, "hello", key="m1")  # one key, one delivery
    job_workers(store_url, "w", poll=0.1)
    async for tailed in any_client.tail(task):
        if isinstance(tailed.event, events.TurnEnded):
            assert tailed.event.answer == "hi there"
            break
    assert await any_client.cancel(task)
    with pytest.raises(TaskCancelled):
        await any_client.result(task, timeout=60)
    with pytest.raises(NoetaError, match="already cancelled"):
        await any_client.cancel(task)


async def test_a_one_shot_task_takes_no_message_and_no_answer_it_did_not_ask(
    any_client: AsyncClient, tmp_path: Path
) -> None:
    task = await any_client.submit("go", model=script(tmp_path, {"text": "x"}), tools=[])
    with pytest.raises(NoetaError, match="one-shot"):
        await any_client.send(task, "hello")
    with pytest.raises(NoetaError, match="not waiting for an answer on call c1"):
        await any_client.answer(task, "c1", "allow")
