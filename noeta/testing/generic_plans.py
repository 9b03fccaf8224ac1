"""A claim statement's generic plan as its connection runs it (ADR-0108), executed under
EXPLAIN (ANALYZE) and rolled back: the plan nodes the tests and benches read."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import psycopg

# The SQL type of each parameter the claim statements take.
CLAIM_PARAMETER_TYPES = {
    "queues": "text[]",
    "excluding": "text[]",
    "offers": "text[]",
    "limit": "integer",
    "lease": "float8",
    "worker": "text",
    "version": "text",
    "pinned": "text",
    "needs": "text[]",
    "only": "text[]",
    "known_id": "text",
    "known_epoch": "bigint",
    "known_seq": "bigint",
}

# The join the planner picks for a claim depends on the tables' statistics. With hash and
# merge joins off, and no Materialize node to cache an inner side, it must nest loops: the
# plan in which a claim's inlined CTE ran again for every claimed row (ADR-0145).
NESTED_LOOPS_ONLY = """SELECT set_config('enable_hashjoin', 'off', false),
       set_config('enable_mergejoin', 'off', false), set_config('enable_material', 'off', false)"""


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan's nodes, the root first, each before its children."""
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


def executed_generic_plan(
    connection: psycopg.Connection[Any], statement: str, arguments: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The nodes of `statement`'s generic plan, run with `arguments` (by name) under
    EXPLAIN (ANALYZE) in a transaction rolled back: nothing is claimed. Leaves the
    connection's plan_cache_mode forced to generic, as the claims' own connection runs it."""
    return plan_nodes(executed_generic_plan_document(connection, statement, arguments)["Plan"])


def executed_generic_plan_document(
    connection: psycopg.Connection[Any], statement: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The same run's whole EXPLAIN document: its plan, and its execution time."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", placeholder, statement).replace("%%", "%")
    types = [CLAIM_PARAMETER_TYPES[name] for name in names]
    connection.execute(f"PREPARE claim({', '.join(types)}) AS {text}")
    connection.execute("SET plan_cache_mode = force_generic_plan")
    # Bound as literals by the client: a utility statement's parameters get no types.
    executed = ", ".join(f"%s::{type_}" for type_ in types)
    try:
        with connection.transaction(force_rollback=True):
            row = (
                psycopg.ClientCursor(connection)
                .execute(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim({executed})",
                    [arguments[name] for name in names],
                )
                .fetchone()
            )
    finally:
        connection.execute("DEALLOCATE claim")
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return dict(document[0])
