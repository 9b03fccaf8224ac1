"""The cluster run's log invariants can fail: each broken log below is caught, and a
healthy log with a crash's traces (an unanswered call, a re-run tool) passes.

This is the quick part of tests/cluster that runs in `make check`; the cluster run itself
is `make cluster`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from noeta.core.ports.store import CANCEL_KEY, InboxEntry, StoredEvent
from tests.cluster.invariants import check_log

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def log(*entries: tuple[str, dict[str, Any]]) -> list[StoredEvent]:
    return [StoredEvent("t", seq, kind, data, NOW) for seq, (kind, data) in enumerate(entries, 1)]


def claimed(*entries: tuple[int, str]) -> list[StoredEvent]:
    """A log of steps, each recorded (by the store) with its claim's epoch and owner."""
    return [
        StoredEvent("t", seq, "Step", {}, NOW, epoch, owner)
        for seq, (epoch, owner) in enumerate(entries, 1)
    ]


def entry(id: int, taken_seq: int | None, key: str | None = None) -> InboxEntry:
    return InboxEntry(id, "t", {"text": "x"}, key, taken_seq, NOW)


HEALTHY = log(
    ("TaskCreated", {}),
    ("ModelCalled", {}),
    ("ModelCalled", {}),  # the first request's worker died: re-sent
    ("ModelReplied", {}),
    ("ToolStarted", {"call_id": "c1"}),
    ("ToolStarted", {"call_id": "c1"}),  # a retry_safe tool re-run after a crash
    ("ToolFinished", {"call_id": "c1"}),
    ("ToolStarted", {"call_id": "j1"}),
    ("ToolFinished", {"call_id": "j1"}),
    ("JobStarted", {"job_id": "j1"}),
    ("JobLost", {"job_id": "j1"}),
    ("MessageTaken", {"inbox_id": 7}),
    ("TaskFinished", {"status": "cancelled"}),
)


def test_a_healthy_log_with_the_traces_of_crashes_passes() -> None:
    inbox = [entry(7, 12), entry(8, 13, CANCEL_KEY), entry(9, None)]
    assert check_log(HEALTHY, inbox) == []
    takeovers = claimed((0, ""), (1, "w1"), (1, "w1"), (3, "w1"), (4, "w2"), (4, "w2"))
    assert check_log(takeovers, []) == []


@pytest.mark.parametrize(
    ("events", "inbox", "problem"),
    [
        (log(("TaskCreated", {}), ("ModelReplied", {})), [], "without a ModelCalled"),
        (log(("ToolFinished", {"call_id": "c1"})), [], "finished without a start"),
        (
            log(
                ("ToolStarted", {"call_id": "c1"}),
                ("ToolFinished", {"call_id": "c1"}),
                ("ToolFinished", {"call_id": "c1"}),
            ),
            [],
            "finished twice",
        ),
        (
            log(("MessageTaken", {"inbox_id": 7}), ("MessageTaken", {"inbox_id": 7})),
            [entry(7, 1)],
            "taken 2 times",
        ),
        (log(("TaskCreated", {})), [entry(7, 1)], "differ from the log"),
        (
            log(("SubtaskReturned", {"inbox_id": 7}), ("SubtaskReturned", {"inbox_id": 7})),
            [entry(7, 1)],
            "taken 2 times",
        ),
        (
            log(
                ("JobStarted", {"job_id": "j1"}),
                ("JobLost", {"job_id": "j1"}),
                ("JobFinished", {"job_id": "j1", "inbox_id": 3}),
            ),
            [entry(3, 3)],
            "ended 2 times",
        ),
        (log(("JobStarted", {"job_id": "j1"})), [], "ended 0 times"),
        ([StoredEvent("t", 2, "TaskCreated", {}, NOW)], [], "not 1..n"),
        (claimed((1, "w1"), (2, "w2"), (1, "w1")), [], "epoch 1 after epoch 2"),
        # The fence's window: the old owner's write lands after the takeover, before the
        # new owner's first write; the store recorded the row's owner, the new one.
        (claimed((1, "w1"), (1, "w1"), (1, "w2"), (3, "w3")), [], "epoch 1 written under"),
    ],
)
def test_each_broken_log_is_caught(
    events: list[StoredEvent], inbox: list[InboxEntry], problem: str
) -> None:
    problems = check_log(events, inbox)
    assert any(problem in found for found in problems), problems
