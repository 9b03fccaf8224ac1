"""A tool call's output written beside the log as it is written (ADR-0114): Bash's stdout
and stderr, through the same writer, table and readers as a reply's text (ADR-0105).

The tool's hook runs on the event loop and only keeps what it is given; the flusher
scrubs it off the loop, with what it held back of the text before (a secret split across
two writes is found whole), and writes it only for a task someone follows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from noeta.core.errors import NoetaError
from noeta.core.ports.reply_streams import Chunk, ChunkKind
from noeta.core.ports.tool import OutputName
from noeta.core.runner.reply_streams import ReplyStream, StreamAttempt, StreamWriter
from noeta.observability import tracing
from noeta.redaction import ScrubWindow

log = logging.getLogger(__name__)

# A stream's blocks: each has its own offsets; `truncated` is a note, once.
KINDS: tuple[ChunkKind, ChunkKind, ChunkKind] = ("stdout", "stderr", "truncated")
BLOCKS: dict[OutputName, int] = {"stdout": 0, "stderr": 1, "truncated": 2}
TRUNCATED_NOTE = (
    "[the output passed the bound of the stored result: no more of it streams; "
    "the result keeps its end]"
)


def open_tool_stream(
    writer: StreamWriter | None, task_id: str, call_seq: int, call_id: str
) -> ToolStream | None:
    """The stream of the call whose ToolStarted is at `call_seq` (None: no streams)."""
    return None if writer is None else ToolStream(writer, task_id, call_seq, call_id)


class ToolStream:
    """A call's stream, its `ToolOutputStream` made at the call's first output (ADR-0142):
    most calls (a function tool's) write none, and a stream that heard nothing ends
    without a row, a task or a wake-up, so making one for each call was work for
    nothing. `output`, `landed` and `abandon` as the stream's."""

    __slots__ = ("_ended", "_loop", "_loop_thread", "_made", "_opened")

    def __init__(self, writer: StreamWriter, task_id: str, call_seq: int, call_id: str) -> None:
        self._opened: ToolOutputStream | None = None
        self._made = (writer, task_id, call_seq, call_id)
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._ended = False

    def output(self, name: OutputName, text: str) -> None:
        """More output: the stream is made on the loop at the first (a tool run in a
        thread may call this too)."""
        opened = self._opened
        if opened is None:
            if threading.get_ident() != self._loop_thread:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads
                    self._loop.call_soon_threadsafe(self.output, name, text)
                return
            if self._ended:  # landed or abandoned before any output: nothing streams
                return
            opened = self._opened = ToolOutputStream(*self._made)
        opened.output(name, text)

    def landed(self, event_seq: int) -> None:
        self._ended = True
        if self._opened is not None:
            self._opened.landed(event_seq)

    def abandon(self) -> None:
        self._ended = True
        if self._opened is not None:
            self._opened.abandon()


class ToolOutputStream(ReplyStream):
    """One tool call's stream: `output` is the tool's hook (ToolContext.on_output);
    `landed` ends it once the call's result is in the log; `abandon` when the claim went.
    Bounded by the tool: Bash hands over only the head its result keeps, then one
    "truncated"."""

    def __init__(
        self, writer: StreamWriter, task_id: str, call_seq: int, call_id: str, attempt: int = 1
    ) -> None:
        super().__init__(writer, task_id, call_seq, attempt)
        self.call_id = call_id
        self._raw: list[tuple[int, str]] = []  # (block, text) not scrubbed yet
        self._windows = (ScrubWindow(tracing.scrubber()), ScrubWindow(tracing.scrubber()))
        self._heard = False
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def output(self, name: OutputName, text: str) -> None:
        """More output: kept, nothing else. A tool run in a thread may call it too."""
        if threading.get_ident() != self._loop_thread:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads
                self._loop.call_soon_threadsafe(self.output, name, text)
            return
        if self._end is not None:
            return
        block = BLOCKS[name]
        if name == "truncated":
            text = TRUNCATED_NOTE
        if not text:
            return
        self._heard = True
        if self._raw and self._raw[-1][0] == block:
            self._raw[-1] = (block, self._raw[-1][1] + text)
        else:
            self._raw.append((block, text))
        self._wake.set()
        if self._flusher is None:
            self._flusher = self._writer.start(self, asyncio.ensure_future(self._flush_loop()))

    def wake(self) -> None:
        if self._raw or self._attempt.pending:
            self._wake.set()

    def _kind(self, block: int) -> ChunkKind:
        return KINDS[block]

    async def _flush(self, final: Chunk | None = None) -> None:
        raw, self._raw = self._raw, []
        release = self._end is not None  # the output ended
        if raw or release:
            # Off the loop: the output is the model's (hostile) and may be 30,000 chars.
            scrubbed = await asyncio.to_thread(self._scrub, raw, release)
            pending = self._attempt.pending
            for block, text in scrubbed:
                if pending and pending[-1][0] == block:
                    pending[-1] = (block, pending[-1][1] + text)
                else:
                    pending.append((block, text))
        await super()._flush(final)

    def _scrub(self, raw: list[tuple[int, str]], release: bool) -> list[tuple[int, str]]:
        scrubbed = []
        for block, text in raw:
            if block < len(self._windows):
                scrubbed.append((block, self._windows[block].take(text)))
                continue
            scrubbed += self._released()  # truncated: no more output comes to the stream
            scrubbed.append((block, text))
        if release:
            scrubbed += self._released()
        return [(block, text) for block, text in scrubbed if text]

    def _released(self) -> list[tuple[int, str]]:
        """What the windows held back, scrubbed: the output ended."""
        return [
            (block, window.take("", release=True)) for block, window in enumerate(self._windows)
        ]

    async def _write_end(self, final: Chunk | None) -> None:
        """As a reply's, and also when all the output so far was held back (a last word
        with no space after it): a follower gets it with the final."""
        if not self._written and self._heard:
            with contextlib.suppress(NoetaError, OSError):
                self._written = await self._writer.is_followed(self.task_id)
        await super()._write_end(final)


def open_job_stream(
    writer: StreamWriter | None, task_id: str, epoch: int, job_id: str
) -> JobOutputStream | None:
    """The stream of background job `job_id`, run under the task's claim of `epoch`."""
    return None if writer is None else JobOutputStream(writer, task_id, epoch, job_id)


class JobOutputStream(ToolOutputStream):
    """A background job's output (ADR-0114). It runs beside the task's calls, so its rows
    go to the jobs' lane: call seq 0, attempt the claim's epoch, seqs shared by the jobs
    of the claim. No final row: the job's result reaches the log through the inbox, taken
    by whichever claim comes next; readers read it there. `end` when the job ended."""

    def __init__(self, writer: StreamWriter, task_id: str, epoch: int, job_id: str) -> None:
        super().__init__(writer, task_id, 0, job_id, epoch)

    def end(self) -> None:
        self._finish(None)

    def _first_seq(self, current: StreamAttempt, count: int) -> int:
        return self._writer.job_seqs(self.task_id, current.number, count)
