"""A quick check of a job's input against the schemas `@noeta.tool` makes, for batches:
jsonschema takes ~100 µs an input, so 10,000 of them would cost a second. It only ever
says yes when jsonschema would (it is stricter: an integer must be an int, not 1.0); a
no, or a schema it does not know, leaves the verdict and its message to jsonschema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noeta.core.ports.payload import JSONValue

Check = Callable[[Any], bool]

_EXACT_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}

# One compiled check per schema object (a tool's schema is made once, at decoration).
_compiled: dict[int, tuple[dict[str, JSONValue], Check | None]] = {}


def surely_valid(schema: dict[str, JSONValue], value: JSONValue) -> bool:
    """True only if `value` matches `schema` (False: ask jsonschema)."""
    check = quick_check(schema)
    return check is not None and check(value)


def quick_check(schema: dict[str, JSONValue]) -> Check | None:
    """`surely_valid` for one schema, looked up once (a batch checks each input with it);
    None: a schema this module does not know, every value for jsonschema."""
    known = _compiled.get(id(schema))
    if known is None or known[0] is not schema:
        known = (schema, _compile(schema))
        _compiled[id(schema)] = known
    return known[1]


def _compile(schema: JSONValue) -> Check | None:
    """The check for a schema of the forms `input_schema_of` makes; None for any other."""
    if not isinstance(schema, dict):
        return None
    if not schema:
        return lambda value: True
    keys = set(schema)
    if keys == {"enum"} and isinstance(schema["enum"], list):
        return _enum(schema["enum"])
    if keys == {"anyOf"} and isinstance(schema["anyOf"], list):
        branches = [_compile(each) for each in schema["anyOf"]]
        if any(branch is None for branch in branches):
            return None
        known = [branch for branch in branches if branch is not None]
        return lambda value: any(branch(value) for branch in known)
    kind = schema.get("type")
    if keys == {"type"} and kind == "null":
        return lambda value: value is None
    if keys == {"type"} and isinstance(kind, str) and kind in _EXACT_TYPES:
        allowed = _EXACT_TYPES[kind]
        return lambda value: type(value) in allowed
    if keys == {"type", "items"} and kind == "array":
        item = _compile(schema["items"])
        return None if item is None else _array(item)
    if keys == {"type", "additionalProperties"} and kind == "object":
        each = _compile(schema["additionalProperties"])
        return None if each is None else _mapping(each)
    if keys == {"type", "properties", "required", "additionalProperties"}:
        return _record(schema)
    return None


def _enum(options: list[JSONValue]) -> Check:
    # Same type and equal: jsonschema tells 1 from True and 1.0; this never says yes
    # where it would say no.
    return lambda value: any(type(value) is type(option) and value == option for option in options)


def _array(item: Check) -> Check:
    return lambda value: type(value) is list and all(item(each) for each in value)


def _mapping(each: Check) -> Check:
    return lambda value: (
        type(value) is dict and all(type(key) is str and each(item) for key, item in value.items())
    )


def _record(schema: dict[str, JSONValue]) -> Check | None:
    properties, required = schema["properties"], schema["required"]
    if (
        schema.get("type") != "object"
        or schema["additionalProperties"] is not False
        or not isinstance(properties, dict)
        or not isinstance(required, list)
    ):
        return None
    checks = {name: _compile(each) for name, each in properties.items()}
    if any(check is None for check in checks.values()):
        return None
    known = {name: check for name, check in checks.items() if check is not None}
    needed = [name for name in required if isinstance(name, str)]
    if len(needed) != len(required):
        return None

    def record(value: Any) -> bool:
        if type(value) is not dict:
            return False
        if not value:  # a function without parameters, or with defaults for all of them
            return not needed
        return all(name in value for name in needed) and all(
            name in known and known[name](item) for name, item in value.items()
        )

    return record
