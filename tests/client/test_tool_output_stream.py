"""Bash's output streams to `AsyncClient.stream` as it is written (issue 34 item 2): a
worker's runner in this process, confined Bash, a real PostgreSQL. The commands wait on a
FIFO the test opens only after it saw their first output: a reader sees output before
the command ends, never by a timing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.client.stream_items import (
    StreamFinal,
    StreamFinished,
    StreamItem,
    StreamToolOutput,
)
from noeta.core.ports.reply_streams import Cursor
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.observability import tracing
from noeta.plugins.core import Bash
from tests.worker.conftest import until

WITHIN = 120  # generous: a loaded 2-core machine


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


class Run:
    """A task whose model runs one Bash command, then answers "done"."""

    def __init__(self, store: Store, tmp_path: Path, task_id: str, bash: Bash) -> None:
        self.store, self.task_id = store, task_id
        self.runner = TaskRunner(
            store, ProviderRegistry(), {"Bash": bash}, workspaces=str(tmp_path / "ws")
        )
        self.workspace = Path(self.runner.workspace_for(task_id))
        self.script = tmp_path / f"{task_id}.json"

    async def start(self, command: str, *, followed: bool = True) -> asyncio.Task[object]:
        call = {"id": "call-1", "name": "Bash", "input": {"command": command}}
        replies = [{"tool_calls": [call]}, {"text": "done"}]
        self.script.write_text(json.dumps({"replies": replies}))
        model = f"scripted:{self.script}"
        created = events.TaskCreated(model=model, prompt="go", tools=("Bash",))
        await self.store.create_task(NewTask(self.task_id, [NewEvent(*events.encode(created))]))
        self.workspace.mkdir(parents=True)
        os.mkfifo(self.workspace / "gate")
        port = self.store.capabilities.reply_streams
        assert port is not None
        if followed:
            await port.follow(self.task_id)  # as the reader's feed does, before the run
        claim = await self.store.claim_task("w", self.task_id, 600)
        assert claim is not None
        return asyncio.ensure_future(self.runner.run(claim))

    async def open_gate(self, what: bytes = b"go\n") -> None:
        def write() -> None:
            with (self.workspace / "gate").open("wb") as gate:  # waits for the command
                gate.write(what)

        await asyncio.to_thread(write)

    async def result(self) -> tuple[int, str]:
        for stored in await self.store.read_log(self.task_id):
            if stored.type == "ToolFinished" and isinstance(stored.data, dict):
                return stored.seq, str(stored.data["content"])
        raise AssertionError("no ToolFinished in the log")


async def until_output(
    reader: AsyncIterator[StreamItem], items: list[StreamItem], wanted: str, within: float = WITHIN
) -> None:
    """Read items until the stdout shown so far holds `wanted`."""
    while wanted not in shown(items, "stdout"):
        items.append(await asyncio.wait_for(anext(reader), within))


async def rest(reader: AsyncIterator[StreamItem], items: list[StreamItem]) -> None:
    async with asyncio.timeout(WITHIN):
        async for item in reader:
            items.append(item)


def shown(items: list[StreamItem], stream: str) -> str:
    return "".join(i.text for i in items if isinstance(i, StreamToolOutput) and i.stream == stream)


async def test_a_reader_sees_stdout_and_stderr_before_the_command_ends_then_the_final(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    run = Run(store, tmp_path, "ts-steps", Bash())
    command = "echo step one; echo oops >&2; read word < gate; echo step two $word"
    running = await run.start(command)
    items: list[StreamItem] = []
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        reader = client.stream(run.task_id)
        await until_output(reader, items, "step one\n")  # the command waits on the gate
        assert not running.done()
        await run.open_gate()
        await rest(reader, items)
    await running
    assert shown(items, "stdout") == "step one\nstep two go\n"
    assert shown(items, "stderr") == "oops\n"
    outputs = [i for i in items if isinstance(i, StreamToolOutput)]
    assert {(i.call_id, i.call_seq) for i in outputs} == {("call-1", outputs[0].call_seq)}
    seq, content = await run.result()
    [final] = [i for i in items if isinstance(i, StreamFinal) and i.call_id == "call-1"]
    assert (final.event_seq, final.event_type, final.text) == (seq, "ToolFinished", content)
    assert items.index(final) > items.index(outputs[-1])
    assert items[-1] == StreamFinished("done")


async def test_a_command_printing_100_mb_streams_only_the_bound_of_its_result(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    run = Run(store, tmp_path, "ts-bound", Bash(output_cap_chars=1000))
    running = await run.start("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo end")
    items: list[StreamItem] = []
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        await rest(client.stream(run.task_id), items)
    await running
    outputs = [i for i in items if isinstance(i, StreamToolOutput)]
    assert shown(items, "stdout") == "a" * 1000  # the head the result keeps, no more
    assert [i.stream for i in outputs][-1] == "truncated"
    assert sum(len(i.text) for i in outputs if i.stream != "truncated") == 1000
    _, content = await run.result()
    assert content.startswith("a" * 500) and "end\n[exit code 0]" in content


async def test_invalid_utf8_a_split_character_cr_and_escapes_stream_as_data(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    run = Run(store, tmp_path, "ts-bytes", Bash())
    # The é is cut between two writes the gate keeps apart (so two reads of the pipe).
    command = r"printf 'one two caf\xc3'; read word < gate; printf '\xa9 \xff\x00 \x1b[31mred\r\n'"
    running = await run.start(command)
    items: list[StreamItem] = []
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        reader = client.stream(run.task_id)
        await until_output(reader, items, "one two ")
        await run.open_gate()
        await rest(reader, items)
    await running
    assert shown(items, "stdout") == "one two café \\xff\\x00 \x1b[31mred\r\n"
    _, content = await run.result()
    assert content.startswith(shown(items, "stdout"))  # the result's own decoding


@pytest.mark.parametrize(
    ("secret", "cut"),
    [("passed-token-5f1c9e0a7b", 9), ("correct horse battery 5f1c", 8)],  # cut at a space
)
async def test_a_secret_split_across_two_writes_never_shows(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    secret: str,
    cut: int,
) -> None:
    monkeypatch.setenv("NOETA_TEST_STREAM_TOKEN", secret)
    tracing.add_passed_secrets(["NOETA_TEST_STREAM_TOKEN"])  # as a worker does at start
    run = Run(store, tmp_path, "ts-secret", Bash(pass_env=["NOETA_TEST_STREAM_TOKEN"]))
    # The first write ends inside the token; the second, after the gate, has its rest.
    token = "$NOETA_TEST_STREAM_TOKEN"
    command = (
        f'printf "before %s" "${{{token[1:]}:0:{cut}}}"; read word < gate; '
        f'printf "%s after\\n" "${{{token[1:]}:{cut}}}"'
    )
    running = await run.start(command)
    items: list[StreamItem] = []
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        reader = client.stream(run.task_id)
        await until_output(reader, items, "before ")  # written while the token's start waits
        await run.open_gate()
        await rest(reader, items)
    await running
    assert shown(items, "stdout") == "before [redacted] after\n"
    streamed = "".join(str(item) for item in items if isinstance(item, StreamToolOutput))
    assert secret[:cut] not in streamed and secret[cut:] not in streamed
    # The final is the log's result, as `noeta show` reads it: the stream scrubs what it
    # writes beside the log, never the log.
    _, content = await run.result()
    assert secret in content


async def test_a_reader_who_comes_after_the_output_went_quiet_is_shown_it(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    """As `noeta run`'s runner (no listening for follows): the command printed, the
    stream was told nobody follows, and the command waits for its reader. The stream asks
    again while it holds text; before, it waited for more output, which never came."""
    run = Run(store, tmp_path, "ts-late", Bash())
    running = await run.start("echo first words; read word < gate; echo $word", followed=False)
    writer = run.runner.streams
    assert writer is not None
    asked_at = writer._followed_at

    async def answered() -> bool:
        return writer._followed_at != asked_at

    await until(answered, 'the stream heard "nobody follows"')
    items: list[StreamItem] = []
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        reader = client.stream(run.task_id)
        await until_output(reader, items, "first words\n", within=30)
        await run.open_gate()
        await rest(reader, items)
    await running
    assert shown(items, "stdout") == "first words\ngo\n"


async def test_a_command_nobody_follows_writes_no_row(store: Store, tmp_path: Path) -> None:
    run = Run(store, tmp_path, "ts-alone", Bash())
    running = await run.start("echo out; echo err >&2; seq 1 5000", followed=False)
    await running
    assert run.runner.streams is not None
    await run.runner.streams.drained()  # every stream of the run is done writing
    port = store.capabilities.reply_streams
    assert port is not None
    assert (await port.read_chunks(run.task_id, Cursor(), 100)).chunks == ()
