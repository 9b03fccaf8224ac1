"""The operator's read-only views on PostgreSQL (`StoreViews`, for `noeta web`): keyset
pages of the task list on `tasks_by_creation`, capped counts by status (0021), log
pages that leave long values in the database, and the claims held now."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.logs import TASK_COLUMNS, _stored_event, _task_record
from noeta.core.ports import payload
from noeta.core.ports.store import StoredEvent, TaskRecord, TaskStatus
from noeta.core.ports.store_views import (
    COUNT_CAP,
    MAX_PAGE,
    HeldClaim,
    LogEntry,
    StatusCount,
    TaskCursor,
    check_page,
    counted,
    text_pattern,
)

# The rows a filter selects: its statuses, its queue, what finished since a moment (through
# tasks_finished, or tasks_by_status_not_claimed_or_done for a failed or cancelled filter).
SELECTED = """status = ANY (%(statuses)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s)"""

# The same, with a text that is part of the id or of the prompt (the task's first event).
# The prompt is matched in the log's own escaped JSON text, never decoded: PostgreSQL
# refuses to decode a \u0000 or a lone surrogate, and one such row would fail every search.
# The plain substring test first: the regular expression runs only where it may match.
SELECTED_MATCHING = f"""{SELECTED}
   AND (id ILIKE %(pattern)s OR EXISTS (
        SELECT 1 FROM events
         WHERE events.task_id = tasks.id AND events.seq = 1
           AND events.data ILIKE %(encoded_pattern)s AND events.data ~* %(prompt_regex)s))"""

# Newest first, strictly before the cursor: the row comparison is the index's own order,
# so each page is one backward walk of tasks_by_creation from the cursor, never a sort.
TASK_PAGE = f"""
SELECT {TASK_COLUMNS} FROM tasks
 WHERE (created_at, id) < (%(before_at)s, %(before_id)s) AND {SELECTED}
 ORDER BY created_at DESC, id DESC LIMIT %(limit)s
"""
TASK_PAGE_MATCHING = f"""
SELECT {TASK_COLUMNS} FROM tasks
 WHERE (created_at, id) < (%(before_at)s, %(before_id)s) AND {SELECTED_MATCHING}
 ORDER BY created_at DESC, id DESC LIMIT %(limit)s
"""
# One count for a bulk action's confirmation (LIMIT NULL: no cap): for a failed or
# cancelled filter, a walk of that status's entries in tasks_by_status_not_claimed_or_done.
COUNT_TASKS = f"""
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE {SELECTED} LIMIT %(cap)s) AS selected
"""
COUNT_TASKS_MATCHING = f"""
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE {SELECTED_MATCHING} LIMIT %(cap)s) AS selected
"""


# Each status counted over at most cap of its rows, the status a literal so that the
# planner can use a partial index: running and holding rows through tasks_by_owner, done
# ones through tasks_finished (a done task has finished_at) or a short walk of a table
# they fill, the others through tasks_by_status_not_claimed_or_done. A million finished
# tasks cost cap rows, not a million; a status with no row costs one index descent.
def capped_count(status: TaskStatus) -> str:
    finished = " AND finished_at IS NOT NULL" if status is TaskStatus.DONE else ""
    return f"""(SELECT '{status.value}' AS status, queue, count(*) AS n
  FROM (SELECT queue FROM tasks WHERE status = '{status.value}'{finished}
         LIMIT %(cap)s) AS capped
 GROUP BY queue)"""


TASK_COUNTS = "\nUNION ALL ".join(map(capped_count, TaskStatus)) + "\nORDER BY 1, 2"

LOG_OPENINGS = """
SELECT task_id, seq, type, data, created_at, epoch, owner FROM events
 WHERE task_id = ANY (%(ids)s) AND seq <= %(through)s ORDER BY task_id, seq
"""

LOG_PAGE = """
SELECT seq, type, created_at, epoch, owner, length(data),
       CASE WHEN length(data) <= %(inline)s THEN data END, left(data, %(preview)s)
  FROM events WHERE task_id = %(task)s AND seq > %(after)s ORDER BY seq LIMIT %(limit)s
"""

EVENT_TEXT = """
SELECT substr(data, %(start)s, %(length)s), length(data) FROM events
 WHERE task_id = %(task)s AND seq = %(seq)s
"""

# tasks_by_owner holds exactly these rows (its predicate): an index walk in owner order.
HELD_CLAIMS = """
SELECT id, queue, status, owner, owner_epoch, lease_until, updated_at FROM tasks
 WHERE status IN ('running', 'holding') ORDER BY owner, id LIMIT %(limit)s
