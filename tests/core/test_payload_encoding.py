"""`payload.encode` calls the C encoder it builds once, not `JSONEncoder.encode` (which
builds one per value): the text must be the same, byte for byte, for every value a store
keeps, lone surrogates, NUL and large numbers included, and what JSON cannot carry is
still refused."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from noeta.core.errors import PayloadError
from noeta.core.ports import payload

REFERENCE = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
TEXT = st.text(st.characters(codec=None, exclude_categories=()))  # surrogates, NUL too
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(VALUES)
def test_the_text_is_what_the_standard_encoder_writes(value: payload.JSONValue) -> None:
    if isinstance(value, float) and math.isinf(value):
        with pytest.raises(PayloadError):
            payload.encode(value)
        return
    try:
        expected = REFERENCE.encode(value)
    except ValueError:  # an infinity inside
        with pytest.raises(PayloadError):
            payload.encode(value)
        return
    assert payload.encode(value) == expected
    assert payload.decode(expected) == value


def test_what_json_cannot_carry_is_refused_before_encoding() -> None:
    for value in (math.nan, [1, {"x": math.inf}], (1, 2), {1: "a"}, b"x"):
        with pytest.raises(PayloadError):
            payload.encode(value)  # type: ignore[arg-type]
    nested: list[object] = []
    nested.append(nested)
    with pytest.raises(PayloadError):
        payload.encode(nested)  # type: ignore[arg-type]
