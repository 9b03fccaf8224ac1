"""Every failure grouped from the search index on PostgreSQL (ADR-0112): the groups are
those the failures read one by one give, whether a failure was indexed, failed after its
task was indexed, or came after the index's walks; none is counted twice, and a pruned
one is gone. Read from the index for real: a kind planted in its row shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.retention import Pruning
from noeta.core.ports.store import Finish, NewTask, Store, TaskStatus
from noeta.core.ports.store_views import MAX_FAILURES, StoreViews
from noeta.core.rules import events
from tests.web.conftest import encoded
from tests.web.test_failure_groups import ended, shape
from tests.web.test_text_search import fill


@pytest.fixture
async def views(postgres_url: str) -> AsyncIterator[StoreViews]:
    store = await open_store(postgres_url, migrate=True)
    assert isinstance(store, StoreViews)
    store.search_settle = timedelta(0)  # type: ignore[attr-defined]
    yield store
    await store.close()


async def every_group_is_as_read_directly(views: StoreViews) -> list[tuple[str, str, str, int]]:
    every = shape(await views.failure_groups(cap=None))
    assert every == shape(await views.failure_groups(cap=MAX_FAILURES))
    return every


async def test_every_failure_is_grouped_once_from_the_index_and_its_tails(
    views: StoreViews, postgres_url: str
) -> None:
    store: Store = views  # type: ignore[assignment]
    for n in range(3):
        await ended(views, f"add-{n}", "add failed: ValueError: bad", job="add")
    await ended(views, "agent-1", "llm_error: the provider said 500", queue="other")
    await ended(views, "fine", "", job="add", status=TaskStatus.DONE)
    opening = encoded(events.TaskCreated(model="scripted:x.yaml", prompt="later"))
    assert await store.create_task(NewTask("late", opening, queue="other"))
    claim = await store.claim_task("w1", "late", 30)  # indexed while it runs
    assert claim is not None
    await fill(views)
    with psycopg.connect(postgres_url) as connection:
        rows = connection.execute(
            "SELECT task_id, ended, error_kind, kind FROM task_search ORDER BY 1"
        ).fetchall()
    assert rows == [
        ("add-0", "failed", "ValueError", "add"),
        ("add-1", "failed", "ValueError", "add"),
        ("add-2", "failed", "ValueError", "add"),
        ("agent-1", "failed", "llm_error", "agent"),
        ("fine", None, None, None),
        ("late", None, None, None),
    ]
    assert await every_group_is_as_read_directly(views) == [
        ("ValueError", "add", "default", 3),
        ("llm_error", "agent", "other", 1),
    ]

    # A failure after its task was indexed: read directly past the walk by finish's mark,
    # then from its row once the walk has passed it; once either way.
    finished = events.TaskFinished("failed", error="llm_error: the provider said 529")
    await store.append(claim, len(opening), encoded(finished), next_state=Finish(TaskStatus.FAILED))
    await ended(views, "new", "add failed: ValueError: bad", job="add")  # after the walks
    expected = [("ValueError", "add", "default", 4), ("llm_error", "agent", "other", 2)]
    assert await every_group_is_as_read_directly(views) == expected
    await fill(views)
    assert await every_group_is_as_read_directly(views) == expected

    # Read from the index, not again from the events: a kind planted in a row shows.
    with psycopg.connect(postgres_url) as connection:
        connection.execute("UPDATE task_search SET error_kind = 'Planted' WHERE task_id = 'add-0'")
    planted = shape(await views.failure_groups(cap=None))
    assert ("Planted", "add", "default", 1) in planted
    assert ("ValueError", "add", "default", 3) in planted

    # A pruned failure leaves its group with its row.
    assert isinstance(views, Pruning)
    assert (await views.prune_tasks(["agent-1", "add-0"])).tasks == 2
    assert await every_group_is_as_read_directly(views) == [
        ("ValueError", "add", "default", 3),
        ("llm_error", "agent", "other", 1),
    ]
