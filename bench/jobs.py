"""Benchmark plain jobs on real `noeta worker` processes: drain rate and idle pickup.

Every figure comes from `noeta worker` subprocesses configured with bench/noop_job.py (a
`@noeta.tool` that does nothing), on one PostgreSQL server with fsync on; times are the
database clock's (events.created_at).

1. Drain: N no-op jobs, made through the client's own job_task and the Store API, due an
   hour ahead; once the workers LISTEN, one UPDATE makes them claimable. Rate = N / (last
   TaskFinished - first ToolStarted), 1 and 2 processes. Every step is fenced: a job is a
   claim that writes its ToolStarted (ADR-0101), and one append of ToolFinished +
   TaskFinished (ADR-0055).
2. The same drain beside 200,000 jobs scheduled a day ahead (ready_at).
3. Idle enqueue-to-start: one idle worker (--poll 1: only LISTEN/NOTIFY makes it fast),
   jobs enqueued one at a time 75 ms apart; latency = ToolStarted - TaskCreated.
   Again beside the 200,000 future jobs. Then where that time goes, step by step
   (bench/job_pickup.py: the create's commit, the NOTIFY, the claim, the load, ToolStarted).
4. Enqueue through the client: `enqueue_many` of 10,000 jobs in one call, beside
   `enqueue` one at a time (awaited in turn), in the same run (wall clock, perf_counter).
5. The claim with and without the capability filter, and past jobs its claimer cannot
   run (bench/claim_offers.py, on the same server; ADR-0092).

Beside each, in the same run on the same server (bench/job_baselines.py): pgbench running
noeta's own statements for a job (claim, ToolStarted, the finish), and the bare claim +
finish, over 16 connections per worker process; for pickup, a bare psycopg loop that
LISTENs and runs the claim and the ToolStarted append (pgbench cannot LISTEN).

Run:  .venv/bin/python bench/jobs.py [--dsn DSN] [--quick]    (always exits 0)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import claim_offers  # the sibling modules: bench/ is on sys.path
import noop_job
from common import parser, server
from job_baselines import bare_pickups, create_many, job_script, pgbench_jobs_per_second
from job_pickup import STEPS, pickup_steps
from worker import PAUSE, Bench, fresh_bench, ms, table, verdict

from noeta.client import AsyncClient
from noeta.client.job_tasks import job_task

BENCH = Path(__file__).parent
# The targets, from the peers measured on this machine (PostgreSQL 15, fsync on).
DBOS = (987.0, 1092.0)
PROCRASTINATE = (624.0, 750.0)
PGQUEUER = (5195.0, 5965.0)
LATENCY_TARGET_MS = 1.5
BACKLOG_KEEPS = 0.95
BULK_TARGET = 10_000.0  # jobs/s written by enqueue_many (issue 29)

DRAIN = """
SELECT extract(epoch FROM max(e.created_at) FILTER (WHERE e.type = 'TaskFinished')
                        - min(e.created_at) FILTER (WHERE e.type = 'ToolStarted'))
  FROM events e WHERE e.task_id LIKE %s
"""
RELEASE = "UPDATE tasks SET ready_at = NULL, claimable_at = clock_timestamp() WHERE queue = %s"
PICKUP = """
SELECT extract(epoch FROM s.created_at - c.created_at)
  FROM events c JOIN events s ON s.task_id = c.task_id AND s.type = 'ToolStarted'
 WHERE c.type = 'TaskCreated' AND c.task_id = ANY(%s)
