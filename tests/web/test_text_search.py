"""The text search (ADR-0102), the same on sqlite and PostgreSQL: it matches ids, prompts,
job names and error messages, literally and in any case; on PostgreSQL through
`task_search`, filled in batches past its marks, and right while the table is behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import search
from noeta.core.ports.retention import Pruning
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import StoreViews
from noeta.core.rules import events
from tests.web.test_task_summaries import agent, job, run


@pytest.fixture
async def views(store_url: str) -> AsyncIterator[StoreViews]:
    store = await open_store(store_url, migrate=True)
    assert isinstance(store, StoreViews)
    if hasattr(store, "search_settle"):
        store.search_settle = timedelta(0)  # the tests' tasks are committed when indexed
    yield store
    await store.close()


async def ids(views: StoreViews, text: str) -> list[str]:
    return [record.id for record in await views.task_page(text=text)]


async def fill(views: StoreViews) -> None:
    while not await views.index_search():
        pass


async def failed_job(views: StoreViews, task_id: str, name: str, error: str) -> None:
    await job(views, task_id, name, {"n": 1})
    ended = events.TaskFinished("failed", error=error)
    await run(views, task_id, ended, ends=TaskStatus.FAILED)


async def some_tasks(views: StoreViews) -> None:
    await agent(views, "a-quarter", "Summarise 100% of the QUARTERLY report_2 of C:\\logs")
    await job(views, "j-resize", "resize_image", {"w": 10})
    await failed_job(views, "j-add", "add", "add failed: ValueError: bad operand 42")
    await agent(views, "a-plain", "nothing to see")


@pytest.mark.parametrize("indexed", [False, True], ids=["as-written", "indexed"])
async def test_a_search_matches_ids_prompts_job_names_and_errors(
    views: StoreViews, indexed: bool
) -> None:
    await some_tasks(views)
    if indexed:
        await fill(views)
    assert await ids(views, "bad operand") == ["j-add"]
    assert await ids(views, "VALUEERROR: BAD") == ["j-add"]
    assert await ids(views, "ize_im") == ["j-resize"]
    assert await ids(views, "quarterly REPORT") == ["a-quarter"]
    assert await ids(views, "a-pl") == ["a-plain"]
    assert await views.count_tasks(text="bad operand") == 1
    assert await views.count_tasks(text="a-", cap=2) == 2


@pytest.mark.parametrize("indexed", [False, True], ids=["as-written", "indexed"])
async def test_wildcards_and_the_escape_are_matched_literally(
    views: StoreViews, indexed: bool
) -> None:
    await some_tasks(views)
    if indexed:
        await fill(views)
    assert await ids(views, "0%") == ["a-quarter"]
    assert await ids(views, "t_2") == ["a-quarter"]
    assert await ids(views, "C:\\logs") == ["a-quarter"]
    assert await ids(views, "y%r") == []
    assert await ids(views, "_%") == []
    assert await ids(views, "\\\\") == []


async def test_an_error_written_after_the_task_was_indexed_is_found(
    views: StoreViews,
) -> None:
    await job(views, "late", "slow_job", {})
    await fill(views)
    assert await ids(views, "timed out") == []
    ended = events.TaskFinished("failed", error="slow_job failed: TimeoutError: timed out")
    await run(views, "late", ended, ends=TaskStatus.FAILED)
    assert await ids(views, "timed out") == ["late"]  # past the finish mark: read directly
    await fill(views)
    assert await ids(views, "timed out") == ["late"]


async def test_postgres_fills_its_search_table_in_batches_past_its_marks(
    views: StoreViews, store_url: str
) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("the sqlite store searches its tasks as written (ADR-0102)")
    await some_tasks(views)
    await fill(views)
    with psycopg.connect(store_url) as connection:
        rows = connection.execute("SELECT task_id, haystack FROM task_search").fetchall()
        marks = connection.execute("SELECT walk, at FROM task_search_marks").fetchall()
        trigrams = connection.execute("SELECT to_regclass('task_search_trigrams')").fetchone()
    found = dict(rows)
    assert set(found) == {"a-quarter", "j-resize", "j-add", "a-plain"}
    assert found["j-add"] == "j-add\nadd\nadd failed: valueerror: bad operand 42"
    assert "summarise 100% of the quarterly report_2" in found["a-quarter"]
    assert all(at.year > 2000 for _, at in marks)  # both walks reached the present
    assert trigrams is not None and trigrams[0] is not None  # pg_trgm ships embedded
    # A task created since is searched before the table holds it.
    await agent(views, "a-new", "a fresh prompt")
    assert await ids(views, "fresh prompt") == ["a-new"]


async def test_a_pruned_tasks_row_of_the_search_goes_with_it(
    views: StoreViews, store_url: str
) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("the sqlite store searches its tasks as written (ADR-0102)")
    await some_tasks(views)
    await fill(views)
    assert isinstance(views, Pruning)
    assert (await views.prune_finished(timedelta(0))).tasks == 1  # j-add, the one finished
    with psycopg.connect(store_url) as connection:
        rows = connection.execute("SELECT task_id FROM task_search ORDER BY 1").fetchall()
    assert [row[0] for row in rows] == ["a-plain", "a-quarter", "j-resize"]


async def test_a_search_of_failed_tasks_finds_each_however_far_the_index_has_read_it(
    views: StoreViews, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "ENDED_WALK", 1)  # PostgreSQL walks one failure first
    # On PostgreSQL a search filtered to failed tasks reads only the rows of task_search
    # that say how their task ended (ADR-0112): a task indexed while it ran, then failed,
    # has no such row until the walk by finish passes it, and is matched whole meanwhile.
    await agent(views, "a-late", "watch the quarterly numbers")
    await agent(views, "a-early", "watch the quarterly numbers early")
    ended = events.TaskFinished("failed", error="llm_error: the provider said 500")
    await run(views, "a-early", ended, ends=TaskStatus.FAILED)
    await agent(views, "a-fine", "watch the quarterly numbers as well")
    await run(views, "a-fine", events.TaskFinished("done", answer="ok"), ends=TaskStatus.DONE)
    await fill(views)
    await run(views, "a-late", ended, ends=TaskStatus.FAILED)
    failed = [TaskStatus.FAILED]
    for _ in range(2):  # before the walk by finish passes a-late, then after
        found = await views.task_page(statuses=failed, text="quarterly numbers")
        assert sorted(record.id for record in found) == ["a-early", "a-late"]
        # A page the newest failures fill (on PostgreSQL, from the walk of their rows).
        newest = await views.task_page(statuses=failed, text="quarterly numbers", limit=1)
        assert [record.id for record in newest] == ["a-early"]
        two = await views.task_page(statuses=failed, text="quarterly numbers", limit=2)
        assert [record.id for record in two] == ["a-early", "a-late"]
        assert await views.count_tasks(statuses=failed, text="quarterly numbers") == 2
        assert await views.count_tasks(statuses=failed, text="provider said") == 2
        assert await views.count_tasks(statuses=[TaskStatus.DONE], text="quarterly") == 1
        await fill(views)
