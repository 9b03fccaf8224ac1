"""Failures by cause on PostgreSQL (`StoreViews.failure_groups`): failed tasks grouped by
their error's kind, their kind (agent or the job's function) and queue. The newest `cap`
are read directly, each task's own end and call through the events' primary key; every
one (no cap) is read from `task_search`, whose walks keep each failure's kinds (ADR-0112),
and only the tasks its walks have not reached yet directly."""

from __future__ import annotations

from typing import Any

from noeta.backends.stores.postgres.search import PostgresSearch
from noeta.backends.stores.task_summary_rows import SUMMARY_CHARS
from noeta.core.ports.store_views import (
    AGENT,
    FAILURES_GROUPED,
    JOB_FAILED,
    FailureGroup,
    check_failure_query,
)

# The kind of a TaskFinished's error, as `store_views.error_kind` reads it from the error
# ("add failed: ValueError: …" is a ValueError), matched in the event's stored JSON text
# (never decoded: PostgreSQL refuses to decode a \u0000, and one such row would fail all).
ERROR_KIND_IN_TEXT = rf'"error":"(?:[^"\\ ]+{JOB_FAILED})?([A-Za-z_][\w.]*): '
# A call's function name: it follows the call id (as views.name_regex reads it).
JOB_NAME_IN_TEXT = r'^\{"v":[0-9]+,"call_id":"(?:[^"\\]|\\.)*","name":"([^"\\]*)"'


def _read_directly(failed: str) -> str:
    """Each task of `failed` (id, queue, last_seq, finished_at) with its error kind, kind,
    queue and finish, from two probes of its own events: its end (among the last three)
    and its call (seq 2, or 3 after a fork's SubtaskOf)."""
    return f"""
SELECT coalesce((regexp_match(ending.text, %(kind_pattern)s))[1], '') AS error_kind,
       CASE WHEN called.text IS NULL THEN %(agent)s
            ELSE coalesce((regexp_match(called.text, %(name_pattern)s))[1], 'job') END AS kind,
       failed.queue, failed.finished_at
  FROM ({failed}) AS failed
  LEFT JOIN LATERAL (SELECT left(e.data, %(chars)s) AS text FROM events e
                      WHERE e.task_id = failed.id AND e.seq > failed.last_seq - 3
                        AND e.type = 'TaskFinished'
                      ORDER BY e.seq DESC LIMIT 1) AS ending ON true
  LEFT JOIN LATERAL (SELECT left(e.data, %(chars)s) AS text FROM events e
                      WHERE e.task_id = failed.id AND e.seq IN (2, 3)
                        AND e.type = 'CallRequested'
                      ORDER BY e.seq LIMIT 1) AS called ON true"""


def _grouped(failures: str) -> str:
    return f"""
SELECT error_kind, kind, queue, count(*), min(finished_at), max(finished_at)
  FROM ({failures}) AS failures
 GROUP BY 1, 2, 3
 ORDER BY 4 DESC, 6 DESC, 1, 2, 3"""


_OF_QUEUE = "(%(queue)s::text IS NULL OR queue = %(queue)s)"

# The newest failures first (tasks_by_status_not_claimed_or_done holds every failed row:
# at most `cap` of them sorted, never a walk of the done ones). EXPLAIN at 1,000,000
# tasks: bench/web.py, "failures".
NEWEST_FAILURE_GROUPS = _grouped(
    _read_directly(f"""
    SELECT id, queue, last_seq, finished_at FROM tasks
     WHERE status = 'failed' AND {_OF_QUEUE}
     ORDER BY finished_at DESC NULLS LAST LIMIT %(cap)s""")
)

# Every failure: those the search table's walks have passed (created before the walk by
# creation's mark and finished before the walk by finish's: each such failure's row was
# written after it failed, ADR-0112) from the table's kinds, through its partial index
# task_search_ended; the rest (created or finished since, a few seconds' worth once the
# table is built) read directly. The two parts split the failures by their own row's
# times: none is counted twice. A row of a pruned id used again (another creation) is
# not the task's.
EVERY_FAILURE_GROUP = _grouped(
    """
SELECT s.error_kind, s.kind, t.queue, t.finished_at
  FROM task_search s JOIN tasks t ON t.id = s.task_id AND t.created_at = s.created_at
 WHERE s.ended = 'failed' AND t.status = 'failed'
   AND (%(queue)s::text IS NULL OR t.queue = %(queue)s)
   AND (t.created_at, t.id) <= (%(created_mark_at)s, %(created_mark_id)s)
   AND t.finished_at < %(finished_mark_at)s
UNION ALL"""
    + _read_directly(f"""
    SELECT id, queue, last_seq, finished_at FROM tasks
     WHERE status = 'failed' AND {_OF_QUEUE}
       AND (created_at, id) > (%(created_mark_at)s, %(created_mark_id)s)
    UNION ALL
    SELECT id, queue, last_seq, finished_at FROM tasks
     WHERE status = 'failed' AND {_OF_QUEUE}
       AND (created_at, id) <= (%(created_mark_at)s, %(created_mark_id)s)
       AND finished_at >= %(finished_mark_at)s""")
)


class PostgresFailureGroups(PostgresSearch):
    """`failure_groups`, one of the read-only views of `noeta web`."""

    async def failure_groups(
        self, *, queue: str | None = None, cap: int | None = FAILURES_GROUPED
    ) -> list[FailureGroup]:
        params: dict[str, Any] = {
            "queue": queue,
            "cap": check_failure_query(queue, cap),
            "chars": SUMMARY_CHARS,
            "agent": AGENT,
            "kind_pattern": ERROR_KIND_IN_TEXT,
            "name_pattern": JOB_NAME_IN_TEXT,
        }
        if cap is None:
            params |= await self.search_marks()
        query = NEWEST_FAILURE_GROUPS if cap is not None else EVERY_FAILURE_GROUP
        return [
            FailureGroup(kind, name, queue, count, first, last)
            for kind, name, queue, count, first, last in await self._read(query, params)
        ]
