"""`noeta tasks` for operators: each task's kind (agent or the job's function), input,
status with its error's kind, runtime, attempts, created and finished; --columns to
choose them; --name, --error and --since to filter; bad input one line, exit 2."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from noeta.core.ports.store import TaskStatus
from noeta.core.rules import events
from tests.cli.test_result import a_chat, created, finish
from tests.cli.test_run import noeta, one_line_error
from tests.cli.test_tasks import append_as_worker


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'noeta.db'}"


def a_job(store: str, task_id: str, name: str, arguments: dict[str, object]) -> None:
    opening = events.TaskCreated(model="", tools=(name,))
    created(store, task_id, opening, events.CallRequested("job", name, arguments))  # type: ignore[arg-type]


def table(store: str, *arguments: str) -> list[list[str]]:
    """The table's rows (the header first), cells split on runs of two spaces or more."""
    result = noeta("tasks", *arguments, store=store)
    assert result.returncode == 0, result.stderr
    return [
        [cell.strip() for cell in line.split("  ") if cell.strip()]
        for line in result.stdout.splitlines()
    ]


@pytest.fixture
def listed_tasks(store: str) -> str:
    a_job(store, "add-1", "add", {"a": 1, "b": 2})
    asyncio.run(append_as_worker(store, "add-1", events.ToolStarted("job", "add", {"a": 1})))
    ended = events.TaskFinished("failed", error="add failed: ValueError: no")
    finish(store, "add-1", ended, TaskStatus.FAILED)
    a_job(store, "resize-1", "resize", {"path": "a.png"})
    a_chat(store, "chat-1")
    return store


def test_the_list_shows_kind_input_status_with_error_kind_and_attempts(listed_tasks: str) -> None:
    header, *rows = table(listed_tasks)
    assert header == [
        "id",
        "kind",
        "status",
        "queue",
        "attempts",
        "runtime",
        "created",
        "finished",
        "input",
    ]
    cells = {row[0]: dict(zip(header, row, strict=False)) for row in rows}
    assert list(cells) == ["chat-1", "resize-1", "add-1"]  # newest first
    assert cells["add-1"]["kind"] == "add" and cells["add-1"]["status"] == "failed (ValueError)"
    assert cells["add-1"]["attempts"] == "1" and cells["add-1"]["input"] == '{"a": 1, "b": 2}'
    assert cells["add-1"]["runtime"].endswith("s") and cells["add-1"]["finished"] != "-"
    assert cells["resize-1"]["kind"] == "resize" and cells["resize-1"]["runtime"] == "-"
    assert cells["chat-1"]["kind"] == "agent" and cells["chat-1"]["status"] == "ready"

    [document] = json.loads(noeta("tasks", "--json", "--name", "add", store=listed_tasks).stdout)
    assert document["kind"] == "add" and document["error_kind"] == "ValueError"
    assert document["error"] == "add failed: ValueError: no" and document["attempts"] == 1
    assert document["status"] == "failed" and document["finished_at"] is not None


def test_columns_are_chosen_and_filters_narrow_the_list(listed_tasks: str) -> None:
    assert table(listed_tasks, "--columns", "id,error", "--error", "ValueError") == [
        ["id", "error"],
        ["add-1", "add failed: ValueError: no"],
    ]
    assert table(listed_tasks, "--columns", "kind,id", "--name", "resize") == [
        ["kind", "id"],
        ["resize", "resize-1"],
    ]
    assert len(table(listed_tasks, "--since", "1h")) == 4
    assert noeta("tasks", "--since", "2999-01-01T00:00Z", store=listed_tasks).stdout == "no tasks\n"
    assert noeta("tasks", "--error", "KeyError", store=listed_tasks).stdout == "no tasks\n"


