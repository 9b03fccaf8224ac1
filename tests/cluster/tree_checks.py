"""The checks of subagent trees after a cluster run: every child created once and known to
its parent's log, every handback delivered once and taken once (left untaken only by a
parent that finished first), every report intact, and no git worktree left behind."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from noeta.core.ports.store import InboxEntry, StoredEvent, TaskStatus
from noeta.core.rules import subtasks
from tests.cluster.fanout import GitFailed, git, root_of

Logs = dict[str, list[StoredEvent]]


def _data(event: StoredEvent) -> dict[str, Any]:
    return event.data if isinstance(event.data, dict) else {}


def launches(logs: Logs) -> Iterator[tuple[str, str, str]]:
    """(parent, call, child) of every SubtaskLaunched in every log."""
    for parent, log in logs.items():
        for event in log:
            if event.type == "SubtaskLaunched":
                data = _data(event)
                yield parent, str(data["call_id"]), str(data["child_id"])


def parent_of(log: list[StoredEvent]) -> tuple[str, str] | None:
    """(parent, call) from a child's SubtaskOf (a subagent's second event, a canvas
    member's fourth); None for a top-level task."""
    for event in log[:4]:
        if event.type == "SubtaskOf":
            return str(_data(event)["parent"]), str(_data(event)["call_id"])
    return None


def allowed_statuses(task_id: str, statuses: dict[str, TaskStatus]) -> set[TaskStatus]:
    """A subtask ends done, or cancelled when an ancestor ended first (its cancel went down)."""
    ancestors = [
        task_id.rsplit(".", 2 * depth)[0] for depth in range(1, task_id.count(".") // 2 + 1)
    ]
    if any(statuses.get(a) in (TaskStatus.CANCELLED, TaskStatus.FAILED) for a in ancestors):
        return {TaskStatus.DONE, TaskStatus.CANCELLED}
    return {TaskStatus.DONE}


def check_trees(
    logs: Logs, inboxes: dict[str, list[InboxEntry]], statuses: dict[str, TaskStatus]
) -> list[str]:
    problems: list[str] = []
    launched = list(launches(logs))
    counts = Counter(child for _, _, child in launched)
    problems += [f"{child}: launched {n} times" for child, n in counts.items() if n > 1]
    known = {(parent, call, child) for parent, call, child in launched}
    for task_id, log in logs.items():
        link = parent_of(log)
        if link is not None and (*link, task_id) not in known:
            problems.append(f"{task_id}: an orphan, no SubtaskLaunched for it in {link[0]}'s log")
        created = sum(1 for event in log if event.type == "TaskCreated")
        if created != 1:
            problems.append(f"{task_id}: created {created} times in its log")
    for parent, call, child in launched:
        if child not in logs:
            problems.append(f"{parent}: launched {child}, which does not exist")
        elif statuses.get(child, TaskStatus.RUNNING).finished:
            problems += handback_problems(logs, inboxes, statuses, parent, call, child)
    return problems


def handback_problems(
    logs: Logs,
    inboxes: dict[str, list[InboxEntry]],
    statuses: dict[str, TaskStatus],
    parent: str,
    call: str,
    child: str,
) -> list[str]:
    """The finished child's report is in its parent's inbox once, and taken exactly once
    if the parent waited for it (ended done), at most once if it ended first."""
    key = subtasks.handback_key(parent, call)
    entries = [entry for entry in inboxes.get(parent, []) if entry.dedupe_key == key]
    if len(entries) != 1:
        return [f"{child}: {len(entries)} handbacks in {parent}'s inbox"]
    (entry,) = entries
    handback = subtasks.read_handback(entry.payload)
    finish = _data(logs[child][-1])
    report = finish.get("answer") if finish.get("status") == "done" else finish.get("error")
    expected = subtasks.Handback(child, call, str(finish.get("status")), str(report))
    if handback != expected:
        return [f"{child}: its handback {handback} is not its finish {expected}"]
    parent_log = logs[parent]
    taken = [
        e for e in parent_log if e.type == "SubtaskReturned" and _data(e)["inbox_id"] == entry.id
    ]
    if statuses.get(parent) is TaskStatus.DONE:
        if len(taken) != 1:
            return [f"{child}: its handback taken {len(taken)} times by {parent}"]
        if any(e.type == "CanvasRequested" for e in parent_log[:2]):  # a canvas: no calls
            returned = _data(taken[0])
            if (returned["status"], returned.get("report", "")) != (handback.status, report):
                return [f"{child}: {parent} took its end as {returned}, not {expected}"]
            return []
        results = [
            _data(e)["content"]
            for e in parent_log
            if e.type == "ToolFinished" and _data(e)["call_id"] == call
        ]
        if results != [expected.result()]:
            return [f"{parent}:{call}: results {results!r}, not the report {expected.result()!r}"]
    elif len(taken) > 1:
        return [f"{child}: its handback taken {len(taken)} times by {parent}"]
    return []


def worktrees_left(workspaces: Path, roots: set[str], logs: Logs) -> list[str]:
    """No subagent's worktree outlives it: each repository lists only its own, no folder is
    a linked worktree, and a done subagent's work is on its branch."""
    problems: list[str] = []
    if workspaces.exists():
        for folder in sorted(workspaces.iterdir()):
            if (folder / ".git").is_file():
                problems.append(f"{folder.name}: its git worktree was left behind")
    for root in sorted(roots):
        try:
            listed = git(workspaces / root, "worktree", "list", "--porcelain")
        except GitFailed as error:
            problems.append(f"{root}: {error}")
            continue
        extra = [line for line in listed.splitlines() if line.startswith("worktree ")][1:]
        problems += [f"{root}: git still lists {line.split(' ', 1)[1]}" for line in extra]
        problems += _work_kept(workspaces / root, root, logs)
    return problems


def _work_kept(repository: Path, root: str, logs: Logs) -> list[str]:
    """A done subagent whose Bash wrote work.txt (recorded as done, not unknown) left it
    on its branch: the worktree's removal committed it."""
    problems = []
    for task_id, log in logs.items():
        if root_of(task_id) != root or task_id == root or not log:
            continue
        wrote = any(
            e.type == "ToolFinished"
            and _data(e)["call_id"] == "w1"
            and not _data(e)["is_error"]
            and not _data(e).get("recovery")
            for e in log
        )
        if wrote and _data(log[-1]).get("status") == "done":
            branch = subtasks.branch_name(task_id)
            try:
                found = git(repository, "show", f"{branch}:work.txt")
            except GitFailed as error:
                found = str(error)
            if found != "w1\n":
                problems.append(f"{task_id}: work.txt on {branch} is {found!r}")
    return problems
