"""Failures by cause on PostgreSQL (`StoreViews.failure_groups`): the newest failed tasks
grouped by their error's kind, their kind (agent or the job's function) and queue, in one
statement that reads each task's own end and call through the events' primary key."""

from __future__ import annotations

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.task_summary_rows import SUMMARY_CHARS
from noeta.core.ports.store_views import AGENT, FAILURES_GROUPED, FailureGroup, check_failure_query

# The kind of a TaskFinished's error, as `store_views.error_kind` reads it from the error
# ("add failed: ValueError: …" is a ValueError), matched in the event's stored JSON text
# (never decoded: PostgreSQL refuses to decode a \u0000, and one such row would fail all).
ERROR_KIND_IN_TEXT = r'"error":"(?:[^"\\ ]+ failed: )?([A-Za-z_][\w.]*): '
# A call's function name: it follows the call id (as views.name_regex reads it).
JOB_NAME_IN_TEXT = r'^\{"v":[0-9]+,"call_id":"(?:[^"\\]|\\.)*","name":"([^"\\]*)"'

# The newest failures first (tasks_by_status_not_claimed_or_done holds every failed row:
# at most `cap` of them sorted, never a walk of the done ones), then per task two probes
# of its own events: its end (among the last three) and its call (seq 2, or 3 after a
# fork's SubtaskOf). EXPLAIN at 1,000,000 tasks: bench/web.py, "failures".
FAILURE_GROUPS = """
SELECT coalesce((regexp_match(ending.text, %(kind_pattern)s))[1], '') AS error_kind,
       CASE WHEN called.text IS NULL THEN %(agent)s
            ELSE coalesce((regexp_match(called.text, %(name_pattern)s))[1], 'job') END AS kind,
       failed.queue, count(*), min(failed.finished_at), max(failed.finished_at)
  FROM (SELECT id, queue, last_seq, finished_at FROM tasks
         WHERE status = 'failed' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
         ORDER BY finished_at DESC NULLS LAST LIMIT %(cap)s) AS failed
  LEFT JOIN LATERAL (SELECT left(e.data, %(chars)s) AS text FROM events e
                      WHERE e.task_id = failed.id AND e.seq > failed.last_seq - 3
                        AND e.type = 'TaskFinished'
                      ORDER BY e.seq DESC LIMIT 1) AS ending ON true
  LEFT JOIN LATERAL (SELECT left(e.data, %(chars)s) AS text FROM events e
                      WHERE e.task_id = failed.id AND e.seq IN (2, 3)
                        AND e.type = 'CallRequested'
                      ORDER BY e.seq LIMIT 1) AS called ON true
 GROUP BY 1, 2, 3
 ORDER BY 4 DESC, 6 DESC, 1, 2, 3
"""


class PostgresFailureGroups(PostgresConnection):
    """`failure_groups`, one of the read-only views of `noeta web`."""

    async def failure_groups(
        self, *, queue: str | None = None, cap: int = FAILURES_GROUPED
    ) -> list[FailureGroup]:
        params = {
            "queue": queue,
            "cap": check_failure_query(queue, cap),
            "chars": SUMMARY_CHARS,
            "agent": AGENT,
            "kind_pattern": ERROR_KIND_IN_TEXT,
            "name_pattern": JOB_NAME_IN_TEXT,
        }
        return [
            FailureGroup(kind, name, queue, count, first, last)
            for kind, name, queue, count, first, last in await self._read(FAILURE_GROUPS, params)
        ]
