"""`fold(events) -> TaskState`: everything a worker needs to know about a task, from its log.

Pure: no I/O, no clock, no randomness. Recovery is folding: a claimer that finds a
ModelCalled without a reply, or a ToolStarted without a finish, learns it here.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, assert_never

from noeta.core.ports.model import Message, Text, ToolCall, ToolResult
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.pin import Pin
from noeta.core.rules import job_fold, task_spend
from noeta.core.rules.conversation import extend
from noeta.core.rules.events import (
    AttemptFailed,
    BudgetExceeded,
    CallRequested,
    CanvasRequested,
    Event,
    JobFinished,
    JobLost,
    JobStarted,
    JobStopped,
    MessageTaken,
    ModelCallCut,
    ModelCalled,
    ModelFailed,
    ModelReplied,
    PluginRecord,
    PluginsPinned,
    SubtaskLaunched,
    SubtaskOf,
    SubtaskReturned,
    TaskCreated,
    TaskFinished,
    ToolAnswered,
    ToolFinished,
    ToolResultCorrected,
    ToolStarted,
    ToolWaiting,
    TurnEnded,
    UnknownEvent,
    WakeupScheduled,
    WokenUp,
)
from noeta.core.rules.task_state import TaskState, state_of
from noeta.core.rules.texts import BUDGET_CALL, JOB_LOST, RESULT_CORRECTED, WOKEN_UP

# Said to the model, from the fold, after a reply cut off by the output limit: being
# derived from the log, it is part of the byte-identical request on a re-send.
CONTINUE_AFTER_TRUNCATION = (
    "[noeta] Your previous reply was cut off by the output token limit. "
    "Continue exactly where it stopped."
)


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with its place in the log."""

    seq: int
    event: Event | UnknownEvent


class _Folding:
    """The mutable builder behind `fold`: every event costs O(1), so a fold is linear."""

    # TaskState's scalar fields: the start's, copied in at once (`__init__`).
    config: TaskCreated | None
    last_seq: int
    turn: int
    turn_open: bool
    model_attempts: int
    model_workers_lost: int
    model_calls_unsent: int
    model_call_open: int
    settled_unknown: tuple[str, ...]
    calls: tuple[ToolCall, ...]
    replies: int
    truncated_in_row: int
    empty_in_row: int
    internal_errors_in_row: int
    last_answer: str
    last_turn_outcome: str
    last_turn_error: str
    finished: str
    waiting_call: str
    waiting_input: tuple[tuple[str, JSONValue], ...]
    waiting_question: str
    approved: tuple[tuple[str, tuple[tuple[str, JSONValue], ...]], ...]
    pins: tuple[Pin, ...]
    jobs: tuple[str, ...]
    wakeups: tuple[tuple[str, str, str], ...]
    newer_event: str
    unreadable: str
    trace: str
    parent: str
    parent_call: str
    parent_trace: str
    depth: int
    children: int
    turn_children: int
    plugin_records: tuple[tuple[str, JSONValue], ...]
    job: str
    attempts: int
    retry_at: str
    canvas: dict[str, JSONValue] | None
    spent: tuple[int, int, int, int, int]
    call_estimate: int
    budget_allowed: int
    budget_denied: str
    first_request: str
    subtask_tokens: int
    subtask_cost: str

    # The collections a fold changes in place, in the builder's own form: made from the
    # start's only when an event first touches one (`__getattr__`).
    started: dict[str, int]
    results: list[ToolResult]
    taken: set[int]
    # Keyed by child, and a list: a canvas of 10,000 members takes each launch and each
    # end in O(1), not a tuple rebuilt per event (ADR-0104).
    subtasks: dict[str, tuple[str, str, int]]
    canvas_results: list[tuple[str, str, str]]
    # Not fields: the state folded from, and the messages this fold adds to its own.
    _start: TaskState
    messages: list[Message]

    def __init__(self, start: TaskState) -> None:
        # The builder's attributes start as the start's fields, one copy of its dict: a
        # rule reads a field as a plain attribute. The collections changed in place are
        # left out until an event first touches one (`__getattr__`), and `messages` holds
        # what this fold adds to the start's conversation.
        fields = start.__dict__.copy()
        for name in _IN_PLACE:
            del fields[name]
        fields["_start"] = start
        fields["messages"] = []
        self.__dict__ = fields

    def __getattr__(self, name: str) -> object:
        """A collection this fold has not touched: the start's, copied into the builder's
        form and kept (nothing else is looked up here)."""
        if name not in _COLLECTIONS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        _, copied_from, _ = _COLLECTIONS[name]
        built = self.__dict__[name] = copied_from(self._start)
        return built

    def state(self) -> TaskState:
        values = self.__dict__.copy()
        start = values.pop("_start")
        # The start's conversation never copied: a snapshot's may be unbuilt.
        values["messages"] = extend(start.messages, values["messages"])
        for name, (field, _, frozen) in _COLLECTIONS.items():
            if name in values:
                values[field] = frozen(values.pop(name))
            elif field not in values:
                values[field] = getattr(start, field)
        return state_of(values)


