"""A real headless Chromium on `noeta web` while a real `noeta worker` runs a task: it
logs in through the link the command printed, the list shows the task, its page follows
it live (a reply lands in the DOM over server-sent events), the cancel button stops it,
the page is kept as a screenshot, and a step's "fork from here" makes a fork of it. A
filtered list is retried and cancelled in bulk through its buttons and confirmation pages,
a failure group retried from the failures page; the workers page shows a worker that
registers without a reload. The queues, limits and cost pages are read from the navigation
and refresh their figures.

Chromium is the distribution's (`make chromium` installs it; CI runs that first). Without
one the test is skipped saying so, except under CI, where it fails."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import noeta
from noeta.core.ports.store import Claim, TaskStatus
from noeta.core.rules import events
from noeta.testing.command_line import store_in_environment
from tests.web.cdp import Chromium, find_chromium

REPOSITORY = Path(__file__).parents[2]
SCRIPT = """
replies:
  - text: "Ready: send me a message and I will get going."
    usage: {input_tokens: 812, output_tokens: 14}
  - text: "Planning the work first."
    tool_calls:
      - id: call-1
        name: TodoWrite
        input: {todos: [{content: "read the report", status: in_progress},
                        {content: "write the summary", status: pending}]}
    usage: {input_tokens: 845, output_tokens: 41}
  - text: "Got your message. Working on it <b>now</b>."
    usage: {input_tokens: 903, output_tokens: 11}
