"""Assembling the model request from the folded log: deterministic, so a re-send is identical."""

from __future__ import annotations

from noeta.core.ports.model import ModelRequest, ToolSpec
from noeta.core.rules.task_state import TaskState


def build_request(state: TaskState, model_name: str, tools: tuple[ToolSpec, ...]) -> ModelRequest:
    """The request for the open turn; depends on nothing but the state and the tool specs."""
    if state.config is None:
        raise ValueError("a task without TaskCreated has no request")
    return ModelRequest(
        model=model_name,
        system=state.config.system,
        messages=tuple(state.messages),
        tools=tools,
        max_tokens=state.config.max_tokens,
        replies_so_far=state.replies,
    )
