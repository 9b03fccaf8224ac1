"""Plain no-op jobs drained by `noeta worker` processes of one or more checkouts, interleaved
in one server: jobs/s, worker and server CPU ms a job, task-row updates a job (which
says whose code ran: a checkout where the claim starts a job updates its row once less),
and the workers' context switches a job: waits (voluntary: the event loop found nothing
to run) and preemptions (involuntary: the kernel gave the core to another process while
the worker had work, the cost of more busy processes than cores).

Run from outside any checkout (a worker's working directory must not shadow PYTHONPATH):
  cd /tmp && <venv>/bin/python <checkout>/bench/job_drain.py --tree main=<a checkout> \
      --tree new=<another> [--jobs 2000] [--rounds 2]
Each round drains a fresh batch per checkout, per concurrency (`--concurrency`, repeatable;
16 a process by default, as bench/jobs.py) and per process count (1, 2); the order of the
checkouts alternates by round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Iterable
from pathlib import Path

import jobs  # the sibling modules: bench/ is on sys.path
import noop_job
from common import server
from worker import Bench, cpu_seconds, find_postmaster, fresh_bench, server_cpu_seconds

UPDATES = """
SELECT n_tup_upd FROM pg_stat_user_tables
 WHERE schemaname = current_schema() AND relname = 'tasks'
"""


def context_switches(pids: Iterable[int]) -> tuple[int, int]:
    """The processes' voluntary and involuntary context switches so far (Linux)."""
    voluntary = involuntary = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "voluntary_ctxt_switches":
                voluntary += int(value)
            elif name == "nonvoluntary_ctxt_switches":
                involuntary += int(value)
    return voluntary, involuntary


async def drain(
    bench: Bench,
    job_bench: jobs.JobBench,
    tree: str,
    label: str,
    count: int,
    processes: int,
    concurrency: int = jobs.CONCURRENCY,
) -> list[float]:
    """[jobs/s, worker CPU ms, server CPU ms, task-row updates (less the release), waits,
    preemptions] a job."""
    job_bench.env["PYTHONPATH"] = os.pathsep.join([str(jobs.BENCH), tree])
    queue = f"{label}-{processes}"
    ids = await job_bench.held_back(queue, count, "1 hour")
    names = [f"{queue}-w{i}" for i in range(processes)]
    postmaster = bench.postmaster
    async with bench.workers(names, queue, concurrency=concurrency, env=job_bench.env) as up:
        await bench.admin.execute("SELECT pg_stat_force_next_flush()")
        updates = await bench.value(UPDATES)
        worker_cpu = sum(cpu_seconds(w.pid) for w in up)
        switched = context_switches(w.pid for w in up)
        server_cpu = server_cpu_seconds(postmaster) if postmaster else 0.0
        await bench.admin.execute(jobs.RELEASE, (queue,))
        await bench.finished(queue, ids, within=900)
        worker_cpu = sum(cpu_seconds(w.pid) for w in up) - worker_cpu
        waits, preemptions = (
            (after - before) / count
            for before, after in zip(switched, context_switches(w.pid for w in up), strict=True)
        )
        server_cpu = server_cpu_seconds(postmaster) - server_cpu if postmaster else float("nan")
    await bench.until(lambda: _flushed(bench), "the workers' sessions end", 60)
    updated = (await bench.value(UPDATES) - updates) / count - 1  # less the release
    seconds = float(await bench.value(jobs.DRAIN, (f"{queue}-%",)))
    return [
        count / seconds,
        worker_cpu * 1e3 / count,
        server_cpu * 1e3 / count,
        updated,
        waits,
        preemptions,
    ]


async def _flushed(bench: Bench) -> bool:
    """No worker session left: each reported its statistics as it ended."""
    others = await bench.value(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        " AND application_name <> 'bench-submit'"
    )
    return bool(others == 0)


async def run(
    dsn: str,
    trees: dict[str, str],
    count: int,
    rounds: int,
    function: str,
    concurrencies: list[int],
    process_counts: list[int],
) -> None:
    results: dict[tuple[str, int, int], list[list[float]]] = {}
    async with fresh_bench(dsn) as bench:
        bench.postmaster = await find_postmaster(bench)
        job_bench = jobs.JobBench(bench, noop_job.FUNCTIONS[function])
        for number in range(rounds):
            order = list(trees.items())
            for name, tree in order if number % 2 == 0 else reversed(order):
                for concurrency in concurrencies:
                    for processes in process_counts:
                        label = f"{name}-r{number}-c{concurrency}"
                        figures = await drain(
                            bench, job_bench, tree, label, count, processes, concurrency
                        )
                        results.setdefault((name, concurrency, processes), []).append(figures)
                        shown = ", ".join(f"{x:,.2f}" for x in figures)
                        print(
                            f"  {name} c{concurrency} x{processes} round {number}: {shown}",
                            flush=True,
                        )
    print(f"\n{count:,} {function} jobs a drain")
    print(
        "checkout  conc  procs  jobs/s (each run)  worker CPU ms/job  server CPU ms/job"
        "  row updates  waits/job    preempted/job"
    )
    for (name, concurrency, processes), runs in results.items():
        columns = [
            " / ".join(f"{run[i]:,.{0 if i == 0 else 2}f}" for run in runs) for i in range(6)
        ]
        print(
            f"{name:9} {concurrency:4} {processes:5}  {columns[0]:18} {columns[1]:18}"
            f" {columns[2]:17}  {columns[3]:11}  {columns[4]:11}  {columns[5]}"
        )


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--tree", action="append", required=True, help="NAME=CHECKOUT")
    arguments.add_argument("--jobs", type=int, default=2000)
    arguments.add_argument("--rounds", type=int, default=2)
    arguments.add_argument(
        "--function",
        choices=sorted(noop_job.FUNCTIONS),
        default="noop",
        help="the no-op drained: noop (sync: run in a thread) or noop_async (the peers' kind)",
    )
    arguments.add_argument(
        "--concurrency",
        type=int,
        action="append",
        help=f"a worker's concurrency, repeatable (default {jobs.CONCURRENCY})",
    )
    arguments.add_argument(
        "--processes", type=int, action="append", help="worker processes, repeatable (1 and 2)"
    )
    arguments.add_argument("--dsn")
    options = arguments.parse_args()
    concurrencies = options.concurrency or [jobs.CONCURRENCY]
    process_counts = options.processes or [1, 2]
    trees = dict(tree.split("=", 1) for tree in options.tree)
    with server(options.dsn) as dsn:
        asyncio.run(
            run(
                dsn,
                trees,
                options.jobs,
                options.rounds,
                options.function,
                concurrencies,
                process_counts,
            )
        )
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