"""


def artifacts() -> Path:
    return Path(os.environ.get("NOETA_TEST_ARTIFACTS", REPOSITORY / "build" / "test-artifacts"))


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chromium]:
    executable = find_chromium()
    if executable is None:
        why = "no Chromium on this machine: `make chromium` installs it (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    browser = Chromium(executable, tmp_path / "profile")
    yield browser
    browser.close()


class Process:
    def __init__(self, *arguments: str, log: Path) -> None:
        self.log = log
        given, environment = store_in_environment(
            arguments, {**os.environ, "NOETA_HOME": str(log.parent / "home")}
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "noeta", *given],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env={k: v for k, v in environment.items() if k != "NOETA_WEB_TOKEN"},
        )

    def first_line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_browser_follows_a_task_live_and_cancels_it(
    chromium: Chromium, postgres_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    with noeta.Client(postgres_url) as client:
        asyncio.run(_migrate(postgres_url))
        task = client.submit(
            "Say hello, then wait.",
            model=f"scripted:{script}",
            interactive=True,
            tools=["TodoWrite"],
        )
        worker = Process(
            "worker",
            "--store",
            postgres_url,
            "--poll",
            "0.2",
            "--name",
            "worker-a",
            log=tmp_path / "worker.log",
        )
        web = Process(
            "web", "--store", postgres_url, "--bind", "127.0.0.1:0", log=tmp_path / "web.log"
        )
        try:
            line = web.first_line()
            assert "serving http://" in line, (tmp_path / "web.log").read_text()
            login = web.first_line()  # the login link with the token drawn at start
            assert "/login?token=" in login, login

            chromium.open(login.split("open ", 1)[1].strip())  # logs in, then the task list
            chromium.wait_for("table.tasks a", task.id)
            chromium.click(f'table.tasks a[href="/tasks/{task.id}"]', navigates=True)
            # The first turn (the worker's reply to the prompt), then the page's live feed.
            chromium.wait_for("#timeline li", "Ready: send me a message")
            chromium.wait_for("body[data-live-state=open]")

            client.send(task, "Please start.")
            arrived = chromium.wait_for("#timeline li.fresh", "Working on it <b>now</b>.")
            assert "Working on it" in arrived
            chromium.wait_for("#task-facts[data-status=waiting]")
            shot = artifacts() / "web-screenshot.png"
            chromium.screenshot(shot)
            if os.environ.get("NOETA_UPDATE_SCREENSHOT"):
                chromium.screenshot(REPOSITORY / "docs" / "web-screenshot.png")
            assert shot.stat().st_size > 10_000

            chromium.click("form.danger button", navigates=True)
            said = chromium.wait_for("#confirmation")
            assert "cancel requested" in said
            with pytest.raises(noeta.TaskCancelled):
                client.result(task, timeout=60)
            assert client.get(task).status is TaskStatus.CANCELLED

            # "fork from here" on its first reply: a new task from the log through it.
            base = line.split("serving ", 1)[1].split()[0].rstrip("/")
            chromium.open(f"{base}/tasks/{task.id}")
            chromium.wait_for("form.fork button", "fork from here")
            at = chromium.evaluate("document.querySelector('form.fork input[name=at]').value")
            chromium.click("form.fork button", navigates=True)
            forked = chromium.wait_for("#confirmation", f"forked at seq {at}")
            fork_id = forked.split("task ", 1)[1].split()[0]
            created = next(client.tail(fork_id, follow=False)).event
            assert isinstance(created, events.TaskCreated)
            assert (created.forked_from, created.forked_at) == (task.id, int(at))
        finally:
            web.stop()
            worker.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_browser_retries_and_cancels_a_filtered_list_in_bulk(
    chromium: Chromium, postgres_url: str, tmp_path: Path
) -> None:
    asyncio.run(_failed_and_ready(postgres_url))
    web = Process("web", "--store", postgres_url, "--bind", "127.0.0.1:0", log=tmp_path / "web.log")
    try:
        serving = web.first_line()
        assert "serving http://" in serving, (tmp_path / "web.log").read_text()
        base = serving.split("serving ", 1)[1].split()[0].rstrip("/")
        chromium.open(web.first_line().split("open ", 1)[1].strip())
        chromium.wait_for("table.tasks a")

        # The failures by cause, from the navigation: a group retried from its row.
        chromium.click('nav a[href="/failures"]', navigates=True)
        row = chromium.wait_for("table.failures tbody tr", "llm_error")
        assert row.startswith("3llm_erroragentdefault"), row
        chromium.click("table.failures a.bulk-retry", navigates=True)
        said = chromium.wait_for("#bulk-count")
        assert "retry 3 failed tasks that ended with llm_error of queue default?" in said
        chromium.click("form.confirm button", navigates=True)
        assert "retried 3 of 3 tasks" in chromium.wait_for("#confirmation")

        # A bulk retry and a bulk cancel from the list's filters, the new ones among them.
        chromium.open(f"{base}/tasks?status=failed&error=RuntimeError&since=1h")
        assert chromium.wait_for("a.bulk-retry") == "retry all 1"
        chromium.click("a.bulk-retry", navigates=True)
        assert "retry 1 failed task that ended with RuntimeError" in chromium.wait_for(
            "#bulk-count"
        )
        chromium.click("form.confirm button", navigates=True)
        assert "retried 1 of 1 tasks" in chromium.wait_for("#confirmation")
        chromium.open(f"{base}/tasks?status=ready&queue=slow&since=1h")
        assert chromium.wait_for("a.bulk-cancel") == "cancel all 2"
        chromium.click("a.bulk-cancel", navigates=True)
        assert "cancel 2 ready tasks of queue slow" in chromium.wait_for("#bulk-count")
        chromium.click("form.danger button", navigates=True)
        assert "asked to stop 2 of 2 tasks" in chromium.wait_for("#confirmation")

        # The workers page reads itself again: a worker that registers shows unreloaded.
        chromium.click('nav a[href="/workers"]', navigates=True)
        chromium.wait_for("body[data-refresh]")
        assert "no worker is live" in chromium.wait_for("#figures")
        asyncio.run(_worker_registers(postgres_url, "worker-late"))
        assert chromium.wait_for("#figures td", "worker-late") == "worker-late"
    finally:
        web.stop()
    with noeta.Client(postgres_url) as client:
        assert {task.id for task in client.tasks(status="ready", queue="default")} == {
            f"{source}.retry-1" for source in ["failed-0", "failed-1", "failed-2", "job-failed"]
        }


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_browser_reads_the_queues_and_limits_pages_live_and_a_finish_drops_cancel(
    chromium: Chromium, postgres_url: str, tmp_path: Path
) -> None:
    claim = asyncio.run(_queue_limit_and_running_task(postgres_url))
    asyncio.run(_spent(postgres_url))
    web = Process("web", "--store", postgres_url, "--bind", "127.0.0.1:0", log=tmp_path / "web.log")
    try:
        serving = web.first_line()
        assert "serving http://" in serving, (tmp_path / "web.log").read_text()
        base = serving.split("serving ", 1)[1].split()[0].rstrip("/")
        chromium.open(web.first_line().split("open ", 1)[1].strip())
        chromium.wait_for("table.tasks a")

        chromium.click('nav a[href="/queues"]', navigates=True)
        assert chromium.wait_for("table.queues td:nth-child(7)", "slots used") == (
            "1 of 3 slots used"
        )
        assert chromium.wait_for("table.queues td:nth-child(2)") == "1"  # mail-1 is claimable
        asyncio.run(_more_mail(postgres_url, 3))  # the page reads itself again: 4 claimable
        assert chromium.wait_for("table.queues td:nth-child(2)", "4") == "4"
        caption = chromium.wait_for("figure.chart figcaption")
        assert caption == "mail: 4 finished in the last hour, per minute (UTC)"
        chromium.screenshot(artifacts() / "web-queues.png")

        chromium.click('nav a[href="/limits"]', navigates=True)
        row = chromium.wait_for("table.limits tbody tr", "anthropic/claude-x")
        assert "600" in row and "90,000" in row

        # The cost page: its figures (read again until the finish is past the settle).
        chromium.click('nav a[href="/cost"]', navigates=True)
        chromium.wait_for("#cost-total", "cost $0.004500")  # 1,000 in and 100 out at $3/$15
        assert chromium.evaluate("document.querySelectorAll('figure.chart svg').length") == 2
        chromium.screenshot(artifacts() / "web-cost.png")

        # A task's page follows it live; once it finishes, its cancel button is gone.
        chromium.open(f"{base}/tasks/{claim.task_id}")
        chromium.wait_for("form.danger button", "cancel task")
        chromium.wait_for("body[data-live-state=open]")
        asyncio.run(_finish(postgres_url, claim))
        chromium.wait_for("#task-facts[data-status=done]")
        chromium.wait_for("body[data-live-state=finished]")
        assert chromium.evaluate("document.querySelectorAll('form.danger').length") == 0
    finally:
        web.stop()


async def _queue_limit_and_running_task(url: str) -> Claim:
    """Queue `mail` (concurrency 3) with one task running, one claimable and four
    finished (one failed), and a model limit; the running task's claim."""
    from noeta.backends.stores import open_store
    from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
    from noeta.core.ports.store import Finish, NewEvent, NewTask

    store = await open_store(url, migrate=True)
    try:
        created = events.TaskCreated(model="scripted:/nonexistent.yaml", prompt="look")
        first = [NewEvent(*events.encode(created))]
        for n in range(2):
            assert await store.create_task(NewTask(f"mail-{n}", first, queue="mail"))
        for n, status in enumerate([TaskStatus.DONE] * 3 + [TaskStatus.FAILED]):
            assert await store.create_task(NewTask(f"ended-{n}", first, queue="mail"))
            ended = await store.claim_task("worker-a", f"ended-{n}", 300)
            assert ended is not None
            await store.append(ended, 1, [], next_state=Finish(status))
        await queue_settings_store(store).set_queue("mail", QueueChange(concurrency=3))
        claim = await store.claim_task("worker-a", "mail-0", 300)
        assert claim is not None
        limiter = store.capabilities.model_limits
        assert limiter is not None
        await limiter.set_model_limit("anthropic/claude-x", 600, 90_000)
        return claim
    finally:
        await store.close()


