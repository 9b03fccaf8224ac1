"""What a canvas of jobs costs (ADR-0104), beside the same work as independent jobs in the
same run: a group of N no-op jobs with a chord callback (time, statements per member) and
a chain of L no-op jobs (the latency each link adds: a member's finish to the next one's
start; goal <= 3 ms), split at the canvas's step, with the floor under it: what a round
trip and a commit cost on the machine at that moment.

Run:  .venv/bin/python bench/canvas.py [--members N] [--links L] [--workers W]
It starts a private embedded PostgreSQL (fsync on, pg_stat_statements loaded), W `noeta
worker` processes (concurrency 8) on a fresh schema, and prints the tables. Statements are
every statement the server ran meanwhile (workers and the submitting client) but the
bench's own counting, per member.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

import noop_job  # the sibling modules (bench/ is on sys.path)
import psycopg
from common import counted_server  # the sibling module (bench/ is on sys.path)
from task_cost import OWN, jobs_env
from worker import Bench, cpu_seconds, fresh_bench, ms, table, verdict

from noeta.client import AsyncClient
from noeta.client.canvas import chain, chord, group

QUEUE = "default"
COUNT = "SELECT query, calls FROM public.pg_stat_statements"
# Each member's finish (its TaskFinished) and the next member's start (its ToolStarted),
# on the store's clock, in the chain's order (member ids end .m<i>.1).
HOPS = """
SELECT split_part(e.task_id, '.', 2), e.type, e.created_at, e.owner FROM events e
 WHERE e.task_id LIKE %s AND e.type IN ('TaskFinished', 'ToolStarted')
"""
# The canvas's steps: each SubtaskReturned (the end of member m<i>) is written by the step
# that took it and launched m<i+1>; its owner says whose slot ran that step.
STEPS = """
SELECT e.data::json ->> 'child_id', e.created_at, e.owner FROM events e
 WHERE e.task_id = %s AND e.type = 'SubtaskReturned'
"""


async def statements(bench: Bench) -> int:
    rows = await bench.rows(COUNT)
    return sum(int(calls) for query, calls in rows if not any(own in query for own in OWN))


async def reset(bench: Bench) -> None:
    await bench.admin.execute("SELECT public.pg_stat_statements_reset()")


async def independent_jobs(bench: Bench, client: AsyncClient, count: int) -> tuple[float, int]:
    await reset(bench)
    began = time.monotonic()
    handles = await client.enqueue_many("noop", [{}] * count)
    await bench.finished(QUEUE, [handle.id for handle in handles], within=3600)
    return time.monotonic() - began, await statements(bench)


async def a_chord(bench: Bench, client: AsyncClient, count: int) -> tuple[float, int]:
    await reset(bench)
    began = time.monotonic()
    handle = await client.canvas(
        chord(group(noop_job.noop.si() for _ in range(count)), noop_job.noop.si())
    )  # type: ignore[attr-defined]
    await client.job_result(handle, timeout=3600)
    return time.monotonic() - began, await statements(bench)


@dataclass
class Hops:
    """A chain's links: finish to next start (the hop), split at the canvas's step, and
    how many steps the finished member's own worker ran (a continuation, ADR-0109)."""

    whole: list[float]
    to_step: list[float]
    from_step: list[float]
    continued: int


async def a_chain(bench: Bench, client: AsyncClient, links: int) -> tuple[float, Hops]:
    began = time.monotonic()
    handle = await client.canvas(chain(*(noop_job.noop.si() for _ in range(links))))  # type: ignore[attr-defined]
    await client.job_result(handle, timeout=3600)
    took = time.monotonic() - began
    at: dict[tuple[int, str], Any] = {}
    owner: dict[int, str] = {}
    for member, kind, when, by in await bench.rows(HOPS, (f"{handle.id}.m%",)):
        at[(int(member[1:]), kind)] = when
        owner[int(member[1:])] = by
    step: dict[int, tuple[Any, str]] = {}
    for child, when, by in await bench.rows(STEPS, (handle.id,)):
        step[int(child.split(".")[1][1:])] = (when, by)
    hops = Hops([], [], [], 0)
    for n in range(links - 1):
        finished, started, (stepped, by) = (
            at[(n, "TaskFinished")],
            at[(n + 1, "ToolStarted")],
            step[n],
        )
        hops.whole.append((started - finished).total_seconds())
        hops.to_step.append((stepped - finished).total_seconds())
        hops.from_step.append((started - stepped).total_seconds())
        hops.continued += by == owner[n]
    return took, hops


