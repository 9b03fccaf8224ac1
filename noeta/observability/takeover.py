"""The spans a lost claim left open, emitted by the next claimer with their original ids
and starts as the log's `SpanRecord` gives them (ADR-0024): the id generator that keeps
those ids, and the accounting for the previous attempt."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Tracer

from noeta.core.rules.task_state import TaskState
from noeta.observability import names as n
from noeta.observability.span_record import SpanRecord
from noeta.observability.steps import chat_attributes, mark_error, tool_attributes, under

# Set while a recovered span is started: the ids it had in the process that died.
forced_ids: ContextVar[tuple[int, int] | None] = ContextVar("noeta_forced_ids", default=None)


class RecoveringIdGenerator(RandomIdGenerator):
    """Random ids, except for a recovered span, which keeps the ids it was given."""

    def generate_span_id(self) -> int:
        forced = forced_ids.get()
        return forced[1] if forced else super().generate_span_id()

    def generate_trace_id(self) -> int:
        forced = forced_ids.get()
        return forced[0] if forced else super().generate_trace_id()


def account_for(
    tracer: Tracer,
    task_id: str,
    previous: SpanRecord,
    taken_over: bool,
    state: TaskState,
    now: int,
) -> None:
    """Emit, with their original ids, the spans the previous attempt never ended.

    A takeover means that attempt died or was cut off: its attempt span and its open
    turn span were never exported. A step whose outcome the log does not record was
    not exported by its process either way (a handed-back claim included).
    """
    how = "takeover" if taken_over else "handback"
    ended_by = (
        "its lease lapsed and another worker took the task over"
        if taken_over
        else "the worker handed the task back"
    )
    if taken_over:
        parent = None if previous.attempt == previous.root else previous.root
        attributes = {n.TASK_ID: task_id, n.EPOCH: previous.epoch, n.RECOVERED: how}
        _recovered(
            tracer, n.ATTEMPT_SPAN, previous, previous.attempt, parent, previous.attempt_start,
            now, attributes, f"attempt cut short: {ended_by}",
        )  # fmt: skip
        if previous.turn and state.turn_open and state.turn == previous.turn_number:
            attributes = {n.TASK_ID: task_id, n.TURN: previous.turn_number, n.RECOVERED: how}
            _recovered(
                tracer, n.TURN_SPAN, previous, previous.turn, previous.attempt,
                previous.turn_start, now, attributes, f"turn cut short: {ended_by}",
            )  # fmt: skip
    step = _open_step(task_id, previous, state)
    if step is not None:
        name, attributes = step
        attributes.update({n.EPOCH: previous.epoch, n.RECOVERED: how})
        _recovered(
            tracer, name, previous, previous.step, previous.turn or previous.attempt,
            previous.step_start, now, attributes,
            f"cut short before its outcome was recorded: {ended_by}",
        )  # fmt: skip


def _recovered(
    tracer: Tracer,
    name: str,
    previous: SpanRecord,
    span_id: int,
    parent: int | None,
    start: int,
    end: int,
    attributes: dict[str, Any],
    message: str,
) -> None:
    context = None if parent is None else under(previous.trace_id, parent)
    token = forced_ids.set((previous.trace_id, span_id))
    try:
        span = tracer.start_span(name, context=context, start_time=start, attributes=attributes)
    finally:
        forced_ids.reset(token)
    mark_error(span, "cut_short", message)
    span.end(end_time=max(end, start))


def _open_step(
    task_id: str, previous: SpanRecord, state: TaskState
) -> tuple[str, dict[str, Any]] | None:
    """The recorded step, if the log still shows it open: (span name, attributes), the
    attributes built as the live span's were."""
    if state.turn != previous.turn_number or not state.turn_open:
        return None
    if previous.call:
        if previous.call not in dict(state.started):
            return None
        name = next((c.name for c in state.calls if c.id == previous.call), "tool")
        return f"execute_tool {name}", tool_attributes(task_id, name, previous.call)
    if not state.model_attempts:
        return None
    # A model spec is PROVIDER:MODEL, and each provider's name is its spec's prefix.
    provider, _, model = state.config.model.partition(":") if state.config else ("", "", "")
    return f"chat {model}", chat_attributes(task_id, provider, model, state)
