"""The JSON schema of a `@noeta.tool` function's input, from its parameters' type hints
(what a model is offered and what `enqueue` checks a job's input against)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args, get_origin, get_type_hints

from noeta.core.ports.payload import JSONValue


def input_schema_of(function: Callable[..., Any]) -> dict[str, JSONValue]:
    """A JSON schema of the function's parameters, from their type hints."""
    hints = get_type_hints(function)
    properties: dict[str, JSONValue] = {}
    required: list[JSONValue] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == "ctx":
            continue
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"{function.__name__}: *{parameter.name} cannot come from JSON")
        if parameter.name not in hints:
            raise TypeError(f"{function.__name__}: parameter {parameter.name} has no type hint")
        properties[parameter.name] = _schema(hints[parameter.name], function.__name__)
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(hint: Any, where: str) -> dict[str, JSONValue]:
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if hint is type(None):
        return {"type": "null"}
    if hint is Any or hint is JSONValue:
        return {}
    origin, arguments = get_origin(hint), get_args(hint)
    if origin in (list, tuple, Sequence) and arguments:
        return {"type": "array", "items": _schema(arguments[0], where)}
    if origin is dict and arguments and arguments[0] is str:
        return {"type": "object", "additionalProperties": _schema(arguments[1], where)}
    if origin in (types.UnionType, typing.Union):
        return {"anyOf": [_schema(each, where) for each in arguments]}
    if origin is Literal:
        return {"enum": list(arguments)}
    raise TypeError(f"{where}: the type {hint!r} has no JSON schema here")
