"""Benchmark pruning online: claim latency while `noeta db prune` removes 100,000 finished
tasks, against claim latency without it, in the same run on one PostgreSQL (fsync on).

Seeded by SQL: finished tasks in queue `old` (finished 8 days ago, two events each, an
inbox entry for one in ten), and ready tasks in queue `q`. One client claims from `q`
one claim at a time (`Store.claim`, its own connection) and times each: first without
pruning, then while a real `noeta db prune --finished-before 7d --queue old` process
runs, then without again. The ratio compares the median and p95 during the prune with
those of the two runs around it. Measured, not asserted.

Run:  .venv/bin/python bench/prune.py [--quick] [--dsn DSN]
It always exits 0; the ratio target is marked PASS/MISS, it is not a test.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import fresh_schema, parser, server

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.store import NewEvent, NewTask

RATIO_TARGET = 1.1
LEASE = 3600.0
NOETA = str(Path(sys.executable).parent / "noeta")

SEED_FINISHED_TASKS = """
INSERT INTO tasks (id, queue, status, last_seq, created_at, updated_at, finished_at)
SELECT 'old-' || n, 'old', 'done', 2, now() - interval '9 days', now() - interval '8 days',
       now() - interval '8 days'
  FROM generate_series(1, %(count)s) AS n
"""
SEED_FINISHED_EVENTS = """
INSERT INTO events (task_id, seq, type, data)
SELECT 'old-' || n, seq, 'bench.step', '["step",1]'
  FROM generate_series(1, %(count)s) AS n, generate_series(1, 2) AS seq
"""
SEED_FINISHED_INBOX = """
INSERT INTO inbox (task_id, dedupe_key, payload, taken_seq)
SELECT 'old-' || n, 'm', '{}', 2 FROM generate_series(1, %(count)s, 10) AS n
"""


async def claim_latencies(
    store: PostgresStore, until: asyncio.Event | None, count: int
) -> list[float]:
    """Claim one task at a time; `count` claims, or with `until`, until it is set."""
    latencies = []
    while (len(latencies) < count) if until is None else not until.is_set():
        start = time.perf_counter()
        claim = await store.claim("bench", ["q"], LEASE)
        latencies.append(time.perf_counter() - start)
        assert claim is not None, "the queue ran dry: seed more ready tasks"
    return latencies


def row(what: str, latencies: list[float], base: list[float] | None = None) -> list[str]:
    median = statistics.median(latencies)
    p95 = statistics.quantiles(latencies, n=20)[-1]
    cells = [what, f"{len(latencies):,}", f"{median * 1000:.2f}", f"{p95 * 1000:.2f}"]
    if base is None:
        return [*cells, "", "", ""]
    ratio = median / statistics.median(base)
    ratio95 = p95 / statistics.quantiles(base, n=20)[-1]
    verdict = "PASS" if ratio <= RATIO_TARGET else "MISS"
    return [*cells, f"{ratio:.3f}", f"{ratio95:.3f}", f"≤{RATIO_TARGET}  {verdict}"]


async def run(dsn: str, quick: bool, batch_size: int) -> None:
    finished = 20_000 if quick else 100_000
    claims = 500 if quick else 3_000
    async with fresh_schema(dsn) as (url, admin):
        for seed in (SEED_FINISHED_TASKS, SEED_FINISHED_EVENTS, SEED_FINISHED_INBOX):
            await admin.execute(seed, {"count": finished})
        store = await PostgresStore.open(url, max_connections=1)
        try:
            ready = [
                NewTask(f"q-{n}", [NewEvent("bench.step", 1)], queue="q") for n in range(60_000)
            ]
            for first in range(0, len(ready), 10_000):
                await store.create_tasks(ready[first : first + 10_000])
            await admin.execute("VACUUM ANALYZE")
            print(f"  seeded {finished:,} finished and {len(ready):,} ready tasks", flush=True)
            await claim_latencies(store, None, 200)  # warm: statements prepared
            before = await claim_latencies(store, None, claims)
            done = asyncio.Event()
            started = time.perf_counter()
            pruner = await asyncio.create_subprocess_exec(
                NOETA,
                "db",
                "prune",
                "--finished-before",
                "7d",
                "--queue",
                "old",
                "--store",
                url,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )

            async def prune() -> bytes:
                output, errors = await pruner.communicate()
                done.set()
                return output or errors

            said, during = await asyncio.gather(prune(), claim_latencies(store, done, 0))
            pruning = time.perf_counter() - started
            after = await claim_latencies(store, None, claims)
        finally:
            await store.close()
    base = before + after
    rows = [
        row("before pruning", before),
        row(f"while pruning {finished:,}", during, base),
        row("after pruning", after),
    ]
    headers = ["claims", "n", "median ms", "p95 ms", "median ratio", "p95 ratio", "target"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("\nClaim latency, one client, with and without a prune running")
    for cells in [headers, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    print(f"\nbatches of {batch_size:,}; noeta db prune said: {said.decode().strip()}")
    print(f"it took {pruning:.1f} s: {finished / pruning:,.0f} tasks/s")
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--batch-size", type=int, default=250, help="the prune's batch")
    options = arguments.parse_args()
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, options.quick, options.batch_size))


if __name__ == "__main__":
    main()
