"""The spans of an attempt's steps, a model call (`chat …`) and a tool call
(`execute_tool …`), and how any noeta span records an error and scrubbed values."""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from noeta.core.ports.model import ModelReply, ToolCall
from noeta.core.rules.task_state import TaskState
from noeta.observability import metrics, tracing
from noeta.observability import names as n

MAX_CONTENT_CHARS = 16_000
# Text is scrubbed before it is cut, and this much past the cut is scrubbed with it: a
# secret straddling the cut is found whole (its start alone matches nothing) and hidden.
SCRUB_MARGIN_CHARS = 4096


def now() -> int:
    return time.time_ns()


def set_scrubbed(span: Span, key: str, value: Any, limit: int = MAX_CONTENT_CHARS) -> None:
    """`value` on the span; a string scrubbed, then cut at `limit` characters."""
    span.set_attribute(key, scrubbed_within(value, limit) if isinstance(value, str) else value)


def scrubbed_within(text: str, limit: int) -> str:
    return tracing.scrub(text[: limit + SCRUB_MARGIN_CHARS])[:limit]


def mark_error(span: Span, error_type: str, message: str) -> None:
    """An error on a span: a low-cardinality type and a scrubbed message, no traceback
    (a traceback's frames may hold what the message was scrubbed of)."""
    message = scrubbed_within(message, 2000)
    span.set_attribute(n.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, message))
    span.add_event("exception", {"exception.type": error_type, "exception.message": message})


def span_context(trace_id: int, span_id: int) -> trace.SpanContext:
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED)
    return trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags)


def under(trace_id: int, span_id: int) -> Any:
    """A context whose parent is the span with these ids (ended, or in another process)."""
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context(trace_id, span_id)))


def chat_attributes(task_id: str, provider: str, model: str, state: TaskState) -> dict[str, Any]:
    """A model call's span attributes, for the live span and for one rebuilt after a
    takeover alike (what only an outcome sets comes later)."""
    attributes: dict[str, Any] = {
        n.OPERATION: "chat",
        n.PROVIDER: provider,
        n.REQUEST_MODEL: model,
        n.TASK_ID: task_id,
        n.CONVERSATION_ID: task_id,
    }
    if state.config is not None:
        attributes[n.REQUEST_MAX_TOKENS] = state.config.max_tokens
    return attributes


def tool_attributes(task_id: str, name: str, call_id: str) -> dict[str, Any]:
    """A tool call's span attributes, live or rebuilt alike."""
    return {
        n.OPERATION: "execute_tool",
        n.TOOL_NAME: name,
        n.TOOL_CALL_ID: call_id,
        n.TOOL_TYPE: "function",
        n.TASK_ID: task_id,
    }


class StepOwner(Protocol):
    """The attempt a step belongs to (`spans.LiveAttempt`)."""

    @property
    def capture_content(self) -> bool: ...

    @property
    def last_seq(self) -> int: ...

    def record(self, step: Span, started: int, call: str) -> str:
        """The step's `SpanRecord`, encoded, for its ModelCalled or ToolStarted."""
        ...


class ChatStep(tracing.Step):
    def __init__(self, attempt: StepOwner, span: Span, provider: str, model: str) -> None:
        self.attempt = attempt
        self.span = span
        self.provider = provider
        self.model = model
        self.started = time.monotonic()
        self.error_type = ""
        self.record = attempt.record(span, now(), "")

    def input_messages(self, messages: object) -> None:
        if self.attempt.capture_content:
            set_scrubbed(self.span, n.INPUT_MESSAGES, content(messages))

    def replied(self, reply: ModelReply) -> None:
        usage, span = reply.usage, self.span
        if usage is not None:  # no usage said: no token attributes, never 0
            # noeta's input_tokens excludes cached tokens; the convention's includes them.
            span.set_attribute(n.INPUT_TOKENS, usage.all_input_tokens)
            span.set_attribute(n.OUTPUT_TOKENS, usage.output_tokens)
            span.set_attribute(n.CACHE_READ_TOKENS, usage.cache_read_tokens)
            span.set_attribute(n.CACHE_CREATION_TOKENS, usage.cache_write_tokens)
            if usage.reasoning_tokens:
                span.set_attribute(n.REASONING_TOKENS, usage.reasoning_tokens)
        span.set_attribute(n.FINISH_REASONS, [reply.provider_stop_reason or reply.stop_reason])
        if reply.response_id:
            set_scrubbed(span, n.RESPONSE_ID, reply.response_id)
        if self.attempt.capture_content:
            set_scrubbed(span, n.OUTPUT_MESSAGES, content(reply.content))
        metrics.replied(self.provider, self.model, usage)

    def failed(self, error_type: str, message: str) -> None:
        self.error_type = error_type
        mark_error(self.span, error_type, message)

    def close(self) -> None:
        self.span.set_attribute(n.SEQ_LAST, self.attempt.last_seq)
        metrics.model_call(
            time.monotonic() - self.started, self.provider, self.model, self.error_type
        )


class ToolStep(tracing.Step):
    def __init__(self, attempt: StepOwner, span: Span, call: ToolCall) -> None:
        self.attempt = attempt
        self.span = span
        self.call = call
        self.started = time.monotonic()
        self.error_type = ""
        self.record = attempt.record(span, now(), call.id)

    def finished(self, content: str, is_error: bool, recovery: str = "") -> None:
        if recovery:
            self.span.set_attribute(n.TOOL_RECOVERY, recovery)
        if self.attempt.capture_content:
            set_scrubbed(self.span, n.TOOL_RESULT, content)
        self.error_type = tracing.tool_error_type(is_error, recovery)
        if is_error:
            mark_error(self.span, self.error_type, scrubbed_within(content, 500))

    def close(self) -> None:
        self.span.set_attribute(n.SEQ_LAST, self.attempt.last_seq)
        metrics.tool_call(time.monotonic() - self.started, self.call.name, self.error_type)


def content(value: object) -> str:
    """Opt-in content as JSON, bounded (with the margin `set_scrubbed` scrubs and cuts)."""
    encoded = json.dumps(value, default=_plain, ensure_ascii=False)
    return encoded[: MAX_CONTENT_CHARS + SCRUB_MARGIN_CHARS]


def _plain(value: object) -> object:
    slots = getattr(type(value), "__slots__", ())
    if slots:
        return {"type": type(value).__name__, **{name: getattr(value, name) for name in slots}}
    return str(value)
