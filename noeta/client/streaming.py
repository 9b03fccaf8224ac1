"""Following a task's streamed replies (ADR-0105): one feed per task in a process (one
LISTEN, one read per notice, shared by every reader of the task), and each reader's own
assembly of the rows into text and markers, checked against the log where a stream ends
out of its sight. Reading adds nothing to the worker's fenced path."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator

from noeta.client.job_streams import JobLane, JobRows
from noeta.client.stream_items import (
    StreamFinished,
    StreamItem,
    StreamRestarted,
    StreamText,
    StreamToolOutput,
)
from noeta.client.stream_outcomes import Outcome, outcome_in
from noeta.core.errors import StoreError, UnknownTask
from noeta.core.ports.reply_streams import (
    FOLLOW_RENEW_SECONDS,
    Chunk,
    Cursor,
    ReplyStreams,
)
from noeta.core.ports.store import Store

log = logging.getLogger(__name__)

READ_PAUSE_SECONDS = 0.05  # a feed reads at most this often, however many notices come
SAFETY_READ_SECONDS = 1.0  # and at least this often (a notice lost with a connection)
# How long a reader waits for a stream's final row once the log shows its call ended,
# before it takes the outcome from the log (its worker died before writing the final).
FINAL_GRACE_SECONDS = 2.0
READ_LIMIT = 1000  # rows a read brings at most; the next read brings the rest
FINISHED = ("done", "failed", "cancelled")
LISTENING_AGAIN = "*"  # what announcements yield when listening (re)starts
FINAL_SEQ = 2**31 - 1  # a final's cursor: after every row of its stream
# The kinds of rows a reader turns into items; a row of another kind (a tool call's
# arguments, which a later release may write) is passed over, its text never taken for
# the reply's, nor its offsets for a gap.
READ_KINDS = frozenset({"text", "final", "stdout", "stderr", "truncated"})


class TaskFeed:
    """One task's rows as this process read them, newest stream kept, for its readers."""

    def __init__(self, store: Store, port: ReplyStreams, task_id: str) -> None:
        self.store, self.port, self.task_id = store, port, task_id
        self.rows: list[Chunk] = []
        self.status: str | None = ""  # "" before the first read; None: no such task
        self.last_seq = 0
        self.version = 0  # counts the reads that changed something
        self.readers = 0
        self._cursor = Cursor()
        self._changed = asyncio.Condition()
        self._outcomes: dict[int, Outcome] = {}
        self._undecided: dict[int, int] = {}
        self._past: dict[int, float] = {}
        self._followed_at = -FOLLOW_RENEW_SECONDS  # call seq -> the last seq its log was read at
        self._running: asyncio.Task[None] | None = None
        self.jobs = JobRows()  # the background jobs' lane (ADR-0114)

    def start(self) -> None:
        if self._running is None:
            self._running = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running

    async def changed(self, seen: int, seconds: float | None = None) -> None:
        """Until a read after `seen` (the `version` the reader last looked at), or
        `seconds` pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(lambda: self.version != seen)

    def waited_for_final(self, call_seq: int) -> float:
        """How long since this feed first saw the log past the call at `call_seq`."""
        now = asyncio.get_running_loop().time()
        return now - self._past.setdefault(call_seq, now)

    async def outcome(self, call_seq: int) -> Outcome | None:
        """How the call at `call_seq` ended, read from the log once per process."""
        known = self._outcomes.get(call_seq)
        if known is not None or self._undecided.get(call_seq) == self.last_seq:
            return known
        known = outcome_in(await self.store.read_log(self.task_id, call_seq - 1), call_seq)
        if known is not None:
            self._outcomes[call_seq] = known
        else:
            self._undecided[call_seq] = self.last_seq
        return known

    async def reply_at(self, event_seq: int, call_seq: int, call_id: str = "") -> Outcome:
        found = await self.outcome(call_seq)
        if found is not None and found.event_seq == event_seq:
            return found
        return Outcome(event_seq, call_id=call_id)

    async def _run(self) -> None:
        notices = asyncio.Event()
        listening = asyncio.ensure_future(self._listen(notices))
        try:
            loop = asyncio.get_running_loop()
            while True:
                if loop.time() - self._followed_at >= FOLLOW_RENEW_SECONDS:
                    with contextlib.suppress(StoreError):
                        await self.port.follow(self.task_id)
                        self._followed_at = loop.time()
                notices.clear()
                await self._read()
                await asyncio.sleep(READ_PAUSE_SECONDS)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(notices.wait(), SAFETY_READ_SECONDS)
        finally:
            listening.cancel()

    async def _listen(self, notices: asyncio.Event) -> None:
        async for notice in self.port.announcements(self.task_id):
            if notice == LISTENING_AGAIN:  # the server may have restarted, and lost the
                self._followed_at = -FOLLOW_RENEW_SECONDS  # follow (unlogged): say it again
            notices.set()

    async def _read(self) -> None:
        try:
            at, (epoch, seq) = self._cursor, self.jobs.position
            after = Cursor(at.call_seq, at.attempt, at.seq, epoch, seq)
            read = await self.port.read_chunks(self.task_id, after, READ_LIMIT)
        except StoreError as error:
            log.debug("task %s: stream not read (%s); again", self.task_id, error)
            return
        async with self._changed:
            if (read.status, read.last_seq) == (self.status, self.last_seq) and not read.chunks:
                return
            self.status, self.last_seq = read.status, read.last_seq
            self.version += 1
            self.jobs.add([row for row in read.chunks if row.of_a_job])
            calls = [row for row in read.chunks if not row.of_a_job]
            if calls:
                # Rows of streams before this read's are dropped (readers of this feed
                # are past them, or are told from the log); this read's are all kept: a
                # tool's last output and final come as the next model call starts.
                stream = (calls[0].call_seq, calls[0].attempt)
                kept = [row for row in self.rows if (row.call_seq, row.attempt) >= stream]
                self.rows = kept + calls
                self._cursor = calls[-1].cursor
            self._changed.notify_all()


class StreamReader:
    """One reader's walk through a feed: rows after its cursor, as items."""

    def __init__(self, feed: TaskFeed, after: Cursor | None) -> None:
        self.feed = feed
        self.cursor = after.calls if after is not None else Cursor()
        self.jobs = JobLane(after)
        self.open: tuple[int, int] | None = None  # the stream whose text is being shown
        self.lengths: dict[int, int] = {}
        self.ended: set[int] = set()  # calls whose outcome was given
        # A cursor given names a stream the reader had open, unless it was at a final;
        # its text's length there is read from the rows up to it, if they are still there.
        self.resumed = False
        if after is not None and 0 < after.seq < FINAL_SEQ:
            self.open, self.resumed = (after.call_seq, after.attempt), True
        # The task's last seq when this reader first saw it unfinished (None: not yet).
        self.attached_at: int | None = None

    async def items(self) -> AsyncGenerator[StreamItem, None]:
        feed = self.feed
        while True:
            seen = feed.version
            if feed.status is None:
                raise UnknownTask(feed.task_id)
            if self.attached_at is None and feed.status not in FINISHED and feed.status:
                self.attached_at = feed.last_seq
            for row in [row for row in feed.rows if row.cursor > self.cursor]:
                async for item in self._take(row):
                    yield item
            for item in self.jobs.take(feed.jobs, self.cursor):
                yield item
            if self.jobs.running:
                await feed.jobs.read_ends(feed.store, feed.task_id, feed.last_seq)
                for item in self.jobs.settle(feed.jobs, self.cursor):
                    yield item
            timeout = None
            if self.open is not None and feed.last_seq > self.open[0]:
                waited = feed.waited_for_final(self.open[0])
                if waited >= FINAL_GRACE_SECONDS:
                    async for item in self._settle_open(None):
                        yield item
                else:  # its final row is on its way, most likely: read on a little
                    timeout = FINAL_GRACE_SECONDS - waited
            if feed.status in FINISHED and self.open is None and not self._unread():
                for item in await self._unseen_replies():
                    yield item
                yield StreamFinished(feed.status)
                return
            await feed.changed(seen, timeout)

    async def _unseen_replies(self) -> list[StreamItem]:
        """The outcomes of the model calls that ended while this reader was attached and
        that no row showed it. A worker writes a reply's final row after the task's
        finish is acknowledged (ADR-0105), so a reader that saw none of the last call's
        rows (its stream unwritten, or emptied by a server crash) and reads between the
        two, or after a worker that died between them, is given the reply from the log."""
        if self.attached_at is None:
            return []  # came to a finished task: what its rows still say, nothing more
        feed = self.feed
        log = await feed.store.read_log(feed.task_id, max(self.cursor.call_seq - 1, 0))
        items: list[StreamItem] = []
        for at, stored in enumerate(log):
            call_seq = stored.seq
            if stored.type != "ModelCalled" or call_seq in self.ended:
                continue
            outcome = outcome_in(log[at:], call_seq)
            end = Cursor(call_seq, FINAL_SEQ, FINAL_SEQ)
            if outcome is None or outcome.event_seq <= self.attached_at or end <= self.cursor:
                continue
            self.ended.add(call_seq)
            self.cursor = end
            items.append(outcome.item(self.jobs.mark(end), call_seq))
        return items

    def _unread(self) -> bool:
        return any(row.cursor > self.cursor for row in self.feed.rows)

    async def _take(self, row: Chunk) -> AsyncGenerator[StreamItem, None]:
        if row.kind not in READ_KINDS:  # a kind this reader does not know (yet): passed
            self.cursor = row.cursor
            return
        key = (row.call_seq, row.attempt)
        if self.resumed and key == self.open and row.kind != "final":
            self.lengths = self._lengths_at_cursor()  # before the cursor moves past it
            if row.seq == self.cursor.seq + 1:  # the very next row: its text joins
                self.lengths[row.block] = row.char_offset
        self.resumed = False
        if self.open is not None and key != self.open:
            async for item in self._settle_open(row):
                yield item
        self.cursor = row.cursor
        if row.call_seq in self.ended:
            return  # its outcome was given from the log already
        if row.kind == "final":
            self.ended.add(row.call_seq)
            self.open = None
            self.cursor = Cursor(row.call_seq, row.attempt, FINAL_SEQ)
            outcome = await self.feed.reply_at(int(row.data), row.call_seq, row.call_id)
            yield outcome.item(self.jobs.mark(self.cursor), row.call_seq)
            return
        if self.open is None:
            self.open, self.lengths = key, {}
        length = self.lengths.get(row.block, 0)
        text = row.data
        if row.char_offset > length:  # rows lost between (the database restarted)
            # Resuming after the marker gives this row's text: its cursor is the row's
            # previous one (the next row after it joins: no marker again).
            before = Cursor(row.call_seq, row.attempt, row.seq - 1)
            yield StreamRestarted(row.call_seq, row.attempt, True, self.jobs.mark(before))
        elif row.char_offset < length:  # written twice: only what is new
            text = text[length - row.char_offset :]
        self.lengths[row.block] = row.char_offset + len(row.data)
        if not text:
            return
        if row.kind == "text":
            yield StreamText(text, row.block, self.jobs.mark(row.cursor))
        elif row.kind in ("stdout", "stderr", "truncated"):
            at = self.jobs.mark(row.cursor)
            yield StreamToolOutput(row.call_id, row.call_seq, row.kind, text, at)

    def _lengths_at_cursor(self) -> dict[int, int]:
        """Each block's length at the cursor of a reader come back, from the rows up to
        it; none if its rows are gone (the next row's offset then says text was lost)."""
        lengths: dict[int, int] = {}
        for row in self.feed.rows:
            if (row.call_seq, row.attempt) == self.open and row.cursor <= self.cursor:
                end = row.char_offset + len(row.data) if row.kind == "text" else 0
                lengths[row.block] = max(lengths.get(row.block, 0), end)
        return lengths

    async def _settle_open(self, next_row: Chunk | None) -> AsyncGenerator[StreamItem, None]:
        """The open stream ended out of sight (its rows gone, or a later stream begun):
        its reply from the log, or a restart; with no row to go on and no outcome in the
        log yet, nothing (the reader waits)."""
        assert self.open is not None
        call_seq, attempt = self.open
        outcome = await self.feed.outcome(call_seq)
        retried = next_row is not None and next_row.call_seq == call_seq
        if outcome is not None and outcome.event_seq and not retried:
            self.ended.add(call_seq)
            self.open = None
            self.cursor = max(self.cursor, Cursor(call_seq, attempt, FINAL_SEQ))
            yield outcome.item(self.jobs.mark(self.cursor), call_seq)
        elif next_row is not None:
            self.open, self.lengths = None, {}
            at = self.jobs.mark(self.cursor)
            yield StreamRestarted(next_row.call_seq, next_row.attempt, False, at)
        elif outcome is not None:  # sent again: its rows will come, after the marker
            self.ended.add(call_seq)
            self.open, self.lengths = None, {}
            self.cursor = Cursor(outcome.next_call)
            yield StreamRestarted(outcome.next_call, 1, False, self.jobs.mark(self.cursor))


class Feeds:
    """A client's feeds, one per task followed, shared by its readers."""

    def __init__(self) -> None:
        self._feeds: dict[str, TaskFeed] = {}

    async def stream(
        self, store: Store, port: ReplyStreams, task_id: str, after: Cursor | None
    ) -> AsyncGenerator[StreamItem, None]:
        feed = self._feeds.get(task_id)
        if feed is None:
            feed = self._feeds[task_id] = TaskFeed(store, port, task_id)
            feed.start()
        feed.readers += 1
        try:
            async for item in StreamReader(feed, after).items():
                yield item
        finally:
            feed.readers -= 1
            if feed.readers == 0 and self._feeds.get(task_id) is feed:
                del self._feeds[task_id]
                await feed.stop()

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()
