"""What one one-shot agent task (or one plain no-op job) costs PostgreSQL, counted, not
timed: statements the worker sends, functions and triggers run, commits, rows written (and
how many updates were not HOT, each of which adds an entry to every index of the table).
Beside the counts, each statement's planning and execution time a task as
pg_stat_statements (track_planning on) records them: times, so they do depend on the load.

Run:  .venv/bin/python bench/task_cost.py [--tasks N] [--jobs | --bash]
It starts a private embedded PostgreSQL (fsync on, pg_stat_statements loaded,
track_functions=all), creates N tasks (scripted model, one reply; with --bash: a reply that
runs one Bash command printing to stdout and stderr, then the answer; with --jobs: N jobs
of bench/noop_job.py's `@noeta.tool`, as bench/jobs.py drains), then starts one `noeta worker`
with no queue settings, no model limits and no retention, resets the statistics, releases
the tasks and reads the statistics once they are done. The counts do not depend on the
machine's load: run it on two checkouts to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import noop_job  # the sibling modules (bench/ is on sys.path)
from common import counted_server  # the sibling module (bench/ is on sys.path)
from worker import Bench, fresh_bench, next_xid

from noeta.client.job_tasks import job_task

QUEUE = "cost"
# The bench's own statements, left out of the worker's.
OWN = ("pg_stat", "count(*) FROM tasks", "UPDATE tasks SET ready_at = NULL", "pg_snapshot")
STATEMENTS = """
SELECT query, calls, total_plan_time, total_exec_time FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY calls DESC
"""
FUNCTIONS = """
SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = current_schema()
 ORDER BY calls DESC, funcname
"""
TABLES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)
  FROM pg_stat_user_tables t WHERE schemaname = current_schema() AND n_tup_ins + n_tup_upd > 0
 ORDER BY relname
"""
# Other sessions of this database: the worker's, until they have ended (and, ending,
# reported their statistics).
OTHERS = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND backend_type = 'client backend' AND application_name <> 'bench-submit'
"""
COMMITS = """
SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()
"""


async def snapshot(bench: Bench) -> dict[str, Any]:
    await bench.admin.execute("SELECT pg_stat_force_next_flush()")
    return {
        "statements": await bench.rows(STATEMENTS),
        "functions": await bench.rows(FUNCTIONS),
        "tables": await bench.rows(TABLES),
        "commits": await bench.value(COMMITS),
        "writes": await next_xid(bench),
    }


def report(
    after: dict[str, Any], before: dict[str, Any], tasks: int, what: str, workers: int
) -> None:
    per = float(tasks)
    print(f"\nper task ({tasks} {what}, {workers} worker{'s' * (workers > 1)}):")
    print(
        f"  commits (pg_stat_database.xact_commit, all sessions): "
        f"{(after['commits'] - before['commits']) / per:.2f}"
    )
    # Transaction ids assigned: the committing writes, each a WAL flush (less the release).
    writes = (after["writes"] - before["writes"] - 1) / per
    print(f"  WAL-flushing commits (transaction ids assigned): {writes:.2f}")
    worker = [row for row in after["statements"] if not any(o in row[0] for o in OWN)]
    print(f"  statements sent: {sum(row[1] for row in worker) / per:.2f}")
    plan, run = (sum(row[i] for row in worker) * 1000 / per for i in (2, 3))
    print(
        f"  server time (pg_stat_statements, µs a task): planning {plan:.0f}, execution {run:.0f}"
    )
    print("    calls   plan µs   exec µs  (a task)")
    for query, calls, planning, execution in worker:
        if calls >= tasks / 20:
            print(
                f"    {calls / per:5.2f}  {planning * 1000 / per:8.0f}"
                f"  {execution * 1000 / per:8.0f}  {' '.join(query.split())[:80]}"
            )
    rare = [row for row in worker if row[1] < tasks / 20]
    rare_calls = sum(row[1] for row in rare) / per
    print(f"    {rare_calls:5.2f}  ({len(rare)} other statements, each under 0.05:")
    for query, calls, _, _ in rare:  # calls in all, not a task: what ran at all
        print(f"          {calls:5d} in all  {' '.join(query.split())[:70]}")
    print("    )")
    # The bench's release (one UPDATE of every task) ran the claimable trigger once a task.
    functions = [
        (n, c - tasks if n == "noeta_notify_claimable" else c) for n, c in after["functions"]
    ]
    runs = sum(c for _, c in functions)
    print(f"  plpgsql function and trigger runs: {runs / per:.2f}")
    for name, calls in functions:
        print(f"    {calls / per:5.2f}  {name}")
    earlier = {row[0]: row for row in before["tables"]}
    print("  (less the bench's release: one noeta_notify_claimable and one non-HOT update a task)")
    print("  rows: table, inserted, updated, of them not HOT, deleted, indexes")
    for name, *counts, indexes in after["tables"]:
        was = earlier.get(name, (name, 0, 0, 0, 0, indexes))[1:5]
        ins, upd, hot, deleted = (now - then for now, then in zip(counts, was, strict=True))
        print(
            f"    {name:20} {ins / per:5.2f} {upd / per:5.2f} {(upd - hot) / per:5.2f}"
            f" {deleted / per:5.2f}  {indexes}"
        )


async def create_jobs(bench: Bench, ids: list[str], ready_at: object) -> None:
    """No-op jobs, made as the client's enqueue makes them (one create_task each)."""
    limit = asyncio.Semaphore(8)

    async def one(task_id: str) -> None:
        async with limit:
            made = job_task(task_id, noop_job.noop, {}, QUEUE, ready_at)  # type: ignore[arg-type]
            await bench.store.create_task(made)

    await asyncio.gather(*(one(task_id) for task_id in ids))


