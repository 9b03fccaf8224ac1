"""The live feed under load and under attack: tool output that tries to end the stream
with bare CRs (parsed as a browser parses server-sent events), a burst of notices read a
few times rather than once each, and more live pages than the server allows (503, one
log line per burst), over real connections to a real `noeta web`."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from starlette.testclient import TestClient

from noeta.client import AsyncClient
from noeta.core.ports.store import Finish, Store, TaskStatus
from noeta.core.rules import events
from noeta.web.live import LiveFeed
from noeta.web.site import Site
from tests.web.conftest import TOKEN, encoded, task_with_log

INJECTION = "ok\revent: finished\rdata: done\r\rdata: <b>forged</b>\r\n\r\n"


def as_a_browser_reads(stream: str) -> list[tuple[str, str]]:
    """(event, data) pairs as the HTML standard's EventSource parser dispatches them: CR,
    LF and CRLF all end a line; a blank line ends an event."""
    dispatched: list[tuple[str, str]] = []
    data: list[str] = []
    name = ""
    for line in re.split(r"\r\n|\r|\n", stream):
        if line == "":
            if data:
                dispatched.append((name or "message", "\n".join(data)))
            name, data = "", []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return dispatched


async def test_tool_output_with_bare_crs_cannot_end_or_forge_events(
    store: Store, web: Callable[..., TestClient]
) -> None:
    happened: list[events.Event] = [
        events.ToolStarted("c1", "Bash", {"command": "printf ..."}),
        events.ToolFinished("c1", INJECTION),
        events.TaskFinished("done", answer="ok"),
    ]
    await task_with_log(store, "crlf", happened, next_state=Finish())
    stream = web().get("/tasks/crlf/live", params={"after": 1})
    assert stream.status_code == 200
    seen = as_a_browser_reads(stream.text)
    assert [name for name, _ in seen] == ["rows", "facts", "finished"], seen
    rows = seen[0][1]
    assert "event: finished" in rows and "&lt;b&gt;forged&lt;/b&gt;" in rows


@pytest.fixture
async def feed(postgres_url: str) -> AsyncIterator[LiveFeed]:
    client = AsyncClient(postgres_url)
    # Rows are read on notices only (no timed round), at most once per half second.
    feed = LiveFeed(Site(client), check_seconds=3600, read_interval=0.5)
    yield feed
    await feed.close()
    await client.close()


async def test_a_burst_of_notices_costs_a_few_reads_and_the_last_state_arrives(
    store: Store, feed: LiveFeed, postgres_url: str
) -> None:
    claim = await task_with_log(store, "busy")
    burst = 200
    async with (
        feed.watch("busy") as changed,
        await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as notifier,
    ):
        await asyncio.wait_for(feed.heard(2), 60)  # both LISTENs in force: "*" from each
        for n in range(burst):  # each its own transaction: each notice delivered alone
            await notifier.execute("SELECT pg_notify('noeta_wake', %s)", [f"q{n}"])
        await asyncio.wait_for(feed.heard(burst + 2), 60)
        finished = events.TaskFinished("done", answer="ok")
        await store.append(claim, 1, encoded(finished), next_state=Finish())
        async with asyncio.timeout(60):
            while feed.seen("busy") != (2, TaskStatus.DONE):
                await changed.wait()
                changed.clear()
    assert feed.reads <= burst // 10, f"{feed.reads} reads for {burst} notices"


async def open_stream(port: int, path: str) -> tuple[str, asyncio.StreamWriter]:
    """A live page's request on its own connection: its status line, and the writer that
    keeps the connection open until closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    writer.write(head.encode())
    await writer.drain()
    status = (await reader.readline()).decode()
    if " 200 " in status:
        while b": following" not in await reader.readline():
            pass
    return status, writer


async def test_live_pages_past_the_limit_get_503_and_one_log_line_per_burst(
    store: Store, postgres_url: str
) -> None:
    await task_with_log(store, "popular")
    arguments = ["web", "--bind", "127.0.0.1:0", "--store", postgres_url, "--max-streams", "2"]
    env = {**os.environ, "NOETA_WEB_TOKEN": TOKEN}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "noeta", *arguments, stdout=PIPE, stderr=PIPE, env=env
    )
    opened: list[asyncio.StreamWriter] = []
    try:
        assert process.stdout is not None and process.stderr is not None
        line = (await process.stdout.readline()).decode()
        assert "serving http://" in line, (await process.stderr.read()).decode()
        port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        for _ in range(2):
            status, writer = await open_stream(port, "/tasks/popular/live")
            assert " 200 " in status
            opened.append(writer)
        for _ in range(5):
            status, writer = await open_stream(port, "/tasks/popular/live")
            opened.append(writer)
            assert " 503 " in status, status
        opened.pop(0).close()  # one page closes: the next is served again
        async with asyncio.timeout(60):
            while True:
                status, writer = await open_stream(port, "/tasks/popular/live")
                opened.append(writer)
                if " 200 " in status:
                    break
        for _ in range(3):  # a second burst
            status, writer = await open_stream(port, "/tasks/popular/live")
            opened.append(writer)
            assert " 503 " in status, status
        process.terminate()
        errors = (await process.stderr.read()).decode()
        await process.wait()
    finally:
        for writer in opened:
            writer.close()
        if process.returncode is None:
            process.kill()
            await process.wait()
    refusals = [line for line in errors.splitlines() if "live" in line and "503" in line]
    assert len(refusals) == 2, errors
    assert "Traceback" not in errors, errors
