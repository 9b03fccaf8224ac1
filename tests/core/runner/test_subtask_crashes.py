"""Subagents across real SIGKILLs: before and after the launch append, during the child's
run, on either side of its finishing append, and while the parent takes a handback. Every
child is created once, every handback taken once, no worktree is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events, subtasks
from tests.core.runner.test_subtasks import agent, git, git_workspace, script

REPOSITORY = Path(__file__).parents[3]


async def start(url: str, tmp_path: Path, child_replies: list[dict[str, Any]]) -> Path:
    """Task p, in a git workspace, launches one child that answers from `child_replies`."""
    root = tmp_path / "ws"
    git_workspace(root, "p")
    child = script(tmp_path, *child_replies)
    parent = script(tmp_path, {"tool_calls": [agent("a", "work", model=child)]}, {"text": "ok"})
    created = events.TaskCreated(model=parent, prompt="go", tools=("Agent", "Write"))
    store = await open_store(url, migrate=True)
    try:
        await store.create_task(NewTask("p", [NewEvent(*events.encode(created))]))
    finally:
        await store.close()
    return root


def worker(url: str, root: Path, failpoints: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETA_FAILPOINTS": failpoints}
    return subprocess.run(
        [sys.executable, "-m", "tests.core.runner.subtask_worker", url, str(root), "p"],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def killed(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode == -signal.SIGKILL


async def read(url: str, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    store = await open_store(url)
    try:
        return [(e.type, e.data) for e in await store.read_log(task_id)]  # type: ignore[misc]
    finally:
        await store.close()


async def inbox_taken_once(url: str) -> bool:
    store = await open_store(url)
    try:
        entries = await store.read_inbox("p", untaken_only=False)
    finally:
        await store.close()
    return len(entries) == 1 and entries[0].taken_seq is not None


def the_result(log: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    (finished,) = [data for kind, data in log if kind == "ToolFinished"]
    return finished


def count(log: list[tuple[str, dict[str, Any]]], kind: str) -> int:
    return sum(1 for each, _ in log if each == kind)


async def test_killed_before_the_launch_append_no_child_and_recover_removes_the_worktree(
    postgres_url: str, tmp_path: Path
) -> None:
    root = await start(postgres_url, tmp_path, [{"text": "A done"}])
    assert killed(worker(postgres_url, root, "subtask.before_launch=kill"))
    assert (root / "p.a.1" / ".git").is_file()  # the launch made its worktree, then died
    done = worker(postgres_url, root)
    assert done.stdout.split() == ["finished", "done"], done.stderr
    log = await read(postgres_url, "p")
    assert count(log, "SubtaskLaunched") == 0
    result = the_result(log)
    assert (result["content"], result["recovery"]) == (subtasks.NOT_STARTED, "recover")
    assert await read(postgres_url, "p.a.1") == []  # no child, ever
    assert not (root / "p.a.1").exists()
    assert "noeta/p.a.1" not in git(root / "p", "branch")


async def test_killed_after_the_launch_append_the_child_runs_once(
    postgres_url: str, tmp_path: Path
) -> None:
    root = await start(postgres_url, tmp_path, [{"text": "A done"}])
    assert killed(worker(postgres_url, root, "subtask.after_launch=kill"))
    assert count(await read(postgres_url, "p.a.1"), "TaskCreated") == 1
    done = worker(postgres_url, root)
    assert done.stdout.split() == ["finished", "done"], done.stderr
    log = await read(postgres_url, "p")
    assert count(log, "SubtaskLaunched") == 1
    assert the_result(log)["content"] == "A done"
    assert await inbox_taken_once(postgres_url)
    assert not (root / "p.a.1").exists()


async def test_killed_during_the_childs_run_it_is_resumed_and_hands_back_once(
    postgres_url: str, tmp_path: Path
) -> None:
    root = await start(postgres_url, tmp_path, [{"text": "A done"}])
    # The first model call is the parent's, the second the child's.
    assert killed(worker(postgres_url, root, "model.after_called=kill@2"))
    done = worker(postgres_url, root)
    assert done.stdout.split() == ["finished", "done"], done.stderr
    assert count(await read(postgres_url, "p.a.1"), "ModelCalled") == 2
    log = await read(postgres_url, "p")
    assert the_result(log)["content"] == "A done"
    assert count(log, "SubtaskReturned") == 1
    assert await inbox_taken_once(postgres_url)


async def test_killed_while_taking_the_handback_it_is_taken_once(
    postgres_url: str, tmp_path: Path
) -> None:
    root = await start(postgres_url, tmp_path, [{"text": "A done"}])
    assert killed(worker(postgres_url, root, "subtask.before_handback_taken=kill"))
    assert not (root / "p.a.1").exists()  # removed before the append, and idempotent
    done = worker(postgres_url, root)
    assert done.stdout.split() == ["finished", "done"], done.stderr
    log = await read(postgres_url, "p")
    assert count(log, "SubtaskReturned") == 1
    assert the_result(log)["content"] == "A done"
    assert await inbox_taken_once(postgres_url)


async def status_of(url: str, task_id: str) -> str:
    store = await open_store(url)
    try:
        record = await store.get_task(task_id)
    finally:
        await store.close()
    assert record is not None
    return record.status.value


async def test_killed_before_the_childs_finishing_append_it_finishes_once_its_worktree_gone(
    postgres_url: str, tmp_path: Path
) -> None:
    root = await start(postgres_url, tmp_path, [{"text": "A done"}])
    assert killed(worker(postgres_url, root, "subtask.before_finish=kill"))
    # The child removed its worktree (its branch stays), then died before its finish.
    assert await status_of(postgres_url, "p.a.1") == "running"
    assert not (root / "p.a.1").exists()
    assert "noeta/p.a.1" in git(root / "p", "branch")
    done = worker(postgres_url, root)
    assert done.stdout.split() == ["finished", "done"], done.stderr
    assert count(await read(postgres_url, "p.a.1"), "TaskFinished") == 1
    log = await read(postgres_url, "p")
    assert the_result(log)["content"] == "A done"
    assert count(log, "SubtaskReturned") == 1
    assert await inbox_taken_once(postgres_url)


async def test_killed_after_the_childs_finishing_append_its_handback_is_taken_once(
    postgres_url: str, tmp_path: Path
) -> None:
    root = await start(postgres_url, tmp_path, [{"text": "A done"}])
    assert killed(worker(postgres_url, root, "subtask.after_finish=kill"))
    assert await status_of(postgres_url, "p.a.1") == "done"
    assert not (root / "p.a.1").exists()
    done = worker(postgres_url, root)
    assert done.stdout.split() == ["finished", "done"], done.stderr
    log = await read(postgres_url, "p")
    assert the_result(log)["content"] == "A done"
    assert count(log, "SubtaskReturned") == 1
    assert await inbox_taken_once(postgres_url)
