"""`noeta submit`, `send`, `tasks`, `tail` and `cancel` as a user runs them, and their bad
inputs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import Finish, NewEvent, TaskStatus
from noeta.core.rules import events
from tests.cli.test_run import EXAMPLE, noeta, one_line_error

# A plugin whose tools exist only once it is started, as an MCP plugin's do.
LATE_PLUGIN = """
class Tool:
    name = "Greet"

class LatePlugin:
    name = "late"
    started = False

    def start(self):
        self.started = True

    def tools(self):
        if not self.started:
            raise RuntimeError("tools() before start()")
        return [Tool()]

    def close(self):
        pass

def plugin(params):
    return LatePlugin()
"""


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'noeta.db'}"


def submit(*arguments: str, store: str, stdin: str | None = None) -> str:
    result = noeta("submit", *arguments, "--model", f"scripted:{EXAMPLE}", store=store, stdin=stdin)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def shown(task_id: str, store: str) -> dict[str, Any]:
    result = noeta("show", task_id, "--json", store=store)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def listed(store: str, *arguments: str) -> list[dict[str, Any]]:
    result = noeta("tasks", "--json", *arguments, store=store)
    assert result.returncode == 0, result.stderr
    records: list[dict[str, Any]] = json.loads(result.stdout)
    return records


def finished_task(store: str, task_id: str) -> None:
    result = noeta("run", "hi", "--model", f"scripted:{EXAMPLE}", "--id", task_id, store=store)
    assert result.returncode == 0, result.stderr


async def inbox(store_url: str, task_id: str) -> list[Any]:
    store = await open_store(store_url)
    try:
        return [(e.dedupe_key, e.payload) for e in await store.read_inbox(task_id)]
    finally:
        await store.close()


async def append_as_worker(
    store_url: str, task_id: str, event: events.Event, status: TaskStatus | None = None
) -> None:
    """Write one event as a worker would: claim, append (finishing the task with `status`)."""
    store = await open_store(store_url)
    try:
        claim = await store.claim_task("test-worker", task_id, 30)
        assert claim is not None
        record = await store.get_task(task_id)
        assert record is not None
        if status is None:
            await store.append(claim, record.last_seq, [NewEvent(*events.encode(event))])
            await store.release(claim)
        else:
            next_state = Finish(status)
            await store.append(
                claim, record.last_seq, [NewEvent(*events.encode(event))], next_state=next_state
            )
    finally:
        await store.close()


# --- submit ---------------------------------------------------------------------------


def test_submit_prints_only_the_id_and_creates_the_task(sqlite_store: str) -> None:
    result = noeta(
        "submit",
        "What is noeta?",
        "--model",
        f"scripted:{EXAMPLE}",
        "--id",
        "t1",
        store=sqlite_store,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "t1\n"
    document = shown("t1", sqlite_store)
    assert document["task"]["status"] == "ready" and document["task"]["queue"] == "default"
    [created] = document["log"]
    assert created["type"] == "TaskCreated"
    assert created["data"] == {
        "v": 2,  # tools null: a noeta that predates it leaves the task to a newer one
        "model": f"scripted:{EXAMPLE}",
        "prompt": "What is noeta?",
        "interactive": False,
        "system": "",
        "max_tokens": 4096,
        "tools": None,  # every tool of the plugins its worker pins
    }


def test_submit_makes_an_id_when_none_is_given(sqlite_store: str) -> None:
    first, second = submit("a", store=sqlite_store), submit("b", store=sqlite_store)
    assert first != second
    assert {record["id"] for record in listed(sqlite_store)} == {first, second}


def test_an_interactive_task_may_start_without_a_prompt_or_with_one(sqlite_store: str) -> None:
    submit("--interactive", "--id", "quiet", "--queue", "chat", store=sqlite_store)
    submit("hello", "--interactive", "--id", "talking", store=sqlite_store)
    quiet = shown("quiet", sqlite_store)
    assert quiet["task"]["queue"] == "chat"
    assert quiet["log"][0]["data"]["interactive"] is True
    assert quiet["log"][0]["data"]["prompt"] == ""
    assert shown("talking", sqlite_store)["log"][0]["data"]["prompt"] == "hello"


def test_the_prompt_can_come_from_stdin(sqlite_store: str) -> None:
    task_id = submit("-", store=sqlite_store, stdin="over\nlines")
    assert shown(task_id, sqlite_store)["log"][0]["data"]["prompt"] == "over\nlines"


def test_submit_starts_no_plugin_and_leaves_the_tools_to_the_worker(
    sqlite_store: str, tmp_path: Path
) -> None:
    # A plugin whose start fails: the submit would fail, were it started.
    (tmp_path / "late_plugin.py").write_text(LATE_PLUGIN.replace("self.started = True", "1/0"))
    config = tmp_path / "noeta.yaml"
    config.write_text("plugins:\n  - core\n  - module: late_plugin\n")
    result = noeta(
        "submit",
        "hi",
        "--model",
        "anthropic:claude-x",  # no key needed to submit: the worker holds it
        "--config",
        str(config),
        "--id",
        "p",
        store=sqlite_store,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert shown("p", sqlite_store)["log"][0]["data"]["tools"] is None


@pytest.mark.parametrize(
    ("arguments", "stdin", "expected"),
    [
        (["hi", "--model", "nope:x"], None, "unknown model spec 'nope:x'"),
        (["hi", "--model", "claude"], None, "unknown model spec 'claude'"),
        (["-"], "x" * (10 * 1024 * 1024), "the prompt is 10485760 characters; the limit is"),
        ([], None, "a one-shot task needs a prompt"),
        (["hi", "--queue", ""], None, "a queue name must not be empty"),
        (["hi", "--queue", "q" * 513], None, "a queue name is 513 characters; the limit is 512"),
        *(
            (["hi", "--id", bad], None, "is not allowed: a task id is 1-128 characters of")
            for bad in ("", "..", ".", "a/../b", "/etc", "x" * 10_000)
        ),
        (["hi", "--config", "/no/such/noeta.yaml"], None, "/no/such/noeta.yaml"),
    ],
)
def test_bad_submissions_are_one_line_and_write_nothing(
    sqlite_store: str, arguments: list[str], stdin: str | None, expected: str
) -> None:
    result = noeta("submit", *arguments, store=sqlite_store, stdin=stdin)
    assert expected in one_line_error(result)
    assert result.stdout == ""
    assert listed(sqlite_store) == []


def test_an_existing_id_is_refused_and_the_task_left_as_it_was(sqlite_store: str) -> None:
    submit("first", "--id", "same", store=sqlite_store)
    result = noeta("submit", "second", "--id", "same", store=sqlite_store)
    assert one_line_error(result) == (
        "noeta: error: a task with id 'same' exists already (or existed and was pruned)"
    )
    [created] = shown("same", sqlite_store)["log"]
    assert created["data"]["prompt"] == "first"


# --- send -----------------------------------------------------------------------------


def test_send_delivers_once_per_id(sqlite_store: str) -> None:
    submit("--interactive", "--id", "chat", store=sqlite_store)
    assert noeta("send", "chat", "hello", "--id", "k", store=sqlite_store).stdout == "sent\n"
    again = noeta("send", "chat", "hello again", "--id", "k", store=sqlite_store)
    assert again.returncode == 0 and again.stdout == "already sent\n"
    assert noeta("send", "chat", "-", store=sqlite_store, stdin="from\nstdin").stdout == "sent\n"
    entries = asyncio.run(inbox(sqlite_store, "chat"))
    assert entries[0] == ("message:k", {"text": "hello"})
    assert entries[1][0].startswith("message:") and entries[1][1] == {"text": "from\nstdin"}
    assert len(entries) == 2


def test_send_to_an_unknown_or_finished_task_is_refused(sqlite_store: str) -> None:
    line = one_line_error(noeta("send", "nope", "hello", store=sqlite_store))
    assert line == "noeta: error: no task with id 'nope'"
    finished_task(sqlite_store, "over")
    line = one_line_error(noeta("send", "over", "hello", store=sqlite_store))
    assert line == "noeta: error: task over is done; it takes no more messages"
    assert asyncio.run(inbox(sqlite_store, "over")) == []


def test_send_to_a_one_shot_task_is_refused_and_delivers_nothing(sqlite_store: str) -> None:
    submit("a one-shot prompt", "--id", "once", store=sqlite_store)
    line = one_line_error(noeta("send", "once", "hello", store=sqlite_store))
    assert line == (
        "noeta: error: task once is one-shot: it takes no messages "
        "(submit it --interactive to converse)"
    )
    assert asyncio.run(inbox(sqlite_store, "once")) == []


@pytest.mark.parametrize(
    ("arguments", "stdin", "expected"),
    [
        (["-"], "x" * 1_000_001, "the message is 1000001 characters; the limit is 1000000"),
        ([""], None, "a message must not be empty"),
        (["hi", "--id", ""], None, "a message id must not be empty"),
    ],
)
def test_bad_messages_are_one_line_and_deliver_nothing(
    sqlite_store: str, arguments: list[str], stdin: str | None, expected: str
) -> None:
    submit("--interactive", "--id", "chat", store=sqlite_store)
    result = noeta("send", "chat", *arguments, store=sqlite_store, stdin=stdin)
    assert expected in one_line_error(result)
    assert asyncio.run(inbox(sqlite_store, "chat")) == []


# --- tasks ----------------------------------------------------------------------------


def test_tasks_lists_a_table_and_json_with_filters(sqlite_store: str) -> None:
    submit("a", "--id", "one", store=sqlite_store)
    submit("b", "--id", "two", "--queue", "other", store=sqlite_store)
    finished_task(sqlite_store, "three")

    columns = "id,status,queue,epoch,owner,updated"
    table = noeta("tasks", "--columns", columns, store=sqlite_store)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == columns.split(",")
    cells = {row.split()[0]: row.split() for row in rows}
    assert set(cells) == {"one", "two", "three"}
    assert cells["two"][1:5] == ["ready", "other", "0", "-"]
    assert cells["three"][1] == "done"

    assert {r["id"] for r in listed(sqlite_store, "--status", "ready")} == {"one", "two"}
    assert [r["id"] for r in listed(sqlite_store, "--queue", "other")] == ["two"]
    assert [r["id"] for r in listed(sqlite_store, "--status", "done")] == ["three"]
    assert len(listed(sqlite_store, "--limit", "1")) == 1
    [record] = listed(sqlite_store, "--queue", "other")
    assert record["status"] == "ready" and record["owner"] is None and record["last_seq"] == 1


def test_tasks_says_so_when_there_are_none(sqlite_store: str) -> None:
    assert noeta("tasks", store=sqlite_store).stdout == "no tasks\n"
    assert listed(sqlite_store) == []


@pytest.mark.parametrize("arguments", [["--status", "bogus"], ["--limit", "0"]])
def test_bad_filters_are_usage_errors(sqlite_store: str, arguments: list[str]) -> None:
    result = noeta("tasks", *arguments, store=sqlite_store)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Invalid value" in result.stderr


# --- cancel ---------------------------------------------------------------------------


def test_cancel_delivers_one_request(sqlite_store: str) -> None:
    submit("--interactive", "--id", "chat", store=sqlite_store)
    told = "; `noeta show chat` tells what it stopped\n"
    assert noeta("cancel", "chat", store=sqlite_store).stdout == "cancel requested" + told
    again = noeta("cancel", "chat", store=sqlite_store)
    assert again.returncode == 0 and again.stdout == "cancel already requested" + told
    assert asyncio.run(inbox(sqlite_store, "chat")) == [("cancel", {"kind": "cancel"})]


def test_cancel_of_an_unknown_or_finished_task_is_refused(sqlite_store: str) -> None:
    line = one_line_error(noeta("cancel", "nope", store=sqlite_store))
    assert line == "noeta: error: no task with id 'nope'"
    finished_task(sqlite_store, "over")
    line = one_line_error(noeta("cancel", "over", store=sqlite_store))
    assert line == "noeta: error: task over is already done"
    assert asyncio.run(inbox(sqlite_store, "over")) == []


# --- subtasks -------------------------------------------------------------------------


async def _parent_with_children(url: str, tmp_path: Path) -> None:
    """Task p launches p.a.1 (done) and p.b.2 (left ready: it has not run yet)."""
    from tests.core.runner import test_subtasks as subtask_tests

    store = await open_store(url, migrate=True)
    try:
        child_a = subtask_tests.script(tmp_path, {"text": "A done"})
        child_b = subtask_tests.script(tmp_path, {"text": "B done"})
        calls = [
            subtask_tests.agent("a", "part A", model=child_a, description="look up A"),
            subtask_tests.agent("b", "part B", model=child_b),
        ]
        parent = subtask_tests.script(tmp_path, {"tool_calls": calls}, {"text": "ok"})
        await subtask_tests.create(store, "p", parent)
        runner = subtask_tests.runner(store)
        for task_id in ("p", "p.a.1"):
            claim = await store.claim_task("w", task_id, 60)
            assert claim is not None
            await runner.run(claim)
    finally:
        await store.close()


def test_tasks_parent_lists_the_subtasks_and_show_lists_them_with_their_states(
    sqlite_store: str, tmp_path: Path
) -> None:
    asyncio.run(_parent_with_children(sqlite_store, tmp_path))
    listed = noeta("tasks", "--parent", "p", "--json", store=sqlite_store)
    assert listed.returncode == 0, listed.stderr
    assert [(t["id"], t["status"]) for t in json.loads(listed.stdout)] == [
        ("p.a.1", "done"),
        ("p.b.2", "ready"),
    ]
    table = noeta("tasks", "--parent", "p", "--status", "ready", store=sqlite_store).stdout
    assert "p.b.2" in table and "p.a.1" not in table
    shown_text = noeta("show", "p", store=sqlite_store).stdout.splitlines()
    assert shown_text[1:3] == ["  subtask p.a.1  done  look up A", "  subtask p.b.2  ready"]
    children = shown("p", sqlite_store)["children"]
    assert [(c["id"], c["status"], c["description"]) for c in children] == [
        ("p.a.1", "done", "look up A"),
        ("p.b.2", "ready", ""),
    ]


def test_tasks_parent_of_an_unknown_task_is_a_one_line_error(sqlite_store: str) -> None:
    noeta("db", "migrate", store=sqlite_store)
    result = noeta("tasks", "--parent", "nope", store=sqlite_store)
    assert result.returncode == 1 and one_line_error(result)
    assert "nope" in result.stderr


def test_a_relative_script_is_stored_as_an_absolute_path(tmp_path: Path) -> None:
    """The worker reads the script from its own folder: the submitter's must be kept."""
    (tmp_path / "hello.yaml").write_text(EXAMPLE.read_text())
    store = f"sqlite:///{tmp_path / 'n.db'}"
    for command in (["submit", "hi", "--id", "sub"], ["run", "hi", "--id", "ran"]):
        result = subprocess.run(
            [sys.executable, "-m", "noeta", *command, "--model", "scripted:hello.yaml"],
            cwd=tmp_path,
            env={**os.environ, "NOETA_STORE": store},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    for task_id in ("sub", "ran"):
        created = shown(task_id, store)["log"][0]
        assert created["data"]["model"] == f"scripted:{tmp_path / 'hello.yaml'}"
