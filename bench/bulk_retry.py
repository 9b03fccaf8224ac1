"""A bulk retry of 100,000 failed jobs (issue 30 item 1): how long the dry run's count
takes, and the real run, batch by batch; then that a second run makes nothing.

Run:  .venv/bin/python bench/bulk_retry.py [--dsn URL] [--quick] [--tasks N]
The jobs are made by `enqueue_many` (10,000 a call) and marked failed by one UPDATE (a
bench's shortcut: a worker would end them one append each; the retry reads only their
rows and first events). Times move with the machine's load; the counts do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from common import fresh_schema, parser, server

import noeta
from noeta.client import AsyncClient
from noeta.client.bulk_actions import BulkOutcome

FAIL_THEM = """
UPDATE tasks SET status = 'failed', ready_at = NULL, claimable_at = NULL, finished_at = now()
 WHERE queue = 'bench'
"""


@noeta.tool
def send_report(to: str) -> str:
    return to


async def run(dsn: str, count: int, batch: int) -> None:
    async with fresh_schema(dsn) as (url, admin):
        started = time.monotonic()
        async with AsyncClient(url) as client:
            for first in range(0, count, 10_000):
                inputs: list[dict[str, Any]] = [
                    {"to": f"user{n}@example.com"} for n in range(first, min(count, first + 10_000))
                ]
                await client.enqueue_many("send_report", inputs, queue="bench")
            await admin.execute(FAIL_THEM)
            await admin.execute("ANALYZE tasks")
            print(f"{count:,} failed jobs made in {time.monotonic() - started:.1f} s")

            started = time.monotonic()
            dry = await client.retry_many(status="failed", queue="bench", dry_run=True)
            took = time.monotonic() - started
            print(f"dry run: {dry.matched:,} match, counted in {took * 1000:.0f} ms")

            marks: list[float] = []

            def progress(outcome: BulkOutcome) -> None:
                marks.append(time.monotonic())

            started = time.monotonic()
            done = await client.retry_many(
                status="failed", queue="bench", batch_size=batch, progress=progress
            )
            took = time.monotonic() - started
            gaps = sorted(b - a for a, b in zip([started, *marks], marks, strict=False))
            print(
                f"run: {done.done:,} retried in {took:.1f} s ({done.done / took:,.0f} a second), "
                f"{len(marks)} batches of {batch}: median {gaps[len(gaps) // 2] * 1000:.0f} ms, "
                f"slowest {gaps[-1] * 1000:.0f} ms"
            )
            started = time.monotonic()
            again = await client.retry_many(status="failed", queue="bench", batch_size=batch)
            took = time.monotonic() - started
            print(f"again: {again.done:,} retried, {again.skipped:,} skipped in {took:.1f} s")


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--tasks", type=int, default=100_000)
    arguments.add_argument("--batch", type=int, default=500)
    options = arguments.parse_args()
    count = 5_000 if options.quick else options.tasks
    with server(options.dsn) as dsn, contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(dsn, count, options.batch))


if __name__ == "__main__":
    main()
