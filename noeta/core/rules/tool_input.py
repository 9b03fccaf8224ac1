"""A tool's input checked against its JSON schema: the problem the model reads, and the
one `enqueue` refuses a job's input with before anything is written.

jsonschema is imported at the first check, not with this module: `noeta submit` and the
client import the job checks without ever checking an input (ADR-0056).

A schema of the shape `@noeta.tool` writes for plain parameters (an object of named
properties, each of one simple type or any value, no others allowed) is first checked by
a plain test that can only accept: jsonschema walks it at 5-10 us a call, a plain job's
every call. An input that test does not accept goes to jsonschema as before, which finds
the problem (or accepts what the test is too strict for: 1.0 as an integer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

Accepts = Callable[[object], bool]


def input_problem(tool: Tool, input: dict[str, JSONValue]) -> str:
    """Why `input` does not match the tool's schema ("" if it does)."""
    checks = _checks.get(tool.name)
    if checks is None or checks[0] is not tool.input_schema:
        checks = (tool.input_schema, plain_accepts(tool.input_schema), None)
        _checks[tool.name] = checks
    if checks[1] is not None and checks[1](input):
        return ""
    validator = checks[2]
    if validator is None:
        from jsonschema import Draft202012Validator

        validator = Draft202012Validator(tool.input_schema)
        _checks[tool.name] = (checks[0], checks[1], validator)
    problems = sorted(validator.iter_errors(input), key=lambda e: list(e.path))
    if not problems:
        return ""
    first = problems[0]
    where = "/".join(str(part) for part in first.path) or "the input"
    return f"invalid input for {tool.name}: {where}: {first.message}"


# By tool name, rebuilt if the tool's schema object changes: the schema, its plain test
# (None: not of the plain shape), and its jsonschema validator once one was needed.
_checks: dict[str, tuple[object, Accepts | None, Draft202012Validator | None]] = {}

# A property's simple types, by exact Python type: what JSON decodes each to. Stricter
# than JSON Schema (`True` is no integer there either, but 1.0 is one): never looser.
_SIMPLE: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties"}


def plain_accepts(schema: object) -> Accepts | None:
    """A test that accepts only inputs `schema` accepts, for a schema of the plain shape
    (`{"type": "object", "properties": {name: {"type": simple} or {}}, "required": [...],
    "additionalProperties": false}`); None for any other schema."""
    if not isinstance(schema, dict) or set(schema) != _OBJECT_KEYS:
        return None
    properties, required = schema["properties"], schema["required"]
    if schema["type"] != "object" or schema["additionalProperties"] is not False:
        return None
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    types: dict[str, tuple[type, ...] | None] = {}
    for name, property_schema in properties.items():
        if property_schema == {}:
            types[name] = None  # any value
        elif (
            isinstance(property_schema, dict)
            and set(property_schema) == {"type"}
            and property_schema["type"] in _SIMPLE
        ):
            types[name] = _SIMPLE[property_schema["type"]]
        else:
            return None
    needed = frozenset(required)
    if not all(isinstance(name, str) for name in needed):
        return None

    def accepts(value: object) -> bool:
        if type(value) is not dict or not needed <= value.keys():
            return False
        for name, item in value.items():
            if name not in types:
                return False
            allowed = types[name]
            if allowed is not None and type(item) not in allowed:
                return False
        return True

    return accepts
