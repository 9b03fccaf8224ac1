"""Filling a migrated schema with a million tasks in set-based SQL, and reading what
PostgreSQL says of its tables (sizes, updates, HOT updates, dead rows, autovacuums).

The rows go into the real tables the migrations made, shaped as the store writes them
(noeta_create_task for a ready or delayed task; a finished task's row and log copied from
a task a real worker finished), so the claim, the drain and prune meet what a deployment
would hold. Only plain INSERT ... SELECT over generate_series: one statement per chunk,
not one round trip per task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

CHUNK = 200_000  # rows per statement: a few seconds each, no transaction of minutes

# A task as noeta_create_task leaves it: ready, due at `due` (NULL claimable_at never:
# a ready task is claimable once due), its log the one TaskCreated event.
FILL_WAITING = """
INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq)
SELECT %(prefix)s || g, (%(queues)s::text[])[1 + g %% cardinality(%(queues)s::text[])],
       'ready', due, due, 1
  FROM generate_series(%(first)s::int, %(last)s::int) AS g,
       LATERAL (SELECT clock_timestamp() + make_interval(secs => %(after)s + g * %(step)s))
               AS d(due)
"""
FILL_CREATED = """
INSERT INTO events (task_id, seq, type, data)
SELECT %(prefix)s || g, 1, %(type)s, %(data)s
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""

# A finished task: done two days ago, its log a copy of a template task's log (same
# events, times moved back), every tenth with a taken inbox entry, so prune deletes what
# a real deployment would keep.
FILL_FINISHED = """
INSERT INTO tasks (id, queue, status, owner, owner_epoch, last_seq, created_at, updated_at,
                   finished_at)
SELECT %(prefix)s || g, %(queue)s, 'done', 'gone', 1, %(last_seq)s,
       clock_timestamp() - interval '2 days', clock_timestamp() - interval '2 days',
       clock_timestamp() - interval '2 days'
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""
FILL_FINISHED_LOG = """
INSERT INTO events (task_id, seq, type, data, epoch, owner, created_at)
SELECT %(prefix)s || g, e.seq, e.type, e.data, e.epoch, 'gone',
       clock_timestamp() - interval '2 days'
  FROM generate_series(%(first)s::int, %(last)s::int) AS g,
       unnest(%(seqs)s::bigint[], %(types)s::text[], %(datas)s::text[], %(epochs)s::bigint[])
           AS e(seq, type, data, epoch)
"""
FILL_FINISHED_INBOX = """
INSERT INTO inbox (task_id, dedupe_key, payload, taken_seq, created_at)
SELECT %(prefix)s || g, 'bench', '{}', 2, clock_timestamp() - interval '2 days'
  FROM generate_series(%(first)s::int, %(last)s::int) AS g WHERE g %% 10 = 0
"""
TEMPLATE_LOG = "SELECT seq, type, data, epoch FROM events WHERE task_id = %s ORDER BY seq"

# Make every ready task of a prefix due now, in one statement: the drain starts at once.
RELEASE = """
UPDATE tasks SET ready_at = NULL, claimable_at = clock_timestamp()
 WHERE status = 'ready' AND queue = %(queue)s AND id LIKE %(prefix)s || '%%'
"""

TABLES = ("tasks", "events", "inbox", "snapshots")
SIZES = """
SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid),
       pg_total_relation_size(c.oid), c.reltuples::bigint
  FROM pg_class c WHERE c.oid = to_regclass(%s)
"""
# The bytes one finished task's rows hold (values and tuple headers, no page or index
# overhead): what a finished task costs until it is pruned.
FINISHED_BYTES = """
SELECT (SELECT sum(pg_column_size(e.*)) FROM events e WHERE e.task_id = %(id)s)
     + (SELECT pg_column_size(t.*) FROM tasks t WHERE t.id = %(id)s)
"""
INDEX_SIZES = """
SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
  FROM pg_index i WHERE i.indrelid = to_regclass(%s) ORDER BY 1
"""
# As JSON: n_tup_newpage_upd (an update that found no room on its page) is PostgreSQL 16+.
TABLE_STATS = "SELECT to_jsonb(s) FROM pg_stat_user_tables s WHERE relid = to_regclass(%s)"
STAT_NAMES = {
    "n_tup_upd": "updates",
    "n_tup_hot_upd": "hot",
    "n_tup_newpage_upd": "newpage",
    "n_dead_tup": "dead",
    "autovacuum_count": "autovacuums",
    "autoanalyze_count": "autoanalyzes",
}


async def rows(
    admin: psycopg.AsyncConnection[Any], statement: str, params: Any = ()
) -> list[tuple[Any, ...]]:
    cursor = await admin.execute(statement, params)
    return await cursor.fetchall() if cursor.description else []


async def fill_waiting(
    admin: psycopg.AsyncConnection[Any],
    prefix: str,
    count: int,
    queues: Sequence[str],
    first_event: tuple[str, str],
    *,
    after: float,
    step: float = 0.0,
) -> None:
    """`count` ready tasks `prefix`1.. spread over `queues`, the n-th due `after` + n *
    `step` seconds from now (a day ahead: waiting timers; an hour: held back to drain)."""
    for first in range(1, count + 1, CHUNK):
        span = {"prefix": prefix, "first": first, "last": min(count, first + CHUNK - 1)}
        waiting = {**span, "queues": list(queues), "after": after, "step": step}
        await admin.execute(FILL_WAITING, waiting)
        await admin.execute(FILL_CREATED, {**span, "type": first_event[0], "data": first_event[1]})


async def fill_finished(
    admin: psycopg.AsyncConnection[Any],
    prefix: str,
    count: int,
    queue: str,
    template: Sequence[tuple[Any, ...]],
) -> None:
    """`count` finished tasks whose logs copy `template` (rows of TEMPLATE_LOG)."""
    seqs, types, datas, epochs = (list(column) for column in zip(*template, strict=True))
    for first in range(1, count + 1, CHUNK):
        span = {"prefix": prefix, "first": first, "last": min(count, first + CHUNK - 1)}
        await admin.execute(FILL_FINISHED, {**span, "queue": queue, "last_seq": max(seqs)})
        log = {**span, "seqs": seqs, "types": types, "datas": datas, "epochs": epochs}
        await admin.execute(FILL_FINISHED_LOG, log)
        await admin.execute(FILL_FINISHED_INBOX, span)


async def release(admin: psycopg.AsyncConnection[Any], queue: str, prefix: str) -> None:
    await admin.execute(RELEASE, {"queue": queue, "prefix": prefix})


async def sizes(admin: psycopg.AsyncConnection[Any]) -> list[tuple[str, int, int, int, int]]:
    """(table, heap bytes, index bytes, total bytes, estimated rows) per store table."""
    found = []
    for name in TABLES:
        found += await rows(admin, SIZES, (name,))
    return [tuple(row) for row in found]  # type: ignore[misc]


async def index_sizes(admin: psycopg.AsyncConnection[Any], table: str) -> list[tuple[str, int]]:
    return [(name, size) for name, size in await rows(admin, INDEX_SIZES, (table,))]


async def table_stats(admin: psycopg.AsyncConnection[Any], table: str) -> dict[str, int]:
    """pg_stat_user_tables of `table`, after this backend's own counters are flushed."""
    await admin.execute("SELECT pg_stat_force_next_flush()")
    found = await rows(admin, TABLE_STATS, (table,))
    counters = found[0][0] if found else {}
    return {name: int(counters[key]) for key, name in STAT_NAMES.items() if key in counters}
