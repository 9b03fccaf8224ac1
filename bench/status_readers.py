"""What the readers of a task's status cost on a million tasks, with and without an index
on `status`: EXPLAIN (ANALYZE, BUFFERS) of each query that filters on it (the web view's
capped counts and pages, `noeta list --status`, the live-claim counts of queue limits).

Run:  .venv/bin/python bench/status_readers.py [--dsn URL]
It fills a fresh schema with 1,000,000 task rows (mostly done, as a deployment that
keeps its history holds them), then prints each reader's plan, time and buffers under
each index variant below. Times move with the machine's load; plans and buffers do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
from common import fresh_schema, parser, server

from noeta.backends.stores.postgres.logs import LIST_TASKS
from noeta.backends.stores.postgres.views import TASK_COUNTS, TASK_PAGE
from noeta.core.ports.store_views import COUNT_CAP

# (status, how many): a history of finished tasks, a backlog, a few live claims.
MIX = (
    ("done", 940_000),
    ("failed", 20_000),
    ("cancelled", 500),
    ("ready", 39_000),
    ("running", 300),
    ("waiting", 200),
)
QUEUES = ("q0", "q1", "q2", "q3")
FILL = """
INSERT INTO tasks (id, queue, status, owner, owner_epoch, lease_until, ready_at,
                   claimable_at, last_seq, created_at, finished_at, concurrency_key)
SELECT %(status)s || '-' || g, (%(queues)s::text[])[1 + g %% 4], %(status)s,
       CASE WHEN live THEN 'w' || g %% 8 END, 1,
       CASE WHEN live THEN now() + interval '30 s' END,
       CASE WHEN %(status)s = 'ready' THEN now() + make_interval(secs => g %% 3600) END,
       CASE WHEN live THEN now() + interval '30 s'
            WHEN %(status)s = 'ready' THEN now() + make_interval(secs => g %% 3600) END,
       1, now() - make_interval(secs => g), CASE WHEN finished THEN now() END,
       'k' || g %% 16
  FROM generate_series(1, %(count)s) AS g,
       LATERAL (SELECT %(status)s IN ('running', 'holding'),
                       %(status)s IN ('done', 'failed', 'cancelled')) AS s(live, finished)
"""
# The live-claim counts noeta_claimable_under_limits and the queue view make.
LIVE_IN_QUEUE = """
SELECT count(*) FROM tasks AS t
 WHERE t.status IN ('running', 'holding') AND t.queue = 'q1' AND t.lease_until > now()
"""
LIVE_BY_KEY = """
SELECT t.concurrency_key, count(*) FROM tasks AS t
 WHERE t.status IN ('running', 'holding') AND t.queue = 'q1'
   AND t.lease_until > now() AND t.concurrency_key IS NOT NULL
 GROUP BY 1
"""
# The web view's counts before 0021: the status a parameter, so no partial index served.
OLD_TASK_COUNTS = """
SELECT s.status, c.queue, c.n
  FROM unnest(%(statuses)s::text[]) AS s(status)
 CROSS JOIN LATERAL (
        SELECT queue, count(*) AS n
          FROM (SELECT queue FROM tasks WHERE status = s.status LIMIT %(cap)s) AS capped
         GROUP BY queue) AS c
 ORDER BY s.status, c.queue
"""
STATUSES = ["ready", "running", "holding", "waiting", "done", "failed", "cancelled"]
NEWEST = datetime(9999, 12, 31, tzinfo=UTC)  # a first page: before every row
READERS: list[tuple[str, str, dict[str, Any]]] = [
    ("web counts, as before 0021", OLD_TASK_COUNTS, {"cap": COUNT_CAP, "statuses": STATUSES}),
    ("web counts (every status, capped)", TASK_COUNTS, {"cap": COUNT_CAP}),
    *[
        (f"noeta list --status {s}", LIST_TASKS, {"status": s, "queue": None, "limit": 100})
        for s in ("running", "waiting", "cancelled", "failed", "ready", "done")
    ],
    *[
        (
            f"web page, status {s}",
            TASK_PAGE,
            {
                "statuses": [s],
                "queue": None,
                "since": None,
                "created_since": None,
                "job_regex": None,
                "error_regex": None,
                "limit": 50,
                "before_at": NEWEST,
                "before_id": "",
            },
        )
        for s in ("running", "cancelled", "failed")
    ],
    ("live claims of a queue (limits)", LIVE_IN_QUEUE, {}),
    ("live claims by key (limits)", LIVE_BY_KEY, {}),
]
# Each applied after the one before it: as migrated before 0021, none, as 0021 leaves it.
NARROW = "tasks_by_status_not_claimed_or_done"
VARIANTS = (
    (
        "tasks_by_status (status, queue): before 0021",
        f"DROP INDEX {NARROW}; CREATE INDEX tasks_by_status ON tasks (status, queue)",
    ),
    ("no index on status", "DROP INDEX tasks_by_status"),
    (
        f"{NARROW}: 0021",
        f"CREATE INDEX {NARROW} ON tasks (status, queue)"
        " WHERE status IN ('ready', 'waiting', 'failed', 'cancelled')",
    ),
)


async def explain(admin: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any]) -> str:
    cursor = await admin.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) {query}", params)
    return "\n".join(row[0] for row in await cursor.fetchall())


def summary(plan: str) -> str:
    """The plan's nodes that touch `tasks` (which index, or a scan), its time, its buffers."""
    nodes = re.findall(r"((?:Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)[^(]*)", plan)
    used = sorted({" ".join(node.split()) for node in nodes})
    took = re.search(r"Execution Time: ([\d.]+) ms", plan)
    buffers = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    pages = sum(int(x) for x in buffers.groups() if x) if buffers else 0
    return f"{took.group(1) if took else '?':>9} ms {pages:>8} pages  {'; '.join(used)}"


async def run(dsn: str) -> None:
    async with fresh_schema(dsn) as (_, admin):
        started = time.monotonic()
        for status, count in MIX:
            await admin.execute(FILL, {"status": status, "count": count, "queues": list(QUEUES)})
        await admin.execute("VACUUM ANALYZE tasks")
        print(f"filled {sum(c for _, c in MIX):,} tasks in {time.monotonic() - started:.0f} s")
        for name, change in VARIANTS:
            if change:
                await admin.execute(change)
                await admin.execute("ANALYZE tasks")
            print(f"\n## {name}")
            for label, query, params in READERS:
                await explain(admin, query, params)  # warm: the figures are of a hot cache
                print(f"  {label:<36} {summary(await explain(admin, query, params))}")


def main() -> None:
    options = parser(__doc__, quick=False).parse_args()
    with server(options.dsn) as dsn, contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(dsn))


if __name__ == "__main__":
    main()
