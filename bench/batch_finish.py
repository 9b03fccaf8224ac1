"""What `noeta_append_batch` costs the server a finished job, alone: claimed jobs finished in
batches, one statement and one commit a batch, as a worker's group commit sends them (two
events a job: its ToolFinished and TaskFinished), on a schema with many finished tasks.

Run:  .venv/bin/python bench/batch_finish.py [--finished 50000] [--claimed 40000]
                                             [--batch 4] [--rounds 4]
It starts a private embedded PostgreSQL (fsync on, pg_stat_statements with track=all, or
top with `--track top`: timing the inner statements costs each of them a little),
fills a fresh schema, then finishes `--claimed / --rounds` jobs a round on one connection.
Per round: wall µs, the backend's CPU µs (/proc/<pid>/stat) and the function's
pg_stat_statements time a job, and its inner statements' calls and times. The server's
version of the function is the checkout's: run it from two checkouts (`PYTHONPATH=<tree>`)
in turn to compare them; CPU and times depend on the load, so alternate and repeat.
With `--b-sql FILE`, a second schema B gets FILE run after its migration (another
version of the function, say), and the rounds alternate A B, B A, ... on the same server
seconds apart, each printing one line; then B ÷ A per pair: a loaded machine moves both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from common import counted_server, fresh_schema  # the sibling module (bench/ is on sys.path)

# A job as its claim leaves it: running under epoch 1, its log at seq 4 (TaskCreated,
# CallRequested, PluginsPinned, ToolStarted); and many finished tasks beside.
FILL = (
    """
INSERT INTO tasks (id, queue, status, owner, owner_epoch, last_seq, finished_at)
SELECT 'old-' || g, 'bench', 'done', 'w', 1, 6, now() FROM generate_series(1, %(finished)s) g
""",
    """
INSERT INTO events (task_id, seq, type, data, epoch, owner)
SELECT 'old-' || g, s, 'X', %(data)s, 1, 'w'
  FROM generate_series(1, %(finished)s) g, generate_series(1, 6) s
""",
    """
INSERT INTO tasks (id, queue, status, owner, owner_epoch, last_seq, lease_until, claimable_at)
SELECT 'run-' || g, 'bench', 'running', 'w', 1, 4, now() + interval '1 day',
       now() + interval '1 day' FROM generate_series(1, %(claimed)s) g
""",
    """
INSERT INTO events (task_id, seq, type, data, epoch, owner)
SELECT 'run-' || g, s, 'X', %(data)s, 1, 'w'
  FROM generate_series(1, %(claimed)s) g, generate_series(1, 4) s
