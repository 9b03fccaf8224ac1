"""Tasks created and finished per queue and minute over the last day, rolled up in
`noeta web`'s own memory: a minute is read from the store until it is final, then kept,
so a page read at a million finishes a day counts only the last few minutes again (no
table, no trigger, nothing on the path that creates or finishes a task); the first
read, the whole day, in the background while the pages go on without it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from noeta.core.ports.queue_settings import QueueActivity, QueueSettingsStore
from noeta.web.charts import Window

MINUTE = timedelta(minutes=1)
# A minute is final once it ended this long ago: a finish is stamped at its append's
# fence, and the append commits a moment later (milliseconds; a group commit's wait). A
# finish committed later still than this is missed by the charts of this process.
SETTLE = timedelta(seconds=30)
KEPT = timedelta(hours=25)  # the day chart's 24 hours, from the start of the first one
# The first read is a day of the store's creations and finishes (2 s at a million): it
# runs in the background, and a page waits for it this long at most (seconds), then is
# drawn without its charts, which its live refresh brings once they are filled.
FIRST_FILL_WAIT = 0.05
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _minute_of(moment: datetime) -> datetime:
    return _EPOCH + (moment - _EPOCH) // MINUTE * MINUTE


class QueueHistory:
    """The per-minute counts of one `noeta web` process (all queues), and what is final."""

    def __init__(self) -> None:
        self._final: dict[tuple[str, datetime], QueueActivity] = {}
        self._final_until: datetime | None = None  # minutes before it are in `_final`
        self._lock = asyncio.Lock()  # two pages at once read the store once
        self._first_fill: asyncio.Task[list[QueueActivity]] | None = None
        self.rows_read = 0  # (queue, minute) rows the store returned, for the tests

    async def per_period(
        self, store: QueueSettingsStore, now: datetime, window: Window, queues: Sequence[str]
    ) -> list[QueueActivity] | None:
        """Tasks created and finished in each period of `window` up to `now`, per queue
        (or `queues`); None while the first fill goes on (see FIRST_FILL_WAIT)."""
        if self._final_until is None and not await self._first_fill_done(store, now):
            return None
        minutes = await self._minutes(store, now)
        first, named = window.first(now), set(queues)
        period = timedelta(seconds=window.seconds)
        summed: dict[tuple[str, datetime], list[int]] = {}
        for count in minutes:
            if count.start < first or (named and count.queue not in named):
                continue
            start = first + (count.start - first) // period * period
            total = summed.setdefault((count.queue, start), [0, 0, 0, 0])
            for index, value in enumerate(_figures(count)):
                total[index] += value
        return [
            QueueActivity(queue, start, *totals)
            for (queue, start), totals in sorted(summed.items())
        ]

    async def _first_fill_done(self, store: QueueSettingsStore, now: datetime) -> bool:
        if self._first_fill is None:
            self._first_fill = asyncio.create_task(
                self._minutes(store, now), name="noeta-web-queue-history"
            )
        if FIRST_FILL_WAIT > 0:
            await asyncio.wait({self._first_fill}, timeout=FIRST_FILL_WAIT)
        if not self._first_fill.done():
            return False
        fill, self._first_fill = self._first_fill, None
        fill.result()  # a failed fill is this page's error; the next page starts another
        return True

    async def close(self) -> None:
        if self._first_fill is not None:
            self._first_fill.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._first_fill

    async def _minutes(self, store: QueueSettingsStore, now: datetime) -> list[QueueActivity]:
        oldest = _minute_of(now - KEPT)
        final_until = _minute_of(now - SETTLE)
        async with self._lock:
            since = oldest if self._final_until is None else max(oldest, self._final_until)
            read = await store.activity_per_period(since, int(MINUTE.total_seconds()))
            self.rows_read += len(read)
            fresh = []
            for count in read:
                if count.start < final_until:
                    self._final[(count.queue, count.start)] = count
                else:
                    fresh.append(count)
            self._final_until = max(final_until, self._final_until or final_until)
            for key in [key for key in self._final if key[1] < oldest]:
                del self._final[key]
            return [*self._final.values(), *fresh]


def _figures(count: QueueActivity) -> tuple[int, int, int, int]:
    return count.created, count.done, count.failed, count.cancelled


def unfinished_at_ends(
    counts: Sequence[QueueActivity], unfinished_now: int, window: Window, now: datetime
) -> list[int]:
    """A queue's unfinished tasks at the end of each period of `window` (the last one:
    now), counted back from now: a period's creations were not there before it, its
    finishes were. Tasks pruned since are not counted back."""
    first, period = window.first(now), timedelta(seconds=window.seconds)
    change = [0] * window.periods
    for count in counts:
        index = (count.start - first) // period
        if 0 <= index < window.periods:
            change[index] += count.created - count.done - count.failed - count.cancelled
    ends = [unfinished_now] * window.periods
    for index in range(window.periods - 2, -1, -1):
        ends[index] = max(0, ends[index + 1] - change[index + 1])
    return ends