"""


@dataclass(frozen=True)
class Sizes:
    drain: int
    latency: int
    future: int
    bulk: int = 10_000
    one_by_one: int = 500


FULL = Sizes(5000, 100, 200_000)
QUICK = Sizes(400, 15, 20_000, bulk=10_000, one_by_one=100)
CONCURRENCY = 16  # per worker process; pgbench runs as many connections


class JobBench:
    def __init__(self, bench: Bench, function: object = noop_job.noop) -> None:
        self.bench = bench
        self.function = function  # the no-op drained: sync (a thread hop) or async
        self.config = config = bench.scratch / "jobs.yaml"
        config.write_text("plugins:\n  - module: noop_job\n")
        pythonpath = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))
        self.env = {"NOETA_CONFIG": str(config), "PYTHONPATH": pythonpath}

    async def enqueue(self, ids: Sequence[str], queue: str, **at: object) -> None:
        limit = asyncio.Semaphore(8)
        ready_at = at.get("ready_at")

        async def one(task_id: str) -> None:
            async with limit:
                made = job_task(task_id, self.function, {}, queue, ready_at)  # type: ignore[arg-type]
                await self.bench.store.create_task(made)

        await asyncio.gather(*(one(task_id) for task_id in ids))

    async def held_back(self, queue: str, count: int, ahead: str) -> list[str]:
        """`count` no-op jobs of `queue`, not due for `ahead` (made in SQL, in batches)."""
        later = await self.bench.value(f"SELECT clock_timestamp() + interval '{ahead}'")
        template = job_task("x", self.function, {}, queue, later)  # type: ignore[arg-type]
        await create_many(self.bench.admin, template, f"{queue}-", count)
        await self.bench.admin.execute("VACUUM (ANALYZE) tasks")
        return [f"{queue}-{n}" for n in range(count)]

    async def future(self, count: int) -> None:
        await self.held_back("later", count, "1 day")

    async def drain(self, label: str, count: int, processes: int) -> float:
        queue = f"drain-{label}-{processes}"
        ids = await self.held_back(queue, count, "1 hour")
        names = [f"{queue}-w{i}" for i in range(processes)]
        async with self.bench.workers(names, queue, concurrency=CONCURRENCY, env=self.env):
            await self.bench.admin.execute(RELEASE, (queue,))
            await self.bench.finished(queue, ids, within=900)
        seconds = float(await self.bench.value(DRAIN, (f"{queue}-%",)))
        print(
            f"  drain {label}, {processes} process(es): {count / seconds:,.0f} jobs/s", flush=True
        )
        return count / seconds

    async def pgbench(self, label: str, count: int, processes: int, durable_start: bool) -> float:
        """The same drain by pgbench: noeta's statements (durable_start) or claim + finish."""
        queue = f"pgbench-{label}-{processes}-{'full' if durable_start else 'bare'}"
        await self.held_back(queue, count, "1 hour")
        await self.bench.admin.execute(RELEASE, (queue,))
        script = job_script(queue, durable_start)
        rate = await pgbench_jobs_per_second(self.bench.dsn, script, CONCURRENCY * processes, count)
        what = "noeta's statements" if durable_start else "claim + finish"
        print(f"  pgbench {label}, {what}, {processes}: {rate:,.0f} jobs/s", flush=True)
        return rate

    async def pickups(self, label: str, count: int) -> list[float]:
        ids = [f"lat-{label}-{n}" for n in range(count)]
        for task_id in ids:
            await self.enqueue([task_id], "latency")
            await asyncio.sleep(PAUSE)  # the worker is idle again before the next
        await self.bench.finished("latency", ids)
        return [float(row[0]) for row in await self.bench.rows(PICKUP, (ids,))]

    async def bare_pickups(self, label: str, count: int) -> list[float]:
        """The pickup baseline: the same jobs, picked up by a bare LISTEN + claim loop."""
        ids = [f"bare-{label}-{n}" for n in range(count)]

        queue = f"bare-{label}"  # its own: an earlier run's claims lapse, claimable again

        async def one(task_id: str) -> None:
            await self.enqueue([task_id], queue)

        await bare_pickups(self.bench.dsn, queue, one, ids, PAUSE)
        return [float(row[0]) for row in await self.bench.rows(PICKUP, (ids,))]


async def run(dsn: str, sizes: Sizes) -> None:
    async with fresh_bench(dsn) as bench:
        jobs = JobBench(bench)
        rates: dict[tuple[str, int], tuple[float, float, float]] = {}
        pickups: dict[str, tuple[list[float], list[float]]] = {}
        await measure_drains(jobs, "empty", sizes.drain, rates)
        pickups["empty"] = await measure_pickups(jobs, "empty", sizes.latency)
        try:
            steps = await pickup_steps(
                bench.dsn, str(jobs.config), noop_job.noop, sizes.latency, PAUSE
            )  # type: ignore[arg-type]
        except TimeoutError:  # it waits on the wake-ups before ADR-0087's registration
            steps = None
        await jobs.future(sizes.future)
        pickups["future"] = await measure_pickups(jobs, "future", sizes.latency)
        await measure_drains(jobs, "future", sizes.drain, rates)
        enqueued = await measure_enqueues(bench.dsn, sizes)
    drain_table(sizes, rates)
    pickup_table(sizes, pickups)
    enqueue_table(enqueued)
    title = "Where an idle pickup goes (empty case; in one process: the store, the runner and"
    title += " LISTEN, no worker loop), median ms after the step before"
    if steps is None:
        print(f"\n{title}: not measured (job_pickup.py predates ADR-0087's wake-ups)")
    else:
        table(title, list(STEPS), [[ms(step) for step in steps]])
    await claim_offers.run(dsn, quick=sizes is QUICK)


async def measure_drains(
    jobs: JobBench, case: str, count: int, rates: dict[tuple[str, int], tuple[float, float, float]]
) -> None:
    for processes in (1, 2):
        noeta = await jobs.drain(case, count, processes)
        statements = await jobs.pgbench(case, count, processes, durable_start=True)
        bare = await jobs.pgbench(case, count, processes, durable_start=False)
        rates[case, processes] = (noeta, statements, bare)


async def measure_pickups(jobs: JobBench, case: str, count: int) -> tuple[list[float], list[float]]:
    async with jobs.bench.workers(["latency-w"], "latency", env=jobs.env):
        await jobs.pickups(f"warm-{case}", 5)
        noeta = await jobs.pickups(case, count)
    await jobs.bare_pickups(f"warm-{case}", 5)
    return noeta, await jobs.bare_pickups(case, count)


