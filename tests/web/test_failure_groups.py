"""Failures by cause (issue 31, issue 33 item 2), the same on sqlite and PostgreSQL: the
failed tasks grouped by error kind, kind (agent or the job's function) and queue, with
counts and the first and last finish; the newest only, under a cap; and the bulk
actions' count under the same filters a group links to."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from noeta.backends.stores import open_store
from noeta.core.errors import NoetaError
from noeta.core.ports.store import Finish, NewTask, Store, TaskStatus
from noeta.core.ports.store_views import FailureGroup, StoreViews, TaskFilter
from noeta.core.rules import events
from tests.web.conftest import encoded


@pytest.fixture
async def views(store_url: str) -> AsyncIterator[StoreViews]:
    store = await open_store(store_url, migrate=True)
    assert isinstance(store, StoreViews)
    yield store
    await store.close()


async def ended(
    views: StoreViews,
    task_id: str,
    error: str,
    *,
    job: str | None = None,
    queue: str = "default",
    status: TaskStatus = TaskStatus.FAILED,
) -> None:
    """A task (a job of function `job`, else an agent task) that ended `status`."""
    store: Store = views  # type: ignore[assignment]
    if job is None:
        opening = encoded(events.TaskCreated(model="scripted:x.yaml", prompt="look"))
    else:
        call = events.CallRequested("job", job, {"a": 1})  # type: ignore[arg-type]
        opening = encoded(events.TaskCreated(model="", tools=(job,)), call)
    assert await store.create_task(NewTask(task_id, opening, queue=queue))
    claim = await store.claim_task("w1", task_id, 30)
    assert claim is not None
    finished = events.TaskFinished(status.value, error=error)
    await store.append(claim, len(opening), encoded(finished), next_state=Finish(status))


def shape(groups: list[FailureGroup]) -> list[tuple[str, str, str, int]]:
    return [(g.error_kind, g.kind, g.queue, g.count) for g in groups]


async def test_failures_are_grouped_by_error_kind_kind_and_queue(views: StoreViews) -> None:
    for n in range(3):
        await ended(views, f"add-{n}", "add failed: ValueError: a is not a number", job="add")
    await ended(views, "add-key", "add failed: KeyError: 'b'", job="add")
    await ended(views, "agent-1", "llm_error: the provider said 500", queue="other")
    await ended(views, "agent-2", "llm_error: the provider said 529", queue="other")
    await ended(views, "plain", "boom, no kind here")
    await ended(views, "fine", "", job="add", status=TaskStatus.DONE)
    await ended(views, "stopped", "cancelled", job="add", status=TaskStatus.CANCELLED)

    groups = await views.failure_groups()

    assert shape(groups) == [
        ("ValueError", "add", "default", 3),
        ("llm_error", "agent", "other", 2),
        ("", "agent", "default", 1),
        ("KeyError", "add", "default", 1),
    ]
    values = groups[0]
    assert values.first_at <= values.last_at
    assert shape(await views.failure_groups(cap=None)) == shape(groups)  # every failure
    assert shape(await views.failure_groups(queue="other")) == [("llm_error", "agent", "other", 2)]
    # The newest two failures only: agent-2, then plain.
    assert sorted(shape(await views.failure_groups(cap=2))) == [
        ("", "agent", "default", 1),
        ("llm_error", "agent", "other", 1),
    ]
    # A group's tasks are the list's filter by job name, error kind and queue.
    where = TaskFilter(job="add", error_kind="ValueError")
    assert await views.count_tasks(statuses=[TaskStatus.FAILED], queue="default", where=where) == 3
    page = await views.task_page(statuses=[TaskStatus.FAILED], where=where)
    assert sorted(record.id for record in page) == ["add-0", "add-1", "add-2"]


async def test_no_failure_is_no_group_and_a_bad_cap_is_refused(views: StoreViews) -> None:
    await ended(views, "fine", "", job="add", status=TaskStatus.DONE)
    assert await views.failure_groups() == []
    for cap in (0, 10**9):
        with pytest.raises(NoetaError, match="failures are grouped over"):
            await views.failure_groups(cap=cap)
