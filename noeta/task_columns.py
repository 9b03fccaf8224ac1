"""What the task list says of a task, the same in the terminal (`noeta tasks`) and the
browser (`noeta web`): its runtime, its status with its error's kind, and the moment a
"since" filter names (an ISO 8601 moment, or a span back from now: 15m, 2h, 3d)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from noeta.core.errors import ConfigError
from noeta.core.ports.store_views import CANCELLED, TaskSummary

_SPAN = re.compile(r"(\d{1,6})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def runtime(summary: TaskSummary | None, now: datetime) -> str:
    """From its first claim's first write to its finish, or so far ("-": never ran)."""
    if summary is None or summary.started_at is None:
        return "-"
    seconds = max(0.0, ((summary.finished_at or now) - summary.started_at).total_seconds())
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{second:02}s"
    return f"{minutes // 60}h{minutes % 60:02}m"


def shown_error_kind(summary: TaskSummary | None) -> str:
    """The error kind a status shows beside it ("" for none, or when the status says it)."""
    kind = summary.error_kind if summary else ""
    return "" if kind == CANCELLED else kind


def since(text: str, now: datetime) -> datetime:
    """The moment `text` names: ISO 8601 (UTC if it names no zone) or a span back from
    `now`; ConfigError, saying both forms, for anything else."""
    relative = _SPAN.fullmatch(text.strip())
    if relative:
        return now - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{text[:40]!r} is neither a moment (2026-12-02T10:00Z) nor a span (15m, 2h, 3d)"
        ) from None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)
