"""What a change to the claim's statement or to the `tasks` table's objects costs a claim:
two schemas on one server, claims alternated between them, read from pg_stat_statements.

Run:  .venv/bin/python bench/claim_alternation.py [--jobs N] [--rounds R] [--b-sql FILE]
          [--a-claim module:NAME] [--b-claim module:NAME] [--analyze] [--nested-loops]
It starts a private embedded PostgreSQL (fsync on) and makes two migrated schemas, A and
B. B is then given FILE's SQL (for example the trigger, function and constraint a
migration dropped, so B is main's table); each claims with the statement NAME of module
if given (else this tree's CLAIM_AND_START_JOBS). Each schema gets N no-op jobs of
bench/noop_job.py (their tables analysed with --analyze); its claims, one job at a time
(an idle worker's) then 25 at a time (a drain's), go A, B, A, B... so the machine's load
falls on both alike (A B, then B A: neither always first). Figures are per round: an A/A
run (no option) shows the spread to read the others against. Before each claim size, one
claim of each statement runs under EXPLAIN (ANALYZE), rolled back: how many times its
fresh-job check read a job's CallRequested (once a claimed job is right: ADR-0145).
--nested-loops turns hash and merge joins and Materialize off on the claimers'
connections: the plan a claim gets when the planner's estimates make it nest loops.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import math
import shutil
from pathlib import Path
from typing import Any

import psycopg
from claim_cost import STATISTICS, claim_params_for, fill
from common import cpu_seconds, fresh_schema

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.postgres.claim_sql import CLAIM_AND_START_JOBS
from noeta.testing.generic_plans import NESTED_LOOPS_ONLY, executed_generic_plan

BATCH = 25


async def claim_rounds(
    claimers: list[tuple[psycopg.AsyncConnection[Any], str, dict[str, Any]]],
    admin: psycopg.AsyncConnection[Any],
    size: int,
    count: int,
) -> list[tuple[float, float]]:
    """`count` claims of `size` in each schema, alternated: µs of execution a claim each,
    and µs of its backend's CPU (which the machine's load moves less)."""
    ids = []
    for claimer, statement, params in claimers:
        plan = await claimer.execute("EXPLAIN (VERBOSE, FORMAT JSON) " + statement, params)
        found = await plan.fetchone()
        assert found is not None
        ids.append(found[0][0]["Query Identifier"])
    await admin.execute("SELECT public.pg_stat_statements_reset()")
    cpu = [cpu_seconds([claimer.info.backend_pid]) for claimer, _, _ in claimers]
    for n in range(count):  # A B, B A, A B...: neither always runs first
        for claimer, statement, params in claimers[:: 1 if n % 2 else -1]:
            cursor = await claimer.execute(statement, params)
            started = [r for r in await cursor.fetchall() if r[4] == "ToolStarted"]
            assert len(started) == size, "a claim did not start its jobs"
    figures = []
    for (claimer, _, _), queryid, before in zip(claimers, ids, cpu, strict=True):
        used = cpu_seconds([claimer.info.backend_pid]) - before
        cursor = await admin.execute(STATISTICS, (queryid,))
        calls, run, *_ = (await cursor.fetchone()) or (0, 0.0)
        figures.append((run * 1000 / calls, used * 1e6 / calls) if calls else (math.nan,) * 2)
    return figures


def check_loops(url: str, statement: str, params: dict[str, Any], nested_loops: bool) -> str:
    """One claim's generic plan run (rolled back): how many times its fresh-job check read
    a job's CallRequested (by seq = 2), against the jobs it started."""
    with psycopg.connect(url, autocommit=True) as connection:
        if nested_loops:
            connection.execute(NESTED_LOOPS_ONLY)
        nodes = executed_generic_plan(connection, statement, params)
    probes = sum(n["Actual Loops"] for n in nodes if "seq = 2" in n.get("Index Cond", ""))
    started = sum(
        n["Actual Rows"]
        for n in nodes
        if n["Node Type"] == "ModifyTable" and n.get("Relation Name") == "events"
    )
    return f"{probes} probes for {started:.0f} jobs"


def statement_named(option: str | None) -> str:
    """The statement `module:NAME` names, else this tree's CLAIM_AND_START_JOBS."""
    if not option:
        return CLAIM_AND_START_JOBS
    module, name = option.split(":")
    return str(getattr(importlib.import_module(module), name))


async def measure(dsn: str, options: argparse.Namespace) -> None:
    a_statement = statement_named(options.a_claim)
    b_statement = statement_named(options.b_claim)
    per_round = options.jobs // options.rounds
    lone = per_round // 2
    batched = (per_round - lone) // BATCH
    async with fresh_schema(dsn) as (url_a, admin), fresh_schema(dsn) as (url_b, admin_b):
        if options.b_sql:
            await admin_b.execute(options.b_sql)
        await fill(url_a, options.jobs)
        await fill(url_b, options.jobs)
        if options.analyze:
            await admin.execute("ANALYZE")
            await admin_b.execute("ANALYZE")
        connect = psycopg.AsyncConnection.connect
        async with (
            await connect(url_a, autocommit=True, prepare_threshold=0) as a,
            await connect(url_b, autocommit=True, prepare_threshold=0) as b,
        ):
            for claimer in (a, b):
                await claimer.execute("SET plan_cache_mode = force_generic_plan")
                if options.nested_loops:
                    await claimer.execute(NESTED_LOOPS_ONLY)
            for size in (1, BATCH):
                checks = [
                    check_loops(
                        url, statement, await claim_params_for(schema, size), options.nested_loops
                    )
                    for url, statement, schema in (
                        (url_a, a_statement, admin),
                        (url_b, b_statement, admin_b),
                    )
                ]
                print(f"claim of {size}, fresh-job check: A {checks[0]}, B {checks[1]}")
            print(
                "round  claim of   A µs a claim   B µs a claim   B / A"
                "   A CPU µs   B CPU µs   B / A"
            )
            for round_ in range(options.rounds):
                for size, count in ((1, lone), (BATCH, batched)):
                    claimers = [
                        (a, a_statement, await claim_params_for(admin, size)),
                        (b, b_statement, await claim_params_for(admin_b, size)),
                    ]
                    (ua, ca), (ub, cb) = await claim_rounds(claimers, admin, size, count)
                    print(
                        f"{round_ + 1:5d} {size:9d} {ua:14.1f} {ub:14.1f} {ub / ua:7.3f}"
                        f" {ca:10.1f} {cb:10.1f} {cb / ca:7.3f}"
                    )


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--jobs", type=int, default=3000)
    arguments.add_argument("--rounds", type=int, default=3)
    arguments.add_argument("--b-sql", help="SQL run in schema B after its migration")
    arguments.add_argument("--a-claim", help="module:NAME of the claim statement A sends")
    arguments.add_argument("--b-claim", help="module:NAME of the claim statement B sends")
    arguments.add_argument("--analyze", action="store_true", help="ANALYZE both schemas filled")
    arguments.add_argument(
        "--nested-loops", action="store_true", help="claim with hash and merge joins off"
    )
    options = arguments.parse_args()
    if options.b_sql:
        options.b_sql = Path(options.b_sql).read_text(encoding="utf-8")
    settings = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}
    embedded = EmbeddedPostgres(make_home("noeta-bench-pg-"), settings=settings)
    try:
        dsn = embedded.start()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        asyncio.run(measure(dsn, options))
    finally:
        embedded.stop()
        shutil.rmtree(embedded.root, ignore_errors=True)


if __name__ == "__main__":
    main()
