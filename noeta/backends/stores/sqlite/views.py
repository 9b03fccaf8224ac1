"""The operator's read-only views on sqlite (`StoreViews`, for `noeta web`): the same
queries as PostgreSQL's, on integer-microsecond times; a text search is a LIKE over the
tasks and their events as written (one machine's store: no search table, ADR-0102)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from noeta.backends.stores.sqlite.encoding import from_micros, task_record, to_micros
from noeta.backends.stores.sqlite.failure_groups import SqliteFailureGroups
from noeta.backends.stores.sqlite.finished_usage import SqliteFinishedUsage
from noeta.backends.stores.task_summary_rows import SUMMARY_CHARS, summary
from noeta.core.ports import payload
from noeta.core.ports.store import StoredEvent, TaskRecord, TaskStatus
from noeta.core.ports.store_views import (
    CANCELLED,
    COUNT_CAP,
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
    text_pattern,
)

_TASK_COLUMNS = (
    "id, queue, status, owner, owner_epoch, lease_until, ready_at, last_seq, created_at,"
    " updated_at, concurrency_key, priority"
)
# A finished task's row changes no more, so its updated_at is when it finished (the
# sqlite store keeps no finished_at; its prune reads updated_at the same way).
_SELECTED = """
   (:status IS NULL OR status IN (SELECT value FROM json_each(:status)))
   AND (:queue IS NULL OR queue = :queue)
   AND (:since IS NULL OR (updated_at >= :since
                           AND status IN ('done', 'failed', 'cancelled')))
   AND (:created_since IS NULL OR created_at >= :created_since)
   AND (:job IS NULL OR EXISTS (
        SELECT 1 FROM events WHERE events.task_id = tasks.id AND events.seq IN (2, 3)
           AND events.type = 'CallRequested' AND json_extract(events.data, '$.name') = :job))
   AND (:error_kind IS NULL OR EXISTS (
        SELECT 1 FROM events WHERE events.task_id = tasks.id
           AND events.seq > tasks.last_seq - 3 AND events.type = 'TaskFinished'
           AND (json_extract(events.data, '$.error') GLOB :error_kind || ': *'
                OR json_extract(events.data, '$.error')
                   GLOB '* failed: ' || :error_kind || ': *'
                OR json_extract(events.data, '$.error')
                   GLOB '* failed after * attempt(s): ' || :error_kind || ': *')))"""
_MATCHING = """
   AND (id LIKE :pattern ESCAPE '\\' OR EXISTS (
        SELECT 1 FROM events WHERE events.task_id = tasks.id AND events.seq = 1
           AND json_extract(events.data, '$.prompt') LIKE :pattern ESCAPE '\\')
        OR EXISTS (
        SELECT 1 FROM events WHERE events.task_id = tasks.id AND events.seq IN (2, 3)
           AND events.type = 'CallRequested'
           AND json_extract(events.data, '$.name') LIKE :pattern ESCAPE '\\')
        OR EXISTS (
        SELECT 1 FROM events WHERE tasks.status IN ('failed', 'cancelled')
           AND events.task_id = tasks.id AND events.seq > tasks.last_seq - 3
           AND events.type = 'TaskFinished'
           AND json_extract(events.data, '$.error') LIKE :pattern ESCAPE '\\'))"""
# A page's summaries in one statement, as PostgreSQL's (its comments say why).
TASK_SUMMARIES = """
SELECT t.id, t.status, t.owner_epoch, t.updated_at,
       (SELECT e.created_at FROM events e WHERE e.task_id = t.id AND e.epoch > 0
         ORDER BY e.seq LIMIT 1),
       (SELECT length(e.data) FROM events e WHERE e.task_id = t.id AND e.seq = 1),
       (SELECT substr(e.data, 1, :chars) FROM events e WHERE e.task_id = t.id AND e.seq = 1),
       called.size, called.text,
       (SELECT length(e.data) || ' ' || substr(e.data, 1, :chars) FROM events e
         WHERE t.status IN ('failed', 'cancelled') AND e.task_id = t.id
           AND e.seq > t.last_seq - 3 AND e.type = 'TaskFinished'
         ORDER BY e.seq DESC LIMIT 1),
       CASE WHEN called.text IS NOT NULL THEN (
            SELECT count(*) FROM events e WHERE e.task_id = t.id AND e.type = 'ToolStarted')
       END
  FROM tasks t
  LEFT JOIN (SELECT e.task_id, length(e.data) AS size, substr(e.data, 1, :chars) AS text
               FROM events e
              WHERE e.task_id IN (SELECT value FROM json_each(:ids)) AND e.seq IN (2, 3)
                AND e.type = 'CallRequested') AS called ON called.task_id = t.id
 WHERE t.id IN (SELECT value FROM json_each(:ids))"""
_PAGE_WHERE = f"""
 WHERE (created_at, id) < (:before_at, :before_id) AND {_SELECTED}"""
TASK_PAGE = f"""
SELECT {_TASK_COLUMNS} FROM tasks {_PAGE_WHERE}
 ORDER BY created_at DESC, id DESC LIMIT :limit"""
TASK_PAGE_MATCHING = f"""
SELECT {_TASK_COLUMNS} FROM tasks {_PAGE_WHERE} {_MATCHING}
 ORDER BY created_at DESC, id DESC LIMIT :limit"""
COUNT_TASKS = f"""
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE {_SELECTED} LIMIT :cap)"""
COUNT_TASKS_MATCHING = f"""
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE {_SELECTED} {_MATCHING} LIMIT :cap)"""
STATUS_COUNTS = """
SELECT queue, count(*) FROM (SELECT queue FROM tasks WHERE status = ? LIMIT ?) GROUP BY queue
 ORDER BY queue"""
LOG_OPENINGS = """
SELECT task_id, seq, type, data, created_at, epoch, owner FROM events
 WHERE task_id IN (SELECT value FROM json_each(:ids)) AND seq <= :through
 ORDER BY task_id, seq"""
LOG_PAGE = """
SELECT seq, type, created_at, epoch, owner, length(data),
       CASE WHEN length(data) <= :inline THEN data END, substr(data, 1, :preview)
  FROM events WHERE task_id = :task AND seq > :after ORDER BY seq LIMIT :limit"""
EVENT_TEXT = """
SELECT substr(data, :start, :length), length(data) FROM events
 WHERE task_id = :task AND seq = :seq"""
HELD_CLAIMS = """
SELECT id, queue, status, owner, owner_epoch, lease_until, updated_at FROM tasks
 WHERE status IN ('running', 'holding') ORDER BY owner, id LIMIT ?"""

# A walk of the task's own events (the primary key's range), stopped at the first launch.
HAS_SUBTASKS = """
SELECT EXISTS (SELECT 1 FROM events WHERE task_id = ? AND type = 'SubtaskLaunched')"""

PREVIEW_CHARS = 2000
_NEWEST = 2**62  # microseconds: after every real row


class SqliteViews(SqliteFailureGroups, SqliteFinishedUsage):
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
        values = _selection(statuses, queue, text, finished_since, where) | {
            "before_at": to_micros(before.created_at) if before else _NEWEST,
            "before_id": before.id if before else "",
            "limit": check_page(limit),
        }
        query = TASK_PAGE_MATCHING if text else TASK_PAGE
        rows = await self._run(self._read_all, query, values)
        return [task_record(row) for row in rows]

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
        values = _selection(statuses, queue, text, finished_since, where) | {
            "cap": -1 if cap is None else cap  # sqlite's LIMIT -1: no limit
        }
        query = COUNT_TASKS_MATCHING if text else COUNT_TASKS
        row = await self._run(self._read_one, query, values)
        return int(row[0])

    async def task_summaries(self, task_ids: Sequence[str]) -> dict[str, TaskSummary]:
        if not task_ids:
            return {}
        values = {"ids": payload.encode(list(task_ids)), "chars": SUMMARY_CHARS}
        found: dict[str, TaskSummary] = {}
        for row in await self._run(self._read_all, TASK_SUMMARIES, values):
            status = TaskStatus(row[1])
            size, _, text = (row[9] or "").partition(" ")
            found[row[0]] = summary(
                row[0],
                status,
                row[2],
                None if row[4] is None else from_micros(row[4]),
                from_micros(row[3]),  # a finished row changes no more: when it finished
                None if row[6] is None else (row[5], row[6]),
                None if row[8] is None else (row[7], row[8]),
                (int(size), text) if row[9] else None,
                row[10],
            )
        return found

    async def task_counts(self, cap: int = COUNT_CAP) -> list[StatusCount]:
        def count() -> list[tuple[str, str, int]]:
            return [
                (status.value, queue, n)
                for status in TaskStatus
                for queue, n in self._read_all(STATUS_COUNTS, (status.value, cap))
            ]

        return counted(await self._run(count), cap)

    async def log_openings(
        self, task_ids: Sequence[str], through_seq: int
    ) -> dict[str, list[StoredEvent]]:
        values = {"ids": payload.encode(list(task_ids)), "through": through_seq}
        found: dict[str, list[StoredEvent]] = {}
        for task, seq, kind, data, at, epoch, owner in await self._run(
            self._read_all, LOG_OPENINGS, values
        ):
            event = StoredEvent(
                task, seq, kind, payload.decode(data), from_micros(at), epoch, owner
            )
            found.setdefault(task, []).append(event)
        return found

    async def log_page(
        self, task_id: str, *, after_seq: int = 0, limit: int = 200, inline_chars: int = 65536
    ) -> list[LogEntry]:
        values = {
            "task": task_id,
            "after": after_seq,
            "limit": check_page(limit),
            "inline": inline_chars,
            "preview": PREVIEW_CHARS,
        }
        rows = await self._run(self._read_all, LOG_PAGE, values)
        return [
            LogEntry(
                seq,
                kind,
                from_micros(at),
                epoch,
                owner,
                size,
                None if text is None else payload.decode(text),
                preview,
            )
            for seq, kind, at, epoch, owner, size, text, preview in rows
        ]

    async def event_text(
        self, task_id: str, seq: int, *, offset: int = 0, length: int = 1 << 20
    ) -> tuple[str, int] | None:
        values = {"task": task_id, "seq": seq, "start": offset + 1, "length": length}
        row = await self._run(self._read_one, EVENT_TEXT, values)
        return None if row is None else (row[0], row[1])

    async def held_claims(self, limit: int = MAX_PAGE) -> list[HeldClaim]:
        rows = await self._run(self._read_all, HELD_CLAIMS, (check_page(limit),))
        return [
            HeldClaim(
                task,
                queue,
                TaskStatus(status),
                owner,
                epoch,
                from_micros(lease),
                from_micros(updated),
            )
            for task, queue, status, owner, epoch, lease, updated in rows
        ]

    async def has_subtasks(self, task_id: str) -> bool:
        row = await self._run(self._read_one, HAS_SUBTASKS, (task_id,))
        return bool(row[0])

    async def index_search(self) -> bool:
        return True  # a sqlite store searches its tasks as written (ADR-0102)


def _selection(
    statuses: Sequence[TaskStatus],
    queue: str | None,
    text: str | None,
    since: datetime | None,
    where: TaskFilter = NO_FILTER,
) -> dict[str, Any]:
    kind = checked_error_kind(where.error_kind)
    if kind is not None:
        statuses = filtered_statuses(statuses, kind)
    created = where.created_since
    values: dict[str, Any] = {
        "status": payload.encode([s.value for s in statuses]) if statuses or kind else None,
        "queue": queue,
        "since": None if since is None else to_micros(since),
        "created_since": None if created is None else to_micros(created),
        "job": where.job,
        "error_kind": None if kind == CANCELLED else kind,
    }
    if text:
        values["pattern"] = text_pattern(text)
    return values
