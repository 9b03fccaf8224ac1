"""`noeta tail`: a task's log as steps, followed to its end, its exit status, Ctrl-C, an
unknown task (split from test_tasks.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from noeta.core.ports.store import TaskStatus
from noeta.core.rules import events
from tests.cli.test_run import noeta, one_line_error
from tests.cli.test_tasks import append_as_worker, finished_task, sqlite_store, submit

__all__ = ["sqlite_store"]  # the fixture, shared


def test_tail_without_follow_prints_the_log(sqlite_store: str) -> None:
    finished_task(sqlite_store, "done")
    result = noeta("tail", "done", "--no-follow", store=sqlite_store)
    assert result.returncode == 0, result.stderr
    assert step_titles(result.stdout) == [
        "created",
        "plugins",
        "model call",
        "model reply",
        "turn ended: answered",
        "finished: done",
    ]
    tail_json = noeta("tail", "done", "--no-follow", "--from", "5", "--json", store=sqlite_store)
    lines = [json.loads(line) for line in tail_json.stdout.splitlines()]
    assert [(line["seq"], line["type"]) for line in lines] == [
        (5, "TurnEnded"),
        (6, "TaskFinished"),
    ]
    assert lines[1]["data"]["status"] == "done"


def test_tail_follows_a_finished_task_to_its_end_and_exits(sqlite_store: str) -> None:
    finished_task(sqlite_store, "done")
    result = noeta("tail", "done", store=sqlite_store)  # --follow is the default
    assert result.returncode == 0 and len(step_titles(result.stdout)) == 6


def test_tail_follow_prints_new_events_and_ends_when_the_task_finishes(
    sqlite_store: str,
) -> None:
    submit("--interactive", "--id", "chat", store=sqlite_store)
    with following("chat", sqlite_store) as process:
        assert process.stdout is not None
        read_until_step(process, "created")
        asyncio.run(append_as_worker(sqlite_store, "chat", events.PluginsPinned(())))
        read_until_step(process, "plugins")
        finish = events.TaskFinished("cancelled", error="stop")
        asyncio.run(append_as_worker(sqlite_store, "chat", finish, TaskStatus.CANCELLED))
        rest, errors = process.communicate(timeout=30)
    assert process.returncode == 1 and errors == "task chat: cancelled\n", errors
    assert step_titles(rest) == ["finished: cancelled"]


def test_tail_exits_non_zero_for_a_failed_task(sqlite_store: str) -> None:
    submit("--interactive", "--id", "chat", store=sqlite_store)
    finish = events.TaskFinished("failed", error="internal")
    asyncio.run(append_as_worker(sqlite_store, "chat", finish, TaskStatus.FAILED))
    for follow in ("--follow", "--no-follow"):
        result = noeta("tail", "chat", follow, store=sqlite_store)
        assert result.returncode == 1 and result.stderr == "task chat: failed\n", result.stderr
        assert step_titles(result.stdout)[-1] == "finished: failed"


def test_ctrl_c_stops_following_quietly(sqlite_store: str) -> None:
    submit("--interactive", "--id", "chat", store=sqlite_store)
    with following("chat", sqlite_store) as process:
        assert process.stdout is not None
        read_until_step(process, "created")
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=30)
    assert process.returncode == 130
    assert errors == ""


def test_tail_of_an_unknown_task_is_one_line(sqlite_store: str) -> None:
    line = one_line_error(noeta("tail", "nope", store=sqlite_store))
    assert line == "noeta: error: no task with id 'nope'"


def step_titles(printed: str) -> list[str]:
    """The titles of the steps `show` or `tail` printed (a step's first line: seq, time,
    title; its values and the epoch marks are the lines between)."""
    return [
        line.split(maxsplit=2)[2] for line in printed.splitlines() if line[:5].strip().isdigit()
    ]


def read_until_step(process: subprocess.Popen[str], title: str) -> None:
    """Read the followed output up to the step `title` (the lines of the steps before it
    and the epoch mark too); fails if the output ends first."""
    assert process.stdout is not None
    for line in process.stdout:
        if step_titles(line) == [title]:
            return
    raise AssertionError(f"the output ended before the step {title!r}")


@contextmanager
def following(task_id: str, store: str) -> Iterator[subprocess.Popen[str]]:
    """`noeta tail TASK` running in the background; killed if the test leaves it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "noeta", "tail", task_id, "--store", store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
