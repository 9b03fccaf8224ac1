"""A real headless Chromium on `noeta web` sees a model's reply grow on the task page
(issue 34) while a real `noeta worker` streams it from the Anthropic fake: the fake holds
its stream open after the first words until the test has seen them on the page, then
sends the rest, and the page ends with the log's reply. A `<script>` in a delta shows as
text and runs nothing; a secret the web process knows, split across the pause (so across
two chunks), is never on the page, not even its first half. A worker SIGKILLed mid-reply:
the page strikes its text through under the restart line, then shows the successor's.
Both record every text the growing reply had (a MutationObserver in the page): a marker
may be replaced by the final a moment later."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

import noeta
from noeta.backends.stores import open_store
from noeta.core.ports.reply_streams import Cursor
from noeta.redaction import REDACTED, is_secret_name
from noeta.testing.fake_providers import FakeAnthropic, Reply
from tests.web.cdp import Chromium
from tests.web.test_browser import Process, chromium
from tests.worker.conftest import add_task, lapse_the_lease, workspace_of

__all__ = ["chromium"]  # the fixture, shared

SECRET = "webstream-secret-2718281828"
PIECE = 6  # characters per text delta
HALF = SECRET[: len(SECRET) // 2]
FIRST = (
    "Streaming now <script>document.body.dataset.owned = 'yes'</script> and these words"
    " come before the pause, then the token is "
)
FIRST += " " * (-(len(FIRST) + len(HALF)) % PIECE) + HALF  # the pause falls after HALF
REST = SECRET[len(HALF) :] + ", and the rest of the reply arrives after the pause."
# The stream's events before its text: message_start, content_block_start, ping.
PAUSE_AFTER = 3 + len(FIRST) // PIECE
# Every text the growing reply ever had, recorded in the page as it changes.
RECORD = """
window.grown = [];
new MutationObserver(() => {
  const item = document.getElementById("reply-stream");
  if (item) window.grown.push(item.textContent);
}).observe(document.getElementById("timeline"),
           {subtree: true, childList: true, characterData: true});
"""


async def chunks_hold(url: str, task_id: str, text: str) -> None:
    """Until the worker has written `text` into the task's stream (read, not waited)."""
    store = await open_store(url)
    try:
        port = store.capabilities.reply_streams
        assert port is not None
        async with asyncio.timeout(120):
            while True:
                read = await port.read_chunks(task_id, Cursor(), 1000)
                if text in "".join(chunk.data for chunk in read.chunks):
                    return
                await asyncio.sleep(0.05)  # a poll of the store's state, not a timed wait
    finally:
        await store.close()


def environment(monkeypatch: pytest.MonkeyPatch, server: FakeAnthropic, **more: str) -> None:
    """The processes' environment: the fake as the provider, and no secret but `more`'s
    (the page holds back as many characters as the longest secret it knows)."""
    for name in [name for name in os.environ if is_secret_name(name)]:
        monkeypatch.delenv(name)
    for name, value in {"ANTHROPIC_API_KEY": "sk-test-key", **more}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)


