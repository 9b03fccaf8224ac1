"""A long-running worker's memory: one `noeta worker` process drains batch after batch,
and its resident set (VmRSS) is read after each. A worker runs for weeks; anything it keeps
per task (a dict of claims, a span, a cached plan, a stream) shows here as growth
proportional to the tasks it ran.

Kinds (--kind, repeatable; each gets its own worker):
  job     the plain no-op job (`@noeta.tool async def`, bench/noop_job.py), concurrency 16
  agent   the one-shot scripted agent task (bench/worker.py's), concurrency 8
  bash    an agent task that runs one Bash call (a confined child process), concurrency 8

Printed: the worker's RSS at start (up and LISTENing) and after each batch, and the
growth from the first batch's end to the last's, per 1,000 tasks.

Run:  .venv/bin/python bench/worker_memory.py [--kind job --kind agent] [--batches 6]
      [--size 10000] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import jobs  # the sibling modules: bench/ is on sys.path
import noop_job
from common import server
from job_baselines import create_many
from task_cost import BASH_CALL
from worker import Bench, fresh_bench

from noeta.client.job_tasks import job_task
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events

CONCURRENCY = {"job": 16, "agent": 8, "bash": 8}
QUEUE = "memory"
# Only the batch just made: the finished rows of the batches before keep their queue.
RELEASE = jobs.RELEASE + " AND status = 'ready'"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def template(bench: Bench, kind: str, function: object, later: object) -> NewTask:
    """The task a batch copies (its id is replaced)."""
    if kind == "job":
        return job_task("x", function, {}, QUEUE, later)  # type: ignore[arg-type]
    if kind == "bash":
        model = bench.script("bash", [{"tool_calls": [BASH_CALL]}, {"text": "ok"}])
        created = events.TaskCreated(model, "go", tools=("Bash",))
    else:
        created = events.TaskCreated(bench.ok_model, "go")
    return NewTask("x", [NewEvent(*events.encode(created))], QUEUE, later)  # type: ignore[arg-type]


async def measure(dsn: str, kind: str, batches: int, size: int) -> list[float]:
    """The worker's RSS (MiB) at start and after each batch."""
    async with fresh_bench(dsn) as bench:
        job_bench = jobs.JobBench(bench, noop_job.FUNCTIONS["noop_async"])
        names = [f"{QUEUE}-w0"]
        async with bench.workers(names, QUEUE, CONCURRENCY[kind], env=job_bench.env) as up:
            pid = up[0].pid
            seen = [rss_mib(pid)]
            for batch in range(batches):
                later = await bench.value("SELECT clock_timestamp() + interval '1 hour'")
                made = template(bench, kind, job_bench.function, later)
                await create_many(bench.admin, made, f"b{batch}-", size)
                await bench.admin.execute(RELEASE, (QUEUE,))
                await bench.finished(QUEUE, [f"b{batch}-0", f"b{batch}-{size - 1}"], within=1800)
                seen.append(rss_mib(pid))
                done = (batch + 1) * size
                print(f"  {kind}: {done:>9,} tasks, RSS {seen[-1]:.1f} MiB", flush=True)
    return seen


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--kind", action="append", choices=sorted(CONCURRENCY))
    arguments.add_argument("--batches", type=int, default=6)
    arguments.add_argument("--size", type=int, default=10_000)
    arguments.add_argument("--dsn")
    options = arguments.parse_args()
    kinds = options.kind or ["job", "agent", "bash"]
    measured: dict[str, list[float]] = {}
    with server(options.dsn) as dsn:
        for kind in kinds:
            measured[kind] = asyncio.run(measure(dsn, kind, options.batches, options.size))
    print("\n| kind | RSS at start | after the first batch | after the last | a 1,000 tasks |")
    print("|---|---|---|---|---|")
    for kind, seen in measured.items():
        tasks = (len(seen) - 2) * options.size
        growth = (seen[-1] - seen[1]) / tasks * 1000 if tasks else 0.0
        print(
            f"| {kind} | {seen[0]:.1f} MiB | {seen[1]:.1f} MiB | {seen[-1]:.1f} MiB "
            f"| {growth * 1024:.1f} KiB |"
        )


if __name__ == "__main__":
    main()
