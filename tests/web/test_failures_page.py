"""The failures page and bulk prune (issue 31 items 4 and 6, issue 33 item 2): failures by
cause, each group linking to its tasks, to a retry of them all and to their discard (a
prune), each a count to confirm and a CSRF-checked POST that says what it did; the bulk
buttons under every filter of the list; a selection of none, a stale one, a bad grouping."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from starlette.testclient import TestClient

from noeta.client import AsyncClient
from noeta.core.ports.store import Store
from noeta.core.ports.store_views import StoreViews
from tests.web.test_actions import form_fields
from tests.web.test_bulk_actions import run_ended
from tests.web.test_failure_groups import ended


def as_views(store: Store) -> StoreViews:
    views = store.capabilities.views
    assert views is not None
    return views


async def failures(store: Store) -> None:
    for n in range(3):
        await ended(as_views(store), f"add-{n}", "add failed: ValueError: bad a", job="add")
    await ended(as_views(store), "add-key", "add failed: KeyError: 'b'", job="add")
    await ended(as_views(store), "chat", "llm_error: 529 overloaded", queue="chat")


def links(page: str, css: str) -> list[tuple[str, str]]:
    found = re.findall(rf'<a href="([^"]*)" class="button {css}">([^<]*)</a>', page)
    return [(html.unescape(href), text) for href, text in found]


async def test_failures_are_grouped_and_a_group_is_retried_then_discarded(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await failures(store)
    http = web()
    page = http.get("/failures").text
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", page)
    cells = [re.split(r"</td><td>", row) for row in rows]
    assert [[re.sub(r"<[^>]+>", "", c) for c in row[:4]] for row in cells] == [
        ["3", "ValueError", "add", "default"],
        ["1", "llm_error", "agent", "chat"],
        ["1", "KeyError", "add", "default"],
    ]
    group = "status=failed&queue=default&name=add&error=ValueError"
    assert f'<a href="/tasks?{html.escape(group)}">3</a>' in page
    listed = http.get(f"/tasks?{group}").text
    assert sorted(re.findall(r'<a href="/tasks/(add-\w+)">', listed)) == ["add-0", "add-1", "add-2"]
    assert ("/bulk/retry?" + group, "retry all") in links(page, "bulk-retry")

    confirmation = http.get(f"/bulk/retry?{group}")
    assert "retry 3 failed tasks of job add that ended with ValueError of queue default?" in (
        confirmation.text
    )
    done = run_ended(
        http, http.post("/bulk/retry", data=form_fields(confirmation.text, "/bulk/retry"))
    )
    assert "retried 3 of 3 tasks" in done
    for n in range(3):
        assert await store.get_task(f"add-{n}.retry-1") is not None
    assert await store.get_task("add-key.retry-1") is None

    key_group = "status=failed&queue=default&name=add&error=KeyError"
    assert ("/bulk/prune?" + key_group, "discard all") in links(page, "bulk-prune")
    confirmation = http.get(f"/bulk/prune?{key_group}")
    assert "prune 1 failed task of job add that ended with KeyError" in confirmation.text
    assert "its id stays taken" in confirmation.text
    fields = form_fields(confirmation.text, "/bulk/prune")
    assert http.post("/bulk/prune", data={**fields, "csrf": "forged"}).status_code == 403
    assert await store.get_task("add-key") is not None
    done = run_ended(http, http.post("/bulk/prune", data=fields))
    assert "pruned 1 of 1 tasks" in done, done
    assert await store.get_task("add-key") is None and await store.read_log("add-key") == []
    after = http.get("/failures").text
    assert "KeyError" not in after and "ValueError" in after

    # "retry all" then "discard all": the sources go, their live retries stay (ADR-0113).
    confirmation = http.get(f"/bulk/prune?{group}")
    done = run_ended(
        http, http.post("/bulk/prune", data=form_fields(confirmation.text, "/bulk/prune"))
    )
    assert "pruned 3 of 3 tasks" in done, done
    for n in range(3):
        assert await store.get_task(f"add-{n}") is None
        assert await store.get_task(f"add-{n}.retry-1") is not None
    assert "ValueError" not in http.get("/failures").text


async def test_the_bulk_buttons_sit_under_every_filter_of_the_list(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await failures(store)
    http = web()
    query = {"status": "failed", "name": "add", "error": "ValueError", "since": "1h"}
    page = http.get("/tasks", params=query).text
    found = dict((text, href) for href, text in links(page, r"bulk-\w+"))
    assert set(found) == {"retry all 3", "prune all 3"}
    assert "name=add&error=ValueError&since=" in found["retry all 3"]
    # Right under the filters, above the counts and the list.
    assert page.index('id="bulk-actions"') < page.index('class="counts"')
    confirmation = http.get(found["prune all 3"])
    assert "prune 3 failed tasks of job add that ended with ValueError" in confirmation.text


async def test_none_matching_a_stale_selection_and_a_bad_grouping(
    store: Store, postgres_url: str, web: Callable[..., TestClient]
) -> None:
    await failures(store)
    http = web()
    nothing = http.get("/bulk/prune", params={"status": "failed", "error": "OSError"})
    assert "no task matches: 0 failed tasks that ended with OSError" in nothing.text
    assert 'method="post"' not in nothing.text

    confirmation = http.get("/bulk/prune", params={"status": "failed", "name": "add"})
    assert "prune 4 failed tasks of job add?" in confirmation.text
    async with AsyncClient(postgres_url) as client:  # one retried, one pruned since the count
        await client.retry("add-0")
        await client.prune_many(status="failed", job="add", error_kind="KeyError")
    done = run_ended(
        http, http.post("/bulk/prune", data=form_fields(confirmation.text, "/bulk/prune"))
    )
    said = re.search(r'id="confirmation">([^<]*)<', done)
    assert said is not None
    assert html.unescape(said.group(1)) == (
        "pruned 3 of 3 tasks; 1 of the 4 confirmed no longer match (changed since the count)"
    )

    newest = http.get("/failures", params={"newest": "1"}).text
    assert "the newest 1 failed tasks, by error kind, kind and queue" in newest
    assert "read more of them" in newest
    for bad in ("0", "many", "100001"):
        wrong = http.get("/failures", params={"newest": bad})
        assert wrong.status_code == 400 and "newest is a number of failures" in wrong.text

    refused = http.get("/failures", params={"group-by": "cause"})
    assert refused.status_code == 400
    assert "failures cannot be grouped by 'cause': only by error" in html.unescape(refused.text)
    assert "Traceback" not in refused.text
