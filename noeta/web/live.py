"""A running task's page, live (ADR-0072): server-sent events carrying the new timeline
entries, rendered here. One `LiveFeed` per process watches every task some page follows:
woken at once by the store's notices (LISTEN noeta_finished, noeta_wake) and otherwise
reading the watched tasks' rows once a second, for all pages together, so a page costs
the store nothing while its task is quiet."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import StreamingResponse

from noeta.core.errors import NoetaError
from noeta.core.store import TaskRecord, TaskStatus
from noeta.web import task_page, timeline
from noeta.web.site import Site, not_found

# A task's row is read this often while a page follows it and no notice came.
CHECK_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0  # a comment line, so proxies keep the stream open
BATCH_EVENTS = 200


@dataclass
class _Watched:
    seen: tuple[int, TaskStatus] | None = None
    changed: set[asyncio.Event] = field(default_factory=set)


class LiveFeed:
    """Tells the streams following a task when its row changed (new events, a status)."""

    def __init__(self, site: Site) -> None:
        self._site = site
        self._watched: dict[str, _Watched] = {}
        self._nudge = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stopping = False

    @contextlib.asynccontextmanager
    async def watch(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        if not self._tasks:
            self._start()
        changed = asyncio.Event()
        watched = self._watched.setdefault(task_id, _Watched())
        watched.changed.add(changed)
        try:
            yield changed
        finally:
            watched.changed.discard(changed)
            if not watched.changed:
                self._watched.pop(task_id, None)

    def stop_streams(self) -> None:
        """End every stream now (the server is stopping: it waits for open connections)."""
        self.stopping = True
        for watched in self._watched.values():
            for changed in watched.changed:
                changed.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def _start(self) -> None:
        self._tasks.append(asyncio.create_task(self._check_rows()))
        self._tasks.append(asyncio.create_task(self._listen()))

    async def _listen(self) -> None:
        store = await self._site.store()
        sources: list[Callable[[], AsyncGenerator[str, None]]] = [
            getattr(store, name) for name in ("finishes", "wakeups") if hasattr(store, name)
        ]
        listeners = [asyncio.create_task(self._forward(source)) for source in sources]
        try:
            await asyncio.gather(*listeners)
        finally:
            for listener in listeners:
                listener.cancel()

    async def _forward(self, notices: Callable[[], AsyncGenerator[str, None]]) -> None:
        async with contextlib.aclosing(notices()) as heard:  # closes its connection
            async for _ in heard:
                self._nudge.set()

    async def _check_rows(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), CHECK_SECONDS)
            self._nudge.clear()
            store = await self._site.store()
            for task_id, watched in list(self._watched.items()):
                try:
                    record = await store.get_task(task_id)
                except NoetaError:
                    continue  # the store is away: the next round asks again
                now = None if record is None else (record.last_seq, record.status)
                if now != watched.seen:
                    watched.seen = now
                    for changed in watched.changed:
                        changed.set()


def event(name: str, data: str) -> str:
    """One server-sent event; every line of `data` is its own `data:` line."""
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {name}\n{lines}\n"


async def follow(site: Site, feed: LiveFeed, request: Request) -> StreamingResponse:
    task_id = request.path_params["task_id"]
    after_text = request.query_params.get("after", "0")
    after = int(after_text) if after_text.isdigit() and len(after_text) < 19 else 0
    store = await site.store()
    if await store.get_task(task_id) is None:
        raise not_found(f"task with the id {task_id!r}")
    return StreamingResponse(
        _stream(site, feed, task_id, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(site: Site, feed: LiveFeed, task_id: str, after: int) -> AsyncIterator[str]:
    views, store = await site.views(), await site.store()
    context = timeline.Context()
    if after > 0:
        timeline.render(
            task_id, await views.log_page(task_id, after_seq=after - 1, limit=1), context
        )
    shown: TaskRecord | None = None
    async with feed.watch(task_id) as changed:
        yield ": following\n\n"
        while not feed.stopping:
            changed.clear()
            record = await store.get_task(task_id)  # before the log: see client.tail
            entries = await views.log_page(task_id, after_seq=after, limit=BATCH_EVENTS)
            if entries:
                yield event("rows", timeline.render(task_id, entries, context))
                after = entries[-1].seq
                continue
            if record is None:
                return
            if record != shown:
                shown = record
                yield event("facts", task_page.facts(record))
            if record.status.finished:
                yield event("finished", record.status.value)
                return
            while not changed.is_set():  # the feed says when to look again
                try:
                    await asyncio.wait_for(changed.wait(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield ": keepalive\n\n"
