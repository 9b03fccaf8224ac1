"""Queue settings: the fleet-wide limits a queue's claims obey (concurrency, per key,
claims per period, paused), their checks, what `noeta queue list` shows, and the small
store port that keeps them (ADR-0073)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from noeta.core.errors import ConfigError
from noeta.core.ports.store_values import check_key

MAX_LIMIT = 1_000_000  # far above any fleet; a typo of a few digits more is refused
MAX_RATE_PERIOD_SECONDS = 7 * 86400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_UNIT_WORDS = {"second": "s", "minute": "m", "hour": "h", "day": "d"}
_PERIOD = re.compile(r"(\d+(?:\.\d+)?)?([a-z]+)")


def check_limit(value: int, what: str) -> int:
    """A concurrency or a rate's count: a whole number from 1 to MAX_LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ConfigError(f"{what} must be a whole number from 1 to {MAX_LIMIT:,}, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` claims start per `seconds`, across the fleet (a token bucket)."""

    count: int
    seconds: float

    def __post_init__(self) -> None:
        check_limit(self.count, "a rate's count")
        if not (math.isfinite(self.seconds) and 0 < self.seconds <= MAX_RATE_PERIOD_SECONDS):
            raise ConfigError(
                f"a rate's period must be above 0 and at most 7 days, not {self.seconds} s"
            )

    def __str__(self) -> str:
        for unit in ("d", "h", "m", "s"):
            if self.seconds == _UNITS[unit]:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.seconds:g}s"


def parse_rate(text: str) -> Rate:
    """'N/PERIOD': 10/s, 600/m, 1000/h, 5/30s, 100/minute."""
    count_text, slash, period_text = text.strip().partition("/")
    if not slash or not count_text.strip().isdigit():
        raise ConfigError(f"a rate is N/PERIOD (such as 10/s, 600/m, 5/30s), not {text!r}")
    match = _PERIOD.fullmatch(period_text.strip().lower())
    unit = match and _UNIT_WORDS.get(match[2].removesuffix("s"), match[2])
    if match is None or unit not in _UNITS:
        raise ConfigError(
            f"{period_text!r} is not a period: use s, m, h or d, optionally after a number "
            "(30s, 5m)"
        )
    return Rate(int(count_text), float(match[1] or 1) * _UNITS[str(unit)])


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's limits; a queue with none is claimed as if limits did not exist."""

    queue: str
    concurrency: int | None = None  # live claims at once, across every worker
    per_key_concurrency: int | None = None  # of them, with the same concurrency key
    rate: Rate | None = None  # claims started per period
    paused: bool = False  # not claimed at all

    def __post_init__(self) -> None:
        check_key("queue name", self.queue)
        if self.concurrency is not None:
            check_limit(self.concurrency, "a queue's concurrency")
        if self.per_key_concurrency is not None:
            check_limit(self.per_key_concurrency, "a per-key concurrency")


