"""The functions a task's appends run test a plain value in an IF of its own before any
query (ADR-0130): PL/pgSQL evaluates a condition holding a subquery as a statement
through the executor, whatever its other operands say, so `x IS NOT NULL AND EXISTS (...)`
starts and ends a query for every row even where x is NULL. Read from the function files
(ADR-0081), which a migrated database is held to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FUNCTIONS = Path(__file__).parents[2] / "queue" / "postgres" / "functions"
# Run by every append of a task or a job: their conditions are read here.
APPEND_PATH = (
    "noeta_append",
    "noeta_append_and_continue",
    "noeta_append_and_finish",
    "noeta_append_batch",
    "noeta_append_model_called",
    "noeta_fence",
)
# An IF's or ELSIF's condition, up to its THEN (not an END IF).
CONDITION = re.compile(r"(?<!END )\b(?:ELS)?IF\b(.*?)\bTHEN\b", re.DOTALL)
# A subquery in a condition.
QUERY = re.compile(r"\b(?:EXISTS|SELECT)\b")
# A condition that joins operands with AND or OR outside any parenthesis.
JOINED = re.compile(r"\b(?:AND|OR)\b")


def top_level(condition: str) -> str:
    """The condition with every parenthesised part removed."""
    depth, kept = 0, []
    for character in condition:
        depth += character == "("
        if depth == 0:
            kept.append(character)
        depth -= character == ")"
    return "".join(kept)


def conditions(name: str) -> list[str]:
    body = re.sub(r"--[^\n]*", "", (FUNCTIONS / f"{name}.sql").read_text(encoding="utf-8"))
    return [" ".join(found.split()) for found in CONDITION.findall(body)]


@pytest.mark.parametrize("name", APPEND_PATH)
def test_no_condition_joins_a_query_to_a_plain_test(name: str) -> None:
    joined = [
        condition
        for condition in conditions(name)
        if QUERY.search(condition) and JOINED.search(top_level(condition))
    ]
    assert joined == [], f"{name}: nest the plain test in an IF of its own: {joined}"


def test_the_rule_sees_a_joined_condition() -> None:
    joined = "IF i.model_keys IS NOT NULL AND EXISTS (SELECT 1 FROM model_limits) THEN"
    nested = "IF i.model_keys IS NOT NULL THEN IF EXISTS (SELECT 1 FROM model_limits) THEN"
    found = [c for c in CONDITION.findall(joined) if JOINED.search(top_level(c))]
    assert found and QUERY.search(found[0])
    assert not [c for c in CONDITION.findall(nested) if QUERY.search(c) and JOINED.search(c)]
