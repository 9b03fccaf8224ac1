"""Where one `enqueue_many` of 10,000 jobs spends its time: the client's checks and build,
the client's encoding of the statement's parameters, the wire, and the server's statement
(and the statements inside it), median of several batches; then what a task row passes
through on the server (the indexes a fresh ready job enters, the per-row triggers).

Run from /tmp with PYTHONPATH=<checkout>: the same file measures any checkout that has
`enqueue_many` (it calls only the client's batch build and the store's bulk port).
  .venv/bin/python bench/enqueue_split.py [--jobs N] [--batches N]
It starts a private embedded PostgreSQL (fsync on, pg_stat_statements tracking nested
statements). Times are wall clock (perf_counter) and the client's CPU (process_time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import noop_job  # the sibling module: bench/ is on sys.path
import psycopg
from common import counted_server, cpu_seconds, fresh_schema
from worker import table

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.client.job_tasks import job_batch

TARGET = 10_000.0  # jobs/s written by enqueue_many (issue 29)

STATEMENTS = """
SELECT toplevel, sum(calls), sum(total_exec_time), min(query) FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (query LIKE '%%noeta_create_tasks%%' OR query LIKE '%%INSERT INTO%%')
 GROUP BY toplevel, query ORDER BY toplevel DESC, sum(total_exec_time) DESC
"""
BACKENDS = """
SELECT pid FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""
TRIGGERS = """
SELECT c.relname, t.tgname, t.tgenabled <> 'D', pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE NOT t.tgisinternal AND c.relname IN ('tasks', 'events')
   AND c.relnamespace = current_schema()::regnamespace AND t.tgtype & 1 = 1
 ORDER BY 1, 2
"""
INDEXES = """
SELECT c.relname, i.indexrelid::regclass::text, pg_get_expr(i.indpred, i.indrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 WHERE c.relname IN ('tasks', 'events') AND c.relnamespace = current_schema()::regnamespace
 ORDER BY 1, 2
"""


async def measure(dsn: str, jobs: int, batches: int) -> None:
    async with fresh_schema(dsn) as (url, admin):
        store = await open_store(url)
        bulk = store.capabilities.bulk
        assert bulk is not None
        tool = noop_job.noop
        start = await store.clock()
        later = start.replace(year=start.year + 1)
        rows: list[tuple[float, float, float, float, float]] = []
        for batch in range(batches + 1):  # the first warms the statement and the pool
            if batch == 1:
                await admin.execute("SELECT public.pg_stat_statements_reset()")
            began = time.perf_counter()
            tasks = job_batch(tool, [{}] * jobs, queue="q", start=later, key=None, priority=0)  # type: ignore[arg-type]
            built, built_cpu = time.perf_counter(), time.process_time()
            await bulk.create_tasks(tasks)
            sent, sent_cpu = time.perf_counter(), time.process_time()
            server = await _server_ms(admin)
            if batch:
                rows.append(
                    (
                        (built - began) * 1e3,
                        (sent_cpu - built_cpu) * 1e3,
                        (sent - built) * 1e3,
                        server - sum(r[3] for r in rows),
                        (sent - began) * 1e3,
                    )
                )
        nested = await admin.execute(STATEMENTS)
        statements = await nested.fetchall()
        await store.close()
        await _report(admin, rows, statements, jobs)
        await _through_the_client(url, admin, jobs, batches)


