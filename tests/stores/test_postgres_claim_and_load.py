"""Reading CLAIM_AND_LOAD's rows back: a log that ends short of the claimed row's last_seq
(an append committed after the statement's snapshot) is never handed to a run."""

from __future__ import annotations

from datetime import UTC, datetime

from noeta.backends.stores.postgres.claimed import claimed_tasks
from noeta.core.ports.store import Snapshot

AT = datetime(2026, 1, 1, tzinfo=UTC)


def claim_row(task_id: str, last_seq: int) -> tuple[object, ...]:
    return (0, task_id, last_seq, 2, None, None, AT, None, False, None)


def event_row(task_id: str, seq: int) -> tuple[object, ...]:
    return (2, task_id, seq, 1, "step", '{"n":1}', AT, "w", None, None)


def test_a_read_that_reaches_the_logs_end_is_handed_over() -> None:
    rows = [claim_row("a", 2), event_row("a", 1), event_row("a", 2)]
    (claimed,) = claimed_tasks(rows, "w2", "v")
    assert claimed.claim.task_id == "a" and claimed.claim.epoch == 2
    assert claimed.loaded is not None
    assert [(e.seq, e.data, e.epoch, e.owner) for e in claimed.loaded.events] == [
        (1, {"n": 1}, 1, "w"),
        (2, {"n": 1}, 1, "w"),
    ]


def test_a_read_short_of_the_logs_end_is_dropped_and_loaded_again() -> None:
    rows = [claim_row("a", 3), claim_row("b", 1), event_row("a", 1), event_row("a", 2)]
    rows.append(event_row("b", 1))
    claimed = {each.claim.task_id: each for each in claimed_tasks(rows, "w2", "v")}
    assert claimed["a"].loaded is None  # seq 3 committed after the read: the run loads it
    assert claimed["b"].loaded is not None


def test_a_snapshot_through_the_logs_end_counts_as_its_end() -> None:
    snapshot = (1, "a", 4, None, None, None, None, None, None, b"state")
    (claimed,) = claimed_tasks([claim_row("a", 4), snapshot], "w2", "v")
    assert claimed.loaded is not None and claimed.loaded.events == []
    assert claimed.loaded.snapshot == Snapshot("a", "v", 4, b"state")
