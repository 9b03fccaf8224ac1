"""Tracing's facade: what the runner, the worker and the store wrapper call (ADR-0024).

Every call is a no-op until `noeta.observability.export` switches tracing on; this module
imports no opentelemetry (an import contract holds the kernel's whole path to it). It also
owns the scrubbing of secrets from spans and log lines.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from noeta.observability import metrics
from noeta.redaction import MIN_PASSED_SECRET_CHARS, Scrubber, ScrubbingFilter

if TYPE_CHECKING:
    from noeta.core.ports.model import ModelReply, ToolCall
    from noeta.core.ports.store import Claim
    from noeta.core.rules.task_state import TaskState

# A store call timed before its attempt span existed: (operation, start ns, end ns).
StoreCall = tuple[str, int, int]


class Tracing(Protocol):
    """Tracing switched on (`spans.LiveTracing`, installed by `export`)."""

    def begin(self, claim: Claim, state: TaskState, before: list[StoreCall]) -> Attempt:
        """The attempt span of this claim; `before` are its store calls made until now."""
        ...

    def shutdown(self) -> None: ...


class _Switch:
    live: Tracing | None = None  # set while tracing is on


_on = _Switch()
_scrub = Scrubber()


def enabled() -> bool:
    return _on.live is not None


def switch_on(live: Tracing) -> None:
    _on.live = live


def uninstall() -> None:
    _on.live = None
    attempts.clear()
    before_attempt.clear()


def shutdown() -> None:
    """Export what is queued (at a clean exit; a killed process loses it)."""
    if _on.live is not None:
        _on.live.shutdown()
    metrics.shutdown()


def scrub(text: str) -> str:
    """`text` without any secret this process knows of (keys, the store's password)."""
    return _scrub(text)


def scrubber() -> Scrubber:
    """What `scrub` uses, for a ScrubWindow: it reads the secrets it holds back for."""
    return _scrub


def add_secrets(values: Iterable[str | None]) -> None:
    """Store URLs (or raw secrets) this process holds: never let them reach a span."""
    for value in values:
        if value:
            _scrub.add_url(value)


def add_passed_secrets(names: Iterable[str]) -> None:
    """The values of the variables passed to tools (`pass_env:`): secrets whatever their
    names. A value too short to scrub is named in a warning (never shown)."""
    for name in sorted(_scrub.add_passed(names)):
        logging.getLogger("noeta.observability").warning(
            "pass_env %s: its value is under %d characters, too short to be scrubbed from "
            "logs and spans; a secret that short is not one",
            name,
            MIN_PASSED_SECRET_CHARS,
        )


def add_environment_secrets() -> None:
    """The secrets in this process's environment (API keys, passwords)."""
    _scrub.add_environment()


def scrub_logs() -> None:
    """Scrub every log line this process writes (its root handlers) of known secrets."""
    _scrub.add_environment()
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingFilter(_scrub))


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

    lost = False  # the worker lost the claim: its spans are the next claimer's to emit

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

    @contextlib.contextmanager
    def store_call(self, operation: str) -> Iterator[None]:
        """A store call made now, a child of the innermost open span."""
        yield

    def store_call_done(self, operation: str, started: int, ended: int) -> None:
        """A store call timed before it could be parented (the claim, the load, a renewal)."""


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
        metrics.replied(self.provider, self.model, reply.usage)

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
attempts: dict[str, Attempt] = {}
# Store calls made for a task before its attempt span exists (its claim, its load).
before_attempt: dict[str, list[StoreCall]] = {}


def begin_attempt(claim: Claim, state: TaskState) -> Attempt:
    """The attempt span of this claim, continuing the task's trace as its log records it.

    Called once the log is loaded; it first emits what a previous attempt left unended.
    """
    live = _on.live
    if live is None:
        return _METERED_ATTEMPT if metrics.enabled() else NO_ATTEMPT
    attempt = live.begin(claim, state, before_attempt.pop(claim.task_id, []))
    attempts[claim.task_id] = attempt
    return attempt


def claim_lost(task_id: str) -> None:
    """The worker lost this task's claim: its spans are left to the next claimer."""
    attempt = attempts.get(task_id)
    if attempt is not None:
        attempt.lost = True


# --- the store's side (noeta.observability.observed_store) ------------------------------


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
    with attempt.store_call(operation):
        yield


def claimed(task_id: str, started: int) -> None:
    """A claim returned this task: its span becomes a child of the coming attempt."""
    if _on.live is not None:
        _remember(task_id, "claim", started)


def renewed(task_ids: Iterable[str], started: int, ended: int) -> None:
    """One renewal round: a child span under each renewed task's attempt."""
    if _on.live is None:
        return
    for task_id in task_ids:
        attempt = attempts.get(task_id)
        if attempt is not None:
            attempt.store_call_done("renew", started, ended)


def _remember(task_id: str, operation: str, started: int) -> None:
    if len(before_attempt) > 10_000:  # tasks claimed and never run: never grow without end
        before_attempt.clear()
    calls = before_attempt.setdefault(task_id, [])
    if len(calls) < 8:
        calls.append((operation, started, time.time_ns()))
