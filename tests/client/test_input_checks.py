"""The quick check `enqueue_many` runs before jsonschema never says yes where jsonschema
says no, over the schemas `@noeta.tool` makes and awkward values (1.0 for an integer,
True for 1, a missing or an extra key, a nested wrong item); and it is sure of the plain
valid inputs, so a batch of them never reaches jsonschema."""

from __future__ import annotations

import itertools
from typing import Any, Literal

from jsonschema import Draft202012Validator

from noeta.client.input_checks import surely_valid
from noeta.core.ports.payload import JSONValue
from noeta.plugins.function_schema import input_schema_of


def everything(
    name: str,
    count: int,
    ratio: float,
    on: bool,
    tags: list[str],
    sizes: dict[str, int],
    mode: Literal["a", 1],
    maybe: int | None = None,
    anything: Any = None,
) -> None:
    """A function with every kind of parameter the schema maker knows."""


VALUES: list[JSONValue] = [
    None, True, False, 0, 1, -3, 1.0, 2.5, "", "a", "1", [], ["a"], [1], ["a", 1],
    {}, {"a": 1}, {"a": "1"}, {"a": True}, {"a": 1.0},
]  # fmt: skip


def test_it_never_says_yes_where_jsonschema_says_no() -> None:
    schema = input_schema_of(everything)
    validator = Draft202012Validator(schema)
    plain: dict[str, JSONValue] = {
        "name": "n",
        "count": 1,
        "ratio": 0.5,
        "on": True,
        "tags": ["x"],
        "sizes": {"a": 1},
        "mode": "a",
    }
    assert surely_valid(schema, plain) and validator.is_valid(plain)
    checked = 0
    for field, value in itertools.product([*plain, "maybe", "anything", "extra"], VALUES):
        changed = {**plain, field: value}
        if surely_valid(schema, changed):
            assert validator.is_valid(changed), changed
        checked += 1
    for field in plain:
        missing = {key: value for key, value in plain.items() if key != field}
        assert not surely_valid(schema, missing) and not validator.is_valid(missing)
    assert not surely_valid(schema, {**plain, "count": True})
    assert validator.is_valid({**plain, "count": 1.0})  # jsonschema's: the message path
    assert checked == 10 * len(VALUES)


def test_a_schema_it_does_not_know_is_left_to_jsonschema() -> None:
    assert not surely_valid({"type": "string", "minLength": 2}, "abc")
    assert not surely_valid({"type": "object", "properties": {}}, {})
