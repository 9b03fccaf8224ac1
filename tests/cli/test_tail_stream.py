"""`noeta tail --follow` prints a model reply's text as it streams (issue 34), before the
reply is in the log, and the whole reply once it lands."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from noeta.core.ports.reply_streams import Chunk, Cursor
from noeta.core.ports.store import Store
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import Bash
from noeta.testing.fake_providers import FakeAnthropic, Reply
from tests.client.test_stream import LONG_TEXT, created, provider, run_task, store, streams_of
from tests.client.test_tool_output_stream import Run

__all__ = ["store"]  # the fixture, shared


def following(
    task_id: str, url: str, more: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`noeta tail TASK --follow`, its store in the environment (never on argv)."""
    return subprocess.Popen(
        [sys.executable, "-m", "noeta", "tail", task_id, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NOETA_STORE": url, **(more or {})},
    )


async def stream_rows(store: Store) -> tuple[Chunk, ...]:
    return (await streams_of(store).read_chunks("secret", Cursor(), 1000)).chunks


def read_until(process: subprocess.Popen[bytes], wanted: bytes) -> bytes:
    """The tail's output up to `wanted` (raw: streamed text ends no line)."""
    assert process.stdout is not None
    seen = b""
    while wanted not in seen:
        piece = os.read(process.stdout.fileno(), 4096)
        if not piece:
            raise AssertionError(f"the output ended before {wanted!r}: {seen!r}")
        seen += piece
    return seen


async def resumed_to_the_end(
    server: FakeAnthropic, running: asyncio.Future[TaskRunner], tail: subprocess.Popen[bytes]
) -> tuple[bytes, bytes]:
    """The paused reply sent on, the task run to its end: what the tail printed after."""
    server.resume.set()
    await asyncio.wait_for(running, 60)
    return await asyncio.to_thread(tail.communicate, timeout=60)


def killed(tail: subprocess.Popen[bytes]) -> None:
    if tail.poll() is None:
        tail.kill()
        tail.communicate()


async def test_tail_follow_prints_the_text_as_it_streams(postgres_url: str, store: Store) -> None:
    with FakeAnthropic() as server:
        server.script(Reply(text=LONG_TEXT, piece_chars=9, pause_after=12))
        await created(store, "tailed", "anthropic:test-model")
        await streams_of(store).follow("tailed")
        tail = following("tailed", postgres_url)
        try:
            running = asyncio.ensure_future(
                run_task(store, "tailed", provider("anthropic", server.base_url))
            )
            early = await asyncio.to_thread(read_until, tail, b"\xe2\x96\xb8 The quick")
            assert server.paused.is_set() and not server.resume.is_set()
            assert b"model reply" not in early  # the text came before the reply landed
            rest, errors = await resumed_to_the_end(server, running, tail)
        finally:
            killed(tail)
    printed = (early + rest).decode()
    assert tail.returncode == 0 and errors == b""
    assert "model reply" in printed and "finished: done" in printed
    # Every streamed piece once, in order: the text between the marks is the reply's.
    pieces = [part.split("\n", 1)[0] for part in printed.split("\u25b8 ")[1:]]
    assert "".join(pieces) == LONG_TEXT


SECRET = "tail-secret-value-1618033988"
HALF = SECRET[: len(SECRET) // 2]


async def test_tail_follow_scrubs_a_secret_split_across_two_chunks(
    postgres_url: str, store: Store
) -> None:
    """The provider pauses in the middle of a secret the tail's environment holds: its
    first half is written as one chunk, the rest as another. Neither half is printed."""
    first = "Here is what you asked for, the value is " + HALF
    with FakeAnthropic() as server:
        # message_start, content_block_start and ping come before the text's pieces.
        server.script(Reply(text=first + SECRET[len(HALF) :] + " and that is all.",
                            piece_chars=len(first), pause_after=4))  # fmt: skip
        await created(store, "secret", "anthropic:test-model")
        await streams_of(store).follow("secret")
        tail = following("secret", postgres_url, {"TAIL_TEST_API_KEY": SECRET})
        try:
            running = asyncio.ensure_future(
                run_task(store, "secret", provider("anthropic", server.base_url))
            )
            await asyncio.to_thread(server.paused.wait, 60)
            async with asyncio.timeout(60):  # the first half is a chunk of its own
                while True:  # polls the store's state; no timed wait
                    if HALF in "".join(row.data for row in await stream_rows(store)):
                        break
                    await asyncio.sleep(0.05)
            printed, errors = await resumed_to_the_end(server, running, tail)
        finally:
            killed(tail)
    assert tail.returncode == 0, errors
    text = printed.decode()
    assert "value is [redacted] and that is all." in text
    assert HALF not in text and SECRET not in text


async def test_tail_follow_prints_a_commands_output_as_it_is_written(
    postgres_url: str, store: Store, tmp_path: Path
) -> None:
    run = Run(store, tmp_path, "tailed-bash", Bash())
    command = r"echo step one; printf 'oops \033[2J\n' >&2; read word < gate; echo step two"
    running = await run.start(command)
    tail = following("tailed-bash", postgres_url)
    try:
        early = await asyncio.to_thread(read_until, tail, "┊ step one\n".encode())
        assert b"ToolFinished" not in early and not running.done()  # the command waits
        await run.open_gate()
        await asyncio.wait_for(running, 60)
        rest, errors = await asyncio.to_thread(tail.communicate, timeout=60)
    finally:
        killed(tail)
    printed = (early + rest).decode()
    assert tail.returncode == 0 and errors == b""
    # Told apart from reply text and from each other; the escape shown, never played.
    assert "┊! oops \\x1b[2J\n" in printed and "\x1b" not in printed
    assert "┊ step two\n" in printed and "finished: done" in printed