async def measure_enqueues(dsn: str, sizes: Sizes) -> list[tuple[str, int, float]]:
    """(how, jobs, jobs/s) of the client's enqueue_many and of enqueue one at a time. The
    jobs are due an hour ahead (nobody runs them); the batch twice, the second counted."""
    measured = []
    async with AsyncClient(dsn) as client:
        inputs: list[dict[str, object]] = [{}] * sizes.bulk
        for _ in range(2):  # the first warms the statement, the pool, the imports
            started = time.perf_counter()
            await client.enqueue_many("noop", inputs, queue="enqueued", delay=3600)
            seconds = time.perf_counter() - started
        measured.append(("enqueue_many, one call", sizes.bulk, sizes.bulk / seconds))
        started = time.perf_counter()
        for _ in range(sizes.one_by_one):
            await client.enqueue("noop", {}, queue="enqueued", delay=3600)
        seconds = time.perf_counter() - started
        measured.append(("enqueue, one at a time", sizes.one_by_one, sizes.one_by_one / seconds))
    for how, count, rate in measured:
        print(f"  {how}: {count:,} jobs, {rate:,.0f} jobs/s", flush=True)
    return measured


def enqueue_table(measured: list[tuple[str, int, float]]) -> None:
    bulk_rate = measured[0][2]
    rows = [
        [how, f"{count:,}", f"{rate:,.0f}", f"{bulk_rate / rate:.1f}x"]
        for how, count, rate in measured
    ]
    rows[0].append(f"≥{BULK_TARGET:,.0f}/s  {verdict(bulk_rate >= BULK_TARGET)}")
    rows[1].append("")
    title = "Enqueue through the client (jobs due an hour ahead; wall clock of the calls)"
    table(title, ["how", "jobs", "jobs/s", "batch is", "target"], rows)


def drain_table(sizes: Sizes, rates: dict[tuple[str, int], tuple[float, float, float]]) -> None:
    rows = []
    for (case, processes), (rate, statements, bare) in rates.items():
        index = processes - 1
        ratio = rate / rates["empty", processes][0]
        row = [case if case == "empty" else f"+{sizes.future:,} future", str(processes)]
        row += [f"{rate:,.0f}", f"{statements:,.0f}", f"{rate / statements:.2f}x"]
        row += [f"{bare:,.0f}", f"{rate / bare:.2f}x"]
        row += [f"{rate / DBOS[index]:.2f}x", f"{rate / PROCRASTINATE[index]:.2f}x"]
        row += [f"{rate / PGQUEUER[index]:.2f}x", f"{ratio:.2f}"]
        ok = (
            rate >= 2 * DBOS[index]
            and rate >= 3 * PROCRASTINATE[index]
            and rate >= 0.4 * PGQUEUER[index]
            and (case == "empty" or ratio >= BACKLOG_KEEPS)
        )
        rows.append([*row, verdict(ok)])
    headers = ["case", "procs", "jobs/s", "pgbench same", "x same", "pgbench c+f", "x c+f"]
    headers += ["vs DBOS", "vs procr.", "vs PgQueuer", "x empty", "≥2x/≥3x/≥0.4x, ≥0.95"]
    title = f"Drain: {sizes.drain:,} no-op jobs, concurrency {CONCURRENCY} per process"
    title += " (pgbench: as many connections; same = noeta's statements, c+f = claim + finish)"
    table(title, headers, rows)


def pickup_table(sizes: Sizes, pickups: dict[str, tuple[list[float], list[float]]]) -> None:
    rows = []
    for case, (values, bare) in pickups.items():
        median, bare_median = statistics.median(values), statistics.median(bare)
        p99 = statistics.quantiles(values, n=100, method="inclusive")[98]
        row = [case, ms(median), ms(p99), ms(max(values)), ms(bare_median)]
        row += [f"{median / bare_median:.1f}x"]
        rows.append(
            [*row, f"≤{LATENCY_TARGET_MS:g} ms  {verdict(median * 1e3 <= LATENCY_TARGET_MS)}"]
        )
    title = f"Idle enqueue-to-start (ToolStarted - TaskCreated), {sizes.latency} jobs each"
    title += " (bare: LISTEN, then the claim and the ToolStarted append, one psycopg process)"
    headers = ["case", "median ms", "p99 ms", "max ms", "bare median", "x bare", "target"]
    table(title, headers, rows)


def main() -> None:
    options = parser(__doc__).parse_args()
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, QUICK if options.quick else FULL))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "Peers here: PgQueuer 5,195/5,965 jobs/s (1/2 processes, unfenced, batched), DBOS "
        "987/1,092, procrastinate 624/750; idle pickup PgQueuer 1.5 ms, procrastinate 2.8 ms."
    )


if __name__ == "__main__":
    main()
