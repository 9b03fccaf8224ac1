"""What the store pools' look at an idle connection costs a checkout, and what it saves
once the server has ended the pool's sessions (ADR-0148).

Four pools of the same size on one server, all last in, first out (noeta's order):
  look      noeta's LastInFirstOutPool: a zero-timeout poll of the socket at checkout
  none      the same with the look taken out (main before ADR-0148)
  callback  none, with the same look as psycopg_pool's `check=` callback
  query     none, with psycopg_pool's own `check=check_connection` (an empty query)

1. A checkout's cost: --checkouts getconn/putconn pairs on each, the four in turn, the
   order reversed every other round; microseconds a checkout, and each ÷ none in the same
   round (the machine's load moves the absolute figures, not much the ratios).
2. After `pg_terminate_backend` of every session of the pool: the seconds until one
   statement runs, and how many statements failed first.

Run:  .venv/bin/python bench/pool_check.py [--dsn DSN] [--quick] [--rounds 4]
(always exits 0)
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import time
from typing import Any

import psycopg
from common import parser, server
from psycopg_pool import AsyncConnectionPool

from noeta.backends.stores.postgres.pool import LastInFirstOutPool, is_alive

SIZE = 4
APPLICATION = "noeta-bench-pool-check"
DEADLINE = 10.0  # the store's own


class Unlooked(LastInFirstOutPool):
    """LastInFirstOutPool as it was before the look (ADR-0127 alone)."""

    async def _get_ready_connection(self, timeout: float | None) -> Any:  # noqa: ASYNC109
        if not self._pool or (timeout is not None and timeout <= 0.0):
            return await AsyncConnectionPool._get_ready_connection(self, timeout)
        connection = self._pool.pop()
        self._nconns_min = min(self._nconns_min, len(self._pool))
        return connection


async def look(connection: psycopg.AsyncConnection[Any]) -> None:
    if not is_alive(connection):
        raise psycopg.OperationalError("ended while idle")


def make(kind: str, dsn: str) -> AsyncConnectionPool[Any]:
    common: dict[str, Any] = {
        "kwargs": {"autocommit": True, "application_name": f"{APPLICATION}-{kind}"},
        "min_size": SIZE,
        "max_size": SIZE,
        "open": False,
        "timeout": DEADLINE,
        "name": kind,
    }
    if kind == "look":
        return LastInFirstOutPool(dsn, where="bench", **common)
    check = {"none": None, "callback": look, "query": AsyncConnectionPool.check_connection}
    return Unlooked(dsn, check=check[kind], **common)


KINDS = ("look", "none", "callback", "query")


async def checkouts(pool: AsyncConnectionPool[Any], count: int) -> float:
    """Microseconds a getconn/putconn pair."""
    started = time.perf_counter()
    for _ in range(count):
        connection = await pool.getconn()
        await pool.putconn(connection)
    return (time.perf_counter() - started) / count * 1e6


async def look_alone(pool: AsyncConnectionPool[Any], count: int) -> float:
    """Microseconds of `is_alive` on an idle, healthy connection."""
    connection = await pool.getconn()
    try:
        started = time.perf_counter()
        for _ in range(count):
            is_alive(connection)
        return (time.perf_counter() - started) / count * 1e6
    finally:
        await pool.putconn(connection)


async def after_the_end(dsn: str, kind: str) -> tuple[float, int]:
    """Seconds until a statement runs once every session of a fresh pool was ended, and
    the statements that failed first."""
    pool = make(kind, dsn)
    await pool.open(wait=True, timeout=DEADLINE)
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            name = f"{APPLICATION}-{kind}"
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (name,),
            )
            alive = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            for _ in range(1000):  # until the server has ended them all
                if not (await (await admin.execute(alive, (name,))).fetchone() or (0,))[0]:
                    break
                await asyncio.sleep(0.01)
        failed = 0
        started = time.perf_counter()
        while True:
            connection = await pool.getconn()
            try:
                await connection.execute("SELECT 1")
                return time.perf_counter() - started, failed
            except psycopg.OperationalError:
                failed += 1
            finally:
                await pool.putconn(connection)
    finally:
        await pool.close()


async def run(dsn: str, rounds: int, count: int) -> None:
    print(f"{os.cpu_count()} CPUs; load {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    pools = {kind: make(kind, dsn) for kind in KINDS}
    for pool in pools.values():
        await pool.open(wait=True, timeout=DEADLINE)
    try:
        print(f"\n1. A checkout (getconn + putconn), µs; {count} a pool a round, pool of {SIZE}")
        print("| round | order | " + " | ".join(KINDS) + " | look ÷ none | query ÷ none |")
        print("|---|---|" + "---|" * (len(KINDS) + 2))
        ratios: dict[str, list[float]] = {"look": [], "query": []}
        for number in range(rounds):
            order = KINDS if number % 2 == 0 else tuple(reversed(KINDS))
            figures = {kind: await checkouts(pools[kind], count) for kind in order}
            for kind, values in ratios.items():
                values.append(figures[kind] / figures["none"])
            cells = " | ".join(f"{figures[kind]:.1f}" for kind in KINDS)
            print(
                f"| {number + 1} | {'→' if number % 2 == 0 else '←'} | {cells} | "
                f"{ratios['look'][-1]:.3f} | {ratios['query'][-1]:.2f} |"
            )
        print(
            f"median look ÷ none {statistics.median(ratios['look']):.3f}, "
            f"query ÷ none {statistics.median(ratios['query']):.2f}"
        )
        alone = [await look_alone(pools["look"], count * 5) for _ in range(3)]
        print(f"is_alive() alone on a healthy idle connection: {min(alone):.2f} µs (best of 3)")
    finally:
        for pool in pools.values():
            await pool.close()
    print(f"\n2. After pg_terminate_backend of all {SIZE} sessions: one statement")
    print("| pool | seconds to a statement that runs | statements failed first |")
    print("|---|---|---|")
    for kind in KINDS:
        seconds, failed = await after_the_end(dsn, kind)
        print(f"| {kind} | {seconds:.3f} | {failed} |")


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--rounds", type=int, default=4)
    options = arguments.parse_args()
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # "none"'s discards, as expected
    count = 2000 if options.quick else 20000
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, 2 if options.quick else options.rounds, count))


if __name__ == "__main__":
    main()