def jobs_env(bench: Bench) -> dict[str, str]:
    """The workers' environment for jobs: a config naming bench/noop_job.py's module."""
    config = bench.scratch / "jobs.yaml"
    config.write_text("plugins:\n  - module: noop_job\n")
    here = str(Path(__file__).parent)
    pythonpath = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return {"NOETA_CONFIG": str(config), "PYTHONPATH": pythonpath}


BASH_CALL = {"id": "c1", "name": "Bash", "input": {"command": "echo out; echo err >&2"}}


async def measure(
    dsn: str, tasks: int, jobs: bool, bash: bool = False, concurrency: int = 8, workers: int = 1
) -> None:
    async with fresh_bench(dsn) as bench:
        await bench.admin.execute("SELECT pg_stat_reset()")  # the migration's own runs
        ids = [f"{QUEUE}-{n}" for n in range(tasks)]
        later = await bench.value("SELECT clock_timestamp() + interval '1 hour'")
        if jobs:
            await create_jobs(bench, ids, later)
        elif bash:  # a streamed tool's cost when nobody follows (ADR-0114)
            model = bench.script("bash", [{"tool_calls": [BASH_CALL]}, {"text": "ok"}])
            await bench.create(ids, QUEUE, model, tools=("Bash",), ready_at=later)
        else:
            await bench.create(ids, QUEUE, bench.ok_model, ready_at=later)
        created = "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = %s"

        async def counted() -> bool:  # the creations' statistics are in, before the reset
            return bool(await bench.value(created, ("noeta_create_task",)) >= tasks)

        await bench.until(counted, "the creations are counted", 60)
        functions = await bench.rows(FUNCTIONS)
        print(f"\nper create ({tasks} tasks created one by one through the Store API):")
        print(f"  plpgsql function and trigger runs: {sum(c for _, c in functions) / tasks:.2f}")
        for name, calls in functions:
            print(f"    {calls / tasks:5.2f}  {name}")
        env = jobs_env(bench) if jobs else None
        names = [f"cost-w{n}" for n in range(workers)]
        async with bench.workers(names, QUEUE, concurrency=concurrency, env=env):
            await bench.admin.execute("SELECT public.pg_stat_statements_reset()")
            await bench.admin.execute("SELECT pg_stat_reset()")
            before = await snapshot(bench)
            release = "UPDATE tasks SET ready_at = NULL, claimable_at = clock_timestamp()"
            await bench.admin.execute(f"{release} WHERE queue = %s", (QUEUE,))
            await bench.finished(QUEUE, ids, within=600)

        async def ended() -> bool:
            return bool(await bench.value(OTHERS) == 0)

        await bench.until(ended, "the worker's sessions end", 60)
        after = await snapshot(bench)
        what = "no-op jobs" if jobs else "tasks running one Bash call" if bash else "one-shot tasks"
        report(after, before, tasks, what, workers)


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--tasks", type=int, default=1000)
    kind = arguments.add_mutually_exclusive_group()
    kind.add_argument("--jobs", action="store_true", help="plain no-op jobs, not agent tasks")
    kind.add_argument("--bash", action="store_true", help="agent tasks that run one Bash call")
    arguments.add_argument("--concurrency", type=int, default=8, help="a worker's concurrency")
    arguments.add_argument("--workers", type=int, default=1, help="worker processes")
    arguments.add_argument(
        "--track",
        choices=("top", "all"),
        default="top",
        help="pg_stat_statements.track: all also times the functions' inner statements",
    )
    options = arguments.parse_args()
    settings = {
        "pg_stat_statements.track_planning": "on",
        "pg_stat_statements.track": options.track,
        "track_functions": "all",
    }
    with counted_server(settings) as dsn:
        asyncio.run(
            measure(
                dsn,
                options.tasks,
                options.jobs,
                options.bash,
                options.concurrency,
                options.workers,
            )
        )


if __name__ == "__main__":
    main()
