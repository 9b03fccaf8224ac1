"""The read-only views an operator's page needs beside the `Store` port (`noeta web`):
the task list a keyset page at a time, capped counts, the count of one filter, a log page
that leaves large values in the store, one event's raw text in chunks, the claims held now.

Both stores implement `StoreViews`; nothing here writes, and nothing a worker calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from noeta.core.errors import ConfigError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store_values import StoredEvent, TaskRecord, TaskStatus

# The most a page or a count asks the store for: a page is read whole, a count walks
# this many index entries at most (a million done tasks are "10000+", not a scan).
MAX_PAGE = 1000
COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class TaskCursor:
    """Where a page of the task list ended: the next page starts strictly before it."""

    created_at: datetime
    id: str


@dataclass(frozen=True, slots=True)
class StatusCount:
    """How many tasks of one queue have one status, counted up to the cap (`capped`: the
    status has at least the cap's number of tasks, so its queues' numbers are partial)."""

    status: TaskStatus
    queue: str
    count: int
    capped: bool


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event of a log page. `data` is None when the event's text is longer than the
    page asked to see whole: then only `preview` (its first characters) left the store."""

    seq: int
    type: str
    created_at: datetime
    epoch: int
    owner: str | None
    size: int  # characters of the stored (ASCII JSON) text
    data: JSONValue | None
    preview: str


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """A task some worker holds now (running or holding), as its row says."""

    task_id: str
    queue: str
    status: TaskStatus
    owner: str
    epoch: int
    lease_until: datetime
    updated_at: datetime


@runtime_checkable
class StoreViews(Protocol):
    async def task_page(
        self,
        *,
        statuses: Sequence[TaskStatus] = (),
        queue: str | None = None,
        text: str | None = None,
        before: TaskCursor | None = None,
        limit: int = 50,
        finished_since: datetime | None = None,
    ) -> list[TaskRecord]:
        """Tasks newest first (by creation, then id, both descending), strictly before
        `before`. `statuses` empty: any. `text`: a part of the id or of the prompt.
        `finished_since`: only tasks that finished (done, failed, cancelled) then or later."""
        ...

    async def count_tasks(
        self,
        *,
        statuses: Sequence[TaskStatus] = (),
        queue: str | None = None,
        text: str | None = None,
        finished_since: datetime | None = None,
        cap: int | None = None,
    ) -> int:
        """How many tasks `task_page` would walk with these filters, in one statement;
        with `cap`, counted up to `cap` (a bulk action's button), else exactly."""
        ...

    async def task_counts(self, cap: int = COUNT_CAP) -> list[StatusCount]:
        """Tasks per (status, queue), each status counted up to `cap` rows."""
        ...

    async def log_openings(
        self, task_ids: Sequence[str], through_seq: int
    ) -> dict[str, list[StoredEvent]]:
        """The first events (seq 1 to `through_seq`) of each of `task_ids` that has a log,
        in one statement: a bulk retry's batch of jobs is read at once."""
        ...

    async def log_page(
        self, task_id: str, *, after_seq: int = 0, limit: int = 200, inline_chars: int = 65536
    ) -> list[LogEntry]:
        """Up to `limit` events after `after_seq`, in order; an event longer than
        `inline_chars` comes as a preview only."""
        ...

    async def event_text(
        self, task_id: str, seq: int, *, offset: int = 0, length: int = 1 << 20
    ) -> tuple[str, int] | None:
        """Characters [offset, offset+length) of one event's stored text, and its total
        length; None if the task has no such event."""
        ...

    async def held_claims(self, limit: int = MAX_PAGE) -> list[HeldClaim]:
        """Tasks held now (running, holding) by owner, then id."""
        ...

    async def has_subtasks(self, task_id: str) -> bool:
        """Whether the task's log launched a subtask (a task page links its subtasks then)."""
        ...


def check_page(limit: int) -> int:
    if isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"a page holds 1 to {MAX_PAGE} rows, not {limit}")
    return limit


def counted(rows: Sequence[tuple[str, str, int]], cap: int) -> list[StatusCount]:
    """(status, queue, count) rows, each status counted over at most `cap` of its tasks."""
    totals: dict[str, int] = {}
    for status, _, count in rows:
        totals[status] = totals.get(status, 0) + count
    return [
        StatusCount(TaskStatus(status), queue, count, totals[status] >= cap)
        for status, queue, count in rows
    ]


def text_pattern(text: str) -> str:
    """A LIKE pattern (escape `\\`) for `text` anywhere, its wildcards taken literally."""
    return _anywhere(text)


def _anywhere(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
