"""`noeta web` on a big store: every operator page at a million tasks, each timed through
the app itself (Starlette's TestClient), so the figure is what a browser waits for minus
the network: the task list's first page (rows, each row's kind, input, error and runtime,
counts, HTML), the next page by its cursor, its status, job-name and error-kind filters,
text searches (ids, prompts, job names, errors, alone and with status=failed; after the
search's index is built, whose time and size are printed), a task page, the workers,
queues (the first request: while its charts' rollup fills in the background),
model-limits, failures (every failure, from the search's index; the newest 2,000 read
one by one) and cost pages (the cost page's first walk of 30 days of finished tasks,
each agent task with a model call and its reply, timed until its figures are drawn).
Prints a table with the machine's load.

    .venv/bin/python bench/web.py                   # 1,000,000 tasks (about a minute to fill)
    .venv/bin/python bench/web.py --tasks 100000    # any number
    .venv/bin/python bench/web.py --quick           # 50,000
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

import psycopg
from starlette.testclient import TestClient

from bench.common import fresh_schema, parser, server
from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.web.app import create_app
from noeta.web.site import Site

# Most tasks finished, a few of each other status, four queues, one created per ms and
# finished a second later: at a million, every finish falls in the last hour, the most
# rows the queues page's charts ever count.
FILL_TASKS = """
INSERT INTO tasks (id, queue, status, owner, owner_epoch, lease_until, claimable_at,
                   last_seq, created_at, updated_at, finished_at)
SELECT 'task-' || g, 'q' || (g %% 4),
       CASE WHEN g %% 1000 = 0 THEN 'waiting' WHEN g %% 997 = 0 THEN 'ready'
            WHEN g %% 991 = 0 THEN 'running' WHEN g %% 89 = 0 THEN 'failed' ELSE 'done' END,
       'worker-' || (g %% 7), 1,
       CASE WHEN g %% 991 = 0 AND g %% 1000 <> 0 AND g %% 997 <> 0
            THEN now() + interval '1 hour' END,
       CASE WHEN g %% 991 = 0 AND g %% 1000 <> 0 AND g %% 997 <> 0 THEN now() + interval '1 hour'
            WHEN g %% 997 = 0 AND g %% 1000 <> 0 THEN now() END,
       1, now() - make_interval(secs => (%(n)s - g) / 1000.0), now(),
       CASE WHEN g %% 1000 <> 0 AND g %% 997 <> 0 AND g %% 991 <> 0
            THEN now() - make_interval(secs => (%(n)s - g) / 1000.0) + interval '1 second' END
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""
FILL_EVENTS = """
INSERT INTO events (task_id, seq, type, data, created_at)
SELECT 'task-' || g, 1, 'TaskCreated',
       '{"v":1,"model":"scripted:x.yaml","prompt":"summarise report ' || g || '","tools":[]}',
       now()
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""
# One task in ten a job (its call the second event: `resize` or `add`), and each failed
# task's end (a job's failure, of kind ValueError, or a model's): what the list's columns,
# its job-name and error-kind filters and its search over job names read.
FILL_JOB_CALLS = """
INSERT INTO events (task_id, seq, type, data, created_at)
SELECT 'task-' || g, 2, 'CallRequested',
       '{"v":1,"call_id":"job","name":"' || CASE WHEN g %% 20 = 0 THEN 'resize' ELSE 'add' END
       || '","input":{"n":' || g || '}}',
       now()
  FROM generate_series(%(first)s::int, %(last)s::int) AS g WHERE g %% 10 = 0
"""
FILL_FINISHES = """
INSERT INTO events (task_id, seq, type, data, created_at, epoch, owner)
SELECT 'task-' || g, 3, 'TaskFinished',
       '{"v":1,"status":"failed","answer":"","error":"'
       || CASE WHEN g %% 10 = 0 THEN 'add failed: ValueError: bad ' || g
               ELSE 'llm_error: overloaded' END || '"}',
       now(), 1, 'worker-1'
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
 WHERE g %% 89 = 0 AND g %% 1000 <> 0 AND g %% 997 <> 0 AND g %% 991 <> 0
"""
# Each agent task (nine in ten) called its model once and got a reply with its usage:
# what the cost page's walk reads (its ledger events), priced with the bundled table.
FILL_MODEL_CALLS = """
INSERT INTO events (task_id, seq, type, data, created_at, epoch, owner)
SELECT 'task-' || g, s.seq, s.type,
       CASE s.type WHEN 'ModelCalled'
            THEN '{"v":1,"request_sha256":"' || md5(g::text) || '","input_estimate":1200}'
            ELSE '{"v":1,"content":[{"type":"text","text":"the summary of report ' || g
                 || '"}],"stop_reason":"end_turn","usage":{"input_tokens":1200,'
                 || '"output_tokens":' || (g %% 500) || ',"cache_read_tokens":0,'
                 || '"cache_write_tokens":0}}' END,
       now(), 1, 'worker-1'
  FROM generate_series(%(first)s::int, %(last)s::int) AS g,
       (VALUES (4, 'ModelCalled'), (5, 'ModelReplied')) AS s(seq, type)
 WHERE g %% 10 <> 0
