"""The cluster's canvas checks can fail: a callback run twice or with a wrong value, an
end taken twice, a wrong result, a failure no crash explains are each caught; a chain that
ran right passes. The quick part of tests/cluster/canvases.py, run in `make check`."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from noeta.core.ports.store import StoredEvent, TaskStatus
from tests.cluster.canvases import PLUGIN, check_canvases, new_task

NOW = datetime(2026, 12, 6, tzinfo=UTC)
CANVAS = "chain-007"  # its chain: add(7, 1), add(_, 2), add(_, 3), collect(_): 13
MEMBERS = [f"{CANVAS}.m{n}.1" for n in range(4)]
CALLBACK_MARKER = f"{MEMBERS[3]}:job=13"


def stored(task: str, entries: list[tuple[str, Any]]) -> list[StoredEvent]:
    return [
        StoredEvent(task, seq, kind, data, NOW, 1, "w")
        for seq, (kind, data) in enumerate(entries, 1)
    ]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The config the cluster's driver submits its canvases with (its jobs' module)."""
    path = tmp_path / "noeta.yaml"
    path.write_text(json.dumps({"plugins": [PLUGIN]}))
    return path


def a_chain(
    config: Path, *, answer: Any = 13, returned: list[str] = MEMBERS, callback_unknown: bool = False
) -> dict[str, list[StoredEvent]]:
    """The canvas's log as its worker writes it (the tree from the client's own spec), and
    each member's, ending as given."""
    task = new_task("chain", CANVAS, config)
    first = [(event.type, event.data) for event in task.events]
    ends = [
        ("SubtaskReturned", {"child_id": child, "status": "done", "inbox_id": n})
        for n, child in enumerate(returned)
    ]
    finish = ("TaskFinished", {"status": "done", "answer": json.dumps(answer)})
    logs = {CANVAS: stored(CANVAS, [*first, *ends, finish])}
    for member in MEMBERS:
        recovery = "unknown" if callback_unknown and member == MEMBERS[3] else ""
        logs[member] = stored(
            member, [("TaskCreated", {}), ("ToolFinished", {"recovery": recovery})]
        )
    return logs


def statuses(canvas: TaskStatus = TaskStatus.DONE) -> dict[str, TaskStatus]:
    return {CANVAS: canvas, **dict.fromkeys(MEMBERS, TaskStatus.DONE)}


def problems(
    logs: dict[str, list[StoredEvent]], ledger: list[str], status: TaskStatus = TaskStatus.DONE
) -> list[str]:
    return check_canvases({CANVAS: "chain"}, logs, statuses(status), Counter(ledger))


def test_a_chain_that_ran_right_passes(config: Path) -> None:
    assert problems(a_chain(config), [CALLBACK_MARKER]) == []


def test_each_way_a_canvas_can_go_wrong_is_caught(config: Path) -> None:
    assert problems(a_chain(config), [CALLBACK_MARKER, CALLBACK_MARKER]) == [
        f"{CANVAS}: the callback ran 2 times",
        f"{CANVAS}: done, and its callback ran 2 times",
    ]
    assert problems(a_chain(config), []) == [f"{CANVAS}: done, and its callback ran 0 times"]
    wrong = f"{MEMBERS[3]}:job=12"
    assert problems(a_chain(config, answer=12), [wrong]) == [
        f"{CANVAS}: the callback ran with {wrong}, not {CALLBACK_MARKER}",
        f"{CANVAS}: its result is 12, not 13",
    ]
    twice = a_chain(config, returned=[*MEMBERS, MEMBERS[0]])
    assert problems(twice, [CALLBACK_MARKER]) == [f"{CANVAS}: {MEMBERS[0]}'s end taken 2 times"]
    short = a_chain(config, returned=MEMBERS[1:])
    assert problems(short, [CALLBACK_MARKER]) == [
        f"{CANVAS}: took the ends of {sorted(MEMBERS[1:])}, not every member's"
    ]


def test_a_failure_passes_only_where_a_crash_left_the_callbacks_outcome_unknown(
    config: Path,
) -> None:
    failed = TaskStatus.FAILED
    assert problems(a_chain(config, callback_unknown=True), [], failed) == []
    assert problems(a_chain(config), [], failed) == [
        f"{CANVAS}: failed (None), its callback never in doubt"
    ]
