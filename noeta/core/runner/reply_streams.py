"""A model reply's text written beside the log as it streams, for the readers that follow
its task (ADR-0105): deltas gathered in memory on the event loop, flushed by a task of
their own over the store's pool, never inside a fenced append and never waited for.

A preview never fails a call: a failed flush is kept and sent again (same rows), and a
stream nobody follows writes nothing (the worker asks who follows at most once a second);
in a worker that listens for follows, it starts no flusher either until one comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from noeta.core.errors import NoetaError
from noeta.core.ports.model import ReplyDelta, TextDelta
from noeta.core.ports.reply_streams import Chunk, ChunkKind, ReplyStreams

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.025  # at most 40 flushes a second per stream; the first delta at once
FOLLOWED_SECONDS = 1.0  # how old the worker's list of followed tasks may be
CLEARING_SECONDS = 60.0  # how often a worker's question also clears expired follows
RETRY_SECONDS = 1.0  # after a failed flush
REMOVE_AFTER_SECONDS = 2.0  # a landed stream's text stays this long for its live readers
ORDER_SECONDS = 5.0  # how long a stream's first flush waits for the end of the one before
MAX_CHARS = 1 << 20  # a stream's bound; past it the preview stops, the final has it all


def printable(text: str) -> str:
    """What PostgreSQL's text takes, one character for one (offsets stay true): NUL and
    lone surrogates become U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


class StreamWriter:
    """One per worker process: its streams, and which tasks are followed.

    A worker calls `listen()` beside its loop: the follows are then read once at the
    start and again only when a reader announces one (a task nobody follows costs no
    statement). Without it (a test's runner, `noeta run`), a stream asks the store at
    most once a second while it has text."""

    def __init__(self, port: ReplyStreams, clock: Callable[[], float] = time.monotonic) -> None:
        self.port = port
        self._clock = clock
        self._followed: dict[str, float] = {}  # task id -> when its follow ends (clock)
        self._followed_at = -FOLLOWED_SECONDS
        self._cleared_at = clock()  # the first question only reads
        self._asking: asyncio.Task[bool] | None = None
        self._listening = False
        self._streams: set[ReplyStream] = set()  # open, woken when the follows change
        self._flushers: set[asyncio.Task[None]] = set()  # held: a loop keeps tasks weakly
        self._job_seqs: dict[tuple[str, int], int] = {}  # (task, epoch) -> next seq
        self._again: asyncio.TimerHandle | None = None  # the streams' next question

    def job_seqs(self, task_id: str, epoch: int, count: int) -> int:
        """The first of `count` seqs in the jobs' lane of the task's claim of `epoch`: its
        jobs write side by side, one seq after another (ADR-0114)."""
        key = (task_id, epoch)
        first = self._job_seqs.get(key, 1)
        self._job_seqs[key] = first + count
        return first

    def open(self, task_id: str, call_seq: int) -> ReplyStream:
        """The stream of the ModelCalled at `call_seq`."""
        return ReplyStream(self, task_id, call_seq)

    def unheard(self, task_id: str) -> bool:
        """Nobody follows `task_id`, as this listening worker knows now: a stream of it
        starts no flusher, and is woken by the follow that comes (`_ask`). Not listening,
        only a question to the store can say."""
        if not self._listening:
            return False
        ends = self._followed.get(task_id)
        return ends is None or ends <= self._clock()

    def hold(self, stream: ReplyStream) -> None:
        """A stream without a flusher yet, to wake if its task becomes followed."""
        self._streams.add(stream)

    def release(self, stream: ReplyStream) -> None:
        self._streams.discard(stream)

    def start(self, stream: ReplyStream, flushing: asyncio.Task[None]) -> asyncio.Task[None]:
        self._streams.add(stream)
        self._flushers.add(flushing)

        def done(task: asyncio.Task[None]) -> None:
            self._flushers.discard(task)
            self._streams.discard(stream)

        flushing.add_done_callback(done)
        return flushing

    async def ended_before(self, stream: ReplyStream) -> None:
        """Until the task's earlier streams wrote their ends (a tool's output ends while
        the next model call starts): a new stream's first flush clears their rows, and a
        reader must read an end before the stream after it. Bounded: a preview waits
        for nothing long."""
        ending = [
            other.end_written.wait()
            for other in self._streams
            if other is not stream and other.task_id == stream.task_id and other.ended
        ]
        if ending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*ending), ORDER_SECONDS)

    def ask_again(self) -> None:
        """A stream holds text that nobody follows, as far as this writer knows. Listening,
        the follow that comes wakes it (`_ask`); not listening, only a question can tell:
        the streams are woken to ask again in a second while they hold text (a reader may
        come after the output went quiet, or the answer may have failed)."""
        if self._listening or self._again is not None:
            return

        def again() -> None:
            self._again = None
            for stream in list(self._streams):
                stream.wake()

        self._again = asyncio.get_running_loop().call_later(FOLLOWED_SECONDS, again)

    async def drained(self) -> None:
        """Until every stream's writes are done (their text removed, after a landing)."""
        while self._flushers:
            await asyncio.gather(*self._flushers, return_exceptions=True)

    async def listen(self) -> None:
        """Keep the follows current from the readers' announcements, until cancelled."""
        changed = asyncio.Event()

        async def hear() -> None:
            async for _ in self.port.follow_announcements():
                self._listening = True  # "*" first: listening, so look now
                changed.set()

        hearing = asyncio.ensure_future(hear())
        try:
            while True:
                await changed.wait()
                changed.clear()
                if not await self._ask():  # unanswered: ask again, not at the next follow
                    await asyncio.sleep(RETRY_SECONDS)
                    changed.set()
                await asyncio.sleep(FOLLOWED_SECONDS / 4)  # a burst of follows, one read
        finally:
            self._listening = False
            hearing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hearing

    async def is_followed(self, task_id: str) -> bool:
        if not self._listening and self._clock() - self._followed_at >= FOLLOWED_SECONDS:
            if self._asking is None:  # one question at a time for all the streams
                self._asking = asyncio.ensure_future(self._ask())
            asking = self._asking
            try:
                await asyncio.shield(asking)
            finally:
                if self._asking is asking:
                    self._asking = None
        ends = self._followed.get(task_id)
        return ends is not None and ends > self._clock()

    async def _ask(self) -> bool:
        """Who follows, read; False if the store did not answer."""
        clearing = self._clock() - self._cleared_at >= CLEARING_SECONDS
        if clearing:
            self._cleared_at = self._clock()
        try:
            found = await self.port.followed(clearing=clearing)
        except (NoetaError, OSError) as error:
            log.debug("who follows streams not read (%s)", error)
            return False
        now = self._clock()
        self._followed = {task_id: now + seconds for task_id, seconds in found.items()}
        self._followed_at = now
        for stream in list(self._streams):
            if stream.task_id in self._followed:
                stream.wake()  # text held while nobody followed goes now
        return True


