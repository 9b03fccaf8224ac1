"""The claim as a statement against the claim as a function (ADR-0099): PostgreSQL's CPU per
claim, and how often each is planned.

Each round claims batches of --limit tasks, with their logs, from a queue of claimable
tasks (three events each) beside 20,000 tasks due tomorrow in another queue, on one
connection, the way a worker does (psycopg prepares a statement after its fifth run):
first with the claim statement as it was before migration 0027 (kept below, run on the
same schema), then with today's CLAIM_AND_LOAD. Backend CPU is the connection's
PostgreSQL process's, from /proc; plans from pg_prepared_statements. Rounds alternate, so
the machine's load falls on both alike: read the ratio.

Run:  .venv/bin/python bench/claim_plan.py [--rounds 3] [--calls 500] [--limit 4]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from common import fresh_schema, parser, server  # the sibling module (bench/ is on sys.path)

from noeta.backends.stores.postgres.claimed import claim_params
from noeta.backends.stores.postgres.claims import CLAIM_AND_LOAD

# CLAIM_AND_LOAD before migration 0027: the walk and the update in the statement itself.
CLAIM_AND_LOAD_BEFORE = """
WITH due AS MATERIALIZED (
    SELECT found.id, found.priority, found.claimable_at, found.taken_over, false AS limited
      FROM (SELECT q.queue, (SELECT t.priority FROM tasks AS t
                               WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                               ORDER BY t.priority DESC LIMIT 1) AS top
              FROM unnest(%(queues)s::text[]) AS q(queue)
             WHERE NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = q.queue)
            OFFSET 0) AS q
     CROSS JOIN generate_series(q.top, 0, -1) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.claimable_at, t.status IN ('running', 'holding') AS taken_over
          FROM tasks AS t
         WHERE t.queue = q.queue AND t.priority = p.priority AND t.claimable_at <= now()
           AND t.id <> ALL(%(excluding)s::text[])
           AND (%(offers)s::text[] IS NULL OR t.needs IS NULL OR t.needs <@ %(offers)s::text[])
         ORDER BY t.claimable_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED
     ) AS found
    UNION ALL
    SELECT limited.id, limited.priority, limited.claimable_at, limited.taken_over, true
      FROM (SELECT s.queue FROM queue_settings AS s
             WHERE s.queue = ANY(%(queues)s::text[]) ORDER BY s.queue OFFSET 0) AS q
     CROSS JOIN LATERAL noeta_claimable_under_limits(q.queue, %(limit)s, false, %(offers)s::text[])
           AS limited
     WHERE limited.id <> ALL(%(excluding)s::text[])
     ORDER BY 2 DESC, 3
     LIMIT %(limit)s
), lease AS (
    SELECT clock_timestamp() AS at, clock_timestamp() + make_interval(secs => %(lease)s) AS until
), claimed AS (
    UPDATE tasks AS t
       SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
           lease_until = lease.until, claimable_at = lease.until,
           updated_at = clock_timestamp()
      FROM due, lease
     WHERE t.id = due.id
    RETURNING t.id, t.owner_epoch, t.lease_until, t.last_seq, due.taken_over, due.limited,
              t.queue
), charged AS (
    UPDATE queue_settings AS s
       SET rate_tokens = least(s.rate_count::float8, coalesce(s.rate_tokens, s.rate_count)
               + extract(epoch FROM lease.at - coalesce(s.rate_at, lease.at))
                 * s.rate_count / s.rate_seconds) - took.n,
           rate_at = lease.at
      FROM (SELECT c.queue, count(*) AS n FROM claimed AS c WHERE c.limited GROUP BY c.queue)
           AS took, lease
     WHERE s.queue = took.queue AND s.rate_count IS NOT NULL
), snapshot AS (
    SELECT s.task_id, s.seq, s.data FROM claimed AS c
      JOIN snapshots AS s ON s.task_id = c.id AND s.version = %(version)s
)
SELECT 0, c.id, c.last_seq, c.owner_epoch, NULL, NULL, c.lease_until, NULL, c.taken_over, NULL
  FROM claimed AS c
