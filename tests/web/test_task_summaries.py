"""What the task list shows of each task beyond its row, the same on sqlite and
PostgreSQL: its kind (agent, or the job's function), a one-line input, its error and the
error's kind, when it started and finished, its attempts; and the filters by job name,
error kind and creation time, and the text search over job names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import Finish, NewTask, Store, TaskStatus
from noeta.core.ports.store_views import StoreViews, TaskFilter
from noeta.core.rules import events
from tests.web.conftest import encoded


@pytest.fixture
async def views(store_url: str) -> AsyncIterator[StoreViews]:
    store = await open_store(store_url, migrate=True)
    assert isinstance(store, StoreViews)
    yield store
    await store.close()


def as_store(views: StoreViews) -> Store:
    assert hasattr(views, "create_task")
    return views  # type: ignore[return-value]


async def agent(views: StoreViews, task_id: str, prompt: str) -> None:
    created = events.TaskCreated(model="scripted:x.yaml", prompt=prompt)
    assert await as_store(views).create_task(NewTask(task_id, encoded(created)))


async def job(views: StoreViews, task_id: str, name: str, arguments: dict[str, object]) -> None:
    opening = events.TaskCreated(model="", tools=(name,))
    call = events.CallRequested("job", name, arguments)  # type: ignore[arg-type]
    assert await as_store(views).create_task(NewTask(task_id, encoded(opening, call)))


async def run(
    views: StoreViews, task_id: str, *written: events.Event, ends: TaskStatus | None = None
) -> None:
    """One claim of the task that appends `written`, finishing it as `ends`, if given."""
    store = as_store(views)
    claim = await store.claim_task("w1", task_id, 30)
    assert claim is not None
    record = await store.get_task(task_id)
    assert record is not None
    if ends is None:
        await store.append(claim, record.last_seq, encoded(*written))
        await store.release(claim)
    else:
        await store.append(claim, record.last_seq, encoded(*written), next_state=Finish(ends))


async def test_a_page_of_summaries_says_kind_input_error_runtime_and_attempts(
    views: StoreViews,
) -> None:
    prompt = "Summarise\nthe report " + 'é\\"' * 700  # longer than what is read of it
    await agent(views, "a1", prompt)
    await job(views, "j1", "add", {"a": 1, "b": "é"})
    attempt = events.ToolStarted("job", "add", {"a": 1, "b": "é"})
    await run(views, "j1", attempt, events.AttemptFailed("job", 1, "ValueError: x", 0.1, "2026"))
    ended = events.TaskFinished("failed", error="add failed: ValueError: bad\nsecond line")
    await run(
        views, "j1", attempt, events.ToolFinished("job", "bad", True), ended, ends=TaskStatus.FAILED
    )
    await job(views, "j2", "resize", {"blob": "x" * 5000})
    cancelled = events.TaskFinished("cancelled", error="cancelled on request")
    await run(views, "j2", cancelled, ends=TaskStatus.CANCELLED)

    found = await views.task_summaries(["a1", "j1", "j2", "nope"])

    assert set(found) == {"a1", "j1", "j2"}
    assert found["a1"].kind == "agent" and found["a1"].error == ""
    assert found["a1"].input == ("Summarise the report " + 'é\\"' * 30)[:79] + "…"
    assert found["a1"].started_at is None and found["a1"].finished_at is None
    assert found["a1"].attempts == 0 and found["a1"].error_kind == ""
    failed = found["j1"]
    assert (failed.kind, failed.input) == ("add", '{"a": 1, "b": "é"}')
    assert failed.error == "add failed: ValueError: bad second line"
    assert failed.error_kind == "ValueError" and failed.attempts == 2
    assert failed.started_at is not None and failed.finished_at is not None
    assert timedelta(0) <= failed.finished_at - failed.started_at < timedelta(hours=1)
    assert found["j2"].kind == "resize" and found["j2"].input.startswith('{"blob":"xxx')
    assert len(found["j2"].input) == 80 and found["j2"].error_kind == "cancelled"
    assert await views.task_summaries([]) == {}


async def test_filters_by_job_name_error_kind_and_creation(views: StoreViews) -> None:
    await job(views, "add-1", "add", {"name": "resize"})
    await job(views, "resize-1", "resize", {})
    await agent(views, "chat-1", 'call "name":"add" please')
    for task_id, error in [("add-1", "add failed: ValueError: no"), ("chat-1", "llm_error: x")]:
        await run(
            views, task_id, events.TaskFinished("failed", error=error), ends=TaskStatus.FAILED
        )
    await run(
        views, "resize-1", events.TaskFinished("cancelled", error="stop"), ends=TaskStatus.CANCELLED
    )

    async def ids(**filters: object) -> list[str]:
        text = filters.pop("text", None)
        where = TaskFilter(**filters)  # type: ignore[arg-type]
        return sorted(r.id for r in await views.task_page(text=text, where=where))  # type: ignore[arg-type]

    assert await ids(job="add") == ["add-1"]
    assert await ids(job="resize") == ["resize-1"]  # not add-1, whose input names it
    assert await ids(job="ad") == []
    assert await ids(error_kind="ValueError") == ["add-1"]
    assert await ids(error_kind="llm_error") == ["chat-1"]
    assert await ids(error_kind="cancelled") == ["resize-1"]
    assert await ids(error_kind="KeyError") == []
    assert await ids(text="esiz") == ["resize-1"]  # a job's name is searched as well
    newest = (await views.task_page(limit=1))[0]
    assert await ids(created_since=newest.created_at) == [newest.id]
    with pytest.raises(Exception, match="is not an error kind"):
        await views.task_page(where=TaskFilter(error_kind="no such kind"))