""",
)
DATA = '{"v":1,"call_id":"job","content":"null","is_error":false,"recovery":"","from_epoch":0}'
EVENTS = [
    ["ToolFinished", DATA],
    ["TaskFinished", '{"v":1,"status":"done","answer":"null","error":""}'],
]
BATCH = "SELECT item, appended_seq, refusal_code FROM noeta_append_batch(%s::jsonb)"
STATEMENTS = """
SELECT query, calls, total_exec_time FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT LIKE '%%pg_stat%%' ORDER BY total_exec_time DESC LIMIT 8
"""


def cpu_seconds(pid: int) -> float:
    """User and system CPU of process `pid` (a backend on this machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def finish_round(
    admin: Any, first: int, jobs: int, batch: int, verbose: bool = True
) -> tuple[float, float]:
    """Finishes jobs `first`.. in batches; the backend's CPU and the function's time, µs a
    job (and, verbose, its inner statements)."""
    await admin.execute("SELECT public.pg_stat_statements_reset()")
    pid = admin.info.backend_pid
    cpu, wall = cpu_seconds(pid), time.perf_counter()
    for start in range(first, first + jobs, batch):
        items = [
            {"task": f"run-{n}", "epoch": 1, "expected_seq": 4, "events": EVENTS, "status": "done"}
            for n in range(start, min(start + batch, first + jobs))
        ]
        rows = await (await admin.execute(BATCH, (json.dumps(items),))).fetchall()
        if any(row[2] is not None for row in rows):
            raise RuntimeError(f"a finish was refused: {rows}")
    wall, cpu = time.perf_counter() - wall, cpu_seconds(pid) - cpu
    top = await (await admin.execute(STATEMENTS)).fetchall()
    function = sum(row[2] for row in top if "FROM noeta_append_batch(" in row[0]) * 1e3 / jobs
    if verbose:
        print(f"\n  wall {wall * 1e6 / jobs:.0f} µs a job,", end=" ")
        print(f"backend CPU {cpu * 1e6 / jobs:.0f} µs a job")
        print("  calls a job   µs a job  statement (inner ones too)")
        for query, calls, execution in top:
            print(
                f"  {calls / jobs:11.2f} {execution * 1e3 / jobs:10.1f}"
                f"  {' '.join(query.split())[:70]}"
            )
    return cpu * 1e6 / jobs, function


async def filled(admin: Any, finished: int, claimed: int) -> None:
    await admin.execute("ALTER TABLE tasks DISABLE TRIGGER tasks_notify_created")
    for statement in FILL:
        await admin.execute(statement, {"finished": finished, "claimed": claimed, "data": DATA})
    await admin.execute("ALTER TABLE tasks ENABLE TRIGGER tasks_notify_created")
    await admin.execute("VACUUM ANALYZE tasks")
    await admin.execute("VACUUM ANALYZE events")


async def measure(
    dsn: str, finished: int, claimed: int, batch: int, rounds: int, other: str | None = None
) -> None:
    """`other`: the SQL run in schema B, if there is one."""
    async with contextlib.AsyncExitStack() as stack:
        schemas = {"A": (await stack.enter_async_context(fresh_schema(dsn)))[1]}
        if other is not None:
            schemas["B"] = (await stack.enter_async_context(fresh_schema(dsn)))[1]
            await schemas["B"].execute(other.encode())
        for admin in schemas.values():
            await filled(admin, finished, claimed)
        jobs = claimed // rounds
        print(f"{finished:,} finished tasks, {claimed:,} claimed jobs; batches of {batch}")
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in schemas}
        for round_number in range(rounds):
            order = list(schemas) if round_number % 2 == 0 else list(reversed(schemas))
            for name in order:
                load = os.getloadavg()[0]
                if other is None:
                    print(f"round {round_number + 1}: {jobs:,} jobs; load {load:.2f}")
                first = 1 + round_number * jobs
                cpu, function = await finish_round(schemas[name], first, jobs, batch, other is None)
                figures[name].append((cpu, function))
                if other is not None:
                    print(
                        f"round {round_number + 1} {name}: backend CPU {cpu:.0f} µs a job,"
                        f" the function {function:.0f} µs; load {load:.2f}",
                        flush=True,
                    )
        if other is not None:
            for index, what in enumerate(("backend CPU", "the function")):
                pairs = zip(figures["A"], figures["B"], strict=True)
                ratios = [b[index] / a[index] for a, b in pairs]
                shown = " ".join(f"{ratio:.2f}" for ratio in ratios)
                print(f"B ÷ A, {what}: {shown} (median {statistics.median(ratios):.3f})")


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--finished", type=int, default=50_000)
    arguments.add_argument("--claimed", type=int, default=40_000)
    arguments.add_argument("--batch", type=int, default=4)
    arguments.add_argument("--rounds", type=int, default=4)
    arguments.add_argument(
        "--track",
        choices=("all", "top"),
        default="all",
        help="pg_stat_statements.track: all times the inner statements too, at a cost a statement",
    )
    arguments.add_argument("--b-sql", help="SQL run in a second schema B after its migration")
    options = arguments.parse_args()
    settings = {"pg_stat_statements.track": options.track}
    with counted_server(settings) as dsn:
        asyncio.run(
            measure(
                dsn,
                options.finished,
                options.claimed,
                options.batch,
                options.rounds,
                Path(options.b_sql).read_text(encoding="utf-8") if options.b_sql else None,
            )
        )


if __name__ == "__main__":
    main()