async def round_trips(dsn: str, times: int = 200) -> tuple[float, float]:
    """The floor under a link, measured beside it: the median of a round trip that writes
    nothing (SELECT 1) and of one that commits a row (fsync on), from an asyncio client
    as a worker's, on a connection of its own."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute("CREATE TABLE IF NOT EXISTS bench_round_trips (x int)")
        medians = []
        for statement in ("SELECT 1", "INSERT INTO bench_round_trips VALUES (1)"):
            took = []
            for _ in range(times):
                began = time.perf_counter()
                await connection.execute(statement)
                took.append(time.perf_counter() - began)
            medians.append(statistics.median(took))
    return medians[0], medians[1]


async def jobs_one_after_another(client: AsyncClient, links: int) -> float:
    """The same chain driven by the client: enqueue, wait for the result, enqueue the next."""
    began = time.monotonic()
    for _ in range(links):
        await client.job_result(await client.enqueue("noop"), timeout=600)
    return time.monotonic() - began


async def measure(dsn: str, members: int, links: int, workers: int) -> None:
    async with fresh_bench(dsn) as bench:
        names = [f"canvas-w{n}" for n in range(workers)]
        env = jobs_env(bench)
        async with (
            bench.workers(names, QUEUE, concurrency=8, poll=0.2, env=env) as processes,
            AsyncClient(bench.dsn, config=str(bench.scratch / "jobs.yaml")) as client,
        ):
            plain_time, plain_statements = await independent_jobs(bench, client, members)
            chord_time, chord_statements = await a_chord(bench, client, members)
            cpu_before = sum(cpu_seconds(process.pid) for process in processes)
            chain_time, hops = await a_chain(bench, client, links)
            chain_cpu = sum(cpu_seconds(process.pid) for process in processes) - cpu_before
            read, commit = await round_trips(bench.dsn)
            by_hand = await jobs_one_after_another(client, links)
    table(
        f"a group of {members} no-op jobs with a chord callback, beside {members} jobs",
        ["", "total s", "ms per member", "statements per member"],
        [
            ["independent jobs", f"{plain_time:.2f}", ms(plain_time / members),
             f"{plain_statements / members:.1f}"],
            ["chord", f"{chord_time:.2f}", ms(chord_time / members),
             f"{chord_statements / members:.1f}"],
        ],
    )  # fmt: skip
    median = statistics.median(hops.whole)
    table(
        f"a chain of {links} no-op jobs: the latency a link adds (finish to next start)",
        ["", "total s", "ms per link", "median hop ms", "p95 hop ms", "goal <= 3 ms"],
        [
            ["chain", f"{chain_time:.2f}", ms(chain_time / links),
             ms(median), ms(p95(hops.whole)), verdict(median <= 0.003)],
            ["client: enqueue, get, next", f"{by_hand:.2f}", ms(by_hand / links), "", "", ""],
        ],
    )  # fmt: skip
    table(
        "the hop in two: a member's finish to its canvas's step, the step to the next start",
        ["", "median ms", "p95 ms"],
        [
            ["finish -> canvas step", ms(statistics.median(hops.to_step)), ms(p95(hops.to_step))],
            ["canvas step -> next start", ms(statistics.median(hops.from_step)),
             ms(p95(hops.from_step))],
            ["steps the finished member's worker ran", f"{hops.continued} of {links - 1}", ""],
            ["the workers' CPU a link (ms, all of it)", ms(chain_cpu / links), ""],
        ],
    )  # fmt: skip
    table(
        "the floor, measured after the chain: a link is three round trips, each a commit",
        ["", "median ms"],
        [["a round trip (SELECT 1)", ms(read)], ["a committing round trip (fsync on)", ms(commit)],
         ["three committing round trips", ms(3 * commit)]],
    )  # fmt: skip


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--members", type=int, default=1000)
    arguments.add_argument("--links", type=int, default=100)
    arguments.add_argument("--workers", type=int, default=2)
    options = arguments.parse_args()
    with counted_server() as dsn:
        asyncio.run(measure(dsn, options.members, options.links, options.workers))


if __name__ == "__main__":
    main()
