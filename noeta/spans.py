"""The live spans of an attempt (tracing on): its turns, its steps, its store calls, and
the accounting for spans a crash cut short (ADR-0024). Imported only when tracing is on.

A step's span (`chat …`, `execute_tool …`) is ended by the process that records the
step's outcome in the log. When that process loses the task first, the next claimer of
the previous epoch emits it, with the ids and start written in the step's `SpanRecord`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from noeta import metrics
from noeta import tracing as t
from noeta.core.errors import StoreError
from noeta.core.fold import TaskState
from noeta.core.model import ModelReply, ToolCall
from noeta.core.store import Claim
from noeta.span_record import SpanRecord

MAX_CONTENT_CHARS = 16_000


class RecoveringIdGenerator(RandomIdGenerator):
    """Random ids, except for a recovered span, which keeps the ids it was given."""

    def generate_span_id(self) -> int:
        forced = t.forced_ids.get()
        return forced[1] if forced else super().generate_span_id()

    def generate_trace_id(self) -> int:
        forced = t.forced_ids.get()
        return forced[0] if forced else super().generate_trace_id()


def _now() -> int:
    return time.time_ns()


def _set(span: Span, key: str, value: Any) -> None:
    span.set_attribute(key, t.scrub(value) if isinstance(value, str) else value)


def _error(span: Span, error_type: str, message: str) -> None:
    """An error on a span: a low-cardinality type and a scrubbed message, no traceback
    (a traceback's frames may hold what the message was scrubbed of)."""
    message = t.scrub(message)[:2000]
    span.set_attribute(t.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, message))
    span.add_event("exception", {"exception.type": error_type, "exception.message": message})


def _span_context(trace_id: int, span_id: int) -> trace.SpanContext:
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED)
    return trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags)


def _under(trace_id: int, span_id: int) -> Any:
    return trace.set_span_in_context(trace.NonRecordingSpan(_span_context(trace_id, span_id)))


def _claim_gone(error: BaseException, attempt: LiveAttempt) -> bool:
    """After these, this process must not end its spans: the claim passed on."""
    if isinstance(error, asyncio.CancelledError):
        return attempt.lost
    return isinstance(error, StoreError)