"""
BATCH = 100_000
RUNS = 7


def timed(http: TestClient, path: str) -> tuple[float, float, float, int]:
    """The first request's milliseconds (a cold page: the queues page's rollup is empty),
    then the median and worst over RUNS more, and the bytes."""
    started = time.perf_counter()
    first = http.get(path)
    cold = (time.perf_counter() - started) * 1000
    assert first.status_code == 200, (path, first.status_code, first.text[:300])
    took = []
    for _ in range(RUNS):
        started = time.perf_counter()
        http.get(path)
        took.append((time.perf_counter() - started) * 1000)
    return cold, statistics.median(took), max(took), len(first.content)


async def fill(admin: psycopg.AsyncConnection[Any], tasks: int) -> float:
    started = time.perf_counter()
    for first in range(1, tasks + 1, BATCH):
        last = min(tasks, first + BATCH - 1)
        params = {"first": first, "last": last, "n": tasks}
        await admin.execute(FILL_TASKS, params)
        await admin.execute(FILL_EVENTS, params)
        await admin.execute(FILL_JOB_CALLS, params)
        await admin.execute(FILL_FINISHES, params)
        await admin.execute(FILL_MODEL_CALLS, params)
    await admin.execute("UPDATE tasks SET last_seq = 3 WHERE status = 'failed'")
    # The insert's trigger stamps every finish with the statement's moment: a second after
    # its creation instead, as the fill means (one finish per ms; the cost page's walk, like
    # the queues page's charts, reads finishes in their order).
    await admin.execute(
        "UPDATE tasks SET finished_at = created_at + interval '1 second'"
        " WHERE finished_at IS NOT NULL"
    )
    await admin.execute("VACUUM ANALYZE tasks")
    await admin.execute("VACUUM ANALYZE events")
    return time.perf_counter() - started


async def build_search_index(url: str) -> tuple[float, int]:
    """The search's index built whole, as `noeta web` builds it behind a first search:
    its seconds and batches."""
    store = await open_store(url)
    views = store.capabilities.views
    assert views is not None
    started, steps = time.perf_counter(), 1
    try:
        while not await views.index_search():
            steps += 1
    finally:
        await store.close()
    return time.perf_counter() - started, steps


async def run(dsn: str, tasks: int) -> None:
    async with fresh_schema(dsn) as (url, admin):
        seconds = await fill(admin, tasks)
        print(f"filled {tasks:,} tasks and their first events in {seconds:.1f} s")
        seconds, steps = await build_search_index(url)
        print(f"built the search index in {seconds:.1f} s ({steps} steps of each walk)")
        await admin.execute("VACUUM ANALYZE task_search")
        cursor = await admin.execute("SELECT pg_total_relation_size('task_search')")
        size = ((await cursor.fetchone()) or (0,))[0]
        print(f"task_search with its indexes: {size / 2**20:,.0f} MiB")
        await asyncio.to_thread(measure, url, tasks)


def measure(url: str, tasks: int) -> None:
    site = Site(AsyncClient(url), allowed_hosts=("testserver",))
    with TestClient(create_app(site)) as http:
        http.get("/login", params={"token": site.token})  # as the printed link does
        listing = http.get("/tasks").text
        cursor = listing.split('href="/tasks?before=', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        rows = [
            ("task list, first page (rows + counts)", "/tasks"),
            ("task list, next page (cursor)", f"/tasks?before={cursor}"),
            ("task list, status=waiting", "/tasks?status=waiting"),
            ("task list, status=failed", "/tasks?status=failed"),
            ("task list, queue=q1, status=done", "/tasks?status=done&queue=q1"),
            ("task list, name=resize (a job's function)", "/tasks?name=resize"),
            ("task list, error=ValueError", "/tasks?error=ValueError"),
            ("task list, status=failed, error=llm_error", "/tasks?status=failed&error=llm_error"),
            ("search: an id's end", f"/tasks?q=-{tasks // 2}"),
            ("search: words of one prompt", f"/tasks?q=report%20{tasks // 3}"),
            ("search: in every prompt", "/tasks?q=summarise"),
            ("search: part of a job's name", "/tasks?q=resiz"),
            ("search: an error message", f"/tasks?q=bad%20{(tasks // 890) * 890}"),
            ("search: found nowhere", "/tasks?q=nowhere"),
            ("search: three characters, found nowhere", "/tasks?q=zqx"),
            ("search + status=failed", "/tasks?q=overloaded&status=failed"),
            (
                "search + status=failed, a rare text",
                f"/tasks?q=bad%20{(tasks // 890) * 890}&status=failed",
            ),
            ("a task's page", f"/tasks/task-{tasks // 2}"),
            ("workers", "/workers"),
            ("queues, finished per minute (last hour)", "/queues"),
            ("queues, finished per hour (last day)", "/queues?range=day"),
            ("one queue, finished per minute", "/queues?queue=q1"),
            ("model limits", "/limits"),
            ("failures by cause (every failure, indexed)", "/failures"),
            ("failures by cause (the newest 2,000, read)", "/failures?newest=2000"),
            ("cost page, its figures (after the walk below)", "/cost"),
            ("cost page, by concurrency key, 7 days", "/cost?by=key&days=7"),
        ]
        started = time.perf_counter()
        first = http.get("/cost")
        cold = (time.perf_counter() - started) * 1000
        while "computing:" in http.get("/cost").text:  # each request waits up to 0.5 s
            pass
        walked = time.perf_counter() - started
        said = "computing" if "computing:" in first.text else "drawn"
        print(f"cost page: first request {cold:.0f} ms ({said}),")
        print(f"  its figures drawn after {walked:.1f} s (the walk of 30 days of finished tasks)")
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\n{tasks:,} tasks; load {load}; the first request, then median and worst of {RUNS}")
        print(f"{'page':<42} {'first ms':>9} {'median ms':>10} {'worst ms':>9} {'bytes':>8}")
        for name, path in rows:
            cold, median, worst, size = timed(http, path)
            print(f"{name:<42} {cold:>9.1f} {median:>10.1f} {worst:>9.1f} {size:>8,}")


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--tasks", type=int, help="how many tasks (default 1,000,000)")
    options = arguments.parse_args()
    tasks = options.tasks or (50_000 if options.quick else 1_000_000)
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, tasks))


if __name__ == "__main__":
    main()