def test_search_finds_job_names_and_errors(listed_tasks: str) -> None:
    def found(text: str) -> list[str]:
        return [row[0] for row in table(listed_tasks, "--search", text, "--columns", "id")[1:]]

    # Two runs of the command: the store's tests cover the rest of what a search matches.
    assert found("valueerror: NO") == ["add-1"]
    assert found("resiz") == ["resize-1"]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--columns", "id,nope"], "unknown column 'nope' (the columns: id, kind, status,"),
        (["--status", "bogus"], "'bogus' is not one of"),
        (["--since", "yesterday"], "is neither a moment"),
        (["--since", "2026-13-45"], "is neither a moment"),
        (["--error", "no such"], "is not an error kind"),
        (["--search", "xy"], "search for 3 characters or more, not 'xy'"),
        (["--search", "x" * 10_000], "10,000 characters; at most 200"),
        (["--group-by", "cause"], "Invalid value for '--group-by': 'cause' is not 'error'"),
        (["--group-by", "error", "--status", "done"], "groups failed tasks, not done ones"),
        (["--group-by", "error", "--name", "add"], "--group-by error takes --queue only"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(store: str, arguments: list[str], said: str) -> None:
    assert said in one_line_error(noeta("tasks", *arguments, store=store), 2)


def test_failures_are_grouped_by_error_kind_job_and_queue(listed_tasks: str) -> None:
    for n in range(2):
        a_job(listed_tasks, f"add-{n + 2}", "add", {"a": n})
        ended = events.TaskFinished("failed", error="add failed: ValueError: no")
        finish(listed_tasks, f"add-{n + 2}", ended, TaskStatus.FAILED)
    a_chat(listed_tasks, "chat-2")
    finish(
        listed_tasks,
        "chat-2",
        events.TaskFinished("failed", error="llm_error: 500"),
        TaskStatus.FAILED,
    )
    header, *rows = table(listed_tasks, "--status", "failed", "--group-by", "error")
    assert header == ["count", "error", "kind", "queue", "first", "last"]
    assert [row[:4] for row in rows] == [
        ["3", "ValueError", "add", "default"],
        ["1", "llm_error", "agent", "default"],
    ]
    assert rows[0][4] <= rows[0][5] and rows[0][5].endswith("Z")
    documents = json.loads(
        noeta("tasks", "--group-by", "error", "--json", store=listed_tasks).stdout
    )
    assert [(d["error_kind"], d["kind"], d["count"]) for d in documents] == [
        ("ValueError", "add", 3),
        ("llm_error", "agent", 1),
    ]
    newest = noeta(
        "tasks", "--group-by", "error", "--limit", "1", "--queue", "default", store=listed_tasks
    )
    assert newest.stdout.splitlines()[1].split()[:3] == ["1", "llm_error", "agent"]
    assert "noeta: the newest 1 failures are grouped (without --limit: every one)" in newest.stderr


@pytest.fixture(params=["sqlite", "postgres"])
def either_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'noeta.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def test_grouping_counts_every_failure_as_the_failures_page_does(
    either_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the newest page only (ADR-0112): the first failure, older than a page of the
    newest (made 2 here: the command grouped FAILURES_GROUPED of them), is counted, from
    the search table on PostgreSQL as the web's page reads it; --limit N: the newest N."""
    monkeypatch.setattr("noeta.cli.task_list.FAILURES_GROUPED", 2, raising=False)
    for n in range(3):
        a_job(either_store, f"add-{n}", "add", {"a": n})
        ended = events.TaskFinished("failed", error="add failed: ValueError: no")
        finish(either_store, f"add-{n}", ended, TaskStatus.FAILED)
    grouped = noeta("tasks", "--status", "failed", "--group-by", "error", store=either_store)
    assert grouped.returncode == 0, grouped.stderr
    assert grouped.stdout.splitlines()[1].split()[:4] == ["3", "ValueError", "add", "default"]
    assert "newest" not in grouped.stderr
    newest = noeta("tasks", "--group-by", "error", "--limit", "2", store=either_store)
    assert newest.stdout.splitlines()[1].split()[:2] == ["2", "ValueError"]
    assert "the newest 2 failures are grouped (without --limit: every one)" in newest.stderr


def test_a_job_that_used_up_its_attempts_is_grouped_and_filtered_by_its_exception(
    either_store: str,
) -> None:
    """A job's last failed attempt ends it with `<job> failed after N attempt(s): <type>:
    ...` (function_tools): its kind is the exception's type, not "-", in the groups, the
    list and the --error filter alike, on both stores."""
    a_job(either_store, "send-1", "send_email", {"to": "a@x"})
    said = "send_email failed after 3 attempt(s): ConnectionError: SMTP refused a@x"
    finish(either_store, "send-1", events.TaskFinished("failed", error=said), TaskStatus.FAILED)
    for newest in ((), ("--limit", "5")):  # from the search table, and read directly
        grouped = table(either_store, "--status", "failed", "--group-by", "error", *newest)
        assert grouped[1][:3] == ["1", "ConnectionError", "send_email"]
    assert table(either_store, "--error", "ConnectionError", "--columns", "id,status") == [
        ["id", "status"],
        ["send-1", "failed (ConnectionError)"],
    ]
