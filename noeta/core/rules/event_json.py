"""An event field's JSON form, both ways: the conversions `events.encode` and `events.decode`
apply to the fields that are not JSON already (content blocks, usage, pins, tuples).

Keyed by event class name, so this module needs no event class and `events` imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.pin import Pin

# What an event's field holds as JSON already (its exact type): most fields, passed with
# one lookup instead of a test per kind below.
_AS_IS = frozenset({str, int, float, bool, type(None), dict, list})


def to_json(value: Any) -> JSONValue:
    """A field's value as JSON."""
    if type(value) in _AS_IS:
        return value  # type: ignore[no-any-return]
    if isinstance(value, tuple):
        return [to_json(item) for item in value]
    if isinstance(value, Text):
        return {"type": "text", "text": value.text}
    if isinstance(value, ToolCall):
        return {"type": "tool_call", "id": value.id, "name": value.name, "input": value.input}
    if isinstance(value, Pin):
        return list(value.as_tuple())
    if isinstance(value, Usage):
        # No reasoning tokens: the four counts of version 1, byte for byte.
        names = Usage.__dataclass_fields__ if value.reasoning_tokens else _USAGE_V1
        return {name: getattr(value, name) for name in names}
    return value  # type: ignore[no-any-return]


_USAGE_V1 = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def same(value: Any) -> Any:
    return value


def _blocks(value: Any) -> tuple[Text | ToolCall, ...]:
    blocks: list[Text | ToolCall] = []
    for block in value:
        if block["type"] == "text":
            blocks.append(Text(block["text"]))
        elif block["type"] == "tool_call":
            blocks.append(ToolCall(block["id"], block["name"], block["input"]))
        else:
            raise TypeError(f"unknown content block {block['type']!r}")
    return tuple(blocks)


# The fields whose stored JSON is not their value, by (event class name, field name).
FROM_JSON: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("ModelReplied", "content"): _blocks,
    ("ModelReplied", "usage"): lambda value: None if value is None else Usage(**value),
    ("TaskCreated", "tools"): lambda value: None if value is None else tuple(value),
    ("PluginsPinned", "pins"): lambda value: tuple(Pin(*pin) for pin in value),
}
