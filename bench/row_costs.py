"""What three per-row mechanisms of the task path cost PostgreSQL, in server time per row
or call (issue 28 item 1): the events foreign key's check, a trigger that sets
`finished_at` against the statement setting it, and a function's `SET search_path` clause
(what a SECURITY DEFINER writer of `events` would need).

Run:  .venv/bin/python bench/row_costs.py [--dsn URL] [--rows N]
Each pair runs the same statement over N rows in one server-side loop, best of 5 rounds
(the machine's load only ever adds time); the difference is the mechanism's cost.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from common import fresh_schema, parser, server
from psycopg import sql

SETUP = """
CREATE TABLE parent (id text PRIMARY KEY, status text NOT NULL, finished_at timestamptz);
CREATE TABLE child_fk (task_id text NOT NULL REFERENCES parent (id), seq bigint NOT NULL,
                       data text NOT NULL, PRIMARY KEY (task_id, seq));
CREATE TABLE child_plain (task_id text NOT NULL, seq bigint NOT NULL, data text NOT NULL,
                          PRIMARY KEY (task_id, seq));
CREATE FUNCTION mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    new.finished_at := CASE WHEN new.status IN ('done', 'failed', 'cancelled')
                            THEN clock_timestamp() END;
    RETURN new;
END $$;
CREATE TABLE marked (LIKE parent INCLUDING ALL);
CREATE TRIGGER marked_finish BEFORE UPDATE OF status ON marked FOR EACH ROW
    WHEN (old.status IS DISTINCT FROM new.status) EXECUTE FUNCTION mark();
CREATE TABLE unmarked (LIKE parent INCLUDING ALL);
CREATE FUNCTION plain(p text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RETURN p; END $$;
CREATE FUNCTION pinned(p text) RETURNS text LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN RETURN p; END $$;
"""
FILL = """
INSERT INTO parent SELECT 't' || g, 'running' FROM generate_series(1, %(rows)s) AS g;
INSERT INTO marked SELECT * FROM parent;
INSERT INTO unmarked SELECT * FROM parent;
"""
# (what, with it, without it, the statement that puts the tables back between rounds)
PAIRS = (
    (
        "events foreign key: one event row",
        # The task row is locked first, as the fence locks it before an append's events.
        "WITH locked AS (SELECT id FROM parent FOR UPDATE)"
        " INSERT INTO child_fk SELECT id, 1, 'x' FROM locked",
        "WITH locked AS (SELECT id FROM parent FOR UPDATE)"
        " INSERT INTO child_plain SELECT id, 1, 'x' FROM locked",
        "TRUNCATE child_fk, child_plain",
    ),
    (
        "finished_at: one finishing row",
        "UPDATE marked SET status = 'done'",
        "UPDATE unmarked SET status = 'done', finished_at = clock_timestamp()",
        "UPDATE marked SET status = 'running'; UPDATE unmarked SET status = 'running',"
        " finished_at = NULL",
    ),
    (
        "SET search_path: one function call",
        "SELECT count(pinned(id)) FROM parent",
        "SELECT count(plain(id)) FROM parent",
        "",
    ),
)
TIMED = """
DO $$
DECLARE started timestamptz := clock_timestamp();
BEGIN
    EXECUTE %(statement)s;
    PERFORM set_config('bench.took', (extract(epoch FROM clock_timestamp() - started))::text,
                       false);
END $$
"""


async def timed(admin: psycopg.AsyncConnection[Any], statement: str) -> float:
    await admin.execute(TIMED.replace("%(statement)s", sql.quote(statement)))
    cursor = await admin.execute("SELECT current_setting('bench.took')::float8")
    row = await cursor.fetchone()
    assert row is not None
    return float(row[0])


async def run(dsn: str, rows: int) -> None:
    async with fresh_schema(dsn) as (_, admin):
        await admin.execute(SETUP)
        await admin.execute(FILL.replace("%(rows)s", str(rows)))
        await admin.execute("VACUUM ANALYZE")
        print(f"\n{'per row or call':<40} {'with':>9} {'without':>9} {'cost':>9}  (µs)")
        for what, with_it, without_it, reset in PAIRS:
            best = [float("inf"), float("inf")]
            for _ in range(5):
                for side, statement in enumerate((with_it, without_it)):
                    best[side] = min(best[side], await timed(admin, statement))
                    if reset:
                        await admin.execute(reset)
            per = [seconds / rows * 1e6 for seconds in best]
            print(f"{what:<40} {per[0]:>9.2f} {per[1]:>9.2f} {per[0] - per[1]:>9.2f}")


def main() -> None:
    made = parser(__doc__, quick=False)
    made.add_argument("--rows", type=int, default=100_000)
    options = made.parse_args()
    with server(options.dsn) as dsn, contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(dsn, options.rows))


if __name__ == "__main__":
    main()
