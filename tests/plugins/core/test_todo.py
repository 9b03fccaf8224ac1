"""TodoWrite checks the whole list and echoes it back, keeping no state of its own."""

from __future__ import annotations

import pytest

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import TodoWrite
from noeta.plugins.core.todo import MAX_ITEMS


async def test_the_list_is_echoed_formatted(ctx: ToolContext) -> None:
    todos: list[JSONValue] = [
        {"content": "Read the spec", "status": "completed"},
        {"content": "Write  the\ntools", "status": "in_progress"},
        {"content": "Write tests", "status": "pending"},
    ]
    output = await TodoWrite().run({"todos": todos}, ctx)
    assert not output.is_error
    assert output.content == (
        "Todo list updated (3 items: 1 pending, 1 in progress, 1 completed):\n"
        "1. [x] Read the spec\n"
        "2. [~] Write the tools\n"
        "3. [ ] Write tests"
    )


async def test_an_empty_list_clears_it(ctx: ToolContext) -> None:
    assert (await TodoWrite().run({"todos": []}, ctx)).content == "Todo list cleared (no items)."


async def test_more_than_one_in_progress_is_noted(ctx: ToolContext) -> None:
    todos: list[JSONValue] = [{"content": c, "status": "in_progress"} for c in ("a", "b")]
    output = await TodoWrite().run({"todos": todos}, ctx)
    assert output.content.endswith("(note: 2 items are in progress; keep it to one)")


@pytest.mark.parametrize(
    ("todos", "reason"),
    [
        ([{"content": "a", "status": "done"}], "item 1: status must be one of"),
        ([{"content": " ", "status": "pending"}], "item 1: content must be a non-empty"),
        ([{"status": "pending"}], "item 1: content must be a non-empty"),
        (["just text"], "item 1 must be an object"),
        ([{"content": "a", "status": "pending", "priority": 1}], "unknown keys"),
        ([{"content": "a", "status": "pending"}] * (MAX_ITEMS + 1), "at most 200"),
        ("not a list", "'todos' must be an array"),
    ],
)
async def test_invalid_lists_are_refused(todos: JSONValue, reason: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=reason):
        await TodoWrite().run({"todos": todos}, ctx)


async def test_the_list_is_required(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="'todos' is required"):
        await TodoWrite().run({}, ctx)
