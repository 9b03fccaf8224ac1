"""`fold(events) -> TaskState`: everything a worker needs to know about a task, from its log.

Pure: no I/O, no clock, no randomness. Recovery is folding: a claimer that finds a
ModelCalled without a reply, or a ToolStarted without a finish, learns it here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import assert_never

from noeta.core.events import (
    Event,
    MessageTaken,
    ModelCalled,
    ModelFailed,
    ModelReplied,
    TaskCreated,
    TaskFinished,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UnknownEvent,
)
from noeta.core.model import Message, Text, ToolCall, ToolResult

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


@dataclass(frozen=True, slots=True)
class TaskState:
    config: TaskCreated | None = None
    last_seq: int = 0
    messages: tuple[Message, ...] = ()  # the conversation the next request is built from
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
    newer_event: str = ""  # the type of an event from a newer noeta: stop here
    unreadable: str = ""  # why the log cannot be folded (a gap in seq, …)

    def starts(self, call_id: str) -> int:
        return dict(self.started).get(call_id, 0)


@dataclass
class _Folding:
    """The mutable builder behind `fold`: linear in the log's length."""

    state: TaskState
    messages: list[Message] = field(default_factory=list)
    started: dict[str, int] = field(default_factory=dict)
    results: list[ToolResult] = field(default_factory=list)
    taken: set[int] = field(default_factory=set)


def fold(events: Iterable[LoggedEvent], start: TaskState | None = None) -> TaskState:
    """Fold `events` (in seq order, following `start` if given) into a state."""
    base = start or TaskState()
    folding = _Folding(
        state=base,
        messages=list(base.messages),
        started=dict(base.started),
        results=list(base.results),
        taken=set(base.taken_inbox),
    )
    for logged in events:
        if folding.state.newer_event or folding.state.unreadable:
            break
        if logged.seq != folding.state.last_seq + 1:
            folding.state = replace(
                folding.state,
                unreadable=f"the log jumps from seq {folding.state.last_seq} to {logged.seq}",
            )
            break
        folding.state = replace(folding.state, last_seq=logged.seq)
        _apply(folding, logged.event)
    return replace(
        folding.state,
        messages=tuple(folding.messages),
        started=tuple(folding.started.items()),
        results=tuple(folding.results),
        taken_inbox=frozenset(folding.taken),
    )


def _apply(folding: _Folding, event: Event | UnknownEvent) -> None:
    state = folding.state
    match event:
        case UnknownEvent(type=event_type):
            folding.state = replace(state, newer_event=event_type)
        case TaskCreated(prompt=prompt):
            folding.state = replace(state, config=event)
            if prompt:
                _open_turn(folding, prompt)
        case MessageTaken(inbox_id=inbox_id, text=text):
            folding.taken.add(inbox_id)
            _open_turn(folding, text)
        case ModelCalled():
            folding.state = replace(state, model_attempts=state.model_attempts + 1)
        case ModelReplied():
            _take_reply(folding, event)
        case ModelFailed():
            folding.state = replace(state, model_attempts=0)
        case ToolStarted(call_id=call_id):
            folding.started[call_id] = folding.started.get(call_id, 0) + 1
        case ToolFinished(call_id=call_id, content=content, is_error=is_error):
            folding.started.pop(call_id, None)
            folding.results.append(ToolResult(call_id, content, is_error))
            if len(folding.results) == len(state.calls):
                _hand_results_to_model(folding)
        case TurnEnded(outcome=outcome, answer=answer, error=error):
            internal = error.startswith("internal_error")
            folding.state = replace(
                state,
                turn_open=False,
                model_attempts=0,
                truncated_in_row=0,
                empty_in_row=0,
                calls=(),
                internal_errors_in_row=state.internal_errors_in_row + 1 if internal else 0,
                last_answer=answer,
                last_turn_outcome=outcome,
                last_turn_error=error,
            )
            folding.started.clear()
            folding.results.clear()
        case TaskFinished(status=status):
            folding.state = replace(state, finished=status, turn_open=False)
        case _:
            assert_never(event)


def _open_turn(folding: _Folding, text: str) -> None:
    folding.messages.append(Message("user", (Text(text),)))
    folding.state = replace(folding.state, turn=folding.state.turn + 1, turn_open=True)


def _take_reply(folding: _Folding, reply: ModelReplied) -> None:
    state = replace(folding.state, model_attempts=0, replies=folding.state.replies + 1)
    texts = tuple(block for block in reply.content if isinstance(block, Text) and block.text)
    calls = tuple(block for block in reply.content if isinstance(block, ToolCall))
    if reply.stop_reason == "max_tokens":
        # A cut-off reply's tool calls may be incomplete: keep its text, ask to go on.
        if texts:
            folding.messages.append(Message("assistant", texts))
        folding.messages.append(Message("user", (Text(CONTINUE_AFTER_TRUNCATION),)))
        folding.state = replace(state, truncated_in_row=state.truncated_in_row + 1, calls=())
        return
    if not texts and not calls:
        # Nothing to keep: an empty assistant message is not a valid request either.
        folding.state = replace(state, empty_in_row=state.empty_in_row + 1, calls=())
        return
    folding.messages.append(Message("assistant", texts + calls))
    folding.results.clear()
    folding.state = replace(
        state,
        truncated_in_row=0,
        empty_in_row=0,
        calls=calls,
        last_answer="\n".join(block.text for block in texts),
    )


def _hand_results_to_model(folding: _Folding) -> None:
    """Every call of the reply is settled: its results go back to the model, in call order."""
    order = {call.id: index for index, call in enumerate(folding.state.calls)}
    results = sorted(folding.results, key=lambda result: order.get(result.call_id, len(order)))
    folding.messages.append(Message("user", tuple(results)))
    folding.results.clear()
    folding.state = replace(folding.state, calls=())
