"""Benchmark producers: tasks created per second, one at a time and in batches, by one
producer and by 8 at once, on one PostgreSQL server (fsync on: every commit flushed).

Rows, all in the same run, each in a queue of its own:
- `create_task` one at a time (the baseline: one statement and one commit per task),
- `AsyncClient.submit` one at a time (what an application calls; checks and encoding too),
- `AsyncClient.submit_many` of a whole batch (one statement, one commit, one NOTIFY),
- 8 producers at once, each with its own connection: `create_task` one at a time, the
  same with tasks due later (no NOTIFY: what the notify lock costs), and `submit_many`
  in batches of 100.

Every PostgreSQL transaction that NOTIFYs takes one database-wide lock at commit and
holds it through the commit's flush, so single creates from 8 producers commit one after
another; a batch pays that once.

Run:  .venv/bin/python bench/submit.py [--quick] [--dsn DSN]
It always exits 0; targets are marked PASS/MISS, they are not a test.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import fresh_schema, parser, server

from noeta.backends.stores.postgres import PostgresStore
from noeta.client import AsyncClient, Submission
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events

PRODUCERS = 8
BATCH_TARGET = 10_000.0  # tasks/s, one submit_many of 10,000
CONCURRENT_TARGET = 3_000.0  # tasks/s, 8 producers
MODEL = "openai:bench"


def task_created(prompt: str) -> NewEvent:
    created = events.TaskCreated(model=MODEL, prompt=prompt, interactive=False, tools=())
    return NewEvent(*events.encode(created))


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def create_one_by_one(url: str, prefix: str, count: int, later: bool = False) -> None:
    store = await PostgresStore.open(url, max_connections=1)
    due = datetime.now(UTC) + timedelta(days=1) if later else None
    try:
        for n in range(count):
            task = NewTask(f"{prefix}{n}", [task_created("hi")], queue=prefix, ready_at=due)
            await store.create_task(task)
    finally:
        await store.close()


async def submit_one_by_one(url: str, prefix: str, count: int) -> None:
    async with AsyncClient(url) as client:
        for n in range(count):
            await client.submit("hi", model=MODEL, queue=prefix, id=f"{prefix}{n}", tools=[])


async def submit_batches(url: str, prefix: str, count: int, batch: int) -> None:
    async with AsyncClient(url) as client:
        await client.store()  # connected before the clock starts
        for first in range(0, count, batch):
            items = [
                Submission("hi", id=f"{prefix}{n}", tools=[])
                for n in range(first, min(first + batch, count))
            ]
            await client.submit_many(items, model=MODEL, queue=prefix)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    for row in [headers, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def mark(rate: float, target: float | None) -> str:
    if target is None:
        return ""
    return f"≥{target:,.0f}  {'PASS' if rate >= target else 'MISS'}"


async def run(dsn: str, quick: bool) -> None:
    single = 300 if quick else 2_000
    batch = 2_000 if quick else 10_000
    each = 200 if quick else 1_000  # per producer
    rows: list[list[str]] = []

    def row(what: str, tasks: int, seconds: float, target: float | None = None) -> None:
        rate = tasks / seconds
        rows.append([what, f"{tasks:,}", f"{seconds:.2f}", f"{rate:,.0f}", mark(rate, target)])
        print(f"  {what}: done", flush=True)

    async with fresh_schema(dsn) as (url, _):
        row(
            "create_task, one at a time",
            single,
            await timed(lambda: create_one_by_one(url, "c-", single)),
        )
        row(
            "submit, one at a time",
            single,
            await timed(lambda: submit_one_by_one(url, "s-", single)),
        )
        seconds = await timed(lambda: submit_batches(url, "b-", batch, batch))
        row(f"submit_many of {batch:,}", batch, seconds, BATCH_TARGET)
        for what, make in (
            ("create_task", lambda p: create_one_by_one(url, p, each)),
            ("create_task, due later (no NOTIFY)", lambda p: create_one_by_one(url, p, each, True)),
            ("submit_many, batches of 100", lambda p: submit_batches(url, p, each, 100)),
        ):
            producers = [make(f"p{what[:8]}{n}-{len(rows)}-") for n in range(PRODUCERS)]
            seconds = await timed(lambda jobs=producers: asyncio.gather(*jobs))
            target = CONCURRENT_TARGET if what.startswith("submit_many") else None
            row(f"{PRODUCERS} producers: {what}", each * PRODUCERS, seconds, target)
    table("Tasks created per second", ["producer", "tasks", "seconds", "tasks/s", "target"], rows)
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    options = parser(__doc__).parse_args()
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, options.quick))


if __name__ == "__main__":
    main()
