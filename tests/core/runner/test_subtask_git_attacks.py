"""The git the worker runs for a task's subagents, attacked as a prompt-injected model
would, through real tool calls from a scripted model: no hook, filter or redirect the
task wrote runs or reaches anything (ADR-0078). Each attack, before the fix, ran the
task's program as the worker, outside any sandbox."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask, Store, TaskStatus
from noeta.core.ports.tool import Tool
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import Agent, Bash, Write
from noeta.plugins.core.confinement import Confinement

LEASE = 60.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(f"sqlite:///{tmp_path / 'noeta.db'}", migrate=True)
    yield store
    await store.close()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Where a hook run by the worker, unconfined, would leave its mark; and a stand-in of
    the embedded server's password beside it."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "password").write_text("superuser-password-stand-in\n")
    return path


def script(tmp_path: Path, *replies: dict[str, Any]) -> str:
    path = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.yaml"
    path.write_text(json.dumps({"replies": list(replies)}))
    return f"scripted:{path}"


def call(call_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "input": tool_input}]}


def git(cwd: Path, *arguments: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    done = subprocess.run(["git", *identity, *arguments], cwd=cwd, check=True, capture_output=True)
    return done.stdout.decode()


def repository(root: Path, task_id: str) -> Path:
    workspace = root / task_id
    workspace.mkdir(parents=True)
    git(workspace, "init", "-q")
    (workspace / "README").write_text("hello\n")
    git(workspace, "add", "README")
    git(workspace, "commit", "-qm", "start")
    return workspace


def hook(outside: Path) -> str:
    """A hook that steals the password and marks, outside and inside, that it ran."""
    return (
        f"#!/bin/sh\ncat {outside}/password > {outside}/stolen 2>/dev/null\n"
        f'touch {outside}/hook-ran "$PWD/hook-ran-inside"\n'
    )


async def run_all(store: Store, root: Path, rounds: int = 100) -> None:
    confinement = Confinement()
    tools: dict[str, Tool] = {
        "Agent": Agent(confinement),
        "Write": Write(),
        "Bash": Bash(confinement=confinement),
    }
    task_runner = TaskRunner(
        store, ProviderRegistry(), tools, workspaces=str(root), subagent_models=("scripted:*",)
    )
    for _ in range(rounds):
        claim = await store.claim("worker-1", ["default"], LEASE)
        if claim is None:
            return
        await task_runner.run(claim)
    raise AssertionError("still running")


async def create(store: Store, task_id: str, model: str) -> None:
    created = events.TaskCreated(model=model, prompt="go", tools=("Agent", "Write", "Bash"))
    assert await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


def no_hook_ran(outside: Path, root: Path) -> None:
    assert not (outside / "stolen").exists() and not (outside / "hook-ran").exists()
    assert not list(root.rglob("hook-ran-inside")), "a hook ran, confined but still ran"


async def test_a_hook_the_task_wrote_does_not_run_when_a_worktree_is_added(
    store: Store, tmp_path: Path, outside: Path
) -> None:
    """Variant A: Bash writes .git/hooks/post-checkout, then Agent {workspace: worktree}."""
    root = tmp_path / "ws"
    repository(root, "p")
    plant = f"cat > .git/hooks/post-checkout <<'EOF'\n{hook(outside)}EOF\nchmod +x .git/hooks/*"
    child = script(tmp_path, {"text": "done"})
    parent = script(
        tmp_path,
        call("h", "Bash", command=plant),
        call("a", "Agent", prompt="x", model=child, workspace="worktree"),
        {"text": "ok"},
    )
    await create(store, "p", parent)
    await run_all(store, root)
    assert await store.get_task("p.a.1") is not None  # the worktree was made: a checkout
    no_hook_ran(outside, root)


async def test_a_hook_a_child_plants_in_its_parents_repository_does_not_run(
    store: Store, tmp_path: Path, outside: Path
) -> None:
    """Variant D: a child with Bash writes a hook into the shared .git; the parent's next
    Agent call (a checkout) and the child's own commit must not run it."""
    root = tmp_path / "ws"
    repository(root, "p")
    shared_hooks = "$(sed 's/^gitdir: //' .git)/../../hooks"
    plant = (
        f"for h in post-checkout post-commit pre-commit; do cat > {shared_hooks}/$h <<'EOF'\n"
        f"{hook(outside)}EOF\nchmod +x {shared_hooks}/$h; done; echo dirty > work.txt"
    )
    child = script(tmp_path, call("h", "Bash", command=plant), {"text": "planted"})
    second = script(tmp_path, {"text": "second"})
    parent = script(
        tmp_path,
        call("a", "Agent", prompt="x", model=child, workspace="worktree"),
        call("b", "Agent", prompt="y", model=second, workspace="worktree"),
        {"text": "ok"},
    )
    await create(store, "p", parent)
    await run_all(store, root)
    assert (root / "p" / ".git" / "hooks" / "post-checkout").exists()  # it was planted
    log = [(e.type, e.data) for e in await store.read_log("p")]
    launched = [data["child_id"] for kind, data in log if kind == "SubtaskLaunched"]
    assert len(launched) == 2 and await store.get_task(launched[1]) is not None  # a checkout
    no_hook_ran(outside, root)
    assert git(root / "p", "show", "noeta/p.a.1:work.txt") == "dirty\n"  # work still kept


