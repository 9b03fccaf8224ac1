"""Where a plain-job drain waits: bench/job_drain.py's drain (held back, released once the
workers listen) with, during it, the workers' backends in pg_stat_activity every 10 ms
(state and wait event, as shares of the samples), the machine's busy share (/proc/stat),
the jobs each WAL flush carried and its mean time (pg_stat_io, track_wal_io_timing on),
and the statements a job (pg_stat_statements).

Run from outside any checkout (a worker's working directory must not shadow PYTHONPATH):
  cd /tmp && <venv>/bin/python <checkout>/bench/drain_waits.py --tree <a checkout> \
      [--jobs 10000] [--concurrency 16] [--processes 1 --processes 2]
It starts its own embedded PostgreSQL (fsync on, pg_stat_statements loaded).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
from pathlib import Path
from typing import Any

import jobs  # the sibling modules: bench/ is on sys.path
import noop_job
import psycopg
from common import counted_server  # the sibling module (bench/ is on sys.path)
from job_drain import drain
from worker import find_postmaster, fresh_bench

ACTIVE = """
SELECT right(application_name, 3), left(ltrim(query, E' \n'), 24),
       coalesce(wait_event_type || ':' || wait_event, 'CPU')
  FROM pg_stat_activity WHERE application_name LIKE 'noeta-worker:%' AND state = 'active'
"""
WAL = "SELECT sum(fsyncs)::float8, sum(fsync_time)::float8 FROM pg_stat_io WHERE object = 'wal'"
STATEMENTS = """
SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 24), sum(calls)::float8
  FROM public.pg_stat_statements WHERE query LIKE 'WITH due%%' OR query LIKE '%%appended_seq%%'
 GROUP BY 1 ORDER BY 2 DESC
"""


def idle_and_total() -> tuple[int, int]:
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return ticks[3] + ticks[4], sum(ticks)


async def sample(dsn: str, stop: asyncio.Event) -> tuple[int, collections.Counter[Any], float]:
    """Samples with a worker backend active, their (worker, statement, wait) counts, and
    the machine's busy share over the drain."""
    seen: collections.Counter[Any] = collections.Counter()
    samples, (idle, total) = 0, idle_and_total()
    # 'bench-submit': a session job_drain.drain does not wait for to end
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, application_name="bench-submit"
    ) as connection:
        while not stop.is_set():
            rows = await (await connection.execute(ACTIVE)).fetchall()
            samples += bool(rows)
            seen.update(tuple(row) for row in rows)
            await asyncio.sleep(0.01)
    idle_after, total_after = idle_and_total()
    return samples, seen, 1 - (idle_after - idle) / max(1, total_after - total)


async def run(dsn: str, tree: str, count: int, concurrency: int, processes: list[int]) -> None:
    async with fresh_bench(dsn) as bench:
        bench.postmaster = await find_postmaster(bench)
        job_bench = jobs.JobBench(bench, noop_job.FUNCTIONS["noop_async"])
        for number, process_count in enumerate(processes):
            await bench.admin.execute("SELECT pg_stat_force_next_flush()")
            wal = (await bench.rows(WAL))[0]
            await bench.admin.execute("SELECT public.pg_stat_statements_reset()")
            stop = asyncio.Event()
            sampling = asyncio.create_task(sample(bench.dsn, stop))
            label = f"w{number}-c{concurrency}"
            figures = await drain(bench, job_bench, tree, label, count, process_count, concurrency)
            stop.set()
            samples, seen, busy = await sampling
            await bench.admin.execute("SELECT pg_stat_force_next_flush()")
            wal_after = (await bench.rows(WAL))[0]
            flushes = max(1.0, wal_after[0] - wal[0])
            print(
                f"\n{process_count} process(es) at concurrency {concurrency}: "
                f"{figures[0]:,.0f} jobs/s, "
                f"worker {figures[1]:.2f} and server {figures[2]:.2f} CPU ms a job, "
                f"machine busy {busy:.0%}; {count / flushes:.1f} jobs a WAL flush "
                f"(its fsync {(wal_after[1] - wal[1]) / flushes:.2f} ms on average)"
            )
            for statement, calls in await bench.rows(STATEMENTS):
                print(f"  statements a job: {calls / count:.3f}  {statement}")
            print(f"  active worker backends, share of {samples} samples with one:")
            for (who, statement, wait), n in seen.most_common(10):
                print(f"    {n / max(1, samples):.3f}  {who}  {wait:22} {statement}")


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--tree", required=True, help="the checkout whose workers run")
    arguments.add_argument("--jobs", type=int, default=10_000)
    arguments.add_argument("--concurrency", type=int, default=jobs.CONCURRENCY)
    arguments.add_argument("--processes", type=int, action="append", help="repeatable (1, 2)")
    options = arguments.parse_args()
    with counted_server({"track_wal_io_timing": "on"}) as dsn:
        tree = os.path.abspath(options.tree)
        processes = options.processes or [1, 2]
        asyncio.run(run(dsn, tree, options.jobs, options.concurrency, processes))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
