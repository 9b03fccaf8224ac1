"""A tool's input check: the plain test `input_problem` tries first accepts only what
jsonschema accepts, and the problem told is jsonschema's, as before the plain test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool
from noeta.core.rules.tool_input import input_problem, plain_accepts
from noeta.plugins.function_schema import input_schema_of


def _plain(a: str, b: int, c: float = 0.0, d: bool = False, e: None = None, f: Any = 0) -> None:
    """Every parameter of a type the plain test takes."""


def _none() -> None:
    """No parameter: a plain no-op job's schema."""


def _nested(a: list[int], b: dict[str, int] | None = None) -> None:
    """Not of the plain shape: jsonschema checks every input."""


SCHEMAS = [input_schema_of(function) for function in (_plain, _none, _nested)]
NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])
SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3)
)
VALUES = SCALARS | st.lists(SCALARS, max_size=2) | st.dictionaries(st.text(max_size=2), SCALARS)
INPUTS = st.dictionaries(NAMES, VALUES, max_size=7) | SCALARS


@dataclass
class _Tool:
    name: str
    input_schema: dict[str, JSONValue]


def reference(name: str, schema: dict[str, JSONValue], value: object) -> str:
    """The problem as `input_problem` told it before its plain test: jsonschema's."""
    problems = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if not problems:
        return ""
    where = "/".join(str(part) for part in problems[0].path) or "the input"
    return f"invalid input for {name}: {where}: {problems[0].message}"


def test_a_function_of_simple_parameters_gets_a_plain_test() -> None:
    assert plain_accepts(SCHEMAS[0]) is not None
    assert plain_accepts(SCHEMAS[1]) is not None
    assert plain_accepts(SCHEMAS[2]) is None
    assert plain_accepts({**SCHEMAS[1], "minProperties": 1}) is None  # a keyword it cannot read


@given(st.sampled_from(range(len(SCHEMAS))), INPUTS)
def test_the_plain_test_accepts_only_what_jsonschema_accepts(which: int, value: object) -> None:
    schema = SCHEMAS[which]
    accepts = plain_accepts(schema)
    if accepts is not None and accepts(value):
        assert Draft202012Validator(schema).is_valid(value), value
    tool = cast(Tool, _Tool(f"input_check_{which}", schema))
    expected = reference(tool.name, schema, value)
    assert input_problem(tool, cast(dict[str, JSONValue], value)) == expected


def test_what_the_plain_test_is_too_strict_for_is_jsonschemas_to_accept() -> None:
    tool = cast(Tool, _Tool("input_check_whole_float", SCHEMAS[0]))
    assert input_problem(tool, {"a": "x", "b": 1.0}) == ""  # 1.0 is an integer there
    assert input_problem(tool, {"a": "x", "b": True}).endswith("b: True is not of type 'integer'")
