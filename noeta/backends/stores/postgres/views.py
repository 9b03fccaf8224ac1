"""The operator's read-only views on PostgreSQL (`StoreViews`, for `noeta web`): keyset
pages of the task list on `tasks_by_creation`, capped counts by status (0021), log
pages that leave long values in the database, and the claims held now."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from noeta.backends.stores.postgres.failure_groups import PostgresFailureGroups
from noeta.backends.stores.postgres.finished_usage import PostgresFinishedUsage
from noeta.backends.stores.postgres.logs import TASK_COLUMNS, _stored_event, _task_record
from noeta.backends.stores.postgres.search import matching_ids, search_params
from noeta.backends.stores.task_summary_rows import SUMMARY_CHARS, summary
from noeta.core.ports import payload
from noeta.core.ports.store import StoredEvent, TaskRecord, TaskStatus
from noeta.core.ports.store_views import (
    CANCELLED,
    COUNT_CAP,
    JOB_FAILED,
    MAX_PAGE,
    NO_FILTER,
    HeldClaim,
    LogEntry,
    StatusCount,
    TaskCursor,
    TaskFilter,
    TaskSummary,
    check_page,
    checked_error_kind,
    counted,
    filtered_statuses,
)

# The rows a filter selects: its statuses, its queue, what finished since a moment (through
# tasks_finished, or tasks_by_status_not_claimed_or_done for a failed or cancelled filter).
# A job's function name and an error kind are matched in the stored JSON text of the call
# (CallRequested, seq 2 or 3) and of the TaskFinished among the last events, by a regular
# expression anchored on the field (PostgreSQL would refuse to decode some texts).
# OFFSET 0 keeps the name filter's test a probe of the task's own events (its primary
# key) as the walk reaches the task: without it the planner hashes every call it finds by
# scanning the whole events table first (EXPLAIN at 200,000 tasks: 265 ms, now 18 ms).
# A text search reads task_search and the tasks past its marks (search.py, ADR-0102).
SELECTED = """status = ANY (%(statuses)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s)
   AND (%(created_since)s::timestamptz IS NULL OR created_at >= %(created_since)s)
   AND (%(job_regex)s::text IS NULL OR EXISTS (
        SELECT 1 FROM events
         WHERE events.task_id = tasks.id AND events.seq IN (2, 3)
           AND events.type = 'CallRequested' AND events.data ~ %(job_regex)s OFFSET 0))
   AND (%(error_regex)s::text IS NULL OR EXISTS (
        SELECT 1 FROM events
         WHERE events.task_id = tasks.id AND events.seq > tasks.last_seq - 3
           AND events.type = 'TaskFinished' AND events.data ~ %(error_regex)s))"""

# Newest first, strictly before the cursor: the row comparison is the index's own order,
# so each page is one backward walk of tasks_by_creation from the cursor, never a sort.
TASK_PAGE = f"""
SELECT {TASK_COLUMNS} FROM tasks
 WHERE (created_at, id) < (%(before_at)s, %(before_id)s) AND {SELECTED}
 ORDER BY created_at DESC, id DESC LIMIT %(limit)s
"""
# A text search (ADR-0102): the ids that match, each read once, newest first.
TASK_PAGE_MATCHING = f"""
SELECT {TASK_COLUMNS} FROM tasks WHERE id IN ({matching_ids(SELECTED)})
 ORDER BY created_at DESC, id DESC LIMIT %(limit)s
"""
# One count for a bulk action's confirmation (LIMIT NULL: no cap): for a failed or
# cancelled filter, a walk of that status's entries in tasks_by_status_not_claimed_or_done.
COUNT_TASKS = f"""
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE {SELECTED} LIMIT %(cap)s) AS selected
"""
COUNT_TASKS_MATCHING = f"""
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE id IN ({matching_ids(SELECTED)})
                      LIMIT %(cap)s) AS selected
