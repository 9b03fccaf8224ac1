"""How soon a store answers once PostgreSQL is back after an outage (ADR-0156).

A worker's store (every connection opened, as a worker's are) reads one task every
--every s while its private embedded PostgreSQL is stopped for --outages seconds each,
then started again; printed is the time from the server's return to the store's first
answer. Two arms, alternated (the order flips
each round), on the same server:
  capped    the store as it is: a lost connection is tried again at most half a
            deadline apart (ADR-0156)
  psycopg   psycopg_pool's own back-off (1 s, 2 s, 4 s, ... for 5 minutes)

Run:  .venv/bin/python bench/outage_return.py [--outages 10,30,70] [--rounds 1]
(about twice the sum of the outages a round; always exits 0)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import statistics
import time

from psycopg_pool import AsyncConnectionPool

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.pool import LastInFirstOutPool
from noeta.core.errors import StoreError
from noeta.testing.store_contract import created

ARMS = ("capped", "psycopg")
CONNECTIONS = 4
CAPPED = LastInFirstOutPool._add_connection


async def one(server: EmbeddedPostgres, arm: str, outage: float, every: float) -> float:
    """Seconds from the server's return to the store's first answer."""
    LastInFirstOutPool._add_connection = (  # type: ignore[method-assign]
        CAPPED if arm == "capped" else AsyncConnectionPool._add_connection
    )
    store = await PostgresStore.open(
        server.start(), max_connections=CONNECTIONS, min_connections=CONNECTIONS
    )
    try:
        await store.get_task("t")
        await asyncio.to_thread(server.stop, mode="fast")
        ends = time.monotonic() + outage
        while time.monotonic() < ends:
            with contextlib.suppress(StoreError):
                await store.get_task("t")
            await asyncio.sleep(every)
        await asyncio.to_thread(server.start)
        back = time.monotonic()
        while True:
            try:
                await store.get_task("t")
                return time.monotonic() - back
            except StoreError:
                await asyncio.sleep(0.05)
    finally:
        await store.close()
        LastInFirstOutPool._add_connection = CAPPED  # type: ignore[method-assign]


async def main(outages: list[float], rounds: int, every: float) -> None:
    logging.getLogger("noeta.store").setLevel(logging.ERROR)
    server = EmbeddedPostgres(make_home("noeta-bench-outage-"))
    try:
        store = await PostgresStore.open(server.start(), migrate=True)
        await store.create_task(created("t"))
        await store.close()
        seen: dict[tuple[str, float], list[float]] = {}
        for index in range(rounds):
            for outage in outages:
                order = ARMS if index % 2 == 0 else ARMS[::-1]
                for arm in order:
                    took = await one(server, arm, outage, every)
                    seen.setdefault((arm, outage), []).append(took)
                    print(
                        f"round {index + 1}: {arm:8} outage {outage:5.0f} s: first answer "
                        f"{took:5.1f} s after the return",
                        flush=True,
                    )
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(server.root, ignore_errors=True)
    print("\n| outage | capped: first answer after the return | psycopg_pool's back-off | ratio |")
    print("|---|---|---|---|")
    for outage in outages:
        capped = statistics.median(seen[("capped", outage)])
        psycopg = statistics.median(seen[("psycopg", outage)])
        ratio = psycopg / capped if capped else float("inf")
        print(f"| {outage:.0f} s | {capped:.1f} s | {psycopg:.1f} s | {ratio:.0f} x |")


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--outages", default="10,30,70", help="seconds, comma-separated")
    arguments.add_argument("--rounds", type=int, default=1)
    arguments.add_argument("--every", type=float, default=0.5, help="seconds between reads")
    options = arguments.parse_args()
    outages = [float(each) for each in options.outages.split(",")]
    asyncio.run(main(outages, options.rounds, options.every))
