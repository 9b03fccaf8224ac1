"""The queues and limits pages over HTTP on a real PostgreSQL store: the figures of
`noeta queue list` and `noeta limit list`, what the settings do, the throughput chart,
their bad input, the per-minute rollup that keeps them cheap; and the task page's rough
edges (a job read as a job, a subtasks link only when there are subtasks)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from starlette.testclient import TestClient

from noeta.client.job_tasks import JOB_CALL_ID
from noeta.core.ports.fleet_budgets import FleetBudget
from noeta.core.ports.queue_settings import QueueActivity, QueueChange, queue_settings_store
from noeta.core.ports.store import Finish, NewEvent, NewTask, Store, TaskStatus
from noeta.core.rules import events
from noeta.web import queue_history
from noeta.web.charts import WINDOWS
from noeta.web.queue_history import QueueHistory
from noeta.web.queue_pages import FILLING
from noeta.web.render import h
from tests.web.conftest import SCRIPT, encoded, task_with_log


@pytest.fixture(autouse=True)
def whole_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page waits for the charts' first fill (the test after the next: it does not)."""
    monkeypatch.setattr(queue_history, "FIRST_FILL_WAIT", 60.0)


def cells(page: str, queue: str) -> list[str]:
    """The text of the cells of `queue`'s row in the queues table."""
    row = re.search(rf'<tr><td><a href="/queues\?queue={queue}">.*?</tr>', page)
    assert row is not None, page
    return [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", row.group(0))]


async def test_the_queues_page_shows_what_noeta_queue_list_counts_and_what_limits_do(
    store: Store, web: Callable[..., TestClient]
) -> None:
    now = await store.clock()
    first = encoded(events.TaskCreated(model=SCRIPT, prompt="mail"))
    for n in range(4):
        assert await store.create_task(NewTask(f"mail-{n}", first, queue="mail"))
    later = NewTask("mail-later", first, queue="mail", ready_at=now + timedelta(hours=1))
    assert await store.create_task(later)
    assert await store.claim("worker-a", ["mail"], 30) is not None
    queues = queue_settings_store(store)
    await queues.set_queue("mail", QueueChange(concurrency=2, rate=None))
    [listed] = await queues.queue_overview(["mail"])

    page = web().get("/queues")
    assert page.status_code == 200
    shown = cells(page.text, "mail")
    assert shown[1:5] == ["3", "1", "2", "1"]  # claimable, running, waiting, scheduled
    figures = [listed.claimable, listed.running, listed.waiting_for_slot, listed.scheduled]
    assert shown[1:5] == [str(n) for n in figures]
    assert shown[5].startswith("concurrency 2 (set ")
    assert shown[6] == "1 of 2 slots used"
    assert 'data-refresh="5"' in page.text and '<a href="/queues">queues</a>' in page.text

    await queues.set_queue("mail", QueueChange(paused=True))
    paused = cells(web().get("/queues", params={"queue": "mail"}).text, "mail")
    assert paused[3] == "3" and paused[6].startswith("paused: no claims, 3 claimable held back")


async def test_the_queues_page_draws_finished_tasks_per_minute_and_per_hour(
    store: Store, web: Callable[..., TestClient]
) -> None:
    for n, status in enumerate([TaskStatus.DONE, TaskStatus.DONE, TaskStatus.FAILED]):
        claim = await task_with_log(store, f"ended-{n}")
        ended = events.TaskFinished(status.value, answer="ok")
        await store.append(claim, 1, encoded(ended), next_state=Finish(status))
    http = web()
    for window, per in [("hour", "per minute"), ("day", "per hour")]:
        page = http.get("/queues", params={"range": window}).text
        caption = f"default: 3 finished in the last {window}, {per} (UTC)"
        assert f"<figcaption>{caption}</figcaption>" in page
        titles = re.findall(r"<title>(\d\d:\d\d UTC: [^<]* done[^<]*)</title>", page)
        done = sum(int(t.split(": ", 1)[1].split(" done")[0]) for t in set(titles))
        assert done == 2 and any("1 failed" in t for t in titles), titles
        assert page.count('<rect class="bar-failed"') == 1


async def test_the_first_queues_page_comes_at_once_and_its_charts_once_filled(
    store: Store, web: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_history, "FIRST_FILL_WAIT", 0.0)  # no wait: the fill is behind
    claim = await task_with_log(store, "ended")
    await store.append(claim, 1, encoded(events.TaskFinished("done")), next_state=Finish())
    await task_with_log(store, "running")
    http = web()
    first = http.get("/queues").text
    assert h(FILLING) in first and "<figure" not in first
    assert cells(first, "default")[2] == "1"  # what the queue holds now is there
    for _ in range(1000):  # each look is a page: the fill runs between them
        if h(FILLING) not in (page := http.get("/queues").text):
            break
    assert "<figcaption>default: 1 finished in the last hour, per minute (UTC)" in page


async def test_the_queues_page_refuses_a_bad_range_or_queue_with_one_message(
    web: Callable[..., TestClient],
) -> None:
    http = web()
    for params, said in [
        ({"range": "week"}, "range must be hour or day, not &#x27;week&#x27;"),
        ({"range": "<b>"}, "not &#x27;&lt;b&gt;&#x27;"),
        ({"queue": "q\x00"}, "NUL"),
        ({"queue": "x" * 600}, "queue name"),
    ]:
        page = http.get("/queues", params=params)
        assert page.status_code == 400, params
        assert page.text.count('class="notice bad"') == 1 and said in page.text, page.text
        assert "Traceback" not in page.text


async def test_the_limits_page_shows_what_noeta_limit_list_shows(
    store: Store, web: Callable[..., TestClient]
) -> None:
    http = web()
    assert "no model limits" in http.get("/limits").text
    limiter = store.capabilities.model_limits
    assert limiter is not None
    await limiter.set_model_limit("anthropic/claude-x", 600, 90_000)
    await limiter.model_call_throttled(["anthropic/claude-x"], 3600)
    page = http.get("/limits")
    assert page.status_code == 200 and '<a href="/limits">limits</a>' in page.text
    row = re.search(r"<tbody><tr>(.*?)</tr>", page.text)
    assert row is not None
    shown = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert shown[:7] == ["anthropic/claude-x", "600", "90,000", "0", "0", "0.0 s", "1"]
    assert re.fullmatch(r"\d\d:\d\d:\d\d", shown[7]), shown  # paused by the 429


async def test_the_limits_page_shows_the_fleet_budgets_as_noeta_budget_list_does(
    store: Store, web: Callable[..., TestClient]
) -> None:
    http = web()
    assert "no fleet budgets" in http.get("/limits").text
    limiter = store.capabilities.model_limits
    assert limiter is not None
    await limiter.set_fleet_budget(FleetBudget("research", "acme", "day", Decimal("20.00")))
    page = http.get("/limits").text
    budgets = page.split("<h2>fleet budgets</h2>", 1)[1]
    row = re.search(r"<tbody><tr>(.*?)</tr>", budgets)
    assert row is not None, budgets
    shown = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert shown == ["research/acme", "day", "$20.00", "$0.000000", "0", "0"]


async def test_a_jobs_page_reads_as_a_job_not_as_a_model_task(
    store: Store, web: Callable[..., TestClient]
) -> None:
    created = events.TaskCreated(model="", tools=("add",))
    call = events.CallRequested(JOB_CALL_ID, "add", {"a": 1, "b": 2})
    assert await store.create_task(NewTask("job-1", encoded(created, call)))
    page = web().get("/tasks/job-1").text
    assert "job add · arguments <code>{&quot;a&quot;: 1, &quot;b&quot;: 2}</code>" in page
    assert "model" not in page.split("<h2>log</h2>", 1)[1].split("job add", 1)[0]
    assert "tools: add" not in page and "model  ·" not in page


async def test_the_subtasks_link_shows_only_when_the_task_launched_one(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(store, "alone")
    launched = events.SubtaskLaunched("call-1", "parent.call-1.1", "look deeper")
    await task_with_log(store, "parent", [launched])
    http = web()
    assert ">subtasks</a>" not in http.get("/tasks/alone").text
    assert '<a href="/tasks?parent=parent">subtasks</a>' in http.get("/tasks/parent").text


async def test_a_canvas_page_says_its_tree_and_links_its_members(
    store: Store, web: Callable[..., TestClient]
) -> None:
    tree = {"chord": [{"group": [{"job": "add"}, {"job": "add"}]}, {"job": "tsum"}]}
    requested = events.CanvasRequested({"jobs": {}, "tree": tree})
    created = events.TaskCreated(model="", tools=())
    assert await store.create_task(NewTask("canvas-1", encoded(created, requested)))
    claim = await store.claim("worker-a", ["default"], 30)
    assert claim is not None
    launched = events.SubtaskLaunched("m0", "canvas-1.m0.1", "add")
    await store.append(claim, 2, [NewEvent(*events.encode(launched))])
    page = web().get("/tasks/canvas-1").text
    assert '<p class="kind">canvas of jobs · <code>chord(group(add x2), tsum)</code></p>' in page
    assert '<a href="/tasks?parent=canvas-1">subtasks</a>' in page


async def test_the_throughput_rollup_reads_a_final_minute_once(
    store: Store, postgres_url: str
) -> None:
    for n, status in enumerate([TaskStatus.DONE, TaskStatus.DONE, TaskStatus.FAILED]):
        claim = await task_with_log(store, f"old-{n}")
        await store.append(claim, 1, [], next_state=Finish(status))
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        # Created and finished ten minutes ago: final minutes, past the settling time.
        await admin.execute(
            "UPDATE tasks SET created_at = created_at - interval '10 minutes',"
            " finished_at = finished_at - interval '10 minutes'"
        )
    history, hour, port = QueueHistory(), WINDOWS["hour"], queue_settings_store(store)

    def totals(counts: list[QueueActivity]) -> tuple[int, int]:
        return sum(c.done for c in counts), sum(c.failed for c in counts)

    assert totals(await history.per_period(port, await store.clock(), hour, [])) == (2, 1)
    read = history.rows_read
    assert read >= 1
    assert totals(await history.per_period(port, await store.clock(), hour, [])) == (2, 1)
    assert history.rows_read == read  # nothing final is read again
    claim = await task_with_log(store, "new")
    await store.append(claim, 1, [], next_state=Finish())
    assert totals(await history.per_period(port, await store.clock(), hour, [])) == (3, 1)
    # Only the minutes not yet final: the one of its creation and finish (or two).
    assert history.rows_read - read in (1, 2)
    assert await history.per_period(port, await store.clock(), hour, ["other"]) == []


async def test_the_queues_page_draws_unfinished_tasks_counted_back_from_now(
    store: Store, web: Callable[..., TestClient]
) -> None:
    for n in range(3):
        await task_with_log(store, f"open-{n}")  # running: unfinished
    claim = await task_with_log(store, "ended")
    await store.append(claim, 1, [], next_state=Finish())
    page = web().get("/queues").text
    assert "<figcaption>default: 3 unfinished now; at the end of each minute</figcaption>" in page
    points = re.findall(r"<title>([^<]*) unfinished</title>", page)
    assert len(points) == 60 and points[-1] == "now: 3", points[-3:]
    # An hour ago none of them existed: the line starts at 0 and ends at 3.
    assert points[0].endswith(": 0") and {p.rsplit(": ", 1)[1] for p in points} <= {"0", "3", "4"}