async def _through_the_client(
    url: str, admin: psycopg.AsyncConnection[Any], jobs: int, batches: int
) -> None:
    """What bench/jobs.py measures: `AsyncClient.enqueue_many`'s whole call, the same
    batch size, median of `batches` calls after one that warms the pool and statement.
    Beside it the CPU the call took, the client's and its server backends': on a loaded
    machine the wall clock is mostly waiting for a core, the CPU much less so."""
    seconds, cpu = [], []
    async with AsyncClient(url) as client:
        for batch in range(batches + 1):
            began, client_cpu = time.perf_counter(), time.process_time()
            server_cpu = await _backends_cpu(admin)
            await client.enqueue_many("noop", [{}] * jobs, queue="client", delay=3600)
            if batch:
                seconds.append(time.perf_counter() - began)
                server = await _backends_cpu(admin) - server_cpu
                cpu.append((time.process_time() - client_cpu, server))
    rate = jobs / statistics.median(seconds)
    verdict = "met" if rate >= TARGET else "MISSED"
    print(
        f"\nAsyncClient.enqueue_many of {jobs:,} jobs, median of {batches}: {rate:,.0f} jobs/s"
        f" (issue 29's target {TARGET:,.0f}: {verdict})"
    )
    client_ms = statistics.median(c for c, _ in cpu) * 1e3
    server_ms = statistics.median(s for _, s in cpu) * 1e3
    print(
        f"  CPU a call: client {client_ms:.0f} ms + server {server_ms:.0f} ms; "
        f"{jobs / (client_ms + server_ms) * 1e3:,.0f} jobs/s if nothing else ran"
    )


async def _backends_cpu(admin: psycopg.AsyncConnection[Any]) -> float:
    """Seconds of CPU the server's other backends of this database have used (Linux,
    a local server: /proc/PID/schedstat; 0 where it cannot be read)."""
    cursor = await admin.execute(BACKENDS)
    return cpu_seconds([pid for (pid,) in await cursor.fetchall()])


async def _server_ms(admin: psycopg.AsyncConnection[Any]) -> float:
    """The top-level create statements' execution time so far (ms)."""
    cursor = await admin.execute(STATEMENTS)
    return sum(float(total) for top, _, total, _ in await cursor.fetchall() if top)


async def _report(
    admin: psycopg.AsyncConnection[Any],
    rows: list[tuple[float, float, float, float, float]],
    statements: list[tuple[Any, ...]],
    jobs: int,
) -> None:
    build, encode, call, server, total = (
        statistics.median(column) for column in zip(*rows, strict=True)
    )
    wire = max(0.0, call - encode - server)
    split = [
        ["checks and build (job_batch)", f"{build:.0f}", f"{build / total:.0%}"],
        ["parameters encoded (client CPU in the call)", f"{encode:.0f}", f"{encode / total:.0%}"],
        ["server: the statement", f"{server:.0f}", f"{server / total:.0%}"],
        ["wire and waits (the rest of the call)", f"{wire:.0f}", f"{wire / total:.0%}"],
        ["total", f"{total:.0f}", f"{jobs / total * 1e3:,.0f} jobs/s"],
    ]
    title = f"One enqueue_many of {jobs:,} jobs, median of {len(rows)} batches (ms)"
    table(title, ["part", "ms", "share"], split)
    calls = max(1, len(rows))
    inner = [
        [
            "top" if top else "  inside",
            f"{float(total) / calls:.0f}",
            " ".join(str(query).split())[:70],
        ]
        for top, _, total, query in statements
    ]
    table("The server's statements, ms a batch (pg_stat_statements)", ["", "ms", "query"], inner)
    cursor = await admin.execute(INDEXES)
    indexes = [
        [relation, name, predicate or "(every row)"]
        for relation, name, predicate in await cursor.fetchall()
    ]
    table(
        "Indexes a row may enter (a fresh ready job: those whose predicate holds)",
        ["table", "index", "predicate"],
        indexes,
    )
    cursor = await admin.execute(TRIGGERS)
    triggers = [
        [relation, name, "on" if enabled else "disabled", " ".join(str(d).split())[:80]]
        for relation, name, enabled, d in await cursor.fetchall()
    ]
    table("Per-row triggers on tasks and events", ["table", "trigger", "", "definition"], triggers)


def main() -> None:
    options = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    options.add_argument("--jobs", type=int, default=10_000)
    options.add_argument("--batches", type=int, default=5)
    arguments = options.parse_args()
    with counted_server({"pg_stat_statements.track": "all"}) as dsn:
        asyncio.run(measure(dsn, arguments.jobs, arguments.batches))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
