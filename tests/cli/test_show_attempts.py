"""`noeta show` prints a job's failed attempt as words: its number, its duration, its
error and when the next is due (or that none is left); other events stay JSON."""

from __future__ import annotations

from datetime import UTC, datetime

from noeta.cli.text import event_line
from noeta.core.ports.store import StoredEvent
from noeta.core.rules import events

AT = datetime(2026, 12, 2, 10, 0, 1, 250000, tzinfo=UTC)


def line_of(event: events.Event) -> str:
    kind, data = events.encode(event)
    return event_line(StoredEvent("t1", 5, kind, data, AT))


def test_a_failed_attempt_reads_as_words() -> None:
    due = "2026-12-02T10:00:03.000+00:00"
    retried = events.AttemptFailed("job", 1, "ConnectionError: refused", 0.1234, due)
    assert line_of(retried) == (
        "    5  10:00:01.250  AttemptFailed attempt 1 failed after 0.12s: "
        f"ConnectionError: refused; next at {due}"
    )
    last = events.AttemptFailed("job", 3, "ConnectionError: refused", 2.5)
    assert line_of(last).endswith(
        "attempt 3 failed after 2.50s: ConnectionError: refused; no attempt left"
    )


def test_other_events_stay_json() -> None:
    assert line_of(events.JobLost("c1")).endswith('JobLost       {"job_id": "c1"}')
