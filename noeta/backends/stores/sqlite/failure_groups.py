"""Failures by cause on sqlite (`StoreViews.failure_groups`): the newest failed tasks read
in one statement with their error and function name; grouped here, by the same
`error_kind` rule the task list's filter uses (sqlite has no regular expressions)."""

from __future__ import annotations

from collections import Counter

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros
from noeta.core.ports.store_views import (
    AGENT,
    FAILURES_GROUPED,
    FailureGroup,
    check_failure_query,
    error_kind,
)

# A finished row changes no more, so its updated_at is when it finished (as views.py).
NEWEST_FAILURES = """
SELECT failed.queue, failed.updated_at,
       (SELECT substr(json_extract(e.data, '$.error'), 1, 300) FROM events e
         WHERE e.task_id = failed.id AND e.seq > failed.last_seq - 3
           AND e.type = 'TaskFinished' ORDER BY e.seq DESC LIMIT 1),
       (SELECT coalesce(json_extract(e.data, '$.name'), 'job') FROM events e
         WHERE e.task_id = failed.id AND e.seq IN (2, 3) AND e.type = 'CallRequested'
         ORDER BY e.seq LIMIT 1)
  FROM (SELECT id, queue, updated_at, last_seq FROM tasks
         WHERE status = 'failed' AND (:queue IS NULL OR queue = :queue)
         ORDER BY updated_at DESC LIMIT :cap) AS failed"""


class SqliteFailureGroups(SqliteConnection):
    """`failure_groups`, one of the read-only views of `noeta web`."""

    async def failure_groups(
        self, *, queue: str | None = None, cap: int | None = FAILURES_GROUPED
    ) -> list[FailureGroup]:
        # LIMIT -1: no limit (every failure: a sqlite store is one machine's, and small).
        values = {"queue": queue, "cap": check_failure_query(queue, cap) or -1}
        rows = await self._run(self._read_all, NEWEST_FAILURES, values)
        counts: Counter[tuple[str, str, str]] = Counter()
        first: dict[tuple[str, str, str], int] = {}
        last: dict[tuple[str, str, str], int] = {}
        for queue_name, at, error, name in rows:
            key = (error_kind(error or ""), name or AGENT, queue_name)
            counts[key] += 1
            first[key] = min(first.get(key, at), at)
            last[key] = max(last.get(key, at), at)
        groups = [
            FailureGroup(*key, count, from_micros(first[key]), from_micros(last[key]))
            for key, count in counts.items()
        ]
        groups.sort(key=lambda g: (-g.count, -g.last_at.timestamp(), g.error_kind, g.kind, g.queue))
        return groups
