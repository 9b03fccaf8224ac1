"""A claim statement's text made short: psycopg parses a statement longer than 4,096 bytes
again at every execute (its cache's limit), and the claims are that long with their
layout."""

from __future__ import annotations

import re

# What `compact` keeps as it is: quoted literals, and the text others look for in
# pg_stat_statements to count claims.
_KEPT = re.compile(r"('(?:[^']|'')*'|owner_epoch = t\.owner_epoch \+)")
# An operator, a parenthesis, comma or an array type's closing bracket, with the spaces
# around it. None of the operators the claims use ends in a character that would join the
# next into a longer token or a comment: no "- -", no "/ *" (and a multi-character
# operator cannot end in + or -).
_SPACED = re.compile(r" ?(<@|<=|<>|=>|[(),=<>+*/\]-]) ?")
# A table's alias needs no AS.
_TABLE_AS = re.compile(
    r"\b(tasks|events|inbox|snapshots?|queue_settings|due|claimed|started|known)"
    r" AS (?=\w\b)"
)
# Nor a subquery's, or a function's (the names the claims give them).
_ALIAS_AS = re.compile(r"\)AS (?=(?:q|p|d|found|limited|took|j|k|e|i|s)\b)")


def compact(statement: str) -> str:
    """The statement without the whitespace its parser does not need: runs of it made one
    space, none beside a parenthesis, comma or operator; `_KEPT` kept as it is."""
    parts = _KEPT.split(statement)
    for i in range(0, len(parts), 2):
        parts[i] = _SPACED.sub(r"\1", " ".join(parts[i].split()))
        parts[i] = _ALIAS_AS.sub(")", _TABLE_AS.sub(r"\1 ", parts[i]))
    return "".join(parts)