# Each collection the builder changes in place, by its name there: its field in the
# state, the builder's copy of the state's, and the state's form of the builder's.
_COLLECTIONS: dict[str, tuple[str, Callable[[TaskState], Any], Callable[[Any], Any]]] = {
    "started": ("started", lambda state: dict(state.started), lambda own: tuple(own.items())),
    "results": ("results", lambda state: list(state.results), tuple),
    "taken": ("taken_inbox", lambda state: set(state.taken_inbox), frozenset),
    "subtasks": (
        "subtasks",
        lambda state: {launched[1]: launched for launched in state.subtasks},
        lambda own: tuple(own.values()),
    ),
    "canvas_results": ("canvas_results", lambda state: list(state.canvas_results), tuple),
}
_OWN = {"_start", "messages"}
# The state's fields of the collections changed in place (`taken_inbox`, a frozenset, is
# left beside the builder's `taken`: no rule reads it).
_IN_PLACE = tuple(field for name, (field, _, _) in _COLLECTIONS.items() if field == name)
# The fields set whole (`calls` too: never changed in place); `messages` is the builder's
# own (what it adds to the start's conversation).
_SCALAR_NAMES = (
    TaskState.__dataclass_fields__.keys()
    - {"messages"}
    - {field for field, _, _ in _COLLECTIONS.values()}
)
assert set(_Folding.__annotations__) == _SCALAR_NAMES | _COLLECTIONS.keys() | _OWN, (
    "_Folding must mirror TaskState"
)


# The state before any event: a frozen value of immutable defaults, made once. Each claimed
# job's log is folded from it, and `TaskState()` sets some sixty fields (10 us).
_EMPTY = TaskState()


def fold(events: Iterable[LoggedEvent], start: TaskState | None = None) -> TaskState:
    """Fold `events` (in seq order, following `start` if given) into a state."""
    f = _Folding(_EMPTY if start is None else start)
    # A long log makes many small objects and no cycles: without this pause the cyclic
    # GC rescans the growing conversation again and again, and folding stops being linear.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for logged in events:
            if f.newer_event or f.unreadable:
                break
            if logged.seq != f.last_seq + 1:
                f.unreadable = f"the log jumps from seq {f.last_seq} to {logged.seq}"
                break
            f.last_seq = logged.seq
            _apply(f, logged.event)
        return f.state()
    finally:
        if collecting:
            gc.enable()


def _apply(f: _Folding, event: Event | UnknownEvent) -> None:
    """One event's effect on the builder."""
    match event:
        case UnknownEvent(type=event_type):
            f.newer_event = event_type
        case TaskCreated(prompt=prompt):
            f.config = event
            if prompt:
                _open_turn(f, prompt)
        case CallRequested():
            job_fold.request_call(f, event)
        case MessageTaken(inbox_id=inbox_id, text=text):
            f.taken.add(inbox_id)
            _open_turn(f, text)
        case ModelCalled() | ModelCallCut() | ModelReplied() | ModelFailed():
            _apply_model(f, event)
        case (
            ToolStarted()
            | ToolFinished()
            | AttemptFailed()
            | ToolResultCorrected()
            | ToolWaiting()
            | ToolAnswered()
        ):
            _apply_tool(f, event)
        case BudgetExceeded():
            task_spend.refused(f, event)
        case PluginsPinned(pins=pins):
            f.pins = pins
        case JobStarted(job_id=job_id):
            f.jobs = (*f.jobs, job_id)
        case JobFinished() | JobLost() | JobStopped():
            _end_job(f, event)
        case WakeupScheduled() | WokenUp():
            _apply_wakeup(f, event)
        case SubtaskOf() | SubtaskLaunched() | SubtaskReturned():
            _apply_subtask(f, event)
        case CanvasRequested(spec=spec):
            f.canvas = spec
        case PluginRecord(plugin=plugin, data=data):
            others = tuple(record for record in f.plugin_records if record[0] != plugin)
            f.plugin_records = (*others, (plugin, data))
        case TurnEnded(outcome=outcome, answer=answer, error=error):
            internal = error.startswith("internal_error")
            f.turn_open = False
            _reset_model_attempts(f)
            f.truncated_in_row = f.empty_in_row = 0
            f.calls = ()
            f.internal_errors_in_row = f.internal_errors_in_row + 1 if internal else 0
            f.last_answer, f.last_turn_outcome, f.last_turn_error = answer, outcome, error
            f.started, f.results = {}, []  # not the start's copied to be emptied
            f.approved, f.waiting_call, f.waiting_input = (), "", ()
        case TaskFinished(status=status):
            f.finished = status
            f.turn_open = False
        case _:
            assert_never(event)


