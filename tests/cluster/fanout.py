"""The cluster's subagent trees: parents that fan out to subagents (in parallel, one of
them nested), half of them in a git workspace so their subagents work in git worktrees,
and parents cancelled while their subagents still work. Also the example notify plugin's
outbox: a task on a queue no worker serves, so every notification stays in its inbox."""

from __future__ import annotations

import subprocess
from pathlib import Path

PARENTS = ("agents", "cancelled-agents")
CANCELLED_PARENT = "cancelled-agents"
OUTBOX = "notifications"
OUTBOX_QUEUE = "outbox"


def in_git(kinds: dict[str, str]) -> set[str]:
    """Every other parent, in creation order, works in a git repository."""
    parents = [task for task, kind in kinds.items() if kind in PARENTS]
    return set(parents[::2])


def make_git_workspace(folder: Path) -> None:
    """A repository with one commit (a worktree starts from HEAD); kept if it exists, so a
    creation retried after a store fault finds it as it was."""
    if (folder / ".git").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README").write_text("a cluster parent's workspace\n")
    for command in (
        ["init", "-q"],
        ["add", "README"],
        ["-c", "user.name=cluster", "-c", "user.email=cluster@localhost", "commit", "-qm", "start"],
    ):
        git(folder, *command)


class GitFailed(Exception):
    pass


def git(folder: Path, *arguments: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), *arguments], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise GitFailed(f"git {arguments[0]} in {folder.name}: {done.stderr.strip()}")
    return done.stdout


def root_of(task_id: str) -> str:
    """The top-level task of a subtask tree (ids are `<task>.<call>.<n>`, nested)."""
    return task_id.split(".", 1)[0]