@dataclass(frozen=True, slots=True)
class QueueChange:
    """What `set_queue` changes; a field left None stays as it was."""

    concurrency: int | None = None
    per_key_concurrency: int | None = None
    rate: Rate | None = None
    paused: bool | None = None

    def applied_to(self, settings: QueueSettings) -> QueueSettings:
        """`settings` with this change: what the store keeps (and checks) after it."""
        return QueueSettings(
            settings.queue,
            settings.concurrency if self.concurrency is None else self.concurrency,
            (
                settings.per_key_concurrency
                if self.per_key_concurrency is None
                else self.per_key_concurrency
            ),
            settings.rate if self.rate is None else self.rate,
            settings.paused if self.paused is None else self.paused,
        )


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """A queue as `noeta queue list` shows it: its settings and what it holds now."""

    settings: QueueSettings
    has_settings: bool  # False: no row, the defaults shown
    claimable: int  # due now, not held
    running: int  # live claims (running or holding, lease not lapsed)
    running_by_key: Mapping[str, int] = field(default_factory=dict)  # the busiest keys
    scheduled: int = 0  # due later (a delay, a retry's backoff, a budget's wait), not held
    changed_at: datetime | None = None  # when its settings were last set (None: none)
    unfinished: int = 0  # every task not finished: ready, running, holding, waiting

    @property
    def queue(self) -> str:
        return self.settings.queue

    @property
    def waiting_for_slot(self) -> int:
        """Claimable tasks no claim may take now: all of a paused queue's, else those past
        the room its concurrency leaves (per-key and rate limits are not counted here)."""
        if self.settings.paused:
            return self.claimable
        if self.settings.concurrency is None:
            return 0
        return max(0, self.claimable - max(0, self.settings.concurrency - self.running))

    def limits(self) -> list[str]:
        """Its settings as `noeta queue list` and the queues page name them."""
        s = self.settings
        named = [
            f"concurrency {s.concurrency}" if s.concurrency else "",
            f"per key {s.per_key_concurrency}" if s.per_key_concurrency else "",
            f"rate {s.rate}" if s.rate else "",
            "PAUSED" if s.paused else "",
        ]
        return [part for part in named if part]

    def effects(self) -> list[str]:
        """What its settings do to it now, in words (the queues page)."""
        s = self.settings
        said = []
        if s.paused:
            said.append(f"paused: no claims, {self.claimable} claimable held back")
        if s.concurrency is not None:
            said.append(f"{self.running} of {s.concurrency} slots used")
        if s.per_key_concurrency is not None and self.running_by_key:
            full = [key for key, n in self.running_by_key.items() if n >= s.per_key_concurrency]
            if full:
                said.append(f"keys at their limit of {s.per_key_concurrency}: {', '.join(full)}")
        if s.rate is not None:
            said.append(f"at most {s.rate.count} claims started per {s.rate.seconds:g} s")
        return said


@dataclass(frozen=True, slots=True)
class QueueActivity:
    """How many tasks of a queue were created, and how many finished, in one period (the
    queues page's charts)."""

    queue: str
    start: datetime  # the period's start, a whole number of periods since the Unix epoch
    created: int
    done: int
    failed: int
    cancelled: int


@runtime_checkable
class QueueSettingsStore(Protocol):
    """The store port for queue settings; both stores implement it beside `Store`."""

    async def set_queue(self, queue: str, change: QueueChange) -> QueueOverview:
        """Create or change `queue`'s settings in one transaction; return the queue as it
        stands after. Idle workers are woken when the queue is left unpaused."""
        ...

    async def clear_queue(self, queue: str) -> bool:
        """Remove `queue`'s settings (it is claimed as if it never had any); False if it
        had none."""
        ...

    async def queue_overview(self, queues: Sequence[str] = ()) -> list[QueueOverview]:
        """Every queue that has settings or tasks (or just `queues`), sorted by name."""
        ...

    async def activity_per_period(
        self, since: datetime, period_seconds: int, queues: Sequence[str] = ()
    ) -> list[QueueActivity]:
        """Tasks created, and tasks finished, at `since` or later, counted per queue (or
        just `queues`) and per period of `period_seconds` (periods aligned on the Unix
        epoch), from the creation and finish times the store keeps; periods with none are
        left out. Ordered by queue, then start."""
        ...


class _OffersQueueSettings(Protocol):
    @property
    def queue_settings(self) -> QueueSettingsStore | None: ...


class _StoreOfQueueSettings(Protocol):
    """A `Store`, as far as this needs one (`store.py` imports this module)."""

    @property
    def capabilities(self) -> _OffersQueueSettings: ...


def queue_settings_store(store: _StoreOfQueueSettings) -> QueueSettingsStore:
    """`store`'s port for queue settings (both stores have one; an observed store
    passes the calls through)."""
    settings = store.capabilities.queue_settings
    if settings is None:
        raise ConfigError(f"the store {type(store).__name__} keeps no queue settings")
    return settings