"""

# A walk of the task's own events (the primary key's range), stopped at the first launch.
HAS_SUBTASKS = """
SELECT EXISTS (SELECT 1 FROM events WHERE task_id = %(task)s AND type = 'SubtaskLaunched')"""

PREVIEW_CHARS = 2000
_NEWEST = (datetime(9999, 12, 31, tzinfo=UTC), "")  # before every real row


# The prompt's opening, then whole characters of its escaped JSON text (a plain one, a
# \uXXXX escape, a two-character escape): a match starts on a character, never inside
# an escape, so "n" does not match the n of a "\n".
_PROMPT_PREFIX = r'"prompt":"(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*'


def prompt_regex(text: str) -> str:
    """A case-insensitive regular expression for `text` in a TaskCreated's prompt, matched
    against the event's stored JSON text (ASCII, so `text` is encoded the same way)."""
    encoded = payload.encode(text)[1:-1]
    return _PROMPT_PREFIX + re.sub(r"([^A-Za-z0-9])", r"\\\1", encoded)


class PostgresViews(PostgresConnection):
    """The read-only views of `noeta web`."""

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
        before_at, before_id = (before.created_at, before.id) if before else _NEWEST
        params = _selection(statuses, queue, text, finished_since)
        params |= {"before_at": before_at, "before_id": before_id, "limit": check_page(limit)}
        query = TASK_PAGE_MATCHING if text else TASK_PAGE
        return [_task_record(row) for row in await self._read(query, params)]

    async def count_tasks(
        self,
        *,
        statuses: Sequence[TaskStatus] = (),
        queue: str | None = None,
        text: str | None = None,
        finished_since: datetime | None = None,
        cap: int | None = None,
    ) -> int:
        params = _selection(statuses, queue, text, finished_since) | {"cap": cap}
        rows = await self._read(COUNT_TASKS_MATCHING if text else COUNT_TASKS, params)
        return int(rows[0][0])

    async def task_counts(self, cap: int = COUNT_CAP) -> list[StatusCount]:
        return counted(await self._read(TASK_COUNTS, {"cap": cap}), cap)

    async def log_openings(
        self, task_ids: Sequence[str], through_seq: int
    ) -> dict[str, list[StoredEvent]]:
        found: dict[str, list[StoredEvent]] = {}
        params = {"ids": list(task_ids), "through": through_seq}
        for row in await self._read(LOG_OPENINGS, params) if task_ids else []:
            found.setdefault(row[0], []).append(_stored_event(row))
        return found

    async def log_page(
        self, task_id: str, *, after_seq: int = 0, limit: int = 200, inline_chars: int = 65536
    ) -> list[LogEntry]:
        params = {
            "task": task_id,
            "after": after_seq,
            "limit": check_page(limit),
            "inline": inline_chars,
            "preview": PREVIEW_CHARS,
        }
        return [
            LogEntry(
                seq,
                kind,
                at,
                epoch,
                owner,
                size,
                None if text is None else payload.decode(text),
                preview,
            )
            for seq, kind, at, epoch, owner, size, text, preview in await self._read(
                LOG_PAGE, params
            )
        ]

    async def event_text(
        self, task_id: str, seq: int, *, offset: int = 0, length: int = 1 << 20
    ) -> tuple[str, int] | None:
        params = {"task": task_id, "seq": seq, "start": offset + 1, "length": length}
        rows = await self._read(EVENT_TEXT, params)
        return (rows[0][0], rows[0][1]) if rows else None

    async def held_claims(self, limit: int = MAX_PAGE) -> list[HeldClaim]:
        rows = await self._read(HELD_CLAIMS, {"limit": check_page(limit)})
        return [
            HeldClaim(task, queue, TaskStatus(status), owner, epoch, lease, updated)
            for task, queue, status, owner, epoch, lease, updated in rows
        ]

    async def has_subtasks(self, task_id: str) -> bool:
        rows = await self._read(HAS_SUBTASKS, {"task": task_id})
        return bool(rows[0][0])


def _selection(
    statuses: Sequence[TaskStatus], queue: str | None, text: str | None, since: datetime | None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "statuses": [status.value for status in (statuses or TaskStatus)],
        "queue": queue,
        "since": since,
    }
    if text:
        params["pattern"] = text_pattern(text)
        params["encoded_pattern"] = text_pattern(payload.encode(text)[1:-1])
        params["prompt_regex"] = prompt_regex(text)
    return params
