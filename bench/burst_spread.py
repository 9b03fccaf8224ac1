"""How an idle fleet takes a burst (issue 28 item 4, ADR-0087, ADR-0123), on real `noeta
worker` processes and a private PostgreSQL (fsync on) with pg_stat_statements.

N idle workers of 2 slots (--poll 300, --lease 3600: no poll and no refresh falls inside),
each in the idle registry; then a burst of 2N jobs that hold their slot until the bench
releases them, created in one bulk create (`enqueue_many`) or one create after another
(each awaited: submits close together). Measured from the first create: the time until a
first job is claimed and until every worker holds two (the burst spread over the whole
fleet; "created": until the last create returned, beside the same creates made just before
in a queue nobody serves, which call nobody), and the statements the server ran for
the burst until then (pg_stat_statements, every session's, the bench's own reads left
out), per job; and how often the creating session, sampled while it created, was waiting
on the wake-up lock (`Lock:advisory`: a registration holds it exclusively, ADR-0087).

    .venv/bin/python bench/burst_spread.py [--quick]   (always exits 0)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import held_job  # the sibling module: bench/ is on sys.path
from common import fresh_schema, parser
from idle_wakeups import counted, settled
from worker import Bench, ms, table

from noeta.backends.stores.postgres import PostgresStore
from noeta.client.job_tasks import job_task
from noeta.core.ports.store import NewTask

BENCH = Path(__file__).parent
SLOTS = 2
WITHIN = 60.0  # seconds: a burst not spread by then is reported as such
# The bench's own statements in the window counted (reset to STATEMENTS): HELD alone,
# left out by its pg_stat_activity (pg_stat_statements keeps no comment to mark it by).
HELD = """SELECT count(*), count(DISTINCT owner),
       (SELECT a.wait_event_type || ':' || a.wait_event FROM pg_stat_activity AS a
         WHERE a.application_name = 'bench-submit' AND a.state = 'active' LIMIT 1)
  FROM tasks WHERE queue = %s AND status = 'running'"""
PER_OWNER = """SELECT owner, count(*) FROM tasks
 WHERE queue = %s AND status = 'running' GROUP BY owner"""
STATEMENTS = """SELECT coalesce(sum(calls), 0) FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT LIKE 'SELECT count(*) FROM idle_workers%%'
   AND query NOT LIKE '%%pg_stat%%' AND query NOT LIKE '%%to_regclass%%'"""
RESET = "SELECT public.pg_stat_statements_reset()"
LEFT = "SELECT count(*) FROM tasks WHERE queue = %s AND status IN ('ready', 'running')"


async def burst(bench: Bench, workers: int, queue: str, bulk: bool, round_: int) -> list[str]:
    """One burst of 2 jobs a worker: the row of the table."""
    tag = "bulk" if bulk else "one"
    release = bench.scratch / f"release-{queue}-{round_}"
    jobs = [
        job_task(f"{queue}-{round_}-{n}", held_job.held, {"release": str(release)}, queue, None)  # type: ignore[arg-type]
        for n in range(workers * SLOTS)
    ]
    await bench.until(lambda: settled(bench, workers), "every worker waits idle", 300)
    # The same creates in a queue nobody serves, the fleet idle beside them: what a create
    # costs on this machine at this moment without a call.
    alone = [
        job_task(f"{queue}-{round_}-alone-{n}", held_job.held, {"release": ""}, "nobody", None)  # type: ignore[arg-type]
        for n in range(len(jobs))
    ]
    began = time.monotonic()
    await create(bench, alone, bulk)
    uncalled = time.monotonic() - began
    await bench.admin.execute(RESET)
    first = spread = None
    waits: list[str | None] = []  # what the creating session waited on, sampled
    started = time.monotonic()

    async def watch() -> None:
        nonlocal first, spread
        while time.monotonic() - started < WITHIN:
            held, owners, wait = (await bench.rows(HELD, (queue,)))[0]
            if created is None:
                waits.append(wait)
            at = time.monotonic() - started
            first = first if first is not None or not held else at
            if held == len(jobs) and owners == workers:
                spread = at
                return
            await asyncio.sleep(0.002)

    created: float | None = None
    watching = asyncio.create_task(watch())
    try:
        await create(bench, jobs, bulk)
        created = time.monotonic() - started
    finally:
        await watching
    statements = await bench.value(STATEMENTS)
    holding = sorted(count for _, count in await bench.rows(PER_OWNER, (queue,)))
    release.touch()
    await bench.until(lambda: left_none(bench, queue), f"the burst of {queue} ends", 120)
    advisory = sum(wait == "Lock:advisory" for wait in waits) / max(1, len(waits))
    seen = Counter(wait or "none (on CPU or the wire)" for wait in waits).most_common(3)
    print(f"    the creator, {len(waits)} samples: {seen}", flush=True)
    shown = "-" if spread is None else ms(spread)
    if spread is None:
        shown = f"not in {WITHIN:g} s (held: {holding})"
    print(f"  {workers} x {SLOTS} {tag}: first {ms(first or 0)} ms, spread {shown}", flush=True)
    return [
        f"{workers} x {SLOTS}",
        "one bulk create" if bulk else "one create at a time",
        str(len(jobs)),
        ms(uncalled),
        ms(created or 0),
        f"{advisory:.0%}",
        "-" if first is None else ms(first),
        shown,
        f"{statements / len(jobs):.1f}",
    ]


async def create(bench: Bench, jobs: list[NewTask], bulk: bool) -> None:
    if bulk:
        await bench.store.create_tasks(jobs)
    else:
        for job in jobs:
            await bench.store.create_task(job)


async def left_none(bench: Bench, queue: str) -> bool:
    return bool(await bench.value(LEFT, (queue,)) == 0)


async def fleet(dsn: str, workers: int) -> list[list[str]]:
    rows = []
    async with fresh_schema(dsn) as (url, admin):
        store = await PostgresStore.open(url, application_name="bench-submit")
        bench = Bench(url, admin, store)
        config = bench.scratch / "jobs.yaml"
        config.write_text("plugins:\n  - module: held_job\n")
        pythonpath = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))
        env = {"NOETA_CONFIG": str(config), "PYTHONPATH": pythonpath}
        queue = f"burst{workers}"
        names = [f"{queue}-w{n}" for n in range(workers)]
        try:
            async with contextlib.AsyncExitStack() as up:
                for first in range(0, workers, 10):  # ten at a time: each batch up in a minute
                    await up.enter_async_context(
                        bench.workers(
                            names[first : first + 10],
                            queue,
                            concurrency=SLOTS,
                            lease=3600.0,
                            poll=300.0,
                            env=env,
                        )
                    )
                for round_, bulk in enumerate((True, False, True, False)):
                    rows.append(await burst(bench, workers, queue, bulk, round_))
        finally:
            bench.kill_all()
            await store.close()
            shutil.rmtree(bench.scratch, ignore_errors=True)
    return rows


async def run(dsn: str, fleets: list[int]) -> None:
    rows = []
    for workers in fleets:
        rows += await fleet(dsn, workers)
    table(
        f"A burst of {SLOTS} held jobs a worker, on an idle fleet (--poll 300: calls alone)",
        [
            "workers x slots",
            "created by",
            "jobs",
            "created ms, nobody called",
            "created ms",
            "creator on wake lock",
            "first claimed ms",
            "all spread ms",
            "stmts/job",
        ],
        rows,
    )


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--workers", type=int, nargs="*", help="fleet sizes (1 3 50)")
    chosen = options.parse_args()
    fleets = chosen.workers or [1, 3, 10 if chosen.quick else 50]
    # 50 workers of 2 slots hold about 6 connections each (their pool, claims, LISTEN).
    counted(chosen.dsn, 600, lambda dsn: run(dsn, fleets))


if __name__ == "__main__":
    main()