def watch(chromium: Chromium, web: Process, task_id: str) -> None:
    """Log in through the link `noeta web` printed, open the task's page, wait for its
    live stream, and record every text its growing reply has (`window.grown`)."""
    serving = web.first_line()
    assert "serving http://" in serving, web.log.read_text()
    base = serving.split("serving ", 1)[1].split()[0].rstrip("/")
    chromium.open(web.first_line().split("open ", 1)[1].strip())
    chromium.open(f"{base}/tasks/{task_id}")
    chromium.wait_for("body[data-live-state=open]")
    chromium.evaluate(RECORD)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_browser_sees_the_reply_grow_then_the_logs_reply(
    chromium: Chromium, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeAnthropic() as server:
        server.script(Reply(text=FIRST + REST, piece_chars=PIECE, pause_after=PAUSE_AFTER))
        environment(monkeypatch, server, WEBSTREAM_TEST_TOKEN=SECRET)  # the web's secret
        with noeta.Client(postgres_url) as client:
            task = client.submit("Stream a reply.", model="anthropic:test-model")
        web = Process(
            "web", "--store", postgres_url, "--bind", "127.0.0.1:0", log=tmp_path / "web.log"
        )
        worker = None
        try:
            watch(chromium, web, task.id)
            worker = Process(
                "worker", "--store", postgres_url, "--poll", "0.2", log=tmp_path / "worker.log"
            )
            growing = chromium.wait_for("#reply-stream .reply-text", "and these words")
            assert server.paused.is_set() and not server.resume.is_set()
            assert growing.startswith("Streaming now <script>document.body.dataset.owned")
            assert chromium.evaluate("document.querySelectorAll('#timeline script').length") == 0
            assert chromium.evaluate("document.body.dataset.owned === undefined")
            asyncio.run(chunks_hold(postgres_url, task.id, HALF))  # split across two chunks
            server.resume.set()

            landed = chromium.wait_for("#timeline li[data-seq]", "arrives after the pause")
            assert f"{REDACTED}, and the rest" in landed
            chromium.wait_for("body[data-live-state=finished]")
            assert chromium.evaluate("document.getElementById('reply-stream')") is None
            grown = chromium.evaluate("window.grown")
            assert any("and these words" in text for text in grown)
            assert not any(HALF in text for text in grown), grown
            assert SECRET not in chromium.evaluate("document.body.textContent")
        finally:
            web.stop()
            if worker is not None:
                worker.stop()


DEAD = "Words of the attempt whose worker dies mid-reply. " * 4
LANDED = "Words of the attempt that lands."


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_browser_sees_a_killed_workers_text_struck_through_and_the_successors(
    chromium: Chromium, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeAnthropic() as server:
        # Paused past the characters held back (the web token is the longest secret).
        server.script(Reply(text=DEAD, piece_chars=PIECE, pause_after=25), Reply(text=LANDED))
        environment(monkeypatch, server)
        with noeta.Client(postgres_url) as client:
            task = client.submit("Stream a reply.", model="anthropic:test-model")
        web = Process(
            "web", "--store", postgres_url, "--bind", "127.0.0.1:0", log=tmp_path / "web.log"
        )
        workers: list[Process] = []
        try:
            watch(chromium, web, task.id)
            worker = Process("worker", "--store", postgres_url, log=tmp_path / "dying.log")
            workers.append(worker)
            chromium.wait_for("#reply-stream .reply-text", DEAD[:20])
            assert server.paused.is_set()
            worker.process.send_signal(signal.SIGKILL)
            worker.process.wait(60)
            server.resume.set()  # the paused reply goes on into a closed socket
            asyncio.run(lapse_the_lease(postgres_url, task.id))
            workers.append(Process("worker", "--store", postgres_url, log=tmp_path / "next.log"))

            chromium.wait_for("#timeline li[data-seq]", LANDED)
            chromium.wait_for("body[data-live-state=finished]")
            grown = chromium.evaluate("window.grown")
            said = [text for text in grown if "sent again" in text]
            assert said, grown  # the restart line, under the dead attempt's text
            assert "↺ the text above is void: sent again (call" in said[0]
            assert said[0].index(DEAD[:20]) < said[0].index("↺")
        finally:
            web.stop()
            for worker in workers:
                worker.stop()


async def bash_task(url: str, folder: Path, task_id: str, command: str) -> Path:
    """A task whose scripted model runs `command` in Bash, then answers; the FIFO `gate`
    in its workspace, which the command waits on."""
    store = await open_store(url, migrate=True)
    try:
        call = {"id": "call-1", "name": "Bash", "input": {"command": command}}
        await add_task(store, folder, task_id, {"tool_calls": [call]}, {"text": "ran it"})
    finally:
        await store.close()
    gate = workspace_of(folder, task_id) / "gate"
    gate.parent.mkdir(parents=True)
    os.mkfifo(gate)
    return gate


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_browser_sees_a_running_commands_output_as_it_is_written(
    chromium: Chromium, postgres_url: str, tmp_path: Path
) -> None:
    command = "echo '<b>step</b> one'; echo oops >&2; read word < gate; echo step two"
    gate = asyncio.run(bash_task(postgres_url, tmp_path, "web-bash", command))
    web = Process("web", "--store", postgres_url, "--bind", "127.0.0.1:0", log=tmp_path / "web.log")
    worker = None
    try:
        watch(chromium, web, "web-bash")
        worker = Process(
            "worker", "--store", postgres_url, "--poll", "0.2", log=tmp_path / "worker.log"
        )
        # The command waits on the gate: what the page shows came while it ran.
        shown = chromium.wait_for("#timeline li.command.streaming pre", "oops")
        assert shown.startswith("<b>step</b> one\n"), shown  # characters, not markup
        assert chromium.evaluate("document.querySelectorAll('#timeline li.command b').length") == 0
        stderr = "document.querySelector('#timeline li.command .stderr').textContent"
        assert chromium.evaluate(stderr) == "oops\n"
        with gate.open("wb") as opened:
            opened.write(b"go\n")
        chromium.wait_for("body[data-live-state=finished]")
        assert chromium.evaluate("document.querySelector('li.command.streaming')") is None
        assert "step two" in chromium.evaluate("document.getElementById('timeline').textContent")
    finally:
        with contextlib.suppress(OSError):  # the command, should it still wait
            os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
        web.stop()
        if worker is not None:
            worker.stop()
