"""Finished tasks per queue and minute over the last day, rolled up in `noeta web`'s own
memory: a minute is read from the store until it is final, then kept, so a page read at
a million finishes a day counts only the last few minutes again (no table, no trigger,
nothing on the path that finishes a task)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from noeta.core.ports.queue_settings import FinishedCount, QueueSettingsStore
from noeta.web.charts import Window

MINUTE = timedelta(minutes=1)
# A minute is final once it ended this long ago: a finish is stamped at its append's
# fence, and the append commits a moment later (milliseconds; a group commit's wait). A
# finish committed later still than this is missed by the charts of this process.
SETTLE = timedelta(seconds=30)
KEPT = timedelta(hours=25)  # the day chart's 24 hours, from the start of the first one
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _minute_of(moment: datetime) -> datetime:
    return _EPOCH + (moment - _EPOCH) // MINUTE * MINUTE


class FinishedHistory:
    """The per-minute counts of one `noeta web` process (all queues), and what is final."""

    def __init__(self) -> None:
        self._final: dict[tuple[str, datetime], FinishedCount] = {}
        self._final_until: datetime | None = None  # minutes before it are in `_final`
        self._lock = asyncio.Lock()  # two pages at once read the store once
        self.rows_read = 0  # (queue, minute) rows the store returned, for the tests

    async def per_period(
        self, store: QueueSettingsStore, now: datetime, window: Window, queues: Sequence[str]
    ) -> list[FinishedCount]:
        """Tasks finished in each period of `window` up to `now`, per queue (or `queues`)."""
        minutes = await self._minutes(store, now)
        first, named = window.first(now), set(queues)
        summed: dict[tuple[str, datetime], list[int]] = {}
        for count in minutes:
            if count.start < first or (named and count.queue not in named):
                continue
            start = first + (count.start - first) // timedelta(seconds=window.seconds) * (
                timedelta(seconds=window.seconds)
            )
            total = summed.setdefault((count.queue, start), [0, 0, 0])
            total[0] += count.done
            total[1] += count.failed
            total[2] += count.cancelled
        return [
            FinishedCount(queue, start, *totals)
            for (queue, start), totals in sorted(summed.items())
        ]

    async def _minutes(self, store: QueueSettingsStore, now: datetime) -> list[FinishedCount]:
        oldest = _minute_of(now - KEPT)
        final_until = _minute_of(now - SETTLE)
        async with self._lock:
            since = oldest if self._final_until is None else max(oldest, self._final_until)
            read = await store.finished_per_period(since, int(MINUTE.total_seconds()))
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