async def test_a_repository_a_folder_child_makes_itself_is_never_committed_by_the_worker(
    store: Store, tmp_path: Path, outside: Path
) -> None:
    """Variant B: a folder-mode child runs `git init --separate-git-dir` and adds a
    post-commit hook; the worker's commit at the child's finish would run it."""
    root = tmp_path / "ws"
    repository(root, "p")
    plant = (
        "git init -q --separate-git-dir=.tmp/evil . && "
        f"cat > .tmp/evil/hooks/post-commit <<'EOF'\n{hook(outside)}EOF\n"
        "chmod +x .tmp/evil/hooks/post-commit; echo x > file.txt"
    )
    child = script(tmp_path, call("h", "Bash", command=plant), {"text": "made a repo"})
    parent = script(
        tmp_path,
        call("a", "Agent", prompt="x", model=child, workspace="folder"),
        {"text": "ok"},
    )
    await create(store, "p", parent)
    await run_all(store, root)
    assert (root / "p.a.1" / ".tmp" / "evil" / "hooks" / "post-commit").exists()  # it ran
    no_hook_ran(outside, root)
    assert (root / "p.a.1" / "file.txt").exists()  # a folder is the child's own: kept


async def test_a_smudge_filter_written_without_bash_does_not_run_at_checkout(
    store: Store, tmp_path: Path, outside: Path
) -> None:
    """Variant E: Write puts a smudge filter in .git/config and `* filter=pwn` in
    .git/info/attributes; Agent's worktree checkout would run it."""
    root = tmp_path / "ws"
    workspace = repository(root, "p")
    config = (workspace / ".git" / "config").read_text()
    program = f"sh -c 'cat {outside}/password > {outside}/stolen; touch hook-ran-inside; cat'"
    filtered = f'{config}[filter "pwn"]\n\tsmudge = "{program}"\n\trequired = true\n'
    child = script(tmp_path, {"text": "done"})
    parent = script(
        tmp_path,
        call("c", "Write", file_path=".git/config", content=filtered),
        call("i", "Write", file_path=".git/info/attributes", content="* filter=pwn\n"),
        call("a", "Agent", prompt="x", model=child, workspace="worktree"),
        {"text": "ok"},
    )
    await create(store, "p", parent)
    await run_all(store, root)
    assert "pwn" in (workspace / ".git" / "config").read_text()  # it was written
    no_hook_ran(outside, root)
    assert (await store.get_task("p.a.1")) is not None  # the child ran all the same


async def test_a_git_file_pointing_at_another_tasks_repository_makes_no_worktree_of_it(
    store: Store, tmp_path: Path
) -> None:
    """`printf 'gitdir: ../victim/.git' > .git`, then an Agent worktree: the worker
    added a worktree of the victim's repository, which the attacker's child could write."""
    root = tmp_path / "ws"
    victim = repository(root, "victim")
    (victim / "secret.txt").write_text("the victim's files\n")
    git(victim, "add", "secret.txt")
    git(victim, "commit", "-qm", "secret")
    (root / "attacker").mkdir()
    child = script(tmp_path, call("r", "Bash", command="cat secret.txt"), {"text": "read"})
    parent = script(
        tmp_path,
        call("g", "Bash", command="printf 'gitdir: ../victim/.git\\n' > .git"),
        call("a", "Agent", prompt="x", model=child, workspace="worktree"),
        {"text": "ok"},
    )
    await create(store, "attacker", parent)
    await run_all(store, root)
    log = [(e.type, e.data) for e in await store.read_log("attacker")]
    agent_result = next(
        data for kind, data in log if kind == "ToolFinished" and data["call_id"] == "a"
    )
    assert agent_result["is_error"] and "needs a git repository" in agent_result["content"]
    assert git(victim, "worktree", "list").count("\n") == 1  # no worktree of the victim's
    assert not (victim / ".git" / "worktrees").exists()
    assert await store.get_task("attacker.a.1") is None
    task = await store.get_task("attacker")
    assert task is not None and task.status == TaskStatus.DONE
