"""`noeta web` as a user starts it: the bind rules and a taken address (one line, exit
1), the import it must not cost other commands, and a real server's live feed: an event
appended to a running task arrives over its server-sent events."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from asyncio.subprocess import PIPE
from collections.abc import Iterator

import httpx
import pytest

from noeta.core.ports.store import Finish, Store
from noeta.core.rules import events
from noeta.testing.command_line import store_in_environment
from tests.web.conftest import TOKEN, encoded, task_with_log

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def noeta_web(
    *arguments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    given, environment = store_in_environment(arguments, {**os.environ, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "noeta", "web", *given],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        check=False,
    )


@pytest.mark.parametrize(
    ("arguments", "env", "said"),
    [
        (["--bind", "0.0.0.0:0"], {}, "refusing to serve on 0.0.0.0:0, which is not a loopback"),
        (["--bind", "0.0.0.0:0"], {"NOETA_WEB_TOKEN": "short"}, "at least 16 characters"),
        (["--bind", "localhost"], {}, "--bind must be HOST:PORT"),
        (["--bind", "127.0.0.1:99999"], {}, "--bind must be HOST:PORT"),
        (["--bind", "no.such.host.invalid:80"], {"NOETA_WEB_TOKEN": "x" * 20}, "cannot listen"),
    ],
)
def test_a_bind_it_must_not_serve_is_one_line_and_exit_1(
    arguments: list[str], env: dict[str, str], said: str, tmp_path: object
) -> None:
    result = noeta_web(*arguments, "--store", "sqlite:////nonexistent/never-opened.db", env=env)
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert said in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_a_taken_address_is_one_line_and_exit_1(postgres_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = noeta_web("--bind", f"127.0.0.1:{port}", "--store", postgres_url)
    assert result.returncode == 1
    assert (
        result.stderr == f"noeta: error: cannot listen on 127.0.0.1:{port}: the address is in use\n"
    )


def test_other_commands_do_not_import_the_web_framework() -> None:
    check = (
        "import sys; from noeta.cli.main import cli; "
        "assert not {'starlette', 'uvicorn', 'noeta.web'} & set(sys.modules), sys.modules.keys()"
    )
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)


@pytest.fixture
def server(postgres_url: str) -> Iterator[str]:
    """A real `noeta web` on a free port; yields its address."""
    process = subprocess.Popen(
        [sys.executable, "-m", "noeta", "web", "--bind", "127.0.0.1:0", "--store", postgres_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NOETA_WEB_TOKEN": TOKEN},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "serving http://" in line, process.stderr.read() if process.stderr else line
        yield line.split("serving ", 1)[1].split()[0].rstrip("/")
    finally:
        process.terminate()
        process.wait(10)


async def test_a_running_tasks_new_events_arrive_live(store: Store, server: str) -> None:
    claim = await task_with_log(store, "followed", [events.MessageTaken(1, "first")])
    async with (
        httpx.AsyncClient(base_url=server, timeout=30, headers=BEARER) as http,
        http.stream("GET", "/tasks/followed/live", params={"after": 2}) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.aiter_lines()

        async def until(text: str) -> list[str]:
            seen = []
            async for line in lines:
                seen.append(line)
                if text in line:
                    return seen
            raise AssertionError(f"the stream ended before {text!r}: {seen}")

        await asyncio.wait_for(until("event: facts"), 30)
        await store.append(claim, 2, encoded(events.MessageTaken(2, "<i>live</i> news")))
        arrived = "\n".join(await asyncio.wait_for(until('data-seq="3"'), 30))
        assert "&lt;i&gt;live&lt;/i&gt; news" in arrived
        finished = events.TaskFinished("done", answer="ok")
        await store.append(claim, 3, encoded(finished), next_state=Finish())
        tail = await asyncio.wait_for(until("event: finished"), 30)
        assert any('data-seq="4"' in line for line in tail)


async def test_stopping_with_a_page_following_a_task_is_quick_and_quiet(
    store: Store, postgres_url: str
) -> None:
    await task_with_log(store, "watched")
    arguments = ["web", "--bind", "127.0.0.1:0", "--store", postgres_url]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "noeta",
        *arguments,
        stdout=PIPE,
        stderr=PIPE,
        env={**os.environ, "NOETA_WEB_TOKEN": TOKEN},
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = (await process.stdout.readline()).decode()
        host, port = line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        bearer = f"Authorization: Bearer {TOKEN}\r\n"
        request = f"GET /tasks/watched/live HTTP/1.1\r\nHost: {host}\r\n{bearer}\r\n"
        writer.write(request.encode())
        await writer.drain()
        while b"event: facts" not in await reader.readline():
            pass
        process.terminate()
        # uvicorn waits for open connections: the stream must end on its own, at once
        # (at its graceful timeout, 2 s, uvicorn would cancel it with a traceback).
        await asyncio.wait_for(process.wait(), 1.5)
        errors = (await process.stderr.read()).decode()
        assert "Traceback" not in errors, errors
        writer.close()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
