"""Tracing: one OpenTelemetry trace per task, across workers and crashes (ADR-0024).

The facade the runner, the worker and the store wrapper call. Until `setup` finds OTEL_*
variables asking for export (or a test calls `install`), every call is a no-op and
opentelemetry is never imported. It owns the span and attribute names and the scrubbing
of secrets; the live spans are in `noeta.spans`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from noeta import metrics
from noeta.redaction import Scrubber, ScrubbingFilter

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer

    from noeta.core.fold import TaskState
    from noeta.core.model import ModelReply, ToolCall
    from noeta.core.store import Claim
    from noeta.spans import LiveAttempt

# --- names (OpenTelemetry GenAI semantic conventions, then noeta's own) ---------------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"  # all input tokens, cached ones included
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"  # opt-in content
OUTPUT_MESSAGES = "gen_ai.output.messages"  # opt-in content
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"  # opt-in content
TOOL_RESULT = "gen_ai.tool.call.result"  # opt-in content
ERROR_TYPE = "error.type"

TASK_ID = "noeta.task.id"
EPOCH = "noeta.epoch"
WORKER = "noeta.worker"
SEQ_FIRST = "noeta.seq.first"  # the first log seq this span's work appended
SEQ_LAST = "noeta.seq.last"  # the log's last seq when the span ended
TAKEN_OVER = "noeta.claim.taken_over"
RECOVERY = "noeta.recovery"  # on an attempt: what the log left it to settle
TOOL_RECOVERY = "noeta.tool.recovery"  # how a half-done call was settled
RECOVERED = "noeta.recovered"  # on a span a crash cut short, emitted by the next claimer
OUTCOME = "noeta.outcome"
TURN = "noeta.turn"
STORE_OPERATION = "noeta.store.operation"

ATTEMPT_SPAN = "noeta.attempt"
TURN_SPAN = "noeta.turn"
STORE_SPAN = "noeta.store."  # + the operation: noeta.store.append, …

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

_TRACES_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_METRICS_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


# --- configuration --------------------------------------------------------------------------


def _wanted(endpoints: Sequence[str], exporter_env: str) -> bool:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get(exporter_env, "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "console" or any(env.get(name) for name in endpoints)


def traces_wanted() -> bool:
    """OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set (or OTEL_TRACES_EXPORTER=console)."""
    return _wanted(_TRACES_ENDPOINTS, "OTEL_TRACES_EXPORTER")


def metrics_wanted() -> bool:
    """OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT is set (or OTEL_METRICS_EXPORTER=console)."""
    return _wanted(_METRICS_ENDPOINTS, "OTEL_METRICS_EXPORTER")


class Live:
    """Tracing switched on: the provider, its tracer, whether to capture content."""

    def __init__(self, provider: TracerProvider, capture_content: bool) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("noeta")
        self.capture_content = capture_content


class _Switch:
    live: Live | None = None  # set while tracing is on


_on = _Switch()
_scrub = Scrubber()
# Set while a recovered span is started: the ids it had in the process that died.
forced_ids: ContextVar[tuple[int, int] | None] = ContextVar("noeta_forced_ids", default=None)


def enabled() -> bool:
    return _on.live is not None


def scrub(text: str) -> str:
    """`text` without any secret this process knows of (keys, the store's password)."""
    return _scrub(text)


def add_secrets(values: Iterable[str | None]) -> None:
    """Store URLs (or raw secrets) this process holds: never let them reach a span."""
    for value in values:
        if value:
            _scrub.add_url(value)


def scrub_logs() -> None:
    """Scrub every log line this process writes (its root handlers) of known secrets."""
    _scrub.add_environment()
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingFilter(_scrub))


def setup(service_name: str, secrets: Iterable[str | None] = ()) -> None:
    """Start exporting traces and metrics if the standard OTEL_* variables ask for it.

    Nothing is imported, and nothing costs anything, when they do not.
    """
    _scrub.add_environment()
    add_secrets(secrets)
    if traces_wanted():
        from opentelemetry import trace
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        exporter: Any
        if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
            exporter = ConsoleSpanExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_* say where and how
        # The batch delay is OTEL_BSP_SCHEDULE_DELAY (5 s by default): a process killed
        # sooner loses what is queued; the next claimer accounts for the step it cut short.
        provider = make_provider(service_name, [BatchSpanProcessor(exporter)])
        trace.set_tracer_provider(provider)
        install(provider)
    if metrics_wanted():
        metrics.setup(service_name)


def make_provider(service_name: str, processors: Sequence[SpanProcessor]) -> TracerProvider:
    """A tracer provider with noeta's id generator (a recovered span keeps its ids)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from noeta.spans import RecoveringIdGenerator

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(
        resource=Resource.create(attributes), id_generator=RecoveringIdGenerator()
    )
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def install(provider: TracerProvider, *, capture_content: bool | None = None) -> None:
    """Trace with `provider` from now on (setup does this; tests pass their own)."""
    if capture_content is None:
        capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    _on.live = Live(provider, capture_content)


def uninstall() -> None:
    _on.live = None
    attempts.clear()
    before_attempt.clear()


def shutdown() -> None:
    """Export what is queued (at a clean exit; a killed process loses it)."""
    if _on.live is not None:
        _on.live.provider.shutdown()
    metrics.shutdown()


# --- the runner's side: attempts and their steps ------------------------------------------------


class Step:
    """One model or tool call's span; this one does nothing (tracing is off)."""

    record = ""  # the SpanRecord written with the step's ModelCalled / ToolStarted

    def input_messages(self, messages: object) -> None: ...

    def replied(self, reply: ModelReply) -> None: ...

    def failed(self, error_type: str, message: str) -> None: ...

    def finished(self, content: str, is_error: bool, recovery: str = "") -> None: ...