@dataclass
class StreamAttempt:
    """The provider attempt streaming now: what it sent that is not written yet."""

    number: int
    pending: list[tuple[int, str]] = field(default_factory=list)  # (block, text)
    lengths: dict[int, int] = field(default_factory=dict)  # each block's length written
    next_seq: int = 1
    chars: int = 0


class ReplyStream:
    """One model call's stream. `delta` is the provider's hook (on the event loop, no I/O);
    `landed`/`failed` end it once its outcome is in the log; `abandon` when the claim went."""

    call_id = ""  # a tool call's stream names its call (tool_streams.py)

    def __init__(self, writer: StreamWriter, task_id: str, call_seq: int, attempt: int = 1) -> None:
        self._writer = writer
        self.task_id = task_id
        self.call_seq = call_seq
        self._attempt = StreamAttempt(attempt)
        self._written = False  # any row of this call's streams
        self._first = True  # the next write is the attempt's first
        self._wake = asyncio.Event()
        self._end: tuple[Chunk | None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self.end_written = asyncio.Event()  # its end's rows are written (or never will be)

    @property
    def ended(self) -> bool:
        return self._end is not None

    def delta(self, attempt: int, delta: ReplyDelta) -> None:
        if attempt != self._attempt.number:  # a retry: the earlier attempt's text is void
            self._attempt = StreamAttempt(attempt)
            self._first = True
        if not isinstance(delta, TextDelta) or not delta.text:
            return
        current = self._attempt
        if current.chars >= MAX_CHARS:
            return
        text = printable(delta.text[: MAX_CHARS - current.chars])
        current.chars += len(text)
        if current.pending and current.pending[-1][0] == delta.block:
            block, before = current.pending[-1]
            current.pending[-1] = (block, before + text)
        else:
            current.pending.append((delta.block, text))
        self._wake.set()
        if self._flusher is None:
            self._start_flushing()

    def wake(self) -> None:
        if self._attempt.pending:
            self._wake.set()
            if self._flusher is None and self._end is None:
                self._start_flushing()

    def _start_flushing(self) -> None:
        """The flusher, unless nobody follows the task: then the text is only kept (a
        reply nobody reads costs no task, no timer), and a follow that comes wakes it."""
        if self._writer.unheard(self.task_id):
            self._writer.hold(self)
            return
        self._flusher = self._writer.start(self, asyncio.ensure_future(self._flush_loop()))

    def landed(self, event_seq: int) -> None:
        """The reply is the log's event `event_seq`: readers are told, and given it."""
        self._finish(Chunk(self.call_seq, 0, 0, "final", 0, 0, str(event_seq), self.call_id))

    def failed(self) -> None:
        """The call failed (its ModelFailed is in the log): its rows go."""
        self._finish(None)

    def abandon(self) -> None:
        """The claim is gone: write nothing more; the next stream of the task clears up.
        Nothing once the stream ended (its end is written still)."""
        if self._flusher is None:
            self._writer.release(self)
        elif self._end is None:
            self._flusher.cancel()

    def _finish(self, final: Chunk | None) -> None:
        self._end = (final,)
        self._wake.set()
        if self._flusher is None and self._written:
            self._flusher = self._writer.start(self, asyncio.ensure_future(self._flush_loop()))
        elif self._flusher is None:  # nothing was written: nothing to end
            self._writer.release(self)
            self.end_written.set()

    def _kind(self, block: int) -> ChunkKind:
        return "text"

    def _first_seq(self, current: StreamAttempt, count: int) -> int:
        """The seq of the first of `count` rows about to be written (sent again after a
        failed write: the same seqs)."""
        return current.next_seq

    async def _flush_loop(self) -> None:
        try:
            await self._flushing()
        finally:
            self.end_written.set()

    async def _flushing(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._end is not None:
                await self._write_end(self._end[0])
                return
            try:
                if await self._writer.is_followed(self.task_id):
                    await self._flush()
                else:
                    self._writer.ask_again()
            except (NoetaError, OSError) as error:
                log.debug("task %s: a streamed chunk not written (%s)", self.task_id, error)
                await asyncio.sleep(RETRY_SECONDS)
                self._wake.set()
                continue
            await asyncio.sleep(FLUSH_SECONDS)

    async def _flush(self, final: Chunk | None = None) -> None:
        current = self._attempt
        # Taken out whole: deltas that come during the write start a new entry.
        taken, current.pending = current.pending, []
        if not taken and final is None:
            return
        chunks = []
        lengths = dict(current.lengths)
        first_seq = self._first_seq(current, len(taken) + (final is not None))
        for offset, (block, text) in enumerate(taken):
            before = lengths.get(block, 0)
            chunks.append(Chunk(self.call_seq, current.number, first_seq + offset,
                                self._kind(block), block, before, text, self.call_id))  # fmt: skip
            lengths[block] = before + len(text)
        if final is not None:
            seq = first_seq + len(chunks)
            chunks.append(Chunk(self.call_seq, current.number, seq, "final", 0, 0, final.data,
                                self.call_id))  # fmt: skip
        if self._first:
            await self._writer.ended_before(self)
        try:
            await self._writer.port.write_chunks(self.task_id, chunks, first=self._first)
        except BaseException:
            current.pending[:0] = taken  # sent again, as the same rows, next time
            raise
        if self._attempt is current:  # else a retry replaced the attempt meanwhile
            current.lengths = lengths
            current.next_seq += len(chunks)
            self._first = False
        self._written = True

    async def _write_end(self, final: Chunk | None) -> None:
        """The rest of the text and the final, at once; the text removed a little later
        (readers that keep up assemble all of it; a later one gets the final's)."""
        if not self._written:
            return  # nobody was shown anything: readers find the outcome in the log
        with contextlib.suppress(NoetaError, OSError):
            try:
                await self._flush(final)
            finally:
                self.end_written.set()
            await asyncio.sleep(REMOVE_AFTER_SECONDS)
            await self._writer.port.remove_text(self.task_id, self.call_seq, self.call_id)
