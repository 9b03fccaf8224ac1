"""The store's read-only views for `noeta web`, the same on sqlite and PostgreSQL: keyset
pages that visit every task once, newest first; text matched literally in the id or the
prompt; counts capped; a log page that leaves a long event in the store; raw text in parts;
the claims held now; whether a task launched a subtask."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import Finish, NewTask, Store, TaskStatus
from noeta.core.ports.store_views import StoreViews, TaskCursor
from noeta.core.rules import events
from tests.web.conftest import encoded

FAILED = Finish(TaskStatus.FAILED)


@pytest.fixture
async def views(store_url: str) -> AsyncIterator[StoreViews]:
    store = await open_store(store_url, migrate=True)
    assert isinstance(store, StoreViews)
    yield store
    await store.close()


def as_store(views: StoreViews) -> Store:
    assert hasattr(views, "create_task")
    return views  # type: ignore[return-value]


async def create(views: StoreViews, task_id: str, prompt: str = "", queue: str = "default") -> None:
    created = events.TaskCreated(model="scripted:x.yaml", prompt=prompt)
    assert await as_store(views).create_task(NewTask(task_id, encoded(created), queue=queue))


async def test_keyset_pages_visit_every_task_once_newest_first(views: StoreViews) -> None:
    for n in range(23):
        await create(views, f"t{n:02}")
    seen: list[str] = []
    cursor = None
    while page := await views.task_page(before=cursor, limit=5):
        seen += [record.id for record in page]
        cursor = TaskCursor(page[-1].created_at, page[-1].id)
    assert seen == [f"t{n:02}" for n in reversed(range(23))]


async def test_filters_match_status_queue_and_text_taken_literally(views: StoreViews) -> None:
    await create(views, "plain-1", prompt="résumé of 100% of the logs")
    await create(views, "under_score", queue="other")
    await create(views, "x", prompt="nothing here")
    found = await views.task_page(text="100%")
    assert [record.id for record in found] == ["plain-1"]
    assert [r.id for r in await views.task_page(text="RÉSUMÉ".lower())] == ["plain-1"]
    assert [r.id for r in await views.task_page(text="_")] == ["under_score"]
    assert [r.id for r in await views.task_page(queue="other")] == ["under_score"]
    assert await views.task_page(statuses=[TaskStatus.DONE]) == []
    assert len(await views.task_page(statuses=[TaskStatus.READY, TaskStatus.DONE])) == 3


async def test_a_filter_is_counted_whole_and_pages_only_what_finished_since(
    views: StoreViews,
) -> None:
    store = as_store(views)
    for n in range(5):
        await create(views, f"f{n}", prompt=f"job {n}", queue="a" if n < 4 else "b")
        claim = await store.claim_task("w", f"f{n}", 30)
        assert claim is not None
        await store.append(claim, 1, encoded(events.TaskFinished("failed")), next_state=FAILED)
    await create(views, "r0", queue="a")
    failed = [TaskStatus.FAILED]
    assert await views.count_tasks(statuses=failed) == 5
    assert await views.count_tasks(statuses=failed, queue="a") == 4
    assert await views.count_tasks(statuses=failed, cap=2) == 2
    assert await views.count_tasks(statuses=failed, text="job 3") == 1
    assert await views.count_tasks(queue="a") == 5
    finished = (await views.task_page(statuses=failed, limit=1))[0].updated_at
    recent = await views.task_page(statuses=failed, finished_since=finished)
    assert [record.id for record in recent] == ["f4"]
    assert await views.count_tasks(statuses=failed, finished_since=finished) == 1
    later = finished + timedelta(seconds=1)
    assert await views.count_tasks(statuses=failed, finished_since=later) == 0
    assert await views.task_page(finished_since=later) == []


async def test_log_openings_read_the_first_events_of_many_tasks(views: StoreViews) -> None:
    store = as_store(views)
    for task_id in ("a", "b"):
        await create(views, task_id, prompt=task_id)
        claim = await store.claim_task("w", task_id, 30)
        assert claim is not None
        turn: list[events.Event] = [
            events.TurnEnded("answered", "x"),
            events.TaskFinished("done", "x"),
        ]
        await store.append(claim, 1, encoded(*turn), next_state=Finish())
    openings = await views.log_openings(["a", "b", "none"], 2)
    assert {task: [e.type for e in log] for task, log in openings.items()} == {
        "a": ["TaskCreated", "TurnEnded"],
        "b": ["TaskCreated", "TurnEnded"],
    }
    assert openings["b"][0].data["prompt"] == "b"  # type: ignore[index]
    assert await views.log_openings([], 3) == {}


async def test_counts_are_capped_per_status(views: StoreViews) -> None:
    for n in range(4):
        await create(views, f"a{n}", queue="a")
    await create(views, "b0", queue="b")
    exact = {(c.status, c.queue): (c.count, c.capped) for c in await views.task_counts(cap=10)}
    assert exact == {(TaskStatus.READY, "a"): (4, False), (TaskStatus.READY, "b"): (1, False)}
    capped = await views.task_counts(cap=3)
    assert sum(c.count for c in capped) == 3 and all(c.capped for c in capped)


async def test_a_long_event_stays_in_the_store_and_is_read_in_parts(views: StoreViews) -> None:
    await create(views, "long", prompt="p" * 5000)
    (entry,) = await views.log_page("long", inline_chars=1000)
    assert entry.data is None and entry.size > 5000 and entry.preview.startswith('{"v":1')
    (whole,) = await views.log_page("long", inline_chars=100_000)
    assert isinstance(whole.data, dict) and whole.data["prompt"] == "p" * 5000
    first = await views.event_text("long", 1, offset=0, length=10)
    rest = await views.event_text("long", 1, offset=10, length=100_000)
    assert first is not None and rest is not None
    assert first[1] == rest[1] == entry.size and len(first[0] + rest[0]) == entry.size
    assert await views.event_text("long", 2) is None


async def test_held_claims_name_their_worker_epoch_and_lease(views: StoreViews) -> None:
    await create(views, "held")
    await create(views, "idle")
    claim = await as_store(views).claim_task("worker-z", "held", 30)
    assert claim is not None
    (held,) = await views.held_claims()
    assert (held.task_id, held.owner, held.epoch, held.status) == (
        "held",
        "worker-z",
        1,
        TaskStatus.RUNNING,
    )
    assert held.lease_until == claim.lease_until


async def test_no_stored_prompt_breaks_the_text_search(views: StoreViews) -> None:
    # Rows the store holds today whatever later edges refuse: a NUL, a lone surrogate (tool
    # output decoded with surrogateescape), control characters; JSON-escaped in the log.
    await create(views, "nul", prompt="before\x00after the NUL")
    await create(views, "surrogate", prompt="bytes \udcff here")
    await create(views, "controls", prompt='tab\there, a "quote", a \\ and a bell\x07')
    await create(views, "plain", prompt="an ordinary prompt: résumé")
    assert [r.id for r in await views.task_page(text="ordinary")] == ["plain"]
    assert [r.id for r in await views.task_page(text="ORDINARY")] == ["plain"]
    assert [r.id for r in await views.task_page(text="résumé")] == ["plain"]
    assert [r.id for r in await views.task_page(text="before")] == ["nul"]
    assert [r.id for r in await views.task_page(text='"quote", a \\ and')] == ["controls"]
    assert [r.id for r in await views.task_page(text="tab\there")] == ["controls"]
    assert [r.id for r in await views.task_page(text="bytes")] == ["surrogate"]
    # A search never matches inside an escape: "n" is not the n of a "\n".
    await create(views, "newline", prompt="line\nice")
    assert [r.id for r in await views.task_page(text="nice")] == []
    assert [r.id for r in await views.task_page(text="line\nice")] == ["newline"]


async def test_has_subtasks_is_true_only_once_the_log_launched_one(views: StoreViews) -> None:
    await create(views, "parent")
    store = as_store(views)
    claim = await store.claim_task("worker-z", "parent", 30)
    assert claim is not None
    assert not await views.has_subtasks("parent") and not await views.has_subtasks("nobody")
    launched = events.SubtaskLaunched("call-1", "parent.call-1.1")
    await store.append(claim, 1, encoded(events.ToolStarted("call-1", "Agent", {}), launched))
    assert await views.has_subtasks("parent")
