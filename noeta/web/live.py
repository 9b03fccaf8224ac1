"""A running task's page, live (ADR-0072): server-sent events carrying the new timeline
entries, rendered here, and the model's reply as it streams (`reply_stream`). One
`LiveFeed` per process watches every task some page follows: woken by the store's notices
(LISTEN noeta_finished, noeta_wake), a burst of them read as one, and otherwise reading
the watched rows once a second for all pages together. How many streams are open at once
is bounded: past it, a 503."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from noeta.client.streaming import Feeds
from noeta.core.errors import NoetaError
from noeta.core.ports.store import TaskRecord, TaskStatus
from noeta.web import reply_stream, task_page, timeline
from noeta.web.site import PageError, Site, not_found, whole_number

log = logging.getLogger("noeta.web")
# A task's row is read this often while a page follows it and no notice came.
CHECK_SECONDS = 1.0
# At most one read of the watched rows this often, however many notices arrive: the
# database announces every wake-up and finish, not only the watched tasks'.
READ_INTERVAL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0  # a comment line, so proxies keep the stream open
BATCH_EVENTS = 200

CLOSE_SECONDS = 5.0  # how long stopping waits for the feed's listeners


@dataclass
class _Watched:
    seen: tuple[int, TaskStatus] | None = None
    changed: set[asyncio.Event] = field(default_factory=set)


class LiveFeed:
    """Tells the streams following a task when its row changed (new events, a status)."""

    def __init__(
        self,
        site: Site,
        *,
        check_seconds: float = CHECK_SECONDS,
        read_interval: float = READ_INTERVAL_SECONDS,
    ) -> None:
        self._site = site
        self._check_seconds, self._read_interval = check_seconds, read_interval
        self._watched: dict[str, _Watched] = {}
        self._nudge = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        self.notices = 0  # heard from the store
        self._heard = asyncio.Condition()
        self.reads = 0  # rounds of reading the watched rows (a seam for tests)
        self.streams = StreamLimit(site.max_streams)
        self.replies = Feeds()  # the streamed replies, one feed per task for every page

    def seen(self, task_id: str) -> tuple[int, TaskStatus] | None:
        """The watched task's (last_seq, status) as last read."""
        watched = self._watched.get(task_id)
        return None if watched is None else watched.seen

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
        await self.replies.close()
        for task in self._tasks:
            task.cancel()
        # Bounded: a LISTEN connection whose close never answers must not keep the
        # server from stopping (seen once as a test teardown that hung).
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=CLOSE_SECONDS)
        self._tasks.clear()

    def _start(self) -> None:
        self._tasks.append(asyncio.create_task(self._check_rows()))
        self._tasks.append(asyncio.create_task(self._listen()))

    async def _listen(self) -> None:
        # The primary's: a standby hears no NOTIFY. The reads follow the pages' store.
        capabilities = (await self._site.primary_store()).capabilities
        sources = [
            source for source in (capabilities.finishes, capabilities.wakeups) if source is not None
        ]
        listeners = [asyncio.create_task(self._forward(source)) for source in sources]
        try:
            await asyncio.gather(*listeners)
        finally:
            for listener in listeners:
                listener.cancel()
            if listeners:
                await asyncio.wait(listeners, timeout=CLOSE_SECONDS)

    async def _forward(self, notices: Callable[[], AsyncGenerator[str, None]]) -> None:
        async with contextlib.aclosing(notices()) as heard:  # closes its connection
            async for _ in heard:
                self._nudge.set()
                async with self._heard:
                    self.notices += 1
                    self._heard.notify_all()

    async def heard(self, count: int) -> None:
        """Return once `count` notices have been heard (a seam for tests)."""
        async with self._heard:
            await self._heard.wait_for(lambda: self.notices >= count)

    async def _check_rows(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), self._check_seconds)
            self._nudge.clear()  # a notice from here on brings one more read: the latest
            await self._read_rows()
            # Notices that arrive meanwhile leave the nudge set: one read after the pause.
            await asyncio.sleep(self._read_interval)

    async def _read_rows(self) -> None:
        self.reads += 1
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


class StreamLimit:
    """How many live streams are open, at most `most`. A refusal is logged once per burst
    (a burst ends when a stream is let in again), not once per request."""

    def __init__(self, most: int) -> None:
        self.most, self.open, self.refused = most, 0, 0
        self._refusing = False

    def enter(self) -> bool:
        if self.open >= self.most:
            self.refused += 1
            if not self._refusing:
                self._refusing = True
                log.warning(
                    "noeta web: %d live pages are open, the most --max-streams allows: "
                    "answering more with 503 until one closes",
                    self.most,
                )
            return False
        self._refusing = False
        self.open += 1
        return True

    def leave(self) -> None:
        self.open -= 1


class _LiveResponse(StreamingResponse):
    """A stream that gives its place back however it ends (even if never started). Cut
    by the server's own stop (uvicorn cancels what outlives its graceful seconds), it
    ends quietly: a stop asked for is not an error, and no traceback goes to the log."""

    def __init__(self, content: AsyncIterator[str], feed: LiveFeed) -> None:
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self._feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            if not self._feed.stopping:
                raise
        finally:
            self._feed.streams.leave()


# What a browser's EventSource takes for the end of a line: all three (the HTML standard).
_LINE_END = re.compile(r"\r\n|\r|\n")


def event(name: str, data: str) -> str:
    """One server-sent event; every line of `data` is its own `data:` line, whichever
    line end it had (a bare CR in a tool's output must not end the event early)."""
    lines = "".join(f"data: {line}\n" for line in _LINE_END.split(data))
    return f"event: {name}\n{lines}\n"


async def follow(site: Site, feed: LiveFeed, request: Request) -> StreamingResponse:
    task_id = request.path_params["task_id"]
    after = whole_number(request.query_params.get("after", "0"))
    if after is None:
        raise PageError(400, "after must be a whole number of 0 or more")
    if not feed.streams.enter():
        raise PageError(503, "too many live pages are open: reload this page later")
    try:
        store = await site.store()
        if await store.get_task(task_id) is None:
            raise not_found(f"task with the id {task_id!r}")
    except BaseException:
        feed.streams.leave()
        raise
    return _LiveResponse(_stream(site, feed, task_id, after), feed)


async def _stream(site: Site, feed: LiveFeed, task_id: str, after: int) -> AsyncIterator[str]:
    views, store = await site.views(), await site.store()
    context = timeline.Context()
    if after > 0:
        timeline.render(
            task_id, await views.log_page(task_id, after_seq=after - 1, limit=1), context
        )
    shown: TaskRecord | None = None
    async with (
        feed.watch(task_id) as changed,
        reply_stream.following(site, feed.replies, task_id, changed) as replies,
    ):
        yield ": following\n\n"
        while not feed.stopping:
            changed.clear()
            while replies:
                yield event("reply", replies.pop(0))
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
