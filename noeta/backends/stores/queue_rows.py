"""Queue settings as both stores bind and read them: a change's parameters, and the rows
of their overview queries as `QueueOverview`s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from noeta.core.errors import ConfigError
from noeta.core.ports.queue_settings import QueueChange, QueueOverview, QueueSettings, Rate
from noeta.core.ports.store import check_key

TOP_KEYS = 5  # the busiest keys of a queue an overview names


def settings_from_row(row: Sequence[Any]) -> QueueSettings:
    """A QueueSettings from (queue, concurrency, per_key, rate_count, rate_seconds, paused)."""
    queue, concurrency, per_key, rate_count, rate_seconds, paused = row[:6]
    rate = None if rate_count is None else Rate(rate_count, rate_seconds)
    return QueueSettings(queue, concurrency, per_key, rate, bool(paused))


def overviews(
    rows: Sequence[Sequence[Any]], by_key: Sequence[Sequence[Any]], top: int
) -> list[QueueOverview]:
    """QUEUE_OVERVIEW's rows (queue, the five settings, has settings, claimable, running,
    scheduled, changed at, unfinished) with the `top` busiest keys of each queue
    (RUNNING_BY_KEY)."""
    keys: dict[str, dict[str, int]] = {}
    for queue, key, count in by_key:
        busiest = keys.setdefault(queue, {})
        if len(busiest) < top:
            busiest[key] = count
    return [
        QueueOverview(
            settings_from_row(row),
            bool(row[6]),
            row[7],
            row[8],
            keys.get(row[0], {}),
            row[9],
            row[10],
            row[11],
        )
        for row in rows
    ]


def check_period(seconds: int) -> int:
    """A chart's period: a whole number of seconds, from 1 to a week."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= 604800:
        raise ConfigError(f"a period must be 1 to 604,800 whole seconds, not {seconds!r}")
    return seconds


def change_params(queue: str, change: QueueChange) -> dict[str, Any]:
    rate = change.rate
    return {
        "queue": check_key("queue name", queue),
        "concurrency": change.concurrency,
        "per_key": change.per_key_concurrency,
        "rate_count": None if rate is None else rate.count,
        "rate_seconds": None if rate is None else rate.seconds,
        "paused": change.paused,
    }
