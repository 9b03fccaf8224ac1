"""`next_action(state) -> Action`: what the log calls for next. Pure, like the fold.

Each cap of SPEC §6 that a log can reach is decided here, so the same log always leads
to the same action, on any worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from noeta.core.ports.model import ToolCall
from noeta.core.ports.pin import Pin
from noeta.core.rules.canvas import AwaitMembers, CanvasEnded, LaunchMembers, next_step
from noeta.core.rules.task_state import TaskState
from noeta.core.rules.texts import (
    EMPTY_REPLIES_LIMIT,
    INFRASTRUCTURE_LOST_THE_CALL,
    INTERNAL_ERRORS_LIMIT,
    MAX_MODEL_ATTEMPTS,
    MAX_WORKERS_LOST,
    MODEL_KEPT_BEING_INTERRUPTED,
    TRUNCATED_REPLIES_LIMIT,
    TRUNCATED_TOO_OFTEN,
)


@dataclass(frozen=True, slots=True)
class CallModel:
    """Send the request the log implies (again, after a crash: the same bytes)."""


@dataclass(frozen=True, slots=True)
class FindWhyCut:
    """A ModelCalled of an earlier claim got no reply: find why (the claims table, a kept
    "not sent" word) and record it as `ModelCallCut` before the cap is weighed (ADR-0080)."""

    seq: int


@dataclass(frozen=True, slots=True)
class RunTools:
    calls: tuple[ToolCall, ...]  # not yet started, in the order the model gave them


@dataclass(frozen=True, slots=True)
class RecoverCalls:
    """Calls started but never finished: their outcome must be settled (recover_calls)."""

    calls: tuple[tuple[ToolCall, int], ...]  # (call, starts so far)


@dataclass(frozen=True, slots=True)
class AwaitRetry:
    """A plain job's attempt failed and its next is due at `due` (store clock): the task
    waits in the queue meanwhile (its slot free), and whoever claims it then runs `calls`
    (the job's one call), as `RunTools` does."""

    calls: tuple[ToolCall, ...]
    due: str  # UTC, ISO 8601


@dataclass(frozen=True, slots=True)
class AwaitAnswer:
    """A gate asked a person about this call: take the answer, or hand the task back."""

    call_id: str


@dataclass(frozen=True, slots=True)
class AwaitSubtasks:
    """Every call of the reply is settled but for Agent calls whose children run: take
    their handbacks, or hand the task back (releasing the claim) until one arrives."""

    children: tuple[tuple[str, str], ...]  # (call id, child id), in launch order


@dataclass(frozen=True, slots=True)
class EndTurn:
    outcome: str  # "answered", "no_answer", "failed"
    answer: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class FinishTask:
    status: str  # "done", "failed"
    answer: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class AwaitMessage:
    """Idle: take the next inbox message if there is one, else hand the task back."""


@dataclass(frozen=True, slots=True)
class LeaveForNewerVersion:
    """The log holds an event this version cannot read: write nothing, let the lease lapse."""

    event_type: str


@dataclass(frozen=True, slots=True)
class LeaveUnreadable:
    """The log cannot be folded; after `task.LOAD_ATTEMPTS` claims the task fails."""

    reason: str


@dataclass(frozen=True, slots=True)
class PinPlugins:
    """Record the plugins this worker runs the task with (first start, or they changed)."""

    pins: tuple[Pin, ...]


@dataclass(frozen=True, slots=True)
class LeavePluginMissing:
    """A pinned plugin is not on this worker: write nothing, let a worker that has it claim."""

    missing: tuple[Pin, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    """The task is finished: nothing more to do."""


Action = (
    CallModel
    | FindWhyCut
    | AwaitAnswer
    | AwaitRetry
    | RunTools
    | RecoverCalls
    | EndTurn
    | FinishTask
    | AwaitMessage
    | AwaitSubtasks
    | LaunchMembers
    | AwaitMembers
    | LeaveForNewerVersion
    | LeaveUnreadable
    | Stop
)


def next_action(state: TaskState) -> Action:
    if state.newer_event:
        return LeaveForNewerVersion(state.newer_event)
    if state.unreadable:
        return LeaveUnreadable(state.unreadable)
    if state.config is None:
        return LeaveUnreadable("the log does not start with TaskCreated")
    if state.finished:
        return Stop()
    if state.canvas is not None:  # no model: a pure rule over its members' ends (ADR-0104)
        step = next_step(state)
        if isinstance(step, CanvasEnded):
            return FinishTask(step.status, step.answer, step.error)
        return step
    if state.turn_open:
        return _within_turn(state)
    if state.turn == 0 or state.config.interactive or state.jobs or state.wakeups:
        # A one-shot task with jobs out waits for their results, with wake-ups for them.
        return AwaitMessage()
    if state.last_turn_outcome == "failed":
        return FinishTask("failed", error=state.last_turn_error)
    return FinishTask("done", answer=state.last_answer)


def check_pins(
    state: TaskState, available: tuple[Pin, ...]
) -> PinPlugins | LeavePluginMissing | None:
    """What the task's pins call for on a worker that has `available` (ADR-023)."""
    if state.config is None or state.finished:
        return None
    if not state.pins:
        return PinPlugins(available)
    names = {pin.name for pin in available}
    missing = tuple(pin for pin in state.pins if pin.name not in names)
    if missing:
        return LeavePluginMissing(missing)
    if state.pins != available:
        return PinPlugins(available)  # visible in the log, used from here on
    return None


def on_internal_error(state: TaskState, error: str) -> EndTurn | FinishTask:
    """A bug in the runner or a plugin: the first fails the turn, the second in a row the task."""
    reason = f"internal_error: {error}"
    if state.internal_errors_in_row + 1 >= INTERNAL_ERRORS_LIMIT:
        return FinishTask("failed", error=reason)
    return EndTurn("failed", error=reason)


def _within_turn(state: TaskState) -> Action:
    if state.budget_denied:
        return FinishTask("failed", error=state.budget_denied)
    if state.waiting_call:
        return AwaitAnswer(state.waiting_call)
    if state.calls:
        started = dict(state.started)
        if state.job:  # a job's starts are all its attempts: its max_attempts spans crashes
            started = {call_id: state.attempts for call_id in started}
        half_done = tuple((call, started[call.id]) for call in state.calls if call.id in started)
        if half_done:
            return RecoverCalls(half_done)
        if state.retry_at:
            return AwaitRetry(state.calls, state.retry_at)
        finished = {result.call_id for result in state.results}
        waiting = tuple((c, child) for c, child, reply in state.subtasks if reply == state.replies)
        waiting_calls = {call_id for call_id, _ in waiting}
        to_run = tuple(c for c in state.calls if c.id not in finished and c.id not in waiting_calls)
        if to_run or not waiting:
            return RunTools(to_run)
        return AwaitSubtasks(waiting)
    if state.model_call_open:
        return FindWhyCut(state.model_call_open)
    lost = state.model_workers_lost + state.model_calls_unsent
    if state.model_attempts - lost >= MAX_MODEL_ATTEMPTS:
        return EndTurn("failed", error=MODEL_KEPT_BEING_INTERRUPTED)
    if lost >= MAX_WORKERS_LOST:
        error = INFRASTRUCTURE_LOST_THE_CALL.format(lost=lost, unsent=state.model_calls_unsent)
        return EndTurn("failed", error=error)
    if state.truncated_in_row >= TRUNCATED_REPLIES_LIMIT:
        return EndTurn("failed", error=TRUNCATED_TOO_OFTEN)
    if state.empty_in_row >= EMPTY_REPLIES_LIMIT:
        return EndTurn("no_answer")
    last = state.messages[-1] if state.messages else None
    if last is not None and last.role == "assistant":
        return EndTurn("answered", answer=state.last_answer)
    return CallModel()