async def _spent(url: str) -> None:
    """A finished task with one reply: 1,000 tokens in, 100 out, on a priced model (in a
    queue drawn after `mail`, whose chart the test reads first)."""
    from noeta.backends.stores import open_store
    from noeta.core.ports.model import Text, Usage
    from noeta.core.ports.store import Finish, NewEvent, NewTask

    store = await open_store(url)
    try:
        created = events.TaskCreated(model="anthropic:claude-sonnet-4-5", prompt="spend")
        opening = [NewEvent(*events.encode(created))]
        assert await store.create_task(NewTask("spent", opening, queue="research"))
        claim = await store.claim_task("worker-a", "spent", 300)
        assert claim is not None
        replied = events.ModelReplied((Text("ok"),), "end_turn", Usage(1000, 100))
        happened = [events.ModelCalled("0" * 64), replied, events.TaskFinished("done", "ok")]
        ended = [NewEvent(*events.encode(event)) for event in happened]
        await store.append(claim, 1, ended, next_state=Finish())
    finally:
        await store.close()


async def _more_mail(url: str, count: int) -> None:
    from noeta.backends.stores import open_store
    from noeta.core.ports.store import NewEvent, NewTask

    store = await open_store(url)
    try:
        created = events.TaskCreated(model="scripted:/nonexistent.yaml", prompt="more")
        first = [NewEvent(*events.encode(created))]
        for n in range(count):
            assert await store.create_task(NewTask(f"more-{n}", first, queue="mail"))
    finally:
        await store.close()


