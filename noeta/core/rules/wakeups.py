"""Wake-ups, the timers a task sets itself: how many may wait, when one is due, what the
model is told when it sets one. The rest stays with its kind: the events in `events.py`,
their fold in `fold.py` (pure: due times as ISO strings, no clock), the tool in
`plugins/core/wakeup.py`; the store sees only a due time (`Wait(until=…)`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from noeta.core.ports.tool import Wakeup
from noeta.core.rules.task_state import TaskState

MAX_WAKEUPS = 10  # pending per task: more is a loop gone wrong


def due_time(wakeup: Wakeup, now: datetime) -> datetime:
    """When `wakeup` falls due, in UTC, never before `now` (both on the store's clock)."""
    due = wakeup.at if wakeup.at is not None else now + timedelta(seconds=wakeup.delay_seconds or 0)
    return max(due, now).astimezone(UTC)


def stamp(due: datetime) -> str:
    """The due time as the log holds it: ISO 8601 in UTC, which sorts as time does."""
    return due.isoformat(timespec="milliseconds")


def scheduled_reply(due: datetime, now: datetime) -> str:
    """The tool result the model reads once its wake-up is recorded."""
    return (
        f"Wake-up scheduled for {stamp(due)} (in {(due - now).total_seconds():.0f} s). "
        "End your turn now; you will be woken then with your prompt."
    )


def next_due(state: TaskState) -> datetime | None:
    """The first pending wake-up's due time (the fold keeps them by due time)."""
    return datetime.fromisoformat(state.wakeups[0][1]) if state.wakeups else None
