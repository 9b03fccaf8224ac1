"""The task list's bulk actions (issue 30 item 1): with a status filtered, "retry all N"
or "cancel all N" where it fits; a confirmation page stating how many; a CSRF-checked POST
that acts on at most that many, and refuses a status the action does not fit."""

from __future__ import annotations

import re
from collections.abc import Callable

from httpx import Response
from starlette.testclient import TestClient

from noeta.core.ports.store import CANCEL_KEY, Finish, NewTask, Store, TaskStatus
from noeta.core.rules import events
from tests.web.conftest import SCRIPT, encoded, task_with_log
from tests.web.test_actions import form_fields

FAILED = Finish(TaskStatus.FAILED)


async def failed_task(store: Store, task_id: str, queue: str = "default") -> None:
    created = events.TaskCreated(model=SCRIPT, prompt=f"look at {task_id}")
    assert await store.create_task(NewTask(task_id, encoded(created), queue=queue))
    claim = await store.claim_task("worker-a", task_id, 30)
    assert claim is not None
    finished = events.TaskFinished("failed", error="llm_truncated")
    await store.append(claim, 1, encoded(finished), next_state=FAILED)


def run_ended(http: TestClient, response: Response) -> str:
    """The page of a bulk run (where its POST led) once the run has ended: each read of it
    waits up to a second server-side for the run's task, so this is a bounded wait on an
    event, not a timed one."""
    assert response.status_code == 303, response.text
    run = response.headers["location"]
    assert re.fullmatch(r"/bulk/runs/[\w-]+", run), run
    for _ in range(600):
        page = http.get(run)
        assert page.status_code == 200, page.text
        if 'id="confirmation"' in page.text:
            return page.text
    raise AssertionError(f"the bulk run {run} never ended")


def bulk_links(page: str) -> list[tuple[str, str]]:
    return re.findall(r'<a href="(/bulk/[^"]*)" class="button bulk-\w+">([^<]*)</a>', page)


async def test_retry_all_is_offered_confirmed_and_done_once(
    store: Store, web: Callable[..., TestClient]
) -> None:
    for n in range(3):
        await failed_task(store, f"f{n}")
    await failed_task(store, "elsewhere", queue="other")
    await store.create_task(NewTask("queued", encoded(events.TaskCreated(model=SCRIPT))))
    http = web()
    assert bulk_links(http.get("/tasks").text) == []  # no status filtered: no bulk action
    assert bulk_links(http.get("/tasks", params={"status": "running"}).text) == []
    offered = bulk_links(http.get("/tasks", params={"status": "failed", "queue": "default"}).text)
    assert offered == [
        ("/bulk/retry?status=failed&amp;queue=default", "retry all 3"),
        ("/bulk/prune?status=failed&amp;queue=default", "prune all 3"),
    ]

    confirmation = http.get("/bulk/retry", params={"status": "failed", "queue": "default"})
    assert confirmation.status_code == 200
    assert "retry 3 failed tasks of queue default?" in confirmation.text
    fields = form_fields(confirmation.text, "/bulk/retry")
    assert fields == {"csrf": fields["csrf"], "status": "failed", "queue": "default", "count": "3"}
    assert http.post("/bulk/retry", data={**fields, "csrf": "forged"}).status_code == 403
    assert await store.get_task("f0.retry-1") is None  # the forged form did nothing

    done = run_ended(http, http.post("/bulk/retry", data=fields))
    assert "retried 3 of 3 tasks" in done
    for n in range(3):
        assert await store.get_task(f"f{n}.retry-1") is not None
    assert await store.get_task("elsewhere.retry-1") is None
    again = run_ended(http, http.post("/bulk/retry", data=fields))  # the form sent twice
    assert "retried 0 of 3 tasks; 3 skipped (retried already)" in again


async def test_cancel_all_asks_each_unfinished_task_to_stop(
    store: Store, web: Callable[..., TestClient]
) -> None:
    for n in range(4):
        await store.create_task(NewTask(f"r{n}", encoded(events.TaskCreated(model=SCRIPT))))
    await task_with_log(store, "running")
    await failed_task(store, "failed")
    http = web()
    page = http.get("/tasks", params={"status": "ready"}).text
    assert bulk_links(page) == [("/bulk/cancel?status=ready", "cancel all 4")]
    assert bulk_links(http.get("/tasks", params={"status": "failed"}).text) == [
        ("/bulk/retry?status=failed", "retry all 1"),
        ("/bulk/prune?status=failed", "prune all 1"),
    ]
    confirmation = http.get("/bulk/cancel", params={"status": "ready"})
    assert "cancel 4 ready tasks?" in confirmation.text
    done = run_ended(
        http, http.post("/bulk/cancel", data=form_fields(confirmation.text, "/bulk/cancel"))
    )
    assert "asked to stop 4 of 4 tasks" in done
    for n in range(4):
        assert [e.dedupe_key for e in await store.read_inbox(f"r{n}")] == [CANCEL_KEY]
    assert await store.read_inbox("running") == []  # not in the filter


async def test_a_bulk_action_refuses_what_does_not_fit_its_filter(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await failed_task(store, "f0")
    http = web()
    refusals = {
        ("/bulk/retry", "running"): (400, "a running task cannot be retried"),
        ("/bulk/retry", "ready"): (400, "a ready task cannot be retried"),
        ("/bulk/cancel", "failed"): (400, "a failed task cannot be asked to stop"),
        ("/bulk/prune", "ready"): (400, "a ready task cannot be pruned"),
        ("/bulk/retry", ""): (400, "a bulk action needs a status"),
        ("/bulk/retry", "bogus"): (400, "unknown status"),
        ("/bulk/delete", "failed"): (404, "there is no bulk action"),
    }
    for (path, status), (code, said) in refusals.items():
        refused = http.get(path, params={"status": status})
        assert (refused.status_code, said in refused.text) == (code, True), (path, status)
    nothing = http.get("/bulk/retry", params={"status": "cancelled"})
    assert "no task matches: 0 cancelled tasks" in nothing.text
    assert 'method="post"' not in nothing.text
