"""Queue limits: what a claim costs with limits on vs off (issue 20, target <= 1.2x).

Each mode fills one queue with ready tasks, then claimers (1, then 4 at once, each on its
own connection) run the worker's claim statement one task at a time and finish each
claimed task outside the timing, so the running count stays at the claimers' number, as
in a fleet. Modes: the claim before limits (0009's statement and index, re-created here),
a queue with no settings (today's path), a concurrency limit that never binds, that and a
per-key limit (tenants), and a binding concurrency limit (claimers find the queue full
half of the time). The provider half of the issue's bench is bench/model_limits.py.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import psycopg
from common import fresh_schema, parser, server  # the sibling module (bench/ is on sys.path)

from noeta.backends.stores.postgres import CLAIM_NEXT_TASK

# The claim as migration 0009 left it (ADR-0060), for the "before" row.
BEFORE_INDEX = """
CREATE INDEX IF NOT EXISTS tasks_claimable_in_queue ON tasks (queue, claimable_at)
    WHERE claimable_at IS NOT NULL"""
CLAIM_BEFORE_LIMITS = """
WITH due AS MATERIALIZED (
    SELECT found.id, found.taken_over FROM unnest(%(queues)s::text[]) AS q(queue)
     CROSS JOIN LATERAL (
        SELECT t.id, t.claimable_at, t.status IN ('running', 'holding') AS taken_over
          FROM tasks AS t
         WHERE t.queue = q.queue AND t.claimable_at <= now()
         ORDER BY t.claimable_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED
     ) AS found
     ORDER BY found.claimable_at
     LIMIT %(limit)s
), lease AS (
    SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until
), claimed AS (
    UPDATE tasks AS t
       SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
           lease_until = lease.until, claimable_at = lease.until,
           updated_at = clock_timestamp()
      FROM due, lease
     WHERE t.id = due.id
    RETURNING t.id, t.owner_epoch, t.lease_until, t.last_seq, due.taken_over
)
SELECT id, owner_epoch, lease_until, taken_over FROM claimed
"""
FILL = """
INSERT INTO tasks (id, queue, status, claimable_at, concurrency_key)
SELECT %(mode)s || '-' || n, %(mode)s, 'ready', now() - n * interval '1 ms', 'tenant-' || n %% 20
  FROM generate_series(1, %(count)s) n
"""
FINISH = """
UPDATE tasks SET status = 'done', lease_until = NULL, claimable_at = NULL, finished_at = now()
 WHERE id = %(id)s
"""
SETTINGS = (
    "INSERT INTO queue_settings (queue, concurrency, per_key_concurrency) VALUES (%s, %s, %s)"
)

# (mode, statement, concurrency, per-key limit); None: no settings row.
MODES: list[tuple[str, str, int | None, int | None]] = [
    ("before", CLAIM_BEFORE_LIMITS, None, None),
    ("none", CLAIM_NEXT_TASK, None, None),
    ("concurrency", CLAIM_NEXT_TASK, 1000, None),
    ("perkey", CLAIM_NEXT_TASK, 1000, 100),
    ("binding", CLAIM_NEXT_TASK, 2, None),
]


async def claimer(url: str, mode: str, statement: str, claims: int) -> list[float]:
    """Claim `claims` times, one task each; the seconds each claim statement took
    (those that found the queue full included)."""
    params = {"queues": [mode], "lease": 30.0, "worker": "bench", "limit": 1, "excluding": []}
    took = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        for _ in range(claims):
            start = time.perf_counter()
            rows = await (await db.execute(statement, params)).fetchall()
            took.append(time.perf_counter() - start)
            for row in rows:
                await db.execute(FINISH, {"id": row[0]})
    return took


async def measure(dsn: str, quick: bool) -> None:
    claims = 300 if quick else 2000
    rows: list[tuple[str, int, float, float, float]] = []
    for modes in (MODES[:1], MODES[1:]):
        # The claim before limits on a schema of its own: its index would tempt the
        # planner of the claim with limits (a due-time walk per queue, priority filtered).
        async with fresh_schema(dsn) as (url, admin):
            if modes[0][1] is CLAIM_BEFORE_LIMITS:
                await admin.execute(BEFORE_INDEX)
            for mode, statement, concurrency, per_key in modes:
                await admin.execute(FILL, {"mode": mode, "count": claims * 5 + 1000})
                if concurrency is not None:
                    await admin.execute(SETTINGS, (mode, concurrency, per_key))
                await admin.execute("ANALYZE tasks")
                for claimers in (1, 4):
                    start = time.perf_counter()
                    runs = [claimer(url, mode, statement, claims) for _ in range(claimers)]
                    took = [t for each in await asyncio.gather(*runs) for t in each]
                    elapsed = time.perf_counter() - start
                    median = statistics.median(took) * 1000
                    p95 = statistics.quantiles(took, n=20)[18] * 1000
                    rows.append((mode, claimers, len(took) / elapsed, median, p95))
    print_table(rows)


def print_table(rows: list[tuple[str, int, float, float, float]]) -> None:
    base = {claimers: median for mode, claimers, _, median, _ in rows if mode == "none"}
    print(
        f"\n{'mode':<12} {'claimers':>8} {'claims/s':>9} {'median ms':>10} {'p95 ms':>8} "
        f"{'vs none':>8}"
    )
    for mode, claimers, rate, median, p95 in rows:
        ratio = median / base[claimers]
        print(f"{mode:<12} {claimers:>8} {rate:>9.0f} {median:>10.3f} {p95:>8.3f} {ratio:>7.2f}x")


def main() -> None:
    arguments = parser(__doc__).parse_args()
    with server(arguments.dsn) as dsn:
        asyncio.run(measure(dsn, arguments.quick))


if __name__ == "__main__":
    main()
