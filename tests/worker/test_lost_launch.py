"""A claim lost during an Agent launch leaves no phantom subagent: the tool's "launching
subagent …" output is never kept as a late result, so the next claimer settles the call
through `Agent.recover` (not started, worktree removed). Real `noeta worker` processes,
held at named points by `pause` failpoints and let go with SIGCONT."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events, subtasks
from tests.core.runner.test_subtasks import agent, git, git_workspace

from .conftest import WorkerProcess, status_of, until


async def add_parent(store: Store, folder: Path) -> Path:
    """Task p, in a git workspace, whose model launches one subagent, then answers."""
    workspace = git_workspace(folder / "home-workspaces", "p")
    child = folder / "child.yaml"
    child.write_text(json.dumps({"replies": [{"text": "A done"}]}))
    parent = folder / "parent.yaml"
    replies = [{"tool_calls": [agent("a", "work", model=f"scripted:{child}")]}, {"text": "ok"}]
    parent.write_text(json.dumps({"replies": replies}))
    created = events.TaskCreated(model=f"scripted:{parent}", prompt="go", tools=("Agent", "Write"))
    await store.create_task(NewTask("p", [NewEvent(*events.encode(created))]))
    return workspace


async def test_a_launch_whose_claim_was_lost_is_not_kept_and_recover_cleans_up(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    workspace = await add_parent(store, tmp_path)
    config = tmp_path / "noeta.yaml"
    config.write_text('subagent_models: ["scripted:*"]\n')  # the child's scripted model
    late = workers(
        postgres_url, "late", lease=3, failpoints="subtask.before_launch=pause", config=config
    )
    await until(late.paused, "the Agent tool made its worktree and the worker froze")
    worktree = workspace.parent / "p.a.1"
    assert (worktree / ".git").is_file()
    heir = workers(
        postgres_url, "heir", lease=30, failpoints="claim.after_commit=pause@1", config=config
    )
    await until(heir.paused, "the heir takes the task over and freezes")
    late.signal(signal.SIGCONT)  # its launch append is refused: the claim is the heir's

    def decided() -> bool:
        text = late.log()
        return "kept for the next claimer" in text or "not kept" in text

    async def the_late_worker_decided() -> bool:
        return decided()

    await until(the_late_worker_decided, "the woken worker decides about its launch's output")
    assert await store.late_results("p") == []
    heir.signal(signal.SIGCONT)

    async def done() -> bool:
        return await status_of(store, "p") == "done"

    await until(done, "the heir settles the launch and finishes the task")
    log = [(e.type, cast(dict[str, Any], e.data)) for e in await store.read_log("p")]
    (result,) = [data for kind, data in log if kind == "ToolFinished"]
    assert (result["content"], result["recovery"]) == (subtasks.NOT_STARTED, "recover")
    assert not any(kind == "SubtaskLaunched" for kind, _ in log)
    assert await store.get_task("p.a.1") is None  # no child, and no record of one
    assert not worktree.exists()
    assert "noeta/p.a.1" not in git(workspace, "branch")