"""
# The same, for a filter of failed or cancelled tasks only: through their rows of
# task_search alone (matching_ids, ADR-0112).
TASK_PAGE_MATCHING_ENDED = TASK_PAGE_MATCHING.replace(
    matching_ids(SELECTED), matching_ids(SELECTED, ended=True)
)
COUNT_TASKS_MATCHING_ENDED = COUNT_TASKS_MATCHING.replace(
    matching_ids(SELECTED), matching_ids(SELECTED, ended=True)
)
ENDED = {TaskStatus.FAILED.value, TaskStatus.CANCELLED.value}


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

# A page's summaries in one statement: per task, a few index probes of its own events
# (its opening, its call, its end; a job's runs), each text cut at %(chars)s.
TASK_SUMMARIES = """
SELECT t.id, t.status, t.owner_epoch, t.finished_at,
       (SELECT e.created_at FROM events e WHERE e.task_id = t.id AND e.epoch > 0
         ORDER BY e.seq LIMIT 1),
       opening.size, opening.text, called.size, called.text, ending.size, ending.text,
       CASE WHEN called.text IS NOT NULL THEN (
            SELECT count(*) FROM events e WHERE e.task_id = t.id AND e.type = 'ToolStarted')
       END
  FROM tasks t
  LEFT JOIN LATERAL (SELECT length(e.data) AS size, left(e.data, %(chars)s) AS text
                       FROM events e WHERE e.task_id = t.id AND e.seq = 1) AS opening ON true
  LEFT JOIN LATERAL (SELECT length(e.data) AS size, left(e.data, %(chars)s) AS text
                       FROM events e
                      WHERE e.task_id = t.id AND e.seq IN (2, 3) AND e.type = 'CallRequested'
                      ORDER BY e.seq LIMIT 1) AS called ON true
  LEFT JOIN LATERAL (SELECT length(e.data) AS size, left(e.data, %(chars)s) AS text
                       FROM events e
                      WHERE t.status IN ('failed', 'cancelled') AND e.task_id = t.id
                        AND e.seq > t.last_seq - 3 AND e.type = 'TaskFinished'
                      ORDER BY e.seq DESC LIMIT 1) AS ending ON true
 WHERE t.id = ANY (%(ids)s)
"""

PREVIEW_CHARS = 2000
_NEWEST = (datetime(9999, 12, 31, tzinfo=UTC), "")  # before every real row


# A call's opening up to its function's name: the name follows the call id.
_NAME_PREFIX = r'^\{"v":[0-9]+,"call_id":"(?:[^"\\]|\\.)*","name":"'


def _literal(text: str) -> str:
    """`text` (ASCII: stored JSON text) taken literally in a regular expression."""
    return re.sub(r"([^A-Za-z0-9])", r"\\\1", text)


def name_regex(text: str, *, whole: bool) -> str:
    """A regular expression for a call whose function's name is `text` (`whole`) or holds
    it, matched against the call's stored JSON text."""
    encoded = _literal(payload.encode(text)[1:-1])
    return _NAME_PREFIX + (f'{encoded}"' if whole else f'[^"]*{encoded}')


def error_regex(kind: str) -> str:
    """A regular expression for a TaskFinished whose error is of `kind` (`error_kind`)."""
    return rf'"error":"(?:[^"\\ ]+{JOB_FAILED})?{_literal(kind)}: '


class PostgresViews(PostgresFailureGroups, PostgresFinishedUsage):
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
        where: TaskFilter = NO_FILTER,
    ) -> list[TaskRecord]:
        before_at, before_id = (before.created_at, before.id) if before else _NEWEST
        params = _selection(statuses, queue, text, finished_since, where)
        params |= {"before_at": before_at, "before_id": before_id, "limit": check_page(limit)}
        if text:
            params |= await self.search_marks()
        ended = bool(text) and set(params["statuses"]) <= ENDED
        query = TASK_PAGE_MATCHING_ENDED if ended else TASK_PAGE_MATCHING if text else TASK_PAGE
        return [_task_record(row) for row in await self._read(query, params)]

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
        params = _selection(statuses, queue, text, finished_since, where) | {"cap": cap}
        params |= {"before_at": _NEWEST[0], "before_id": _NEWEST[1], "limit": cap}
        if text:
            params |= await self.search_marks()
        ended = bool(text) and set(params["statuses"]) <= ENDED
        query = (
            COUNT_TASKS_MATCHING_ENDED if ended else COUNT_TASKS_MATCHING if text else COUNT_TASKS
        )
        rows = await self._read(query, params)
        return int(rows[0][0])

    async def task_summaries(self, task_ids: Sequence[str]) -> dict[str, TaskSummary]:
        if not task_ids:
            return {}
        params = {"ids": list(task_ids), "chars": SUMMARY_CHARS}
        return {
            row[0]: summary(
                row[0],
                TaskStatus(row[1]),
                row[2],
                row[4],
                row[3],
                None if row[6] is None else (row[5], row[6]),
                None if row[8] is None else (row[7], row[8]),
                None if row[10] is None else (row[9], row[10]),
                row[11],
            )
            for row in await self._read(TASK_SUMMARIES, params)
        }

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
    statuses: Sequence[TaskStatus],
    queue: str | None,
    text: str | None,
    since: datetime | None,
    where: TaskFilter = NO_FILTER,
) -> dict[str, Any]:
    kind = checked_error_kind(where.error_kind)
    params: dict[str, Any] = {
        "statuses": [status.value for status in filtered_statuses(statuses, kind)],
        "queue": queue,
        "since": since,
        "created_since": where.created_since,
        "job_regex": None if where.job is None else name_regex(where.job, whole=True),
        "error_regex": None if kind in (None, CANCELLED) else error_regex(kind),
    }
    params["ended"] = params["statuses"]
    params["ended_one"] = params["statuses"][0] if len(params["statuses"]) == 1 else None
    return params | (search_params(text) if text else {})
