"""`noeta result ID`: the whole answer of a done task, a job's result as JSON; a failed or
cancelled task exits 1 with its error in one line, one not finished exits 2 (or is
waited for with --wait), an unknown id is one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask, TaskStatus
from noeta.core.rules import events
from tests.cli.test_run import EXAMPLE, noeta, one_line_error
from tests.cli.test_tasks import append_as_worker

KEY = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-dcBA"  # made up, a key's shape


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'noeta.db'}"


def created(store_url: str, task_id: str, *log: events.Event) -> None:
    async def create() -> None:
        store = await open_store(store_url)
        try:
            encoded = [NewEvent(*events.encode(event)) for event in log]
            assert await store.create_task(NewTask(task_id, encoded))
        finally:
            await store.close()

    asyncio.run(create())


def a_job(store_url: str, task_id: str) -> None:
    opening = events.TaskCreated(model="", tools=("add",))
    created(store_url, task_id, opening, events.CallRequested("job", "add", {"a": 1, "b": 2}))


def a_chat(store_url: str, task_id: str) -> None:
    created(store_url, task_id, events.TaskCreated(model="scripted:x.yaml", interactive=True))


def finish(store_url: str, task_id: str, ended: events.TaskFinished, status: TaskStatus) -> None:
    asyncio.run(append_as_worker(store_url, task_id, ended, status))


def test_a_done_task_prints_its_whole_answer(store: str) -> None:
    ran = noeta("run", "What?", "--model", f"scripted:{EXAMPLE}", "--id", "demo", store=store)
    assert ran.returncode == 0, ran.stderr
    answer = ran.stdout.strip()
    printed = noeta("result", "demo", store=store)
    assert printed.returncode == 0 and printed.stderr == "", printed.stderr
    assert printed.stdout.strip() == answer and "exactly one writer" in answer
    as_json = noeta("result", "demo", "--json", store=store)
    assert json.loads(as_json.stdout) == answer


def test_a_job_prints_its_result_as_indented_json_or_raw(store: str) -> None:
    a_job(store, "job-1")
    result = {"sum": 3, "parts": [1, 2], "note": "é"}
    raw = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
    finish(store, "job-1", events.TaskFinished("done", answer=raw), TaskStatus.DONE)
    printed = noeta("result", "job-1", store=store)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == json.dumps(result, ensure_ascii=False, indent=2) + "\n"
    assert noeta("result", "job-1", "--json", store=store).stdout == raw + "\n"


def test_a_failed_task_exits_1_with_its_error_on_one_line_scrubbed(store: str) -> None:
    a_job(store, "job-2")
    error = f"add failed: ValueError: no key {KEY}\n  in line two"
    finish(store, "job-2", events.TaskFinished("failed", error=error), TaskStatus.FAILED)
    printed = noeta("result", "job-2", store=store)
    line = one_line_error(printed, 1)
    assert line.startswith("noeta: error: task job-2 failed: add failed: ValueError: no key ")
    assert line.endswith(" in line two") and KEY not in line and printed.stdout == ""


def test_a_cancelled_task_exits_1_saying_so(store: str) -> None:
    a_chat(store, "chat")
    ended = events.TaskFinished("cancelled", error="cancelled on request")
    finish(store, "chat", ended, TaskStatus.CANCELLED)
    line = one_line_error(noeta("result", "chat", store=store), 1)
    assert line == "noeta: error: task chat was cancelled: cancelled on request"


def test_a_task_not_finished_exits_2_or_is_waited_for(store: str) -> None:
    a_chat(store, "chat")
    line = one_line_error(noeta("result", "chat", store=store), 2)
    assert line == (
        "noeta: error: task chat has not finished: it is ready "
        "(`noeta result chat --wait` waits for it)"
    )
    # Nothing finishes it: the wait ends at its bound, and says so.
    line = one_line_error(noeta("result", "chat", "--wait", "0.2", store=store), 2)
    assert line == "noeta: error: task chat did not finish within 0.2s: it is ready"

    waiting = subprocess.Popen(
        [sys.executable, "-m", "noeta", "result", "chat", "--wait", "--store", store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:  # finished before or after the wait began: the same answer either way
        finish(store, "chat", events.TaskFinished("done", answer="at last"), TaskStatus.DONE)
        out, errors = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0 and out == "at last\n", errors


def test_an_unknown_task_and_a_bad_wait_are_one_line(store: str) -> None:
    line = one_line_error(noeta("result", "nope", store=store), 1)
    assert line == "noeta: error: no task with id 'nope'"
    a_chat(store, "chat")
    for bad in ("soon", "0", "nan", "inf"):
        line = one_line_error(noeta("result", "chat", f"--wait={bad}", store=store), 2)
        assert "is not a number of seconds above 0" in line
