"""A NUL in text a person gives (a prompt, a message, an id, a note) is refused at the
edge, before anything is written, in one line naming the field, on both stores, from
Python and from the command line (issue 25, item 23): PostgreSQL's text cannot hold it, so
one such prompt made every text search of `noeta web` fail."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient, Submission
from noeta.core.errors import PayloadError
from noeta.testing.command_line import run_in_process

SCRIPT = "scripted:" + str(Path(__file__).parents[2] / "examples" / "hello.yaml")
NUL = "a\x00b"


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[AsyncClient]:
    store = await open_store(store_url, migrate=True)
    await store.close()
    async with AsyncClient(store_url) as client:
        yield client


Call = Callable[[AsyncClient], Awaitable[object]]
CALLS: list[tuple[str, Call, str]] = [
    ("prompt", lambda c: c.submit(NUL, model=SCRIPT), "the prompt"),
    ("model", lambda c: c.submit("hi", model=f"scripted:/x{NUL}"), "the model spec"),
    ("batch", lambda c: c.submit_many(["ok", Submission(NUL)], model=SCRIPT), "the prompt"),
    ("message", lambda c: c.send("chat", NUL), "the message"),
    ("send to", lambda c: c.send(NUL, "hi"), "the task id"),
    ("cancel", lambda c: c.cancel(NUL), "the task id"),
    ("answer call", lambda c: c.answer("chat", NUL, "allow"), "the call id"),
    ("answer note", lambda c: c.answer("chat", "c1", "deny", note=NUL), "the note"),
    ("get", lambda c: c.get(NUL), "the task id"),
]


@pytest.mark.parametrize(("name", "call", "field"), CALLS, ids=[c[0] for c in CALLS])
async def test_the_client_refuses_a_nul_naming_the_field_and_writes_nothing(
    client: AsyncClient, name: str, call: Call, field: str
) -> None:
    await client.submit("", model=SCRIPT, id="chat", interactive=True)
    before = [(t.id, t.last_seq) for t in await client.tasks()]
    with pytest.raises(PayloadError, match=f"{field} must not contain a NUL character"):
        await call(client)
    assert [(t.id, t.last_seq) for t in await client.tasks()] == before


def noeta(store: str, *arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NOETA_")}
    environment |= {"NOETA_STORE": store, "NOETA_HOME": str(Path(store).parent)}
    return run_in_process(arguments, environment, stdin)


# A command line cannot hold a NUL: it comes through standard input, or a cron file.
COMMANDS = [
    ("submit", ["submit", "-", "--model", SCRIPT], "the prompt"),
    ("run", ["run", "-", "--model", SCRIPT], "the prompt"),
    ("send", ["send", "chat", "-"], "the message"),
]


@pytest.mark.parametrize(("name", "arguments", "field"), COMMANDS, ids=[c[0] for c in COMMANDS])
async def test_the_command_line_refuses_a_nul_in_one_line_and_writes_nothing(
    client: AsyncClient, store_url: str, name: str, arguments: list[str], field: str
) -> None:
    await client.submit("", model=SCRIPT, id="chat", interactive=True)
    result = noeta(store_url, *arguments, stdin=NUL)
    [line] = result.stderr.splitlines()
    assert result.returncode == 1
    assert line == f"noeta: error: {field} must not contain a NUL character"
    listed = json.loads(noeta(store_url, "tasks", "--json").stdout)
    assert [(t["id"], t["last_seq"]) for t in listed] == [("chat", 1)]


def test_a_cron_file_with_a_nul_is_refused_naming_the_file_line_and_field(tmp_path: Path) -> None:
    cron = tmp_path / "cron.yaml"
    cron.write_text(
        'schedules:\n  - name: a\n    schedule: "@daily"\n'
        '    task: {prompt: "a\\0b", model: "openai:m"}\n'
    )
    result = noeta(f"sqlite:///{tmp_path / 'n.db'}", "cron", "validate", str(cron))
    [line] = result.stderr.splitlines()
    assert result.returncode == 1
    assert line.endswith("line 4: schedules[0].task.prompt: must not contain a NUL character")
