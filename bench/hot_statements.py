"""Server time per hot statement, from pg_stat_statements: what one task costs the server
on its way through create, claim and finish, in a queue without settings and in one
with a rate. Run it on two checkouts to see what a migration changed.

Run:  .venv/bin/python bench/hot_statements.py [--tasks N]
It starts a private embedded PostgreSQL (fsync on) with pg_stat_statements loaded, and
stops it at the end. Prints the mean execution time (ms) and calls per statement kind.
"""

from __future__ import annotations

import argparse
import asyncio

from common import counted_server, fresh_schema  # the sibling module (bench/ is on sys.path)

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.queue_settings import QueueChange, Rate
from noeta.core.ports.store import Finish, NewEvent, NewTask

KINDS = {  # statement kind: a fragment of its text
    "create": "noeta_create_task(",
    "claim": "WITH due AS MATERIALIZED",
    "finish": "noeta_append_and_finish(",
}
STATS = """
SELECT query, calls, mean_exec_time FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


async def one_queue(url: str, queue: str, tasks: int) -> None:
    store = await PostgresStore.open(url, max_connections=1)
    try:
        for number in range(tasks):
            task = NewTask(f"{queue}-{number}", [NewEvent("created", {})], queue=queue)
            assert await store.create_task(task)
            claim = await store.claim("w", [queue], 3600.0)
            assert claim is not None
            await store.append(claim, 1, [NewEvent("done", {})], next_state=Finish())
    finally:
        await store.close()


async def measure(dsn: str, tasks: int) -> None:
    async with fresh_schema(dsn) as (url, admin):
        store = await PostgresStore.open(url)
        await store.set_queue("rated", QueueChange(rate=Rate(1_000_000, 1.0)))
        await store.close()
        for queue in ("plain", "rated"):
            await admin.execute("SELECT public.pg_stat_statements_reset()")
            await one_queue(url, queue, tasks)
            rows = await (await admin.execute(STATS)).fetchall()
            for kind, fragment in KINDS.items():
                found = [(calls, mean) for query, calls, mean in rows if fragment in query]
                calls = sum(c for c, _ in found)
                mean = sum(c * m for c, m in found) / calls if calls else 0.0
                print(f"{queue:6} {kind:7} {calls:6} calls  {mean:.4f} ms mean")


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__)
    arguments.add_argument("--tasks", type=int, default=2000)
    tasks = arguments.parse_args().tasks
    with counted_server() as dsn:
        asyncio.run(measure(dsn, tasks))


if __name__ == "__main__":
    main()
