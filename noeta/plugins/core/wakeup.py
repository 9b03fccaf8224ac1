"""ScheduleWakeup: the model asks to be woken later, with a prompt, and ends its turn.

The tool only checks the request. The runner records the wake-up with the call's result
(`WakeupScheduled`, its due time on the store's clock) and, once it is due, the task's
next claimer opens a turn with the prompt (`WokenUp`): exactly once, since that append is
fenced like every other. A task with a wake-up pending waits instead of finishing.
"""

from __future__ import annotations

from datetime import datetime

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput, Wakeup
from noeta.plugins.core.arguments import Arguments

MAX_DELAY_SECONDS = 366 * 24 * 3600.0
MAX_PROMPT_CHARS = 10_000

_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "prompt": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_PROMPT_CHARS,
            "description": "What to tell yourself when woken: the work to pick up then.",
        },
        "delay_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_DELAY_SECONDS,
            "description": "Wake after this many seconds.",
        },
        "at": {
            "type": "string",
            "description": "Or wake at this time: ISO 8601 with a UTC offset, "
            "e.g. 2026-12-01T09:00:00+01:00. A time already past wakes at once.",
        },
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


class ScheduleWakeup:
    name = "ScheduleWakeup"
    description = (
        "Be woken later to continue this task: give a prompt and either delay_seconds or "
        "at. After calling it, end your turn; at the due time a new turn starts with your "
        "prompt. Use it to check back on something slow (a deploy, a reply, a job) "
        "instead of waiting."
    )
    input_schema = _SCHEMA
    # Re-running it schedules nothing twice: the wake-up is recorded with the result.
    flags = ToolFlags(retry_safe=True)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        arguments = Arguments(self.name, input, self.input_schema)
        prompt = arguments.string("prompt").strip()
        if not prompt:
            raise ToolError(f"{self.name}: 'prompt' must not be empty")
        at_text = arguments.optional_string("at")
        if ("delay_seconds" in input) == (at_text is not None):
            raise ToolError(f"{self.name}: give exactly one of 'delay_seconds' and 'at'")
        if at_text is None:
            delay = arguments.number("delay_seconds", 0.0, MAX_DELAY_SECONDS)
            return ToolOutput("", wakeup=Wakeup(prompt, delay_seconds=delay))
        return ToolOutput("", wakeup=Wakeup(prompt, at=_moment(at_text)))


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"ScheduleWakeup: 'at' must be ISO 8601 such as 2026-12-01T09:00:00+00:00, not {text!r}"
        ) from None
    if moment.utcoffset() is None:
        raise ToolError(
            f"ScheduleWakeup: 'at' needs a UTC offset (e.g. {text}+00:00): "
            "without one it means a different moment on each machine"
        )
    return moment
