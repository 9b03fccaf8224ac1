"""The encoding of every value a store keeps: ASCII-only JSON text.

Tool output holds NUL bytes, lone surrogates (invalid UTF-8 decoded with
`surrogateescape`) and huge strings. PostgreSQL `jsonb` rejects `\\u0000` and UTF-8 cannot
carry a lone surrogate, but escaped ASCII JSON carries both, exactly. Values that JSON
cannot carry exactly (NaN, bytes, tuples, non-string keys, overly deep or large values)
raise `PayloadError` here, before any transaction starts.
"""

from __future__ import annotations

import json
import math
from typing import TypeAlias

from noeta.core.errors import PayloadError

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None

MAX_ENCODED_BYTES = 64 * 1024 * 1024  # one event; well under PostgreSQL's 1 GB field limit
MAX_DEPTH = 200  # deep enough for any real tool output, shallow enough for every decoder

_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
# The C encoder `_ENCODER.encode` builds anew for every value, built once: the same
# arguments `JSONEncoder.iterencode` gives it, but no circular-reference markers, which
# `_check` makes needless (a cycle is nested deeper than MAX_DEPTH). About 40 % of an
# encode's time for an event's few fields (10,000 of them in an `enqueue_many`).
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_ENCODE_ONCE = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(
        None,
        _ENCODER.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        False,
    )
)


def encode(value: JSONValue) -> str:
    """Encode a value so that `decode(encode(v)) == v`, or raise `PayloadError`."""
    _check(value, 0)
    text = _ENCODER.encode(value) if _ENCODE_ONCE is None else "".join(_ENCODE_ONCE(value, 0))
    if len(text) > MAX_ENCODED_BYTES:
        raise PayloadError(
            f"value is {len(text)} bytes encoded; the limit is {MAX_ENCODED_BYTES} bytes"
        )
    return text


def decode(text: str) -> JSONValue:
    value: JSONValue = json.loads(text)
    return value


# Values that JSON carries exactly, by their exact type: most of an event's values, each
# let through with one lookup (subclasses, floats and containers take the checks below).
_EXACT = frozenset({str, int, bool, type(None)})


def _check(value: object, depth: int) -> None:
    """Refuse what JSON would silently change: tuples, non-str keys, NaN, bytes..."""
    if depth > MAX_DEPTH:
        raise PayloadError(f"value is nested deeper than {MAX_DEPTH} levels")
    if type(value) in _EXACT or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{value!r} has no exact JSON form")
        return
    # A plain item one level down is let through here, unless that level is too deep.
    deepest = depth >= MAX_DEPTH
    if type(value) is list:
        for item in value:
            if deepest or type(item) not in _EXACT:
                _check(item, depth + 1)
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(f"object keys must be strings, not {type(key).__name__}")
            if deepest or type(item) not in _EXACT:
                _check(item, depth + 1)
        return
    raise PayloadError(
        f"a {type(value).__name__} cannot be stored exactly; use str, int, float, bool, "
        "None, list or dict (bytes: decode them, e.g. with errors='surrogateescape')"
    )
