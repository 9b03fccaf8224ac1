"""How many times each job claim's fresh-job check runs, and what a claim of 25 costs, over
the plan test's tables: its generic plan as planned and with nested loops only.

Run:  .venv/bin/python bench/claim_plan_loops.py [--b-claims MODULE] [--repeats R]
It starts the tests' PostgreSQL, fills one schema as the plan test does
(tests/stores/test_postgres_claim_generic_plan.py: 65,000 tasks of every kind, 100,000
events, 100 fresh jobs; analysed) and runs each
job claim (full, lean, named) of this tree (A) and of MODULE (B: a module holding the same
names, say a tree of main's claim_sql.py) under EXPLAIN (ANALYZE), each rolled back, R
times alternated. It prints the CallRequested probe's loops (25 is once a job) and the
median execution time; then the same with hash and merge joins and Materialize off.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
from typing import Any

import psycopg

from noeta.backends.stores.postgres import claim_sql
from noeta.testing.generic_plans import NESTED_LOOPS_ONLY, executed_generic_plan_document
from noeta.testing.postgres import TestPostgres

NAMES = ("CLAIM_AND_START_JOBS", "LEAN_CLAIM_AND_START_JOBS", "CLAIM_NAMED_AND_START_JOBS")


def probes_and_ms(
    connection: psycopg.Connection[Any], statement: str, arguments: dict[str, Any]
) -> tuple[int, float]:
    """One claim's run: its CallRequested probe's loops, and its ms of execution."""
    document = executed_generic_plan_document(connection, statement, arguments)
    stack, probes = [document["Plan"]], 0
    while stack:
        node = stack.pop()
        probes += node["Actual Loops"] if "seq = 2" in node.get("Index Cond", "") else 0
        stack += node.get("Plans", [])
    return probes, float(document["Execution Time"])


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--b-claims", help="a module with B's statements (else this tree's)")
    arguments.add_argument("--repeats", type=int, default=9)
    options = arguments.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.stores.test_postgres_claim_generic_plan import EVENTS, FILL, FRESH_JOBS, VALUES

    claimed = {**VALUES, "limit": 25, "only": [f"ready-{2 * n}" for n in range(1, 26)]}
    b_module = importlib.import_module(options.b_claims) if options.b_claims else claim_sql
    claims = [
        (f"{side} {name}", getattr(module, name))
        for name in NAMES
        for side, module in (("A", claim_sql), ("B", b_module))
    ]
    server = TestPostgres()
    try:
        with psycopg.connect(server.new_migrated_schema(), autocommit=True) as connection:
            connection.execute(FILL)
            connection.execute(EVENTS)
            connection.execute(FRESH_JOBS)
            print(f"load {os.getloadavg()[0]:.2f}; claims of 25, ms of execution (median)")
            for joins in ("as planned", "nested loops only"):
                if joins != "as planned":
                    connection.execute(NESTED_LOOPS_ONLY)
                times: dict[str, list[float]] = {label: [] for label, _ in claims}
                loops: dict[str, int] = {}
                for n in range(options.repeats):  # A B, B A...: neither always first
                    for label, statement in claims[:: 1 if n % 2 else -1]:
                        loops[label], ms = probes_and_ms(connection, statement, claimed)
                        times[label].append(ms)
                for label, _ in claims:
                    median = statistics.median(times[label][1:])
                    print(f"  {joins:18} {label:30} probes {loops[label]:4d} {median:8.2f} ms")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
