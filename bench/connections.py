"""A worker's server connections beside its drain (ADR-0139): the pool it held before
(`--connections` concurrency + 2) and the new default, in turn, on one server.

One `noeta worker` process drains, in each round: one-shot scripted agent tasks at
--concurrency 8 and 32, and plain no-op jobs (bench/noop_job.py) at 16, once with each
pool; the order of the two alternates by round. Tasks/s as bench/worker.py and
bench/jobs.py count them (database clock); "held" is the most server sessions the worker
had at once (pg_stat_activity by its application name, sampled every 20 ms through the
drain: its pool, its claims', its renewals'; its LISTEN is apart, one more).

Run:  .venv/bin/python bench/connections.py [--dsn DSN] [--quick] [--rounds 3]
(always exits 0; on a shared machine compare the ratios within a round, not rounds)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
from collections.abc import AsyncIterator

import jobs  # the sibling modules: bench/ is on sys.path
from common import parser, server
from worker import DRAIN_STATS, Bench, fresh_bench, table

from noeta.cli.worker import default_connections

HELD = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s"
CASES = (("agent", 8), ("agent", 32), ("job", jobs.CONCURRENCY))


@contextlib.asynccontextmanager
async def most_held(bench: Bench, prefix: str) -> AsyncIterator[list[int]]:
    """The most sessions of workers named `prefix`... held at once, while inside."""
    most = [0]

    async def sample() -> None:
        while True:
            held = await bench.value(HELD, (f"noeta-worker:{prefix}%",))
            most[0] = max(most[0], int(held))
            await asyncio.sleep(0.02)

    sampling = asyncio.create_task(sample())
    try:
        yield most
    finally:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling


async def drain(
    bench: Bench, job_bench: jobs.JobBench, kind: str, concurrency: int, pool: str, count: int
) -> tuple[float, int]:
    """Tasks/s and the most sessions held, for one drain by one worker process."""
    queue = f"{kind}-{concurrency}-{pool}-{await bench.value('SELECT txid_current()')}"
    connections = concurrency + 2 if pool == "old" else default_connections(concurrency)
    if kind == "job":
        ids = await job_bench.held_back(queue, count, "1 hour")
        env, done = job_bench.env, jobs.DRAIN
    else:
        ids = [f"{queue}-{n}" for n in range(count)]
        later = await bench.value("SELECT clock_timestamp() + interval '1 hour'")
        await bench.create(ids, queue, bench.ok_model, ready_at=later)
        await bench.admin.execute("VACUUM (ANALYZE) tasks")
        env, done = {}, DRAIN_STATS

    extra = ["--connections", str(connections)]
    workers = bench.workers([f"{queue}-w"], queue, concurrency, env=env, extra=extra)
    async with workers, most_held(bench, queue) as most:
        await bench.admin.execute(jobs.RELEASE, (queue,))
        await bench.finished(queue, ids, within=900)
    seconds = float((await bench.rows(done, (f"{queue}-%",)))[0][0])
    return count / seconds, most[0]


async def run(dsn: str, count: int, rounds: int) -> None:
    measured: dict[tuple[str, int, str], list[tuple[float, int]]] = {}
    async with fresh_bench(dsn) as bench:
        job_bench = jobs.JobBench(bench)
        for round_number in range(rounds):
            pools = ("old", "new") if round_number % 2 == 0 else ("new", "old")
            for kind, concurrency in CASES:
                for pool in pools:
                    figures = await drain(bench, job_bench, kind, concurrency, pool, count)
                    measured.setdefault((kind, concurrency, pool), []).append(figures)
                    print(
                        f"  round {round_number + 1}, {kind} x {concurrency}, {pool} pool:"
                        f" {figures[0]:,.0f}/s, {figures[1]} held",
                        flush=True,
                    )
    rows = []
    for kind, concurrency in CASES:
        old, new = measured[kind, concurrency, "old"], measured[kind, concurrency, "new"]
        ratios = [n[0] / o[0] for o, n in zip(old, new, strict=True)]
        rows.append(
            [
                kind,
                str(concurrency),
                f"{concurrency + 2} / {default_connections(concurrency)}",
                " ".join(f"{rate:,.0f}" for rate, _ in old),
                " ".join(f"{rate:,.0f}" for rate, _ in new),
                " ".join(f"{ratio:.2f}" for ratio in ratios),
                f"{statistics.median(ratios):.2f}",
                f"{max(h for _, h in old)} / {max(h for _, h in new)}",
            ]
        )
    headers = ["tasks", "concurrency", "--connections old / new", "old tasks/s", "new tasks/s"]
    headers += ["new ÷ old by round", "median", "most held old / new"]
    table(f"One worker process draining {count:,} tasks, old pool and new in turn", headers, rows)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--rounds", type=int, default=3)
    chosen = options.parse_args()
    count = 300 if chosen.quick else 2000
    with server(chosen.dsn) as dsn:
        asyncio.run(run(dsn, count, chosen.rounds))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
