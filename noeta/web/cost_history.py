"""What the tasks finished in the last 30 days cost, rolled up in `noeta web`'s own memory
per day, queue, concurrency key and model: the finished tasks walked by finish past a
mark, each one's ledger read once (its model events only), so nothing is added to the
path that creates, runs or finishes a task; the first walk in the background while the
cost page says it is computing, each later page a walk of what finished since."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from noeta.core.ports.store import StoredEvent
from noeta.core.ports.store_views import FinishedTask, StoreViews
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.ledger import Ledger, ModelLedger, ledger_of

KEPT_DAYS = 30  # today (UTC) and the 29 days before
WALK_ROWS = 1000  # finished tasks a step reads, then their ledgers' events in one statement
# A finish is stamped inside its transaction: the store's cutoff holds the walk back from
# any still uncommitted, and this much more for what its checks cannot see (another role).
SETTLE_SECONDS = 5.0
# A page waits this long for the walk (seconds), then is drawn with what it has; the
# first walk, 30 days of finishes, runs on in the background (bench/web.py has its time).
WAIT_SECONDS = 0.5
# Per day, the concurrency keys kept apart; a day's later ones are summed as one, so a key
# per user cannot grow the rollup without bound.
MAX_KEYS_PER_DAY = 1000
OTHER_KEYS = "(other keys)"
NO_KEY = ""


@dataclass(frozen=True, slots=True)
class CostRow:
    """One model's calls in the tasks of one queue and key that finished on one day."""

    day: date
    queue: str
    key: str  # NO_KEY: tasks without a concurrency key
    ledger: ModelLedger


class CostHistory:
    """The rollup of one `noeta web` process, and how far its walk has come."""

    def __init__(self) -> None:
        self._sums: dict[tuple[date, str, str, str], ModelLedger] = {}
        self._keys: dict[date, set[str]] = defaultdict(set)
        self._mark: tuple[datetime, str] | None = None
        self._walk: asyncio.Task[None] | None = None
        self.through: datetime | None = None  # every task finished before it is counted
        self.tasks_read = 0  # for the tests and the benchmark

    async def refresh(self, views: StoreViews, now: datetime) -> bool:
        """Walk on to what finished since the last page (started once, in the background,
        waited for up to WAIT_SECONDS): True when the walk has reached the store's cutoff."""
        if self._walk is not None and self._walk.done():
            walk, self._walk = self._walk, None
            walk.result()  # a failed walk is this page's error; the next starts anew
        if self._walk is None:
            self._walk = asyncio.create_task(self._walked(views, now), name="noeta-web-costs")
        await asyncio.wait({self._walk}, timeout=WAIT_SECONDS)
        if not self._walk.done():
            return False
        walk, self._walk = self._walk, None
        walk.result()
        return True

    def rows(self, since: date) -> list[CostRow]:
        return [
            CostRow(day, queue, key, ledger)
            for (day, queue, key, _), ledger in sorted(self._sums.items())
            if day >= since
        ]

    async def close(self) -> None:
        if self._walk is not None:
            self._walk.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._walk

    async def _walked(self, views: StoreViews, now: datetime) -> None:
        first_day = first_kept_day(now)
        self._forget_before(first_day)
        oldest = datetime.combine(first_day, time(), UTC)
        after, after_id = self._mark or (oldest, "")
        if after < oldest:
            after, after_id = oldest, ""
        while True:
            step = await views.finished_tasks(after, after_id, WALK_ROWS, SETTLE_SECONDS)
            found = await views.ledger_events([task.task_id for task in step.tasks])
            for task in step.tasks:
                self._add(task, found.get(task.task_id, []))
            self.tasks_read += len(step.tasks)
            if step.tasks:
                after, after_id = step.tasks[-1].finished_at, step.tasks[-1].task_id
                self._mark = (after, after_id)
            if len(step.tasks) < WALK_ROWS:
                self.through = step.cutoff
                return

    def _add(self, task: FinishedTask, stored: Iterable[StoredEvent]) -> None:
        ledger = ledger_from(stored)
        if not ledger:
            return
        day = task.finished_at.astimezone(UTC).date()
        key = task.concurrency_key or NO_KEY
        kept = self._keys[day]
        if key not in kept:
            if len(kept) >= MAX_KEYS_PER_DAY:
                key = OTHER_KEYS
            else:
                kept.add(key)
        for entry in ledger:
            at = (day, task.queue, key, entry.model)
            known = self._sums.get(at)
            self._sums[at] = entry if known is None else known.plus(entry)

    def _forget_before(self, first_day: date) -> None:
        for at in [at for at in self._sums if at[0] < first_day]:
            del self._sums[at]
        for day in [day for day in self._keys if day < first_day]:
            del self._keys[day]


def first_kept_day(now: datetime) -> date:
    return now.astimezone(UTC).date() - timedelta(days=KEPT_DAYS - 1)


def ledger_from(stored: Iterable[StoredEvent]) -> Ledger:
    """A task's own ledger from its ledger events (`StoreViews.ledger_events`)."""
    return ledger_of(LoggedEvent(event.seq, _decoded(event.type, event.data)) for event in stored)


def _decoded(event_type: str, data: object) -> events.Event | events.UnknownEvent:
    try:
        return events.decode(event_type, data)  # type: ignore[arg-type]
    except ValueError:
        return events.UnknownEvent(event_type, 0)  # unreadable: it counts for nothing