async def _finish(url: str, claim: Claim) -> None:
    from noeta.backends.stores import open_store
    from noeta.core.ports.store import Finish, NewEvent

    store = await open_store(url)
    try:
        ended = [NewEvent(*events.encode(events.TaskFinished("done", answer="ok")))]
        await store.append(claim, 1, ended, next_state=Finish())
    finally:
        await store.close()


async def _failed_and_ready(url: str) -> None:
    """Three failed agent tasks, ended through the store's fenced appends, and two queued
    ones in queue `slow`."""
    from noeta.backends.stores import open_store
    from noeta.core.ports.store import Finish, NewEvent, NewTask
    from noeta.core.rules import events

    store = await open_store(url, migrate=True)
    try:
        created = events.TaskCreated(model="scripted:/nonexistent.yaml", prompt="look")
        first = [NewEvent(*events.encode(created))]
        for n in range(2):
            assert await store.create_task(NewTask(f"queued-{n}", first, queue="slow"))
        error = "llm_error: the reply was cut"
        for n in range(3):
            assert await store.create_task(NewTask(f"failed-{n}", first))
            claim = await store.claim_task("worker-a", f"failed-{n}", 30)
            assert claim is not None
            ended = [NewEvent(*events.encode(events.TaskFinished("failed", error=error)))]
            await store.append(claim, 1, ended, next_state=Finish(TaskStatus.FAILED))
        job = events.CallRequested("job", "send", {"to": "a"})  # type: ignore[arg-type]
        opening = [NewEvent(*events.encode(events.TaskCreated(model="", tools=("send",))))]
        assert await store.create_task(
            NewTask("job-failed", [*opening, NewEvent(*events.encode(job))])
        )
        claim = await store.claim_task("worker-a", "job-failed", 30)
        assert claim is not None
        failed = events.TaskFinished("failed", error="send failed: RuntimeError: down")
        ending = [NewEvent(*events.encode(failed))]
        await store.append(claim, 2, ending, next_state=Finish(TaskStatus.FAILED))
    finally:
        await store.close()


async def _worker_registers(url: str, name: str) -> None:
    from noeta.backends.stores import open_store
    from noeta.core.ports.worker_registry import WorkerEntry

    store = await open_store(url)
    try:
        registry = store.capabilities.workers
        assert registry is not None
        await registry.record_worker(WorkerEntry(name, ("default",), None, instance=name), 600)
    finally:
        await store.close()


async def _migrate(url: str) -> None:
    from noeta.backends.stores import open_store

    store = await open_store(url, migrate=True)
    await store.close()
