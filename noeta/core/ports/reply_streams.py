"""The ReplyStreams port beside Store (ADR-0105): a model reply's text as it streams, kept
beside the log for the readers that follow a task, written off the fence and only for a
task someone follows. The values here are what crosses it; the log stays the truth."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

# A reply's `text`; a tool call's `stdout` and `stderr` and, once its output passed the
# stored result's bound, `truncated` (ADR-0114); the `final` of either.
ChunkKind = Literal["text", "final", "stdout", "stderr", "truncated"]

# How long a reader's follow holds without being renewed, and how often it is renewed.
FOLLOW_SECONDS = 60.0
FOLLOW_RENEW_SECONDS = 20.0


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """A place in a task's streams: rows after it are new. Streams are ordered by the
    ModelCalled they answer, then by the provider's retry within it."""

    call_seq: int = 0
    attempt: int = 0
    seq: int = 0
    # Where the reader is in the output of the task's background jobs (ADR-0114): a lane
    # of its own, rows keyed (0, the claim's epoch, n), since jobs run beside the calls.
    job_epoch: int = 0
    job_seq: int = 0

    def __str__(self) -> str:
        calls = f"{self.call_seq}.{self.attempt}.{self.seq}"
        return f"{calls}.{self.job_epoch}.{self.job_seq}" if self.job_epoch else calls

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The form `str` gives; ValueError saying what it wants otherwise."""
        parts = text.split(".")
        if len(parts) not in (3, 5) or not all(part.isdigit() for part in parts):
            wants = "three numbers a.b.c (or five, a.b.c.d.e, with background jobs)"
            raise ValueError(f"a stream cursor is {wants}, not {text[:40]!r}")
        return cls(*(int(part) for part in parts))

    @property
    def calls(self) -> Cursor:
        """The place in the calls' streams alone."""
        return Cursor(self.call_seq, self.attempt, self.seq)

    @property
    def jobs(self) -> tuple[int, int]:
        return (self.job_epoch, self.job_seq)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One row of a stream. `text`: more of block `block`, whose length before it was
    `char_offset`. `stdout`/`stderr`: the same for a tool call's output (block 0 and 1),
    `call_id` naming the call. `final`: the reply or result is in the log; `data` is its
    event's seq."""

    call_seq: int
    attempt: int
    seq: int
    kind: ChunkKind
    block: int
    char_offset: int
    data: str
    call_id: str = ""  # a tool call's id; "" for a reply's stream

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.call_seq, self.attempt, self.seq)

    @property
    def of_a_job(self) -> bool:
        """A background job's output: the jobs' lane, (0, epoch, n)."""
        return self.call_seq == 0


@dataclass(frozen=True, slots=True)
class ChunksRead:
    """One read: the task's status and last seq (None: no such task), and its rows past
    the cursor, in order."""

    status: str | None
    last_seq: int
    chunks: tuple[Chunk, ...]


class ReplyStreams(Protocol):
    """The store's side of streams. Every method is one statement; none touches a task's
    row or log, and none runs inside a fenced append."""

    async def followed(self, *, clearing: bool = False) -> Mapping[str, float]:
        """The tasks followed now, with the seconds their follow has left; `clearing`:
        and remove the follows long expired, with their tasks' rows (a write: rare)."""
        ...

    async def write_chunks(self, task_id: str, chunks: Sequence[Chunk], *, first: bool) -> None:
        """Insert the rows, text and final (one already there is kept: a flush whose
        outcome was unknown is sent again) and announce them. `first`: the stream's
        first flush, which also removes the task's rows of older streams (a dead
        worker's, a retried attempt's)."""
        ...

    async def remove_text(self, task_id: str, call_seq: int, call_id: str = "") -> None:
        """The call's outcome is in the log: its text rows go (a final row stays). A
        job's (call seq 0): the rows of job `call_id`."""
        ...

    async def follow(self, task_id: str) -> None:
        """Say a reader follows the task, for `FOLLOW_SECONDS` from now, and announce it
        to the workers' `follow_announcements`."""
        ...

    def follow_announcements(self) -> AsyncGenerator[str, None]:
        """An item each time a reader follows a task ("*" when listening (re)starts)."""
        ...

    async def read_chunks(self, task_id: str, after: Cursor, limit: int) -> ChunksRead:
        """The task's status and last seq, and up to `limit` rows after the cursor in the
        calls' streams, then up to `limit` after it in the jobs' lane."""
        ...

    def announcements(self, task_id: str) -> AsyncGenerator[str, None]:
        """An item each time the task's streams may have new rows ("*" when listening
        (re)starts: look now); reconnects after a lost connection."""
        ...
