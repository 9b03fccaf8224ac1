"""Benchmark plain jobs on real `noeta worker` processes: drain rate and idle pickup.

Every figure comes from `noeta worker` subprocesses configured with bench/noop_job.py (a
`@noeta.tool` that does nothing), on one PostgreSQL server with fsync on; times are the
database clock's (events.created_at).

1. Drain: N no-op jobs, made through the client's own job_task and the Store API, due an
   hour ahead; once the workers LISTEN, one UPDATE makes them claimable. Rate = N / (last
   TaskFinished - first ToolStarted), 1 and 2 processes. Every step is fenced: a job is a
   claim, a ToolStarted append, and a ToolFinished + TaskFinished append.
2. The same drain beside 200,000 jobs scheduled a day ahead (ready_at).
3. Idle enqueue-to-start: one idle worker (--poll 1: only LISTEN/NOTIFY makes it fast),
   jobs enqueued one at a time 75 ms apart; latency = ToolStarted - TaskCreated.
   Again beside the 200,000 future jobs.

Not yet here (issue 16 asks for it): each figure beside a pgbench run of the same claim on
the same server; ../shared/peers-bench/run_anchors.py has the claim's pgbench scripts.

Run:  .venv/bin/python bench/jobs.py [--dsn DSN] [--quick]    (always exits 0)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import noop_job  # the sibling module: bench/ is on sys.path
from common import server
from worker import PAUSE, Bench, fresh_bench, ms, table, verdict

from noeta.client.job_tasks import job_task
from noeta.testing.postgres import TEST_DSN_ENV

BENCH = Path(__file__).parent
# The targets, from the peers measured on this machine (PostgreSQL 15, fsync on).
DBOS = (987.0, 1092.0)
PROCRASTINATE = (624.0, 750.0)
PGQUEUER = (5195.0, 5965.0)
LATENCY_TARGET_MS = 1.5
BACKLOG_KEEPS = 0.95

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


FULL = Sizes(5000, 100, 200_000)
QUICK = Sizes(300, 15, 20_000)


class JobBench:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        config = bench.scratch / "jobs.yaml"
        config.write_text("plugins:\n  - module: noop_job\n")
        pythonpath = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))
        self.env = {"NOETA_CONFIG": str(config), "PYTHONPATH": pythonpath}

    async def enqueue(self, ids: Sequence[str], queue: str, **at: object) -> None:
        limit = asyncio.Semaphore(8)
        ready_at = at.get("ready_at")

        async def one(task_id: str) -> None:
            async with limit:
                made = job_task(task_id, noop_job.noop, {}, queue, ready_at)  # type: ignore[arg-type]
                await self.bench.store.create_task(made)

        await asyncio.gather(*(one(task_id) for task_id in ids))

    async def future(self, count: int) -> None:
        later = await self.bench.value("SELECT clock_timestamp() + interval '1 day'")
        await self.enqueue([f"future-{n}" for n in range(count)], "later", ready_at=later)
        await self.bench.admin.execute("VACUUM (ANALYZE) tasks")

    async def drain(self, label: str, count: int, processes: int) -> float:
        queue = f"drain-{label}-{processes}"
        ids = [f"{queue}-{n}" for n in range(count)]
        later = await self.bench.value("SELECT clock_timestamp() + interval '1 hour'")
        await self.enqueue(ids, queue, ready_at=later)
        await self.bench.admin.execute("VACUUM (ANALYZE) tasks")
        names = [f"{queue}-w{i}" for i in range(processes)]
        async with self.bench.workers(names, queue, concurrency=16, env=self.env):
            await self.bench.admin.execute(RELEASE, (queue,))
            await self.bench.finished(queue, ids, within=900)
        seconds = float(await self.bench.value(DRAIN, (f"{queue}-%",)))
        print(
            f"  drain {label}, {processes} process(es): {count / seconds:,.0f} jobs/s", flush=True
        )
        return count / seconds

    async def pickups(self, label: str, count: int) -> list[float]:
        ids = [f"lat-{label}-{n}" for n in range(count)]
        for task_id in ids:
            await self.enqueue([task_id], "latency")
            await asyncio.sleep(PAUSE)  # the worker is idle again before the next
        await self.bench.finished("latency", ids)
        return [float(row[0]) for row in await self.bench.rows(PICKUP, (ids,))]


async def run(dsn: str, sizes: Sizes) -> None:
    async with fresh_bench(dsn) as bench:
        jobs = JobBench(bench)
        rates: dict[tuple[str, int], float] = {}
        pickups: dict[str, list[float]] = {}
        for processes in (1, 2):
            rates["empty", processes] = await jobs.drain("empty", sizes.drain, processes)
        async with bench.workers(["latency-w"], "latency", env=jobs.env):
            await jobs.pickups("warm", 5)
            pickups["empty"] = await jobs.pickups("empty", sizes.latency)
            await jobs.future(sizes.future)
            await jobs.pickups("warm2", 5)
            pickups["future"] = await jobs.pickups("future", sizes.latency)
        for processes in (1, 2):
            rates["future", processes] = await jobs.drain("future", sizes.drain, processes)
    rows = []
    for (case, processes), rate in rates.items():
        index = processes - 1
        ratio = rate / rates["empty", processes]
        row = [case if case == "empty" else f"+{sizes.future:,} future", str(processes)]
        row += [f"{rate:,.0f}", f"{rate / DBOS[index]:.2f}x", f"{rate / PROCRASTINATE[index]:.2f}x"]
        row += [f"{rate / PGQUEUER[index]:.2f}x", f"{ratio:.2f}"]
        ok = (
            rate >= 2 * DBOS[index]
            and rate >= 3 * PROCRASTINATE[index]
            and rate >= 0.4 * PGQUEUER[index]
            and (case == "empty" or ratio >= BACKLOG_KEEPS)
        )
        rows.append([*row, verdict(ok)])
    headers = ["case", "processes", "jobs/s", "vs DBOS", "vs procrastinate", "vs PgQueuer"]
    headers += ["x empty", "≥2x/≥3x/≥0.4x, ≥0.95"]
    table(f"Drain: {sizes.drain:,} no-op jobs, concurrency 16 per process", headers, rows)
    rows = []
    for case, values in pickups.items():
        median = statistics.median(values)
        p99 = statistics.quantiles(values, n=100, method="inclusive")[98]
        row = [case, ms(median), ms(p99), ms(max(values))]
        rows.append(
            [*row, f"≤{LATENCY_TARGET_MS:g} ms  {verdict(median * 1e3 <= LATENCY_TARGET_MS)}"]
        )
    title = f"Idle enqueue-to-start (ToolStarted - TaskCreated), {sizes.latency} jobs each"
    table(title, ["case", "median ms", "p99 ms", "max ms", "target"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", help=f"PostgreSQL URL (default: ${TEST_DSN_ENV}, else embedded)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer of everything")
    options = parser.parse_args()
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, QUICK if options.quick else FULL))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "Peers here: PgQueuer 5,195/5,965 jobs/s (1/2 processes, unfenced, batched), DBOS "
        "987/1,092, procrastinate 624/750; idle pickup PgQueuer 1.5 ms, procrastinate 2.8 ms."
    )


if __name__ == "__main__":
    main()