UNION ALL
SELECT 1, s.task_id, s.seq, NULL, NULL, NULL, NULL, NULL, NULL, s.data FROM snapshot AS s
UNION ALL
SELECT 2, e.task_id, e.seq, e.epoch, e.type, e.data, e.created_at, e.owner, NULL, NULL
  FROM claimed AS c
  JOIN events AS e ON e.task_id = c.id
   AND e.seq > coalesce((SELECT s.seq FROM snapshot AS s WHERE s.task_id = c.id), 0)
UNION ALL
SELECT 3, i.task_id, i.id, i.taken_seq, i.dedupe_key, i.payload, i.created_at, NULL, NULL,
       NULL
  FROM claimed AS c JOIN inbox AS i ON i.task_id = c.id AND i.taken_seq IS NULL
 ORDER BY 1, 2, 3
"""

LATER = """
INSERT INTO tasks (id, queue, status, claimable_at)
SELECT 'later-' || n, 'other', 'ready', now() + interval '1 day'
  FROM generate_series(1, 20000) n
"""
FILL = (
    """
INSERT INTO tasks (id, queue, status, claimable_at, last_seq)
SELECT %(prefix)s || n, 'default', 'ready', now() - interval '1 hour' + n * interval '1 ms', 3
  FROM generate_series(1, %(count)s) n""",
    """
INSERT INTO events (task_id, seq, type, data, epoch)
SELECT %(prefix)s || n, s, 'Noted', '{"note": "x"}', 0
  FROM generate_series(1, %(count)s) n, generate_series(1, 3) s""",
    "ANALYZE tasks",
    "ANALYZE events",
)


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the backend `pid` has used (it runs on this machine)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


async def one_round(url: str, statement: str, calls: int, limit: int) -> dict[str, Any]:
    """`calls` claims of `limit` tasks on a connection of its own."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        pid = connection.info.backend_pid
        params = claim_params("bench", ["default"], 30.0, limit)
        params["version"] = "bench"
        claimed = 0
        cpu, wall = backend_cpu(pid), time.perf_counter()
        for _ in range(calls):
            rows = await (await connection.execute(statement, params, prepare=True)).fetchall()
            claimed += sum(1 for row in rows if row[0] == 0)
        wall, cpu = time.perf_counter() - wall, backend_cpu(pid) - cpu
        cursor = await connection.execute(
            "SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements"
        )
        generic, custom = (await cursor.fetchone()) or (0, 0)
    assert claimed == calls * limit, f"claimed {claimed} of {calls * limit}"
    return {"cpu": cpu / calls, "wall": wall / calls, "generic": generic, "custom": custom}


async def measure(dsn: str, rounds: int, calls: int, limit: int) -> None:
    arms = {"statement (before 0027)": CLAIM_AND_LOAD_BEFORE, "noeta_due_for_claim": CLAIM_AND_LOAD}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    async with fresh_schema(dsn) as (url, admin):
        await admin.execute(LATER)
        for round_ in range(rounds):
            for name, statement in arms.items():
                prefix = f"r{round_}-{len(results[name])}-{name[:4]}-"
                for fill in FILL:
                    await admin.execute(fill, {"prefix": prefix, "count": calls * limit})
                results[name].append(await one_round(url, statement, calls, limit))
    print(f"\n{calls} claims of {limit} tasks with their logs a round, {rounds} rounds")
    print("| claim | backend CPU us/claim | wall us/claim | generic / custom plans |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        cpu = ", ".join(f"{run['cpu'] * 1e6:,.0f}" for run in runs)
        wall = ", ".join(f"{run['wall'] * 1e6:,.0f}" for run in runs)
        plans = ", ".join(f"{run['generic']} / {run['custom']}" for run in runs)
        print(f"| {name} | {cpu} | {wall} | {plans} |")
    before, after = (sum(r["cpu"] for r in runs) for runs in results.values())
    print(f"\nCPU ratio, function / statement: {after / before:.2f}")


def main() -> None:
    options = parser(__doc__, quick=False)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--calls", type=int, default=500)
    options.add_argument("--limit", type=int, default=4)
    chosen = options.parse_args()
    with server(chosen.dsn) as dsn:
        asyncio.run(measure(dsn, chosen.rounds, chosen.calls, chosen.limit))


if __name__ == "__main__":
    main()
