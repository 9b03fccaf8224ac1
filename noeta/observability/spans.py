"""The live spans of an attempt (tracing on): the attempt, its turns, its steps and its
store calls (ADR-0024). Imported only once tracing is switched on.

A step's span (`chat …`, `execute_tool …`) is ended by the process that records the
step's outcome in the log. When that process loses the task first, the next claimer of
the previous epoch emits it (`takeover`), with the ids and start of its `SpanRecord`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, Span, SpanKind

from noeta.core.errors import StoreError
from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import Claim
from noeta.core.rules.task_state import TaskState
from noeta.observability import metrics, tracing
from noeta.observability import names as n
from noeta.observability.span_record import SpanRecord
from noeta.observability.steps import (
    ChatStep,
    ToolStep,
    chat_attributes,
    content,
    mark_error,
    now,
    set_scrubbed,
    span_context,
    tool_attributes,
    under,
)
from noeta.observability.takeover import account_for


class LiveTracing:
    """Tracing switched on: the provider, its tracer, whether to capture content."""

    def __init__(self, provider: TracerProvider, capture_content: bool) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("noeta")
        self.capture_content = capture_content

    def begin(self, claim: Claim, state: TaskState, before: list[tracing.StoreCall]) -> LiveAttempt:
        return LiveAttempt(self, claim, state, before)

    def shutdown(self) -> None:
        self.provider.shutdown()


def _claim_gone(error: BaseException, attempt: LiveAttempt) -> bool:
    """After these, this process must not end its spans: the claim passed on."""
    if isinstance(error, asyncio.CancelledError):
        return attempt.lost
    return isinstance(error, StoreError)


class LiveAttempt(tracing.Attempt):
    def __init__(
        self, live: LiveTracing, claim: Claim, state: TaskState, before: list[tracing.StoreCall]
    ) -> None:
        self.live = live
        self.task_id = claim.task_id
        self.epoch = claim.epoch
        self.lost = False
        self.state = state
        self.first_seq = state.last_seq + 1
        started_now = now()
        self.start = min([started_now, *(started for _, started, _ in before)])
        previous = SpanRecord.parse(state.trace) if state.trace else None
        attributes: dict[str, Any] = {
            n.TASK_ID: claim.task_id,
            n.EPOCH: claim.epoch,
            n.WORKER: claim.worker,
            n.TAKEN_OVER: claim.taken_over,
            n.CONVERSATION_ID: claim.task_id,
            n.RECOVERY: _recovery_of(state),
        }
        context, links = None, []  # the task's first traced attempt: the root of its trace
        launched_by = SpanRecord.parse(state.parent_trace) if state.parent_trace else None
        if previous is None and launched_by is not None:
            # A subtask's trace is its own, linked to its parent's `execute_tool Agent` span.
            links.append(Link(span_context(launched_by.trace_id, launched_by.step)))
        if previous is not None:
            context = under(previous.trace_id, previous.root)
            links.append(Link(span_context(previous.trace_id, previous.attempt)))
            if previous.epoch == claim.epoch - 1:
                account_for(
                    live.tracer, self.task_id, previous, claim.taken_over, state, started_now
                )
        self.span = live.tracer.start_span(
            n.ATTEMPT_SPAN,
            context=context,
            start_time=self.start,
            attributes=attributes,
            links=links,
        )
        ids = self.span.get_span_context()
        self.trace_id = ids.trace_id
        self.root = previous.root if previous else ids.span_id
        for operation, started, ended in before:
            self.store_call_done(operation, started, ended)
        self.turn: Span | None = None
        self.turn_start = 0
        self.turn_number = 0
        self.step: Span | None = None
        if state.turn_open and not state.finished:
            self._open_turn(state.turn)

    @property
    def capture_content(self) -> bool:
        return self.live.capture_content

    @property
    def last_seq(self) -> int:
        return self.state.last_seq

    # --- turns ------------------------------------------------------------------------------

    def _open_turn(self, number: int) -> None:
        self.turn_start = now()
        self.turn_number = number
        self.turn = self.live.tracer.start_span(
            n.TURN_SPAN,
            context=trace.set_span_in_context(self.span),
            start_time=self.turn_start,
            attributes={n.TASK_ID: self.task_id, n.TURN: number},
        )

    def _close_turn(self, ended_in_log: bool) -> None:
        if self.turn is None:
            return
        state = self.state
        if ended_in_log:
            set_scrubbed(self.turn, n.OUTCOME, state.last_turn_outcome or state.finished)
            if state.last_turn_error:
                error_type = state.last_turn_error.split(":", 1)[0]
                mark_error(self.turn, error_type, state.last_turn_error)
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
                mark_error(span, type(error).__name__, str(error))
                span.end()
            raise
        self.step = None
        span.end()

    @contextlib.contextmanager
    def chat(self, provider: str, model: str, state: TaskState) -> Iterator[tracing.Step]:
        attributes = chat_attributes(self.task_id, provider, model, state)
        attributes[n.SEQ_FIRST] = state.last_seq + 1
        with self._step(f"chat {model}", SpanKind.CLIENT, attributes) as span:
            step = ChatStep(self, span, provider, model)
            yield step
            step.close()

    @contextlib.contextmanager
    def tool(self, call: ToolCall, state: TaskState, recovery: str = "") -> Iterator[tracing.Step]:
        attributes = tool_attributes(self.task_id, call.name, call.id)
        attributes[n.SEQ_FIRST] = state.last_seq + 1
        if recovery:
            attributes[n.TOOL_RECOVERY] = recovery
        with self._step(f"execute_tool {call.name}", SpanKind.INTERNAL, attributes) as span:
            step = ToolStep(self, span, call)
            if self.live.capture_content:
                set_scrubbed(span, n.TOOL_ARGUMENTS, content(call.input))
            yield step
            step.close()

    def job_lost(self, job_id: str) -> None:
        self.span.add_event("noeta.job.lost", {"noeta.job.id": job_id})
        metrics.job_lost()

    def end(self, outcome: str, error: BaseException | None = None) -> None:
        if tracing.attempts.get(self.task_id) is self:
            del tracing.attempts[self.task_id]
        if error is not None and _claim_gone(error, self):
            return  # the claim is gone: the next claimer accounts for these spans
        self._close_turn(ended_in_log=False)
        set_scrubbed(self.span, n.OUTCOME, outcome)
        self.span.set_attribute(n.SEQ_FIRST, self.first_seq)
        self.span.set_attribute(n.SEQ_LAST, self.state.last_seq)
        if error is not None:
            mark_error(self.span, type(error).__name__, str(error))
        self.span.end()

    # --- store calls --------------------------------------------------------------------------

    @contextlib.contextmanager
    def store_call(self, operation: str) -> Iterator[None]:
        span = self.live.tracer.start_span(
            n.STORE_SPAN + operation,
            context=trace.set_span_in_context(self.parent()),
            kind=SpanKind.CLIENT,
            attributes={n.STORE_OPERATION: operation, n.TASK_ID: self.task_id},
        )
        try:
            yield
        except BaseException as error:
            mark_error(span, type(error).__name__, str(error))
            raise
        finally:
            span.end()

    def store_call_done(self, operation: str, started: int, ended: int) -> None:
        span = self.live.tracer.start_span(
            n.STORE_SPAN + operation,
            context=trace.set_span_in_context(self.span),
            kind=SpanKind.CLIENT,
            start_time=started,
            attributes={n.STORE_OPERATION: operation, n.TASK_ID: self.task_id},
        )
        span.end(end_time=ended)


def _recovery_of(state: TaskState) -> str:
    """What the log left this attempt to settle."""
    if state.started:
        return "settle_tool_calls"
    if state.model_attempts:
        return "resend_model_call"
    return "none"
