"""A tool's input checked against its JSON schema: the problem the model reads, and the
one `enqueue` refuses a job's input with before anything is written.

jsonschema is imported at the first check, not with this module: `noeta submit` and the
client import the job checks without ever checking an input (ADR-0056).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


def input_problem(tool: Tool, input: dict[str, JSONValue]) -> str:
    """Why `input` does not match the tool's schema ("" if it does)."""
    validator = _validators.get(tool.name)
    if validator is None or validator[0] is not tool.input_schema:
        from jsonschema import Draft202012Validator

        validator = (tool.input_schema, Draft202012Validator(tool.input_schema))
        _validators[tool.name] = validator
    problems = sorted(validator[1].iter_errors(input), key=lambda e: list(e.path))
    if not problems:
        return ""
    first = problems[0]
    where = "/".join(str(part) for part in first.path) or "the input"
    return f"invalid input for {tool.name}: {where}: {first.message}"


# One validator per tool name, rebuilt if the tool's schema object changes.
_validators: dict[str, tuple[object, Draft202012Validator]] = {}
