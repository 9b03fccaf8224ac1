"""The client's `stream`: a task's replies as they stream, with the markers of ADR-0105;
a part of `AsyncClient`. A store that keeps no stream (sqlite) gives each reply's final
once it is in the log, and the finish."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from noeta.client import task_logs
from noeta.client.handles import TaskHandle
from noeta.client.stream_items import StreamFinal, StreamFinished, StreamItem, reply_text
from noeta.client.streaming import FINAL_SEQ, Feeds
from noeta.core.ports.reply_streams import Cursor
from noeta.core.ports.store import Store
from noeta.core.ports.store_values import check_text


class StreamCalls:
    """What `AsyncClient` offers for streamed replies; it supplies `store()`."""

    _feeds: Feeds | None = None

    async def store(self) -> Store:
        raise NotImplementedError

    async def stream(
        self, task: str | TaskHandle, *, after: Cursor | str | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        """The task's replies as they stream, until it finishes: `StreamText` (more
        text), `StreamRestarted` (the text so far is void: the call was sent again),
        `StreamFinal` (the reply is in the log: its event's seq and its whole text),
        then `StreamFinished`. Each item's `cursor` (or its text form) passed as `after`
        resumes after it; a cursor whose stream is gone is answered from the log.
        Readers of one task in one client share one listener and one read."""
        task_id = check_text("task id", task.id if isinstance(task, TaskHandle) else task)
        cursor = Cursor.parse(after) if isinstance(after, str) else after
        store = await self.store()
        port = store.capabilities.reply_streams
        if port is None:
            async for item in _from_the_log(store, task_id):
                yield item
            return
        if self._feeds is None:
            self._feeds = Feeds()
        async for item in self._feeds.stream(store, port, task_id, cursor):
            yield item

    async def _close_streams(self) -> None:
        if self._feeds is not None:
            feeds, self._feeds = self._feeds, None
            await feeds.close()


async def _from_the_log(store: Store, task_id: str) -> AsyncGenerator[StreamItem, None]:
    """Without streams: each outcome of a model call as it lands in the log."""
    record = await task_logs.task_row(store, task_id)
    async for tailed in task_logs.tail(store, task_id, record.last_seq, True):
        if tailed.stored.type in ("ModelReplied", "ModelFailed"):
            cursor = Cursor(tailed.seq, 0, FINAL_SEQ)
            yield StreamFinal(tailed.seq, tailed.stored.type, reply_text(tailed.event), cursor)
    yield StreamFinished((await task_logs.task_row(store, task_id)).status)