class Attempt:
    """One claim's run of a task; this one does nothing (tracing is off)."""

    def appended(self, state: TaskState) -> None:
        """Events landed (the runner's one write path): turns open and close here."""

    @contextlib.contextmanager
    def chat(self, provider: str, model: str, state: TaskState) -> Iterator[Step]:
        yield NO_STEP

    @contextlib.contextmanager
    def tool(self, call: ToolCall, state: TaskState, recovery: str = "") -> Iterator[Step]:
        yield NO_STEP

    def job_lost(self, job_id: str) -> None: ...

    def end(self, outcome: str, error: BaseException | None = None) -> None: ...


NO_STEP = Step()
NO_ATTEMPT = Attempt()


def tool_error_type(is_error: bool, recovery: str) -> str:
    """The `error.type` of a tool call's result ("" for a success)."""
    if not is_error:
        return ""
    return "outcome_unknown" if recovery == "unknown" else "tool_error"


class _MeteredStep(Step):
    """Metrics without spans (metrics exported, traces not)."""

    def __init__(self, provider: str, model: str) -> None:
        self.provider, self.model = provider, model
        self.started = time.monotonic()
        self.error_type = ""

    def replied(self, reply: ModelReply) -> None:
        usage = reply.usage
        total = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        metrics.tokens(self.provider, self.model, total, usage.output_tokens)

    def failed(self, error_type: str, message: str) -> None:
        self.error_type = error_type

    def finished(self, content: str, is_error: bool, recovery: str = "") -> None:
        self.error_type = tool_error_type(is_error, recovery)


class _MeteredAttempt(Attempt):
    @contextlib.contextmanager
    def chat(self, provider: str, model: str, state: TaskState) -> Iterator[Step]:
        step = _MeteredStep(provider, model)
        yield step
        metrics.model_call(time.monotonic() - step.started, provider, model, step.error_type)

    @contextlib.contextmanager
    def tool(self, call: ToolCall, state: TaskState, recovery: str = "") -> Iterator[Step]:
        step = _MeteredStep("", "")
        yield step
        metrics.tool_call(time.monotonic() - step.started, call.name, step.error_type)

    def job_lost(self, job_id: str) -> None:
        metrics.job_lost()


_METERED_ATTEMPT = _MeteredAttempt()

# The attempts this process is running, by task id (store spans find their parent here).
attempts: dict[str, LiveAttempt] = {}
# Store calls made for a task before its attempt span exists (its claim, its load).
before_attempt: dict[str, list[tuple[str, int, int]]] = {}


def begin_attempt(claim: Claim, state: TaskState) -> Attempt:
    """The attempt span of this claim, continuing the task's trace as its log records it.

    Called once the log is loaded; it first emits what a previous attempt left unended.
    """
    live = _on.live
    if live is None:
        return _METERED_ATTEMPT if metrics.enabled() else NO_ATTEMPT
    from noeta.spans import LiveAttempt

    attempt = LiveAttempt(live, claim, state, before_attempt.pop(claim.task_id, []))
    attempts[claim.task_id] = attempt
    return attempt


def claim_lost(task_id: str) -> None:
    """The worker lost this task's claim: its spans are left to the next claimer."""
    attempt = attempts.get(task_id)
    if attempt is not None:
        attempt.lost = True


# --- the store's side (noeta.observed_store) ---------------------------------------------------


@contextlib.contextmanager
def store_span(operation: str, task_id: str | None) -> Iterator[None]:
    """A child span for one store call, under the task's innermost open span.

    A load made before the task's attempt span exists is remembered and emitted as a
    child of the attempt when it starts (the claim too: see `claimed`).
    """
    live = _on.live
    attempt = attempts.get(task_id) if task_id else None
    if live is None or task_id is None or (attempt is None and operation != "load"):
        yield
        return
    if attempt is None:
        started = time.time_ns()
        try:
            yield
        finally:
            _remember(task_id, operation, started)
        return
    from noeta.spans import store_call

    with store_call(live, attempt, operation):
        yield


def claimed(task_id: str, started: int) -> None:
    """A claim returned this task: its span becomes a child of the coming attempt."""
    if _on.live is not None:
        _remember(task_id, "claim", started)


def renewed(task_ids: Iterable[str], started: int, ended: int) -> None:
    """One renewal round: a child span under each renewed task's attempt."""
    live = _on.live
    if live is None:
        return
    from noeta.spans import store_call_done

    for task_id in task_ids:
        attempt = attempts.get(task_id)
        if attempt is not None:
            store_call_done(live, attempt, "renew", started, ended)


def _remember(task_id: str, operation: str, started: int) -> None:
    if len(before_attempt) > 10_000:  # tasks claimed and never run: never grow without end
        before_attempt.clear()
    calls = before_attempt.setdefault(task_id, [])
    if len(calls) < 8:
        calls.append((operation, started, time.time_ns()))