def _apply_tool(
    f: _Folding,
    event: ToolStarted
    | ToolFinished
    | AttemptFailed
    | ToolResultCorrected
    | ToolWaiting
    | ToolAnswered,
) -> None:
    match event:
        case ToolStarted(call_id=call_id, trace=trace):
            f.started[call_id] = f.started.get(call_id, 0) + 1
            f.trace = trace or f.trace
            if f.job:
                f.attempts, f.retry_at = f.attempts + 1, ""
        case AttemptFailed(call_id=call_id, retry_at=retry_at):
            f.started.pop(call_id, None)  # it ended: not half done
            f.retry_at = retry_at
        case ToolFinished(call_id=call_id, content=content, is_error=is_error):
            f.started.pop(call_id, None)
            if event.recovery == "unknown":
                f.settled_unknown = (*f.settled_unknown, call_id)
            f.results.append(ToolResult(call_id, content, is_error))
            if f.job:
                job_fold.end_job_call(f, content, is_error)
            elif len(f.results) == len(f.calls):
                _hand_results_to_model(f)
        case ToolResultCorrected(call_id=call_id, content=content, is_error=is_error):
            f.settled_unknown = tuple(c for c in f.settled_unknown if c != call_id)
            kind = "error" if is_error else "result"
            note = RESULT_CORRECTED.format(call_id=call_id, kind=kind, content=content)
            f.messages.append(Message("user", (Text(note),)))
        case ToolWaiting(call_id=call_id, input=input, question=question):
            f.waiting_call, f.waiting_question = call_id, question
            f.waiting_input = tuple(input.items())
        case ToolAnswered(call_id=call_id, decision=decision, note=note, inbox_id=inbox_id):
            f.taken.add(inbox_id)
            if call_id == BUDGET_CALL:
                task_spend.answered(f, decision, note)
            elif decision == "allow":
                f.approved = (*f.approved, (call_id, f.waiting_input))
            else:
                denial = f"A person denied this call{': ' + note if note else '.'}"
                f.results.append(ToolResult(call_id, denial, True))
            f.waiting_call, f.waiting_input, f.waiting_question = "", (), ""
            if len(f.results) == len(f.calls):
                _hand_results_to_model(f)


def _apply_wakeup(f: _Folding, event: WakeupScheduled | WokenUp) -> None:
    match event:
        case WakeupScheduled(wakeup_id=wakeup_id, due=due, prompt=prompt):
            # ISO 8601 in UTC sorts as time does: the first pending is the next due.
            f.wakeups = tuple(sorted((*f.wakeups, (wakeup_id, due, prompt)), key=itemgetter(1)))
        case WokenUp(wakeup_id=wakeup_id):
            woken = next((w for w in f.wakeups if w[0] == wakeup_id), None)
            if woken is None:
                f.unreadable = f"WokenUp {wakeup_id} has no pending wake-up"
                return
            f.wakeups = tuple(w for w in f.wakeups if w[0] != wakeup_id)
            _open_turn(f, WOKEN_UP.format(due=woken[1], prompt=woken[2]))