class LiveAttempt(t.Attempt):
    def __init__(
        self, live: t.Live, claim: Claim, state: TaskState, before: list[tuple[str, int, int]]
    ) -> None:
        self.live = live
        self.task_id = claim.task_id
        self.epoch = claim.epoch
        self.lost = False
        self.state = state
        self.first_seq = state.last_seq + 1
        now = _now()
        self.start = min([now, *(started for _, started, _ in before)])
        previous = SpanRecord.parse(state.trace) if state.trace else None
        attributes: dict[str, Any] = {
            t.TASK_ID: claim.task_id,
            t.EPOCH: claim.epoch,
            t.WORKER: claim.worker,
            t.TAKEN_OVER: claim.taken_over,
            t.CONVERSATION_ID: claim.task_id,
            t.RECOVERY: _recovery_of(state),
        }
        context, links = None, []  # the task's first traced attempt: the root of its trace
        if previous is not None:
            context = _under(previous.trace_id, previous.root)
            links.append(Link(_span_context(previous.trace_id, previous.attempt)))
            if previous.epoch == claim.epoch - 1:
                self._account_for(previous, claim.taken_over, state, now)
        self.span = live.tracer.start_span(
            t.ATTEMPT_SPAN,
            context=context,
            start_time=self.start,
            attributes=attributes,
            links=links,
        )
        ids = self.span.get_span_context()
        self.trace_id = ids.trace_id
        self.root = previous.root if previous else ids.span_id
        for operation, started, ended in before:
            store_call_done(live, self, operation, started, ended)
        self.turn: Span | None = None
        self.turn_start = 0
        self.turn_number = 0
        self.step: Span | None = None
        if state.turn_open and not state.finished:
            self._open_turn(state.turn)

    # --- what the previous attempt left -----------------------------------------------------

    def _account_for(
        self, previous: SpanRecord, taken_over: bool, state: TaskState, now: int
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
            attributes = {t.TASK_ID: self.task_id, t.EPOCH: previous.epoch, t.RECOVERED: how}
            self._recovered(
                t.ATTEMPT_SPAN, previous, previous.attempt, parent, previous.attempt_start,
                now, attributes, f"attempt cut short: {ended_by}",
            )  # fmt: skip
            if previous.turn and state.turn_open and state.turn == previous.turn_number:
                attributes = {
                    t.TASK_ID: self.task_id,
                    t.TURN: previous.turn_number,
                    t.RECOVERED: how,
                }
                self._recovered(
                    t.TURN_SPAN, previous, previous.turn, previous.attempt, previous.turn_start,
                    now, attributes, f"turn cut short: {ended_by}",
                )  # fmt: skip
        step = _open_step(previous, state)
        if step is not None:
            name, attributes = step
            attributes.update({t.TASK_ID: self.task_id, t.EPOCH: previous.epoch, t.RECOVERED: how})
            self._recovered(
                name, previous, previous.step, previous.turn or previous.attempt,
                previous.step_start, now, attributes,
                f"cut short before its outcome was recorded: {ended_by}",
            )  # fmt: skip

    def _recovered(
        self,
        name: str,
        previous: SpanRecord,
        span_id: int,
        parent: int | None,
        start: int,
        end: int,
        attributes: dict[str, Any],
        message: str,
    ) -> None:
        context = None if parent is None else _under(previous.trace_id, parent)
        token = t.forced_ids.set((previous.trace_id, span_id))
        try:
            span = self.live.tracer.start_span(
                name, context=context, start_time=start, attributes=attributes
            )
        finally:
            t.forced_ids.reset(token)
        _error(span, "cut_short", message)
        span.end(end_time=max(end, start))

    # --- turns ------------------------------------------------------------------------------

    def _open_turn(self, number: int) -> None:
        self.turn_start = _now()
        self.turn_number = number
        self.turn = self.live.tracer.start_span(
            t.TURN_SPAN,
            context=trace.set_span_in_context(self.span),
            start_time=self.turn_start,
            attributes={t.TASK_ID: self.task_id, t.TURN: number},
        )

    def _close_turn(self, ended_in_log: bool) -> None:
        if self.turn is None:
            return
        state = self.state
        if ended_in_log:
            _set(self.turn, t.OUTCOME, state.last_turn_outcome or state.finished)
            if state.last_turn_error:
                _error(self.turn, state.last_turn_error.split(":", 1)[0], state.last_turn_error)
        self.turn.end()
        self.turn = None

    def appended(self, state: TaskState) -> None:
        self.state = state
        if self.turn is not None and (not state.turn_open or state.turn != self.turn_number):
            self._close_turn(ended_in_log=True)
        if self.turn is None and state.turn_open and not state.finished:
            self._open_turn(state.turn)

    def parent(self) -> Span:
        """The innermost open span: what a store call made now belongs to."""
        return self.step or self.turn or self.span

    # --- steps ------------------------------------------------------------------------------

    def record(self, step: Span, started: int, call: str) -> str:
        return SpanRecord(
            self.trace_id,
            self.epoch,
            self.root,
            self.span.get_span_context().span_id,
            self.start,
            self.turn.get_span_context().span_id if self.turn else 0,
            self.turn_start,
            self.turn_number,
            step.get_span_context().span_id,
            started,
            call,
        ).encode()

    @contextlib.contextmanager
    def _step(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> Iterator[Span]:
        """A step's span, ended only by the process that records the step's outcome."""
        span = self.live.tracer.start_span(
            name,
            context=trace.set_span_in_context(self.turn or self.span),
            kind=kind,
            attributes=attributes,
        )
        self.step = span
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                yield span
        except BaseException as error:
            self.step = None
            # Cancelled (claim lost, or shutting down and handing the task back) or
            # refused by the store: the log does not record the outcome, so the next
            # claimer reports the span. A bug's error ends it here (the turn fails).
            if not isinstance(error, asyncio.CancelledError | StoreError):
                _error(span, type(error).__name__, str(error))
                span.end()
            raise
        self.step = None
        span.end()

    @contextlib.contextmanager
    def chat(self, provider: str, model: str, state: TaskState) -> Iterator[t.Step]:
        attributes: dict[str, Any] = {
            t.OPERATION: "chat",
            t.PROVIDER: provider,
            t.REQUEST_MODEL: model,
            t.TASK_ID: self.task_id,
            t.CONVERSATION_ID: self.task_id,
            t.SEQ_FIRST: state.last_seq + 1,
        }
        if state.config is not None:
            attributes[t.REQUEST_MAX_TOKENS] = state.config.max_tokens
        with self._step(f"chat {model}", SpanKind.CLIENT, attributes) as span:
            step = _Chat(self, span, provider, model)
            yield step
            step.close()

    @contextlib.contextmanager
    def tool(self, call: ToolCall, state: TaskState, recovery: str = "") -> Iterator[t.Step]:
        attributes: dict[str, Any] = {
            t.OPERATION: "execute_tool",
            t.TOOL_NAME: call.name,
            t.TOOL_CALL_ID: call.id,
            t.TOOL_TYPE: "function",
            t.TASK_ID: self.task_id,
            t.SEQ_FIRST: state.last_seq + 1,
        }
        if recovery:
            attributes[t.TOOL_RECOVERY] = recovery
        with self._step(f"execute_tool {call.name}", SpanKind.INTERNAL, attributes) as span:
            step = _Tool(self, span, call)
            if self.live.capture_content:
                _set(span, t.TOOL_ARGUMENTS, _content(call.input))
            yield step
            step.close()

    def job_lost(self, job_id: str) -> None:
        self.span.add_event("noeta.job.lost", {"noeta.job.id": job_id})
        metrics.job_lost()

    def end(self, outcome: str, error: BaseException | None = None) -> None:
        if t.attempts.get(self.task_id) is self:
            del t.attempts[self.task_id]
        if error is not None and _claim_gone(error, self):
            return  # the claim is gone: the next claimer accounts for these spans
        self._close_turn(ended_in_log=False)
        _set(self.span, t.OUTCOME, outcome)
        self.span.set_attribute(t.SEQ_FIRST, self.first_seq)
        self.span.set_attribute(t.SEQ_LAST, self.state.last_seq)
        if error is not None:
            _error(self.span, type(error).__name__, str(error))
        self.span.end()


def _recovery_of(state: TaskState) -> str:
    """What the log left this attempt to settle."""
    if state.started:
        return "settle_tool_calls"
    if state.model_attempts:
        return "resend_model_call"
    return "none"


def _open_step(previous: SpanRecord, state: TaskState) -> tuple[str, dict[str, Any]] | None:
    """The recorded step, if the log still shows it open: (span name, attributes)."""
    if state.turn != previous.turn_number or not state.turn_open:
        return None
    if previous.call:
        if previous.call not in dict(state.started):
            return None
        name = next((c.name for c in state.calls if c.id == previous.call), "tool")
        attributes = {t.OPERATION: "execute_tool", t.TOOL_NAME: name, t.TOOL_CALL_ID: previous.call}
        return f"execute_tool {name}", attributes
    if not state.model_attempts:
        return None
    model = state.config.model.partition(":")[2] if state.config else ""
    return f"chat {model}", {t.OPERATION: "chat", t.REQUEST_MODEL: model}


class _Chat(t.Step):
    def __init__(self, attempt: LiveAttempt, span: Span, provider: str, model: str) -> None:
        self.attempt = attempt
        self.span = span
        self.provider = provider
        self.model = model
        self.started = time.monotonic()
        self.error_type = ""
        self.record = attempt.record(span, _now(), "")

    def input_messages(self, messages: object) -> None:
        if self.attempt.live.capture_content:
            _set(self.span, t.INPUT_MESSAGES, _content(messages))

    def replied(self, reply: ModelReply) -> None:
        usage, span = reply.usage, self.span
        # noeta's input_tokens excludes cached tokens; the convention's includes them.
        total_input = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        span.set_attribute(t.INPUT_TOKENS, total_input)
        span.set_attribute(t.OUTPUT_TOKENS, usage.output_tokens)
        span.set_attribute(t.CACHE_READ_TOKENS, usage.cache_read_tokens)
        span.set_attribute(t.CACHE_CREATION_TOKENS, usage.cache_write_tokens)
        span.set_attribute(t.FINISH_REASONS, [reply.provider_stop_reason or reply.stop_reason])
        if reply.response_id:
            _set(span, t.RESPONSE_ID, reply.response_id)
        if self.attempt.live.capture_content:
            _set(span, t.OUTPUT_MESSAGES, _content(reply.content))
        metrics.tokens(self.provider, self.model, total_input, usage.output_tokens)

    def failed(self, error_type: str, message: str) -> None:
        self.error_type = error_type
        _error(self.span, error_type, message)

    def close(self) -> None:
        self.span.set_attribute(t.SEQ_LAST, self.attempt.state.last_seq)
        metrics.model_call(
            time.monotonic() - self.started, self.provider, self.model, self.error_type
        )


class _Tool(t.Step):
    def __init__(self, attempt: LiveAttempt, span: Span, call: ToolCall) -> None:
        self.attempt = attempt
        self.span = span
        self.call = call
        self.started = time.monotonic()
        self.error_type = ""
        self.record = attempt.record(span, _now(), call.id)

    def finished(self, content: str, is_error: bool, recovery: str = "") -> None:
        if recovery:
            self.span.set_attribute(t.TOOL_RECOVERY, recovery)
        if self.attempt.live.capture_content:
            _set(self.span, t.TOOL_RESULT, content[:MAX_CONTENT_CHARS])
        self.error_type = t.tool_error_type(is_error, recovery)
        if is_error:
            _error(self.span, self.error_type, content[:500])

    def close(self) -> None:
        self.span.set_attribute(t.SEQ_LAST, self.attempt.state.last_seq)
        metrics.tool_call(time.monotonic() - self.started, self.call.name, self.error_type)


def _content(value: object) -> str:
    """Opt-in content as JSON, bounded."""
    return json.dumps(value, default=_plain, ensure_ascii=False)[:MAX_CONTENT_CHARS]


def _plain(value: object) -> object:
    slots = getattr(type(value), "__slots__", ())
    if slots:
        return {"type": type(value).__name__, **{name: getattr(value, name) for name in slots}}
    return str(value)


# --- store calls ----------------------------------------------------------------------------------


@contextlib.contextmanager
def store_call(live: t.Live, attempt: LiveAttempt, operation: str) -> Iterator[None]:
    span = live.tracer.start_span(
        t.STORE_SPAN + operation,
        context=trace.set_span_in_context(attempt.parent()),
        kind=SpanKind.CLIENT,
        attributes={t.STORE_OPERATION: operation, t.TASK_ID: attempt.task_id},
    )
    try:
        yield
    except BaseException as error:
        _error(span, type(error).__name__, str(error))
        raise
    finally:
        span.end()


def store_call_done(
    live: t.Live, attempt: LiveAttempt, operation: str, started: int, ended: int
) -> None:
    """A store call timed before it could be parented (the claim, the load, a renewal)."""
    span = live.tracer.start_span(
        t.STORE_SPAN + operation,
        context=trace.set_span_in_context(attempt.span),
        kind=SpanKind.CLIENT,
        start_time=started,
        attributes={t.STORE_OPERATION: operation, t.TASK_ID: attempt.task_id},
    )
    span.end(end_time=ended)
