"""The web task list's columns and filters (issue 31 item 3): each row's kind (agent or
the job's function), input, status with the error's kind, attempts, runtime, created and
finished; filters by job name, error kind and since; bad ones a 400 page saying why."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import Finish, NewTask, Store, TaskStatus
from noeta.core.rules import events
from tests.web.conftest import encoded, task_with_log
from tests.web.test_bulk_actions import bulk_links


async def failed_job(store: Store, task_id: str, name: str, error: str) -> None:
    opening = events.TaskCreated(model="", tools=(name,))
    call = events.CallRequested("job", name, {"path": "a.png"})
    assert await store.create_task(NewTask(task_id, encoded(opening, call)))
    claim = await store.claim_task("worker-a", task_id, 30)
    assert claim is not None
    written = encoded(
        events.ToolStarted("job", name, {"path": "a.png"}),
        events.TaskFinished("failed", error=error),
    )
    await store.append(claim, 2, written, next_state=Finish(TaskStatus.FAILED))


def rows(page: str) -> dict[str, list[str]]:
    """The list's rows by id: each cell's text, tags dropped."""
    body = page.split('<table class="tasks">', 1)[1].split("</table>", 1)[0]
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1]):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td>(.*?)</td>", row)
        ]
        found[cells[0]] = cells
    return found


async def test_the_list_shows_kind_input_error_kind_and_attempts(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await failed_job(store, "resize-1", "resize", "resize failed: OSError: no file")
    await task_with_log(store, "chat-1")
    page = web().get("/tasks")
    assert page.status_code == 200
    assert (
        "<th>kind</th><th>status</th><th>queue</th><th>attempts</th><th>runtime</th>" in page.text
    )
    listed = rows(page.text)
    assert listed["resize-1"][1:5] == ["resize", "failed OSError", "default", "1"]
    assert listed["resize-1"][7] != "-" and listed["resize-1"][8] == '{"path": "a.png"}'
    assert listed["chat-1"][1:3] == ["agent", "running"] and listed["chat-1"][8] == "look around"


async def test_filters_by_job_error_and_since_and_bad_ones_are_400(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await failed_job(store, "resize-1", "resize", "resize failed: OSError: no file")
    await failed_job(store, "add-1", "add", "add failed: ValueError: no")
    http = web()
    assert list(rows(http.get("/tasks", params={"name": "add"}).text)) == ["add-1"]
    assert list(rows(http.get("/tasks", params={"error": "OSError"}).text)) == ["resize-1"]
    assert list(rows(http.get("/tasks", params={"text": "resiz"}).text)) == ["resize-1"]
    assert len(rows(http.get("/tasks", params={"since": "1h"}).text)) == 2
    later = http.get("/tasks", params={"since": "2999-01-01T00:00:00Z"})
    assert "no task matches" in later.text
    # The bulk actions count and act on the whole filter: under a narrower one too.
    assert [
        text for _, text in bulk_links(http.get("/tasks", params={"status": "failed"}).text)
    ] == [
        "retry all 2",
        "prune all 2",
    ]
    narrower = http.get("/tasks", params={"status": "failed", "name": "add"})
    assert bulk_links(narrower.text) == [
        ("/bulk/retry?status=failed&amp;name=add", "retry all 1"),
        ("/bulk/prune?status=failed&amp;name=add", "prune all 1"),
    ]
    bad_since = http.get("/tasks", params={"since": "yesterday"})
    assert bad_since.status_code == 400 and "is neither a moment" in bad_since.text
    bad_error = http.get("/tasks", params={"error": "no such"})
    assert bad_error.status_code == 400 and "is not an error kind" in bad_error.text


async def test_a_page_costs_the_same_statements_for_5_rows_as_for_50(
    store: Store, web: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row's kind, input, error and runtime come with the page's one read of them,
    not one read per row: the statements the store runs for the page (counted where every
    statement passes) do not grow with its rows."""
    run_all = PostgresConnection._run_all
    statements: list[str] = []

    async def counted(self: PostgresConnection, batch: Any, **options: Any) -> Any:
        statements.extend(query for query, _ in batch)
        return await run_all(self, batch, **options)

    monkeypatch.setattr(PostgresConnection, "_run_all", counted)
    http = web()

    def statements_for_the_list() -> int:
        statements.clear()
        assert http.get("/tasks").status_code == 200
        return len(statements)

    for n in range(5):
        await failed_job(store, f"job-{n}", "resize", "resize failed: OSError: no")
    assert len(rows(http.get("/tasks").text)) == 5
    with_5 = statements_for_the_list()
    for n in range(5, 50):
        await failed_job(store, f"job-{n}", "resize", "resize failed: OSError: no")
    assert len(rows(http.get("/tasks").text)) == 50
    assert statements_for_the_list() == with_5
