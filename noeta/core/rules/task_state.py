"""`TaskState`: what a worker knows of a task, folded from its log (`fold.py` builds it).

A plain frozen value: snapshots store it, `next_action` reads it, the runner keeps it current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from noeta.core.ports.model import Message, ToolCall, ToolResult
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.pin import Pin
from noeta.core.rules.events import TaskCreated


# Not `slots=True`: a fold makes a state per append from the one before, and a state of
# sixty fields kept in a dict is made from a copy of that one's dict (`state_of`,
# ADR-0149), where slots take sixty descriptor calls.
@dataclass(frozen=True)
class TaskState:
    config: TaskCreated | None = None
    last_seq: int = 0
    messages: Sequence[Message] = ()  # the conversation the next request is built from
    turn: int = 0  # turns started so far
    turn_open: bool = False
    model_attempts: int = 0  # ModelCalled without a reply, in the open turn
    replies: int = 0  # ModelReplied events in the whole log
    truncated_in_row: int = 0
    empty_in_row: int = 0
    internal_errors_in_row: int = 0  # turns in a row that failed with internal_error
    calls: tuple[ToolCall, ...] = ()  # the last reply's tool calls, in order
    started: tuple[tuple[str, int], ...] = ()  # (call id, starts) of unfinished calls
    results: tuple[ToolResult, ...] = ()  # finished calls of the last reply
    last_answer: str = ""
    last_turn_outcome: str = ""
    last_turn_error: str = ""
    finished: str = ""  # "", or the final status
    taken_inbox: frozenset[int] = frozenset()
    waiting_call: str = ""  # a call stopped for a person's answer
    waiting_input: tuple[tuple[str, JSONValue], ...] = ()
    waiting_question: str = ""
    approved: tuple[tuple[str, tuple[tuple[str, JSONValue], ...]], ...] = ()  # allowed asks
    pins: tuple[Pin, ...] = ()
    jobs: tuple[str, ...] = ()  # background jobs started and not yet finished or lost
    wakeups: tuple[tuple[str, str, str], ...] = ()  # (id, due, prompt) pending, by due time
    newer_event: str = ""  # the type of an event from a newer noeta: stop here
    unreadable: str = ""  # why the log cannot be folded (a gap in seq, …)
    trace: str = ""  # the latest span record in the log: how a claimer continues the trace
    parent: str = ""  # the task whose Agent call made this one ("" for a top-level task)
    parent_call: str = ""
    parent_trace: str = ""  # the span record of the parent's Agent call (for a link)
    depth: int = 0  # 0 for a top-level task
    children: int = 0  # subtasks launched over the task's life
    turn_children: int = 0  # subtasks launched in the open (or last) turn
    # Launched and not yet handed back: (call id, child id, the reply that made the call).
    subtasks: tuple[tuple[str, str, int], ...] = ()
    plugin_records: tuple[tuple[str, JSONValue], ...] = ()  # each plugin's latest record
    job: str = ""  # a plain job's tool name ("" for an agent task): its call's result ends it
    # Of the model_attempts, those a claimer found cut by the worker's loss, or never sent
    # (ADR-0080); the rest count towards the model's cap. Last: a snapshot's scalars are
    # positional, and an older snapshot loads with these at their defaults.
    model_workers_lost: int = 0
    model_calls_unsent: int = 0
    model_call_open: int = 0  # the seq of a ModelCalled not yet replied to nor found cut
    # Calls settled "outcome unknown" with no correction yet: a claimer looks for their
    # late results before its next model call (ADR-0083).
    settled_unknown: tuple[str, ...] = ()
    # A plain job's attempts: every ToolStarted of its call, those a crash cut included,
    # so its max_attempts holds across workers; and when its next attempt is due (UTC
    # ISO 8601, store clock; "" none waits).
    attempts: int = 0
    retry_at: str = ""
    # A canvas's tree (CanvasRequested's spec; None for any other task) and its members'
    # ends: (call id, status, report), in the order they came back (ADR-0104).
    canvas: dict[str, JSONValue] | None = None
    canvas_results: tuple[tuple[str, str, str], ...] = ()
    # What the model calls spent, for the task's budget (counted as the ledger counts,
    # after any fork point): (input, output, cache-read, cache-write tokens of the
    # replies, estimated input of requests possibly billed). A reply that said no usage
    # counts its request's estimate as input. `call_estimate`: the open call's estimate.
    spent: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    call_estimate: int = 0
    # `on_budget: ask` (ADR-0107): model calls a person allowed past the budget, not yet
    # made; and, once a person denied one, the task's error.
    budget_allowed: int = 0
    budget_denied: str = ""
    # The open call's request as first sent (its first ModelCalled's request_sha256): a
    # re-send sends those bytes, whichever release's worker recorded them; "" when no
    # call is open.
    first_request: str = ""
    # What the subtasks that drew on this task's budget reported spending when they
    # handed back (ADR-0107): tokens, and USD as a decimal string ("" none, "unknown").
    subtask_tokens: int = 0
    subtask_cost: str = ""

    def starts(self, call_id: str) -> int:
        return dict(self.started).get(call_id, 0)


_new = object.__new__
_set_values = TaskState.__dict__["__dict__"].__set__


def state_of(values: dict[str, Any]) -> TaskState:
    """The state whose fields are `values` (every field, by name, nothing else), as
    `TaskState(**values)` makes it without its `__init__`: the dict is the state's from
    here on, the caller's copy, not changed after (a fold's, ADR-0149)."""
    state = _new(TaskState)
    _set_values(state, values)
    return state
