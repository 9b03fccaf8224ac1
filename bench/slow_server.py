"""What ADR-0152 costs a server that is merely slow. A statement whose deadline passes
makes the store replace its process's idle connections, at most once a deadline. On a
forgotten path that saves deadlines. On a slow server it costs sessions.

Two arms, alternated in each round (the order flips every other round), on one server:
  replace   the store as it is (ADR-0152)
  keep      the same store with the replacement taken out (main before ADR-0152)

Each arm opens a worker's store (`for_worker`, --connections, all of them opened, a
deadline of --deadline s). Another session holds ACCESS EXCLUSIVE on `tasks` for
--deadlines deadlines. Meanwhile --callers callers read one task each in a loop, and
each read waits out its deadline. Then the lock goes, and each caller reads --after
more times.

Printed for each arm (medians over the rounds):
  sessions      sessions the server started while the lock was held
                (pg_stat_database.sessions; PostgreSQL 14 or newer)
  server ms     the server's CPU over that time (the postmaster's tree from /proc,
                reaped backends included) and the same per deadline
  first ms      the first read after the lock went (the slowest caller's)
  after ms      the median of the reads after it
Each arm's figure ÷ keep's, from the same round.

Run:  .venv/bin/python bench/slow_server.py [--dsn DSN] [--quick] [--rounds 3]
(a local server: CPU is read from /proc; always exits 0)
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Any

import psycopg
from common import fresh_schema, parser, server
from peer_cpu import postmaster_of, tree_cpu

from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.forgotten_path import ForgottenPath
from noeta.core.errors import StoreError

ARMS = ("replace", "keep")
LOCK = "LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"
SESSIONS = "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"


async def _kept(self: ForgottenPath) -> None:
    """The replacement taken out: what a deadline passing did before ADR-0152."""


async def sessions(admin: psycopg.AsyncConnection[Any]) -> int:
    await admin.execute("SELECT pg_stat_force_next_flush()")
    row = await (await admin.execute(SESSIONS)).fetchone()
    return int(row[0]) if row else 0


async def reads(store: PostgresStore, stop: asyncio.Event) -> None:
    """Read one task until told to stop; each read blocked by the lock fails at its
    deadline, and the next goes at once, as a worker's runs keep writing."""
    while not stop.is_set():
        try:
            await store.get_task("bench")
        except StoreError:
            continue


async def timed_reads(store: PostgresStore, count: int) -> list[float]:
    taken = []
    for _ in range(count):
        started = time.perf_counter()
        await store.get_task("bench")
        taken.append((time.perf_counter() - started) * 1000)
    return taken


async def arm(url: str, admin: psycopg.AsyncConnection[Any], options: Any) -> dict[str, float]:
    store = await PostgresStore.open(
        url,
        for_worker=True,
        max_connections=options.connections,
        min_connections=options.connections,
        deadline_seconds=options.deadline,
        application_name="noeta-bench-slow-server",
    )
    postmaster = postmaster_of(admin.info.backend_pid)
    assert postmaster is not None, "a local server: its CPU is read from /proc"
    try:
        await timed_reads(store, 20)  # every session of the pool used once: warm
        async with await psycopg.AsyncConnection.connect(url) as holder:
            before, cpu_before = await sessions(admin), tree_cpu(postmaster)
            await holder.execute(LOCK)  # held until this transaction ends
            stop = asyncio.Event()
            callers = [asyncio.ensure_future(reads(store, stop)) for _ in range(options.callers)]
            await asyncio.sleep(options.deadlines * options.deadline)  # the slow spell
            stop.set()
            await holder.rollback()
            await asyncio.gather(*callers)
            held = await sessions(admin) - before, (tree_cpu(postmaster) - cpu_before) * 1000
        first = await asyncio.gather(*(timed_reads(store, 1) for _ in range(options.callers)))
        after = await asyncio.gather(
            *(timed_reads(store, options.after) for _ in range(options.callers))
        )
    finally:
        await store.close()
    return {
        "sessions": held[0],
        "server ms": held[1],
        "server ms a deadline": held[1] / options.deadlines,
        "first ms": max(each[0] for each in first),
        "after ms": statistics.median(v for each in after for v in each),
    }


async def measure(options: Any) -> dict[str, list[dict[str, float]]]:
    found: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
    replace = ForgottenPath.no_answer
    with server(options.dsn) as dsn:
        async with fresh_schema(dsn) as (url, admin):
            for number in range(options.rounds):
                order = ARMS if number % 2 == 0 else ARMS[::-1]
                for name in order:
                    ForgottenPath.no_answer = replace if name == "replace" else _kept  # type: ignore[method-assign]
                    try:
                        found[name].append(await arm(url, admin, options))
                    finally:
                        ForgottenPath.no_answer = replace  # type: ignore[method-assign]
                    shown = ", ".join(f"{k} {v:.1f}" for k, v in found[name][-1].items())
                    print(f"round {number + 1} {name}: {shown}", flush=True)
    return found


def report(found: dict[str, list[dict[str, float]]], options: Any) -> None:
    print(
        f"\n{options.connections} connections, {options.callers} callers, deadline "
        f"{options.deadline:g} s, the lock held {options.deadlines} deadlines; "
        f"medians of {options.rounds} rounds"
    )
    figures = list(found["keep"][0])
    print(f"{'arm':>8}  " + "  ".join(f"{name:>20}" for name in figures))
    for name in ARMS:
        values = [statistics.median(run[f] for run in found[name]) for f in figures]
        print(f"{name:>8}  " + "  ".join(f"{v:>20.1f}" for v in values))
    ratios = []
    for f in figures:
        each = [r[f] / k[f] for r, k in zip(found["replace"], found["keep"], strict=True) if k[f]]
        ratios.append(statistics.median(each) if each else float("nan"))
    print(f"{'÷ keep':>8}  " + "  ".join(f"{v:>20.2f}" for v in ratios))


def main() -> None:
    made = parser(__doc__)
    made.add_argument("--rounds", type=int, help="rounds (default 3, --quick 1)")
    made.add_argument("--connections", type=int, default=10, help="the pool (default 10)")
    made.add_argument("--callers", type=int, default=4, help="readers at once (default 4)")
    made.add_argument("--deadline", type=float, default=1.0, help="seconds (default 1)")
    made.add_argument("--deadlines", type=int, help="the lock's length (default 10, --quick 3)")
    made.add_argument("--after", type=int, default=50, help="reads after the lock (default 50)")
    options = made.parse_args()
    options.rounds = options.rounds or (1 if options.quick else 3)
    options.deadlines = options.deadlines or (3 if options.quick else 10)
    # Not the store's line at each replacement, nor the pool's at each discarded session.
    for name in ("noeta", "psycopg"):
        logging.getLogger(name).setLevel(logging.ERROR)
    report(asyncio.run(measure(options)), options)


if __name__ == "__main__":
    main()
