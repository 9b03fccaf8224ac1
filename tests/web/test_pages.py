"""The pages of `noeta web` over HTTP on a real PostgreSQL store: the task list and its
filters, a task's timeline (epochs, recoveries, tokens), and every bad input the issue
names: an unknown id, HTML in an id and in a tool's output, a 10 MB output, 100,000
events."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from starlette.testclient import TestClient

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.ports.store import NewTask, Store
from noeta.core.rules import events
from noeta.observability.span_record import SpanRecord
from noeta.scheduler.cronfile import MessageAction, Schedule
from noeta.web.app import create_app
from noeta.web.site import Site
from tests.web.conftest import encoded, task_with_log

SCRIPT_TAG = "<script>alert('owned')</script>"


async def test_the_task_list_shows_tasks_counts_and_filters(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(store, "alpha-1")
    await task_with_log(store, "beta-2")
    http = web()
    page = http.get("/tasks")
    assert page.status_code == 200
    assert "alpha-1" in page.text and "beta-2" in page.text
    assert '<a href="/tasks?status=running">running</a></td><td>2</td>' in page.text
    assert "beta-2" not in http.get("/tasks", params={"text": "alpha"}).text
    assert "alpha-1" not in http.get("/tasks", params={"status": "done"}).text


async def test_the_task_list_pages_by_cursor(store: Store, web: Callable[..., TestClient]) -> None:
    for n in range(55):
        await task_with_log(store, f"paged-{n:02}")
    http = web()
    first = http.get("/tasks").text
    assert "paged-54" in first and "paged-04" not in first
    cursor = re.search(r'href="(/tasks\?before=[^"]+)"', first)
    assert cursor is not None
    second = http.get(cursor.group(1).replace("&amp;", "&")).text
    assert "paged-04" in second and "paged-05" not in second and "paged-54" not in second


async def test_bad_filters_are_a_400_page(web: Callable[..., TestClient]) -> None:
    http = web()
    for params, said in [
        ({"status": "<b>odd</b>"}, "unknown status &#x27;&lt;b&gt;odd&lt;/b&gt;&#x27;"),
        ({"before": "not-a-cursor"}, "the page cursor is damaged"),
        ({"text": "x" * 201}, "at most 200"),
        ({"queue": "q\x00"}, "NUL"),
    ]:
        page = http.get("/tasks", params=params)
        assert page.status_code == 400, params
        assert said in page.text


async def test_an_unknown_task_id_with_html_is_a_404_page_showing_it_as_text(
    web: Callable[..., TestClient],
) -> None:
    http = web()
    page = http.get("/tasks/" + "nope<img src=x onerror=alert(1)>")
    assert page.status_code == 404
    assert "there is no task with the id" in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
    assert "<img" not in page.text
    assert http.get("/tasks/nope/events/1").status_code == 404
    assert http.get("/tasks/nope/events/x").status_code == 400


async def test_html_in_a_tool_result_shows_as_text(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(
        store,
        "escaping",
        [
            events.ToolStarted("c1", "Bash", {"command": f"echo {SCRIPT_TAG}"}),
            events.ToolFinished("c1", SCRIPT_TAG),
        ],
    )
    page = web().get("/tasks/escaping")
    assert page.status_code == 200
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in page.text
    assert "alert('owned')" not in page.text and "<script>alert" not in page.text


async def test_the_timeline_marks_takeovers_recoveries_and_model_calls(
    store: Store, web: Callable[..., TestClient]
) -> None:
    reply = events.ModelReplied(
        (Text("listing"), ToolCall("c1", "Bash", {"command": "ls"})),
        "tool_use",
        Usage(input_tokens=1234, output_tokens=56),
    )
    claim = await task_with_log(
        store,
        "taken",
        [events.ModelCalled("ab" * 32), reply, events.ToolStarted("c1", "Bash", {"command": "ls"})],
        worker="worker-a",
    )
    await store.release(claim)  # as a worker would lose it: mid-step, the tool half done
    second = await store.claim_task("worker-b", "taken", 30)
    assert second is not None
    await store.append(second, 4, encoded(events.ToolFinished("c1", "", recovery="unknown")))
    page = web().get("/tasks/taken").text
    assert "epoch 1: claimed by worker-a" in page
    assert "epoch 2: taken over by worker-b: epoch 1 on worker-a ended mid-step" in page
    assert "outcome unknown" in page
    assert "tokens in 1234 / out 56" in page
    assert "calls Bash (c1)" in page


async def test_the_task_page_sums_its_usage_unknown_cost_and_possibly_billed(
    store: Store, web: Callable[..., TestClient]
) -> None:
    reply = events.ModelReplied((Text("hi"),), "end_turn", Usage(1234, 56, 7000, 0))
    happened = [
        events.ModelCalled("ab" * 32, "", 900),
        events.ModelCallCut(1, "worker_lost"),
        events.ModelCalled("ab" * 32, "", 900),
        reply,
    ]
    await task_with_log(store, "billed", happened)
    page = web().get("/tasks/billed").text
    usage = page.split('id="task-usage"', 1)[1].split("</div>", 1)[0]
    # A scripted model is free: known, $0 (an unknown price is test_cost_cli's).
    assert "usage (with subtasks): cost $0.000000 + possibly billed $0.000000" in usage
    assert "1 reply, in 1,234 cache read 7,000 cache write 0 out 56  $0.000000" in usage
    assert "1 request with no reply, ~900 input tokens" in usage


async def test_a_10_mb_tool_output_is_cut_and_served_raw_in_parts(
    store: Store, web: Callable[..., TestClient]
) -> None:
    huge = "0123456789" * 1_000_000
    await task_with_log(
        store,
        "huge",
        [events.ToolStarted("c1", "Bash", {"command": "yes"}), events.ToolFinished("c1", huge)],
    )
    http = web()
    started = time.monotonic()
    page = http.get("/tasks/huge")
    took = time.monotonic() - started
    assert page.status_code == 200
    assert len(page.content) < 100_000, "the page carries the whole output"
    assert "10,000,0" in page.text and "show raw" in page.text
    assert "too long to bring whole" in page.text  # the 10 MB stayed in the database
    index = http.get("/tasks/huge/events/3")
    assert "served in 10 parts" in index.text
    part = http.get("/tasks/huge/events/3", params={"part": 9})
    assert part.status_code == 200 and part.headers["x-content-type-options"] == "nosniff"
    assert part.text.endswith('"from_epoch":0}') and len(part.text) < 1 << 20
    assert http.get("/tasks/huge/events/3", params={"part": 10}).status_code == 404
    print(f"task page with a 10 MB tool output: {took * 1000:.0f} ms, {len(page.content)} bytes")


async def test_a_long_value_on_the_page_is_cut_with_a_way_to_the_rest(
    store: Store, web: Callable[..., TestClient]
) -> None:
    longish = "x" * 50_000  # under the size an event is brought whole, over the cut
    await task_with_log(
        store,
        "longish",
        [events.ToolStarted("c1", "Bash", {"command": "yes"}), events.ToolFinished("c1", longish)],
    )
    page = web().get("/tasks/longish")
    assert "50,000 characters; the rest is not on this page" in page.text
    assert len(page.content) < 40_000
    assert "too long to bring whole" not in page.text


async def test_a_log_of_100000_events_is_paged(
    store: Store, web: Callable[..., TestClient]
) -> None:
    claim = await task_with_log(store, "long")
    seq = 1
    for _ in range(100):
        batch = [events.WokenUp(f"w{seq + n}") for n in range(1000)]
        seq = await store.append(claim, seq, encoded(*batch))
    http = web()
    newest = http.get("/tasks/long").text
    assert newest.count("<li class=") == 200
    assert "events 99802 to 100001 of 100001" in newest
    assert "usage is not summed on this page for 100,001 events" in newest
    first = http.get("/tasks/long", params={"after": 0}).text
    assert 'data-seq="1"' in first and 'data-seq="201"' not in first
    assert http.get("/tasks/long", params={"after": "-1"}).status_code == 400


async def test_a_traced_task_links_to_jaeger(store: Store, web: Callable[..., TestClient]) -> None:
    record = SpanRecord(0xABC, 1, 1, 2, 0, 3, 0, 1, 4, 0)
    await task_with_log(store, "traced", [events.ModelCalled("ef" * 32, trace=record.encode())])
    page = web(jaeger_url="http://jaeger.local:16686/").get("/tasks/traced").text
    assert f'href="http://jaeger.local:16686/trace/{0xABC:032x}"' in page
    assert "in Jaeger" not in web().get("/tasks/traced").text


async def test_workers_and_cron_pages(store: Store, web: Callable[..., TestClient]) -> None:
    await task_with_log(store, "held-1", worker="worker-<x>")
    http = web()
    workers = http.get("/workers")
    assert workers.status_code == 200
    assert "worker-&lt;x&gt;" in workers.text and "held-1" in workers.text
    assert "lease ends in" in workers.text
    schedule = Schedule(
        name="nightly",
        cron="0 3 * * *",
        timezone="Europe/Paris",
        action=MessageAction("held-1", "wake up"),
        source="cron.yaml:1",
    )
    cron = web(schedules=[schedule]).get("/cron")
    assert cron.status_code == 200
    assert "nightly" in cron.text and "03:00 CET" in cron.text and "02:00 UTC" in cron.text


async def test_the_pages_work_on_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    store = await open_store(url, migrate=True)
    try:
        await task_with_log(store, "on-sqlite", [events.MessageTaken(1, "<hi>")])
    finally:
        await store.close()
    site = Site(AsyncClient(url), allowed_hosts=("testserver",))
    with TestClient(create_app(site)) as http:
        http.get("/login", params={"token": site.token})
        assert "on-sqlite" in http.get("/tasks").text
        page = http.get("/tasks/on-sqlite").text
        assert "&lt;hi&gt;" in page and "epoch 1: claimed by worker-a" in page
        assert http.get("/workers").status_code == http.get("/cron").status_code == 200


async def test_a_model_request_re_sent_after_a_takeover_is_marked(
    store: Store, web: Callable[..., TestClient]
) -> None:
    claim = await task_with_log(store, "resent", [events.ModelCalled("12" * 32)])
    await store.release(claim)  # the reply never came: the next claim sends it again
    second = await store.claim_task("worker-b", "resent", 30)
    assert second is not None
    late = events.ToolFinished("c7", "kept", recovery="late", from_epoch=1)
    await store.append(second, 2, encoded(events.ModelCalled("12" * 32), late))
    page = web().get("/tasks/resent").text
    assert page.count("re-sent after a takeover: the same request bytes") == 1
    assert "recorded from the result its own run kept after its claim was gone (epoch 1)" in page


async def test_a_nul_in_one_stored_prompt_leaves_the_text_search_working(
    store: Store, web: Callable[..., TestClient]
) -> None:
    from noeta.core.ports.store import NewTask

    created = events.TaskCreated(model="scripted:x.yaml", prompt="odd \x00 prompt")
    assert await store.create_task(NewTask("with-nul", encoded(created)))
    await task_with_log(store, "findable")
    http = web()
    found = http.get("/tasks", params={"text": "findable"})
    assert found.status_code == 200 and "findable" in found.text
    assert "with-nul" in http.get("/tasks", params={"text": "odd"}).text


async def test_a_correction_shows_beside_the_unknown_it_corrects(
    store: Store, web: Callable[..., TestClient]
) -> None:
    from noeta.core.ports.tool import OUTCOME_UNKNOWN

    unknown = events.ToolFinished("c7", OUTCOME_UNKNOWN, True, recovery="unknown")
    corrected = events.ToolResultCorrected("c7", "<the real result>", False, 1)
    await task_with_log(store, "corrected", [unknown, corrected])
    page = web().get("/tasks/corrected").text
    assert "outcome unknown: it may or may not have happened" in page  # never rewritten
    assert "tool result corrected (c7)" in page
    assert "corrected: the result came late (epoch 1)" in page
    assert "&lt;the real result&gt;" in page


async def test_a_fork_links_to_the_task_it_was_forked_from(
    store: Store, web: Callable[..., TestClient]
) -> None:
    forked = events.TaskCreated(model="scripted:x", prompt="go", forked_from="src<1>", forked_at=3)
    assert await store.create_task(NewTask("fork", encoded(forked)))
    page = web().get("/tasks/fork").text
    assert 'forked from <a href="/tasks/src%3C1%3E">src&lt;1&gt;</a> at seq 3' in page


async def test_a_task_no_live_worker_can_run_says_so_on_its_page(
    store: Store, web: Callable[..., TestClient]
) -> None:
    """ADR-0092: the page says what the task waits for; once a worker offers it, not."""
    from noeta.core.ports.worker_registry import WorkerEntry
    from noeta.testing.store_contract.capabilities import needing

    await store.create_task(needing("job-1", "myjobs"))
    http = web()
    assert "no worker offers myjobs" in http.get("/tasks/job-1").text
    registry = store.capabilities.workers
    assert registry is not None
    await registry.record_worker(WorkerEntry("w", ("default",), ("myjobs",)), 30)
    assert "no worker offers" not in http.get("/tasks/job-1").text