def _apply_subtask(f: _Folding, event: SubtaskOf | SubtaskLaunched | SubtaskReturned) -> None:
    match event:
        case SubtaskOf(parent=parent, call_id=call_id, depth=depth, trace=trace):
            f.parent, f.parent_call, f.depth, f.parent_trace = parent, call_id, depth, trace
        case SubtaskLaunched(call_id=call_id, child_id=child_id):
            # The call is not half done: it waits for the child's handback.
            f.started.pop(call_id, None)
            f.subtasks[child_id] = (call_id, child_id, f.replies)
            f.children += 1
            f.turn_children += 1
        case SubtaskReturned(child_id=child_id, status=status, inbox_id=inbox_id):
            f.taken.add(inbox_id)
            launched = f.subtasks.pop(child_id, None)
            if f.canvas is not None:  # a member's end is the canvas's to weigh (ADR-0104)
                call = launched[0] if launched else ""
                f.canvas_results.append((call, status, event.report))
            if event.tokens or event.cost:
                task_spend.returned(f, event)


def _end_job(f: _Folding, event: JobFinished | JobLost | JobStopped) -> None:
    """A job's end, once: a result or a loss opens a turn to tell the model; a job
    stopped because its task ended tells no one."""
    f.jobs = tuple(job for job in f.jobs if job != event.job_id)
    match event:
        case JobFinished(job_id=job_id, exit_code=code, output=output, inbox_id=inbox_id):
            f.taken.add(inbox_id)
            ended = "was killed" if code is None else f"exited with code {code}"
            _open_turn(f, f"[noeta] Background job {job_id} {ended}. Its output:\n{output}")
        case JobLost(job_id=job_id):
            _open_turn(f, JOB_LOST.format(job_id=job_id))
        case JobStopped():
            pass


def _open_turn(f: _Folding, text: str) -> None:
    f.messages.append(Message("user", (Text(text),)))
    f.turn += 1
    f.turn_open = True
    f.turn_children = 0


def _apply_model(
    f: _Folding, event: ModelCalled | ModelCallCut | ModelReplied | ModelFailed
) -> None:
    match event:
        case ModelCalled(trace=trace):
            f.first_request = f.first_request or event.request_sha256
            f.model_attempts += 1
            f.model_call_open = f.last_seq
            f.trace = trace or f.trace
            task_spend.called(f, event)
        case ModelCallCut(cause=cause):
            # Why the open call got no reply (ADR-0080): only a "call" cut is the model's.
            task_spend.cut(f, cause)
            f.model_call_open = 0
            f.model_workers_lost += cause == "worker_lost"
            f.model_calls_unsent += cause == "not_sent"
        case ModelReplied():
            _take_reply(f, event)
        case ModelFailed():
            _reset_model_attempts(f)


def _reset_model_attempts(f: _Folding) -> None:
    f.model_attempts = f.model_workers_lost = f.model_calls_unsent = f.model_call_open = 0
    f.first_request = ""


def _take_reply(f: _Folding, reply: ModelReplied) -> None:
    _reset_model_attempts(f)
    task_spend.replied(f, reply)
    f.replies += 1
    # A blank block (older logs hold some) is left out: Anthropic refuses it re-sent.
    texts = tuple(
        block for block in reply.content if isinstance(block, Text) and block.text.strip()
    )
    calls = tuple(block for block in reply.content if isinstance(block, ToolCall))
    if reply.stop_reason == "max_tokens":
        # A cut-off reply's tool calls may be incomplete: keep its text, ask to go on.
        if texts:
            f.messages.append(Message("assistant", texts))
        f.messages.append(Message("user", (Text(CONTINUE_AFTER_TRUNCATION),)))
        f.truncated_in_row += 1
        f.calls = ()
        return
    if not texts and not calls:
        # Nothing to keep: an empty assistant message is not a valid request either.
        f.empty_in_row += 1
        f.calls = ()
        return
    f.messages.append(Message("assistant", texts + calls))
    f.results = []
    f.truncated_in_row = f.empty_in_row = 0
    f.calls = calls
    f.last_answer = "\n".join(block.text for block in texts)


def _hand_results_to_model(f: _Folding) -> None:
    """Every call of the reply is settled: its results go back to the model, in call order."""
    order = {call.id: index for index, call in enumerate(f.calls)}
    results = sorted(f.results, key=lambda result: order.get(result.call_id, len(order)))
    f.messages.append(Message("user", tuple(results)))
    f.results.clear()
    f.calls = ()
