"""The read-only views an operator's page needs beside the `Store` port (`noeta web`):
the task list a keyset page at a time, capped counts, the count of one filter, a log page
that leaves large values in the store, one event's raw text in chunks, the claims held now.

Both stores implement `StoreViews`; nothing here writes, and nothing a worker calls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from noeta.core.errors import ConfigError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store_values import StoredEvent, TaskRecord, TaskStatus, check_key

# The most a page or a count asks the store for: a page is read whole, a count walks
# this many index entries at most (a million done tasks are "10000+", not a scan).
MAX_PAGE = 1000
COUNT_CAP = 10_000
# A text search's length: the trigram index serves three characters or more; a shorter
# text has no trigram, and one found in few tasks is a scan of the whole index table
# (551 ms at a million, ADR-0112), so it is refused with the filters that do serve it.
# A long one is not a search someone typed.
MIN_SEARCH_CHARS = 3
MAX_SEARCH_CHARS = 200
# The failures one grouping reads, the newest: by default (two index probes each; about
# 1.5 s for 10,000 on a loaded 2-core machine, bench/web.py), and at most when asked.
FAILURES_GROUPED = 2_000
MAX_FAILURES = 100_000
# The events a task's ledger reads (noeta.core.rules.ledger), and nothing else of a log.
LEDGER_EVENT_TYPES = ("TaskCreated", "ModelCalled", "ModelReplied", "ModelCallCut", "ModelFailed")
MAX_LEDGER_TASKS = 5_000  # the tasks one `ledger_events` reads


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


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """What the task list shows of a task beyond its row, read from its log's opening and
    end: `kind` "agent" or the job's function name; `input` the prompt or the job's
    arguments (JSON), cut; `error` a failed or cancelled task's error, cut; `started_at`
    when its first claim wrote; `attempts` a job's runs of its function, an agent task's
    claims."""

    task_id: str
    status: TaskStatus
    kind: str
    input: str
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int

    @property
    def error_kind(self) -> str:
        """The kind of its error: "cancelled" for a cancelled task, "" if none is told."""
        return error_kind(self.error, cancelled=self.status is TaskStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """The task list's filters beyond status, queue and text: a job's function name, an
    error kind (`error_kind`), tasks created at or after a moment."""

    job: str | None = None
    error_kind: str | None = None
    created_since: datetime | None = None


NO_FILTER = TaskFilter()
AGENT = "agent"  # the kind of a task that is not a job
CANCELLED = "cancelled"  # the error kind of every cancelled task
# An error's kind: its leading name (llm_error, internal_error), or a job's exception
# type ("add failed: ValueError: …", and as a job that used up its attempts ends: "add
# failed after 3 attempt(s): ValueError: …"). The stores' error filters match the same
# shapes, with this between the job's name and the kind (a regular expression).
JOB_FAILED = r" failed(?: after [0-9]+ attempt\(s\))?: "
_ERROR_KIND = re.compile(rf"(?:\S+{JOB_FAILED})?([A-Za-z_][\w.]*): ")
ERROR_KIND_NAME = re.compile(r"[A-Za-z_][\w.]*")


def error_kind(error: str, *, cancelled: bool = False) -> str:
    """The kind of a finished task's `error` ("" if it has none that can be told)."""
    if cancelled:
        return CANCELLED
    found = _ERROR_KIND.match(error)
    return found.group(1) if found else ""


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Failed tasks that share a cause: their error's `error_kind` ("" if none can be
    told), their `kind` ("agent" or the job's function name) and queue; how many, and the
    first and last time one of them finished."""

    error_kind: str
    kind: str
    queue: str
    count: int
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """A finished task as the cost page counts it: where it ran and when it finished."""

    task_id: str
    queue: str
    concurrency_key: str | None
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class FinishedTasks:
    """A step of a walk of the finished tasks: the next ones by finish (then id), and
    the cutoff the walk may not pass (no finish before it can still be uncommitted)."""

    tasks: list[FinishedTask]
    cutoff: datetime


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
        where: TaskFilter = NO_FILTER,
    ) -> list[TaskRecord]:
        """Tasks newest first (by creation, then id, both descending), strictly before
        `before`. `statuses` empty: any. `text`: a part of the id, of the prompt or of a
        job's function name. `finished_since`: only tasks that finished (done, failed,
        cancelled) then or later. `where`: the filters of `TaskFilter`."""
        ...

    async def task_summaries(self, task_ids: Sequence[str]) -> dict[str, TaskSummary]:
        """The summary of each of `task_ids` that exists, in one statement (a page of the
        task list is read in two: its rows, then this)."""
        ...

    async def count_tasks(
        self,
        *,
        statuses: Sequence[TaskStatus] = (),
        queue: str | None = None,
        text: str | None = None,
        finished_since: datetime | None = None,
        cap: int | None = None,
        where: TaskFilter = NO_FILTER,
    ) -> int:
        """How many tasks `task_page` would walk with these filters, in one statement;
        with `cap`, counted up to `cap` (a bulk action's button), else exactly."""
        ...

    async def failure_groups(
        self, *, queue: str | None = None, cap: int | None = FAILURES_GROUPED
    ) -> list[FailureGroup]:
        """The newest `cap` failed tasks (by finish; of `queue`, or any), or every one
        (`cap` None), grouped by error kind, kind and queue in one statement, the largest
        group first. Every one is fast once `index_search` has built the search index
        (PostgreSQL groups what it holds, ADR-0112), as slow as reading each before."""
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

    async def finished_tasks(
        self, after: datetime, after_id: str, limit: int, settle: float
    ) -> FinishedTasks:
        """Up to `limit` tasks finished after (`after`, `after_id`), by finish then id, and
        before the cutoff: `settle` seconds ago, and no later than any finish still
        uncommitted could be stamped. Nothing on a task's own path writes for it."""
        ...

    async def ledger_events(self, task_ids: Sequence[str]) -> dict[str, list[StoredEvent]]:
        """Each task's events a ledger reads (LEDGER_EVENT_TYPES), in order, in one
        statement. A long event's data holds only what a ledger reads of it (its version,
        model, fork point, estimate, usage, cut), its other fields at their defaults."""
        ...

    async def index_search(self) -> bool:
        """Bring the text search's index a batch further (ADR-0102); True when it holds
        every task but the last moments' (a search reads those directly). A store that
        searches its tasks directly has nothing to do: True."""
        ...


def checked_error_kind(kind: str | None) -> str | None:
    """An error kind to filter by, if it has a kind's form (a name: llm_error, ValueError)."""
    if kind is not None and not ERROR_KIND_NAME.fullmatch(kind):
        raise ConfigError(
            f"{kind[:80]!r} is not an error kind: a name such as llm_error or ValueError"
        )
    return kind


def checked_search(text: str | None) -> str | None:
    """A text to search for, if its length is one to search for ("" and None: none)."""
    if not text:
        return None
    if len(text) < MIN_SEARCH_CHARS:
        raise ConfigError(
            f"search for {MIN_SEARCH_CHARS} characters or more, not {text!r}: a shorter "
            "text has no index to find it by; filter by job name, or open a task by its id"
        )
    if len(text) > MAX_SEARCH_CHARS:
        raise ConfigError(
            f"the text to search for is {len(text):,} characters; at most {MAX_SEARCH_CHARS}"
        )
    return text


def filtered_statuses(statuses: Sequence[TaskStatus], kind: str | None) -> list[TaskStatus]:
    """The statuses a filter walks: an error kind is a failed task's, or "cancelled"."""
    wanted = list(statuses or TaskStatus)
    if kind is None:
        return wanted
    ended = TaskStatus.CANCELLED if kind == CANCELLED else TaskStatus.FAILED
    return [status for status in wanted if status is ended]


def check_failure_query(queue: str | None, cap: int | None) -> int | None:
    """The cap of a `failure_groups` query (None: no cap), checked with its queue's name."""
    if queue is not None:
        check_key("queue name", queue)
    if cap is not None and (isinstance(cap, bool) or not 1 <= cap <= MAX_FAILURES):
        raise ConfigError(f"failures are grouped over 1 to {MAX_FAILURES:,} tasks, not {cap}")
    return cap


def check_ledger_tasks(task_ids: Sequence[str]) -> list[str]:
    if len(task_ids) > MAX_LEDGER_TASKS:
        raise ConfigError(f"ledgers are read for {MAX_LEDGER_TASKS:,} tasks at most at once")
    return list(task_ids)


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
