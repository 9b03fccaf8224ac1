"""What the capability filter costs the claim (issue 29 item 1, ADR-0092), same run.

One migrated schema holds jobs that each need one module (their pin, as `enqueue` makes
them). The worker's claim statement (CLAIM_AND_LOAD, 4 slots) runs inside a transaction
that is rolled back, so every repetition sees the same rows; only the statement is timed
(perf_counter around its execute). Two claimers alternate, repetition by repetition:

- "offers anything" (offers NULL: a worker that checks no pins; the old claim's cost),
- "offers 10 modules" (the job's among them: what a worker with plugins sends).

Then the case the filter makes slow: K due jobs at the head of the queue that this
claimer cannot run, before the ones it can. Each claim walks past them (no index on what
a task needs): the table shows how that cost grows with K (docs/scaling.md).

Run:  .venv/bin/python bench/claim_offers.py [--dsn DSN] [--quick]    (always exits 0)
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import psycopg
from common import fresh_schema, parser, server
from worker import table

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres.claim_sql import CLAIM_AND_LOAD
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events

QUEUE = "claims"
SLOTS = 4
MODULE = "bench_jobs"
OFFERS = sorted([MODULE, *(f"module_{n}" for n in range(9))])
TARGET = 1.1


def job(task_id: str, module: str) -> NewTask:
    pin = Pin(module, f"module:{module}", "1.0", "0")
    pinned = NewEvent(*events.encode(events.PluginsPinned((pin,))))
    return NewTask(task_id, [NewEvent("TaskCreated", {"v": 1}), pinned], queue=QUEUE)


async def create(url: str, prefix: str, count: int, module: str) -> None:
    store = await open_store(url)
    try:
        bulk = store.capabilities.bulk
        assert bulk is not None
        for start in range(0, count, 5000):
            batch = range(start, min(count, start + 5000))
            await bulk.create_tasks([job(f"{prefix}{n:07d}", module) for n in batch])
    finally:
        await store.close()


async def claim_seconds(
    connection: psycopg.AsyncConnection[Any], offers: list[str] | None
) -> float:
    params = {
        "worker": "bench",
        "queues": [QUEUE],
        "lease": 30.0,
        "limit": SLOTS,
        "excluding": [],
        "offers": offers,
        "version": "v",
    }
    async with connection.transaction(force_rollback=True):
        started = time.perf_counter()
        cursor = await connection.execute(CLAIM_AND_LOAD, params)
        rows = await cursor.fetchall()
        took = time.perf_counter() - started
    assert rows, "the claim found nothing"
    return took


async def alternate(
    url: str, cases: dict[str, list[str] | None], repetitions: int
) -> dict[str, float]:
    """Median seconds of each case's claim, the cases alternating in one connection."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    async with await psycopg.AsyncConnection.connect(url) as connection:
        for _ in range(max(10, repetitions // 10)):  # warm: plans, caches
            for offers in cases.values():
                await claim_seconds(connection, offers)
        for _ in range(repetitions):
            for name, offers in cases.items():
                times[name].append(await claim_seconds(connection, offers))
    return {name: statistics.median(values) for name, values in times.items()}


async def run(dsn: str, quick: bool) -> None:
    runnable, repetitions = (2_000, 300) if quick else (20_000, 2_000)
    heads = (0, 100, 1_000) if quick else (0, 100, 1_000, 10_000)
    async with fresh_schema(dsn) as (url, admin):
        await create(url, "job", runnable, MODULE)
        await admin.execute("ANALYZE tasks")
        medians = await alternate(url, {"anything": None, "offers": OFFERS}, repetitions)
        ratio = medians["offers"] / medians["anything"]
        table(
            f"the claim ({SLOTS} slots, {runnable:,} due jobs, median of {repetitions:,} each,"
            " alternating)",
            ["claimer", "ms per claim", "ratio", f"target <= {TARGET}x"],
            [
                ["offers anything (NULL)", f"{medians['anything'] * 1e3:.3f}", "1.00", ""],
                [
                    f"offers {len(OFFERS)} modules",
                    f"{medians['offers'] * 1e3:.3f}",
                    f"{ratio:.2f}",
                    "PASS" if ratio <= TARGET else "MISS",
                ],
            ],
        )
        rows = []
        made = 0
        for head in heads:
            # Due before every runnable job: created with an earlier claimable_at.
            if head > made:
                await create(url, f"head{made:07d}-", head - made, "module_nobody_offers")
                await admin.execute(
                    "UPDATE tasks SET claimable_at = claimable_at - interval '1 day'"
                    " WHERE id LIKE 'head%%'"
                )
                await admin.execute("VACUUM ANALYZE tasks")
                made = head
            cases = {"anything": None, "offers": OFFERS}
            medians = await alternate(url, cases, max(50, repetitions // 10))
            rows.append(
                [
                    f"{head:,}",
                    f"{medians['anything'] * 1e3:.3f}",
                    f"{medians['offers'] * 1e3:.3f}",
                    f"{medians['offers'] / medians['anything']:.2f}",
                ]
            )
        table(
            "due jobs this claimer cannot run, ahead of those it can (the walk reads them)",
            ["jobs ahead", "offers anything ms", f"offers {len(OFFERS)} ms", "ratio"],
            rows,
        )


def main() -> None:
    options = parser(__doc__).parse_args()
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, options.quick))


if __name__ == "__main__":
    main()
