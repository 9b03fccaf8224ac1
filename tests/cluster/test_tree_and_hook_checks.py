"""The cluster's subagent and notify-plugin checks can fail: each broken tree or delivery
below is caught, and a healthy tree (a parent that waited, one that ended first) passes.
The quick part of tests/cluster/tree_checks.py and hook_checks.py, run in `make check`."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from noeta.core.ports.store import InboxEntry, StoredEvent, TaskStatus
from noeta.core.rules import subtasks
from tests.cluster import fanout
from tests.cluster.hook_checks import on_event_gaps
from tests.cluster.tree_checks import check_trees, worktrees_left

NOW = datetime(2026, 11, 30, tzinfo=UTC)
DONE, CANCELLED = TaskStatus.DONE, TaskStatus.CANCELLED


def log(task: str, *entries: tuple[str, dict[str, Any]], epoch: int = 1) -> list[StoredEvent]:
    return [
        StoredEvent(task, seq, kind, data, NOW, epoch, "w")
        for seq, (kind, data) in enumerate(entries, 1)
    ]


def handback(parent: str, call: str, child: str, status: str, report: str, id: int) -> InboxEntry:
    payload = subtasks.Handback(child, call, status, report).payload()
    return InboxEntry(id, parent, payload, subtasks.handback_key(parent, call), None, NOW)


def tree(
    *, parent_status: str = "done", taken: int = 1, linked: bool = True
) -> tuple[dict[str, list[StoredEvent]], dict[str, list[InboxEntry]], dict[str, TaskStatus]]:
    """p launches p.a.1, which finishes done with "A"; p takes its handback `taken` times."""
    entry = handback("p", "a", "p.a.1", "done", "A", 7)
    returned = [("SubtaskReturned", {"child_id": "p.a.1", "status": "done", "inbox_id": 7})]
    result = [("ToolFinished", {"call_id": "a", "content": "A", "is_error": False})]
    parent = log(
        "p",
        ("TaskCreated", {}),
        ("SubtaskLaunched", {"call_id": "a", "child_id": "p.a.1"}),
        *(returned + result) * taken,
        ("TaskFinished", {"status": parent_status}),
    )
    link = [("SubtaskOf", {"parent": "p", "call_id": "a"})] if linked else []
    child = log(
        "p.a.1", ("TaskCreated", {}), *link, ("TaskFinished", {"status": "done", "answer": "A"})
    )
    statuses = {"p": TaskStatus(parent_status), "p.a.1": DONE}
    return {"p": parent, "p.a.1": child}, {"p": [entry]}, statuses


def test_a_healthy_tree_passes_and_a_parent_that_ended_first_may_leave_it_untaken() -> None:
    assert check_trees(*tree()) == []
    assert check_trees(*tree(parent_status="cancelled", taken=0)) == []


@pytest.mark.parametrize(("taken", "problem"), [(0, "taken 0 times"), (2, "taken 2 times")])
def test_a_handback_not_taken_exactly_once_by_a_parent_that_waited_is_caught(
    taken: int, problem: str
) -> None:
    found = check_trees(*tree(taken=taken))
    assert any(problem in each for each in found), found


def test_an_orphan_child_is_caught() -> None:
    logs, inboxes, statuses = tree()
    logs["q.z.1"] = log(
        "q.z.1", ("TaskCreated", {}), ("SubtaskOf", {"parent": "q", "call_id": "z"})
    )
    found = check_trees(logs, inboxes, statuses)
    assert found == ["q.z.1: an orphan, no SubtaskLaunched for it in q's log"]


def test_a_child_launched_twice_a_lost_handback_and_a_changed_report_are_caught() -> None:
    logs, inboxes, statuses = tree()
    twice = [
        *logs["p"],
        StoredEvent("p", 9, "SubtaskLaunched", {"call_id": "a", "child_id": "p.a.1"}, NOW, 1, "w"),
    ]
    assert any(
        "launched 2 times" in p for p in check_trees({**logs, "p": twice}, inboxes, statuses)
    )
    assert any("0 handbacks" in p for p in check_trees(logs, {"p": []}, statuses))
    changed = {"p": [handback("p", "a", "p.a.1", "done", "B", 7)]}
    assert any("is not its finish" in p for p in check_trees(logs, changed, statuses))


def test_a_worktree_left_behind_is_caught(tmp_path: Path) -> None:
    fanout.make_git_workspace(tmp_path / "p")
    fanout.git(tmp_path / "p", "worktree", "add", "-q", "-b", "noeta/p.a.1", "../p.a.1", "HEAD")
    found = worktrees_left(tmp_path, {"p"}, {})
    assert any("p.a.1: its git worktree was left behind" in p for p in found), found
    assert any("git still lists" in p for p in found), found
    fanout.git(tmp_path / "p", "worktree", "remove", "--force", "../p.a.1")
    assert worktrees_left(tmp_path, {"p"}, {}) == []


def test_on_event_may_miss_only_the_finishing_appends_events() -> None:
    events = log(
        "t",
        ("TaskCreated", {}),
        ("PluginRecord", {}),
        ("TurnEnded", {}),
        ("TaskFinished", {"status": "done"}),
    )
    delivered = Counter({("t", 1, "TaskCreated"): 1})
    assert on_event_gaps({"t": events}, delivered) == []  # 3 and 4: the finishing append
    older = [*events[:2], StoredEvent("t", 3, "TurnEnded", {}, NOW, 1, "w"),
             StoredEvent("t", 4, "TaskFinished", {"status": "done"}, NOW, 2, "w")]  # fmt: skip
    assert on_event_gaps({"t": older}, delivered) == ["t: on_event never got TurnEnded at seq 3"]
    missed = Counter({("t", 3, "TurnEnded"): 1})  # seq 1, before the mark, never delivered
    assert on_event_gaps({"t": events}, missed) == ["t: on_event never got TaskCreated at seq 1"]
    wrong = Counter({**delivered, ("t", 5, "TaskFinished"): 2})
    assert on_event_gaps({"t": events}, wrong) == [
        "t: on_event got TaskFinished at seq 5, the log has None"
    ]
