"""What the job claim costs the server: one claim of one job (an idle worker's) and claims of
25 (a drain's), each as the store sends it (prepared, its generic plan), read from
pg_stat_statements: execution a claim and a job, WAL bytes and records a job, buffer hits.

Run:  .venv/bin/python bench/claim_cost.py [--jobs N] [--explain]
It starts a private embedded PostgreSQL (fsync on), creates N no-op jobs of
bench/noop_job.py through the Store API (half claimed one by one, half 25 at a time) and
claims them with CLAIM_AND_START_JOBS and the jobs' own pin, so each claim starts its job.
With --explain, auto_explain logs every claim (analyze, buffers, WAL, nested statements)
and the plan of the last claim of one is printed. Times depend on the load: run it on two
checkouts in turn to compare them (docs/scaling.md, "The job claim on the server").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import noop_job  # the sibling modules (bench/ is on sys.path)
import psycopg
from common import fresh_schema

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.job_starts import pin_names, pinned_data
from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.claim_sql import CLAIM_AND_START_JOBS
from noeta.backends.stores.postgres.claimed import claim_params
from noeta.client.job_tasks import job_task
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import JobStarts

BATCH = 25
EXPLAIN = {
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_buffers": "on",
    "auto_explain.log_wal": "on",
    "auto_explain.log_nested_statements": "on",
    "auto_explain.log_triggers": "on",
}
STATISTICS = """
SELECT calls, total_exec_time, wal_bytes, wal_records, shared_blks_hit
  FROM public.pg_stat_statements WHERE queryid = %s AND toplevel
"""


async def claim_params_for(admin: psycopg.AsyncConnection[Any], limit: int) -> dict[str, Any]:
    """The claim's parameters, with the jobs' own pin as the claimer's."""
    cursor = await admin.execute("SELECT data FROM events WHERE seq = 3 LIMIT 1")
    row = await cursor.fetchone()
    assert row is not None, "the jobs have no pin"
    starts = JobStarts(tuple(Pin(*pin) for pin in json.loads(row[0])["pins"]))
    params = claim_params("bench-w", ["q"], 60, limit)
    params.update(version="v", pinned=pinned_data(starts), needs=pin_names(starts))
    return params


async def fill(url: str, jobs: int) -> None:
    """`jobs` no-op jobs in queue q, created through the Store API."""
    store = await PostgresStore.open(url, max_connections=4)
    limit = asyncio.Semaphore(8)

    async def create(task_id: str) -> None:
        async with limit:
            await store.create_task(job_task(task_id, noop_job.noop, {}, "q", None))  # type: ignore[arg-type]

    await asyncio.gather(*(create(f"j{n}") for n in range(jobs)))
    await store.close()


async def measure(dsn: str, jobs: int) -> None:
    async with fresh_schema(dsn) as (url, admin):
        await fill(url, jobs)
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, prepare_threshold=0
        ) as claimer:
            await claimer.execute("SET plan_cache_mode = force_generic_plan")  # as the store's
            print("  claim of  calls  exec µs a claim  a job  WAL B a job  records  buffer hits")
            for size, count in ((1, jobs // 2), (BATCH, (jobs - jobs // 2) // BATCH)):
                params = await claim_params_for(admin, size)
                plan = await claimer.execute(
                    "EXPLAIN (VERBOSE, FORMAT JSON) " + CLAIM_AND_START_JOBS, params
                )
                found = await plan.fetchone()
                assert found is not None
                await admin.execute("SELECT public.pg_stat_statements_reset()")
                for _ in range(count):
                    cursor = await claimer.execute(CLAIM_AND_START_JOBS, params)
                    started = [r for r in await cursor.fetchall() if r[4] == "ToolStarted"]
                    assert len(started) == size, "a claim did not start its jobs"
                cursor = await admin.execute(STATISTICS, (found[0][0]["Query Identifier"],))
                calls, run, wal, records, hits = (await cursor.fetchone()) or (0, 0, 0, 0, 0)
                if calls:
                    print(
                        f"  {size:8d} {calls:6d} {run * 1000 / calls:16.1f} "
                        f"{run * 1000 / calls / size:6.1f} {int(wal) / calls / size:12.0f}"
                        f" {records / calls / size:8.1f} {hits / calls:12.1f}"
                    )


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--jobs", type=int, default=2000)
    arguments.add_argument("--explain", action="store_true", help="auto_explain every claim")
    options = arguments.parse_args()
    settings = {"shared_preload_libraries": "pg_stat_statements"}
    if options.explain:
        settings = {"shared_preload_libraries": "pg_stat_statements,auto_explain", **EXPLAIN}
    settings["pg_stat_statements.track"] = "all"
    embedded = EmbeddedPostgres(make_home("noeta-bench-pg-"), settings=settings)
    try:
        dsn = embedded.start()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        asyncio.run(measure(dsn, options.jobs))
        if options.explain:
            print_last_lone_plan(embedded.log_file)
    finally:
        embedded.stop()
        shutil.rmtree(embedded.root, ignore_errors=True)


def print_last_lone_plan(log: Path) -> None:
    """The last plan auto_explain logged for a claim of one (its limit parameter '1')."""
    plans = log.read_text(encoding="utf-8", errors="replace").split(" LOG:  duration: ")
    lone = [p for p in plans if "owner_epoch = t.owner_epoch +" in p and "$4 = '1'" in p]
    if lone:
        text = lone[-1].splitlines()
        print("\nauto_explain of one claim of one job:\n" + text[0])
        print("\n".join(line for line in text[1:] if "Query Text" not in line))


if __name__ == "__main__":
    main()
