"""TodoWrite: the model's own task list, checked and echoed back.

The tool keeps no state: each call carries the whole list, so the latest call in the log
is the list, and a re-run (or a recovered task) sees the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.core.arguments import Arguments

Status = Literal["pending", "in_progress", "completed"]
STATUSES: tuple[str, ...] = get_args(Status)
MAX_ITEMS = 200  # a list longer than this is a plan gone wrong, and costs context per call

_MARKS: dict[str, str] = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}

_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The complete list, replacing the previous one.",
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "status": {"type": "string", "enum": list(STATUSES)},
                },
                "required": ["content", "status"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["todos"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class TodoItem:
    content: str
    status: str


class TodoWrite:
    name = "TodoWrite"
    description = (
        "Keep a todo list for this task. Send the whole list every time, each item with "
        "content and status (pending, in_progress or completed); it replaces the previous "
        "list. Keep one item in_progress at a time and mark items completed as soon as "
        "they are done."
    )
    input_schema = _SCHEMA
    flags = ToolFlags(retry_safe=True)  # it only echoes its input

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        raw = Arguments(self.name, input, self.input_schema).array("todos")
        if len(raw) > MAX_ITEMS:
            raise ToolError(f"TodoWrite: {len(raw)} items; at most {MAX_ITEMS} are allowed")
        items = [_item(index, value) for index, value in enumerate(raw, start=1)]
        return ToolOutput(render(items))


def _item(index: int, value: JSONValue) -> TodoItem:
    where = f"TodoWrite: item {index}"
    if not isinstance(value, dict):
        raise ToolError(f"{where} must be an object with content and status, not {value!r}")
    unknown = sorted(set(value) - {"content", "status"})
    if unknown:
        raise ToolError(f"{where} has unknown keys {unknown}; only content and status")
    content = value.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ToolError(f"{where}: content must be a non-empty string")
    status = value.get("status")
    if not isinstance(status, str) or status not in STATUSES:
        raise ToolError(f"{where}: status must be one of {', '.join(STATUSES)}, not {status!r}")
    return TodoItem(" ".join(content.split()), status)


def render(items: list[TodoItem]) -> str:
    if not items:
        return "Todo list cleared (no items)."
    counts = {status: sum(item.status == status for item in items) for status in STATUSES}
    summary = ", ".join(
        f"{counts[status]} {status.replace('_', ' ')}" for status in STATUSES if counts[status]
    )
    lines = [f"Todo list updated ({len(items)} items: {summary}):"]
    lines += [
        f"{number}. {_MARKS[item.status]} {item.content}"
        for number, item in enumerate(items, start=1)
    ]
    if counts["in_progress"] > 1:
        lines.append(f"(note: {counts['in_progress']} items are in progress; keep it to one)")
    return "\n".join(lines)
