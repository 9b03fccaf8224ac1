"""The task list's text search in `noeta web` (ADR-0102): bad input is one message on a 400
page; a search finds through its index, which nothing fills until a search asks, and
says so while a store's index is still being built in the background."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest
from starlette.testclient import TestClient

from noeta.backends.stores.postgres import search
from noeta.core.ports.store import NewTask, Store
from noeta.core.rules import events
from noeta.web.render import h
from noeta.web.search_index import BUILDING_NOTE
from tests.web.conftest import encoded


async def agent(store: Store, task_id: str, prompt: str) -> None:
    created = events.TaskCreated(model="scripted:x.yaml", prompt=prompt)
    assert await store.create_task(NewTask(task_id, encoded(created)))


def listed(http: TestClient, **params: str) -> str:
    page = http.get("/tasks", params=params)
    assert page.status_code == 200, page.text
    return page.text


async def test_bad_searches_are_one_message_and_wildcards_are_literal(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await agent(store, "odd", "a 50%_off sale \\now")
    await agent(store, "plain", "a 50 percent sale now")
    http = web()
    everything = listed(http, q="")
    assert "odd" in everything and "plain" in everything  # an empty search: no filter
    for text in ("%_o", "50%", "0%_", "\\no"):
        found = listed(http, q=text)
        assert 'href="/tasks/odd"' in found and 'href="/tasks/plain"' not in found, text
    assert 'href="/tasks/plain"' in listed(http, text="PERCENT")
    for text, said in [
        ("x", "search for 3 characters or more, not &#x27;x&#x27;: a shorter text"),
        ("%_", "search for 3 characters or more, not &#x27;%_&#x27;: a shorter text"),
        ("zq", "has no index to find it by; filter by job name, or open a task by its id"),
        ("x" * 10_000, "the text to search for is 10,000 characters; at most 200"),
    ]:
        page = http.get("/tasks", params={"q": text})
        assert page.status_code == 400, text
        assert page.text.count(said) == 1, page.text[:500]
        assert "x" * 300 not in page.text  # the text is not shown back whole


async def test_nothing_fills_the_index_until_a_search_and_a_big_one_builds_behind(
    store: Store,
    web: Callable[..., TestClient],
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search.PostgresSearch, "search_settle", timedelta(0))
    monkeypatch.setattr(search, "CREATED_ROWS", 1)  # three tasks: three batches
    for n in range(3):
        await agent(store, f"t{n}", f"prompt number {n}")
    http = web()
    assert "t2" in listed(http) and http.get("/queues").status_code == 200

    def indexed() -> int:
        with psycopg.connect(postgres_url) as connection:
            row = connection.execute("SELECT count(*) FROM task_search").fetchone()
        return row[0] if row else -1

    assert indexed() == 0  # the feature is not used: nothing ran

    first = listed(http, q="number 1")
    assert h(BUILDING_NOTE) in first  # one batch done, the rest in the background
    assert 'href="/tasks/t1"' in first and 'href="/tasks/t0"' not in first
    for _ in range(1000):  # each look is a page: the build runs between them
        if h(BUILDING_NOTE) not in (page := listed(http, q="number 1")):
            break
    assert h(BUILDING_NOTE) not in page and 'href="/tasks/t1"' in page
    assert indexed() == 3
