"""Forking a task (ADR-0091): a new task whose log is a copy of another's through one step,
plus what the user changed (a message, a replacement for a model reply, another model).
Nothing in the copy runs again: the fork's worker folds it as a log it had written itself,
and its calls' idempotency keys are its own (`<task id>:<call id>`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from noeta.client.creating import create_once
from noeta.core.errors import ConfigError, UnknownTask
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import NewEvent, NewTask, Store, StoredEvent
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import (
    CallModel,
    EndTurn,
    FinishTask,
    RunTools,
    Stop,
    next_action,
)
from noeta.core.rules.task_state import TaskState

# Written with a task's creation, never split from its TaskCreated.
_CREATION_COMPANIONS = {"SubtaskOf", "CallRequested"}
NEAREST_SHOWN = 3  # valid seqs named on each side of a refused one
WORKSPACE_CHOICES = ("fresh", "copy")


class ForkRefused(ConfigError):
    """The fork cannot be made as asked: nothing was written."""


@dataclass(frozen=True, slots=True)
class ForkChange:
    """What the fork changes: at most one of `message` and `reply`; `model` for the calls
    that follow (the source's model if None)."""

    message: str | None = None
    reply: events.ModelReplied | None = None
    model: str | None = None
    # "copy": the fork starts in a copy of the source's workspace as it is when the fork
    # first runs (its worker makes it, ADR-0096); "fresh": an empty one.
    workspace: str = "fresh"

    def __post_init__(self) -> None:
        check_one_change(self.message, self.reply)
        if self.workspace not in WORKSPACE_CHOICES:
            raise ForkRefused(
                f"a fork's workspace is {' or '.join(WORKSPACE_CHOICES)}, not {self.workspace!r}"
            )


def check_one_change(message: object, reply: object) -> None:
    if message is not None and reply is not None:
        raise ForkRefused("a fork takes a new message or a replacement reply, not both")


def forked_events(
    source: str, log: Sequence[StoredEvent], at: int, change: ForkChange
) -> list[NewEvent]:
    """The fork's first events: `log` (the source's) through seq `at`, re-stamped, with
    `change` applied. Raises ForkRefused naming the reason and the valid seqs near `at`."""
    if isinstance(at, bool) or not isinstance(at, int):
        raise ForkRefused(f"a fork point is a seq (an integer), not {at!r}")
    last = log[-1].seq if log else 0
    if not 1 <= at <= last:
        raise ForkRefused(f"seq {at} is not in task {source}'s log (seqs 1 to {last})")
    decoded = [LoggedEvent(e.seq, _decoded(e)) for e in log[:at]]
    if change.reply is not None:
        if log[at - 1].type != "ModelReplied":
            raise ForkRefused(
                f"seq {at} is a {log[at - 1].type}, not a model reply: --reply-file replaces "
                f"the reply at a seq; the replies are at {_replies(log)}"
            )
        decoded[-1] = LoggedEvent(at, change.reply)
    state = fold(decoded)
    reason = why_not_a_fork_point(state, log, at, change)
    if reason:
        raise ForkRefused(f"cannot fork task {source} at seq {at}: {reason}{_nearest(log, at)}")
    copied = [_copied(source, e, at, change) for e in log[:at] if e.type != "SubtaskOf"]
    if change.reply is not None:
        copied[-1] = NewEvent(*events.encode(change.reply))
    if change.message is not None:
        copied.append(NewEvent(*events.encode(events.MessageTaken(0, change.message))))
    return copied


def why_not_a_fork_point(
    state: TaskState, log: Sequence[StoredEvent], at: int, change: ForkChange
) -> str:
    """Why the log folded through `at` is not a step boundary to continue from ("" if it
    is one): a fork must start where a worker could have stopped and another gone on,
    owning nothing that belongs to the source task."""
    if state.newer_event:
        return f"the log holds a {state.newer_event} event from a newer noeta"
    if state.unreadable:
        return state.unreadable
    if at < len(log) and log[at].type in _CREATION_COMPANIONS:
        return "it splits the task's creation from its first events"
    if state.finished:
        return "it is the task's finish; fork at an earlier step"
    if state.model_call_open:
        return "a model call is awaiting its reply there; fork before the call or after it"
    if state.started:
        call_id = state.started[0][0]
        name = next((c.name for c in state.calls if c.id == call_id), "a tool")
        return (
            f"it would cut tool call {call_id} ({name}) in half: started, not finished; "
            "fork before it started or after it finished"
        )
    if state.jobs:
        return f"background job {state.jobs[0]} is running there and belongs to the source task"
    if state.subtasks:
        return f"subtask {state.subtasks[0][1]} has not handed back there"
    if state.wakeups:
        return f"a wake-up ({state.wakeups[0][0]}) is pending there"
    if change.message is not None and state.turn_open:
        return "a message starts a turn, and a turn is open there; fork it where a turn ended"
    return ""


def parse_reply(text: str) -> events.ModelReplied:
    """A replacement reply from JSON: {"content": [{"type": "text", "text": …} |
    {"type": "tool_call", "id": …, "name": …, "input": {…}}, …], "stop_reason": …}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ForkRefused(f"the reply is not JSON: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ForkRefused('the reply must be a JSON object with a "content" list')
    calls = any(isinstance(b, dict) and b.get("type") == "tool_call" for b in data["content"])
    stored: dict[str, JSONValue] = {
        "v": events.ENCODING_VERSION,
        "content": data["content"],
        "stop_reason": data.get("stop_reason", "tool_use" if calls else "end_turn"),
    }
    try:
        reply = events.decode("ModelReplied", stored)
    except (ValueError, KeyError, TypeError) as error:
        raise ForkRefused(f"the reply is not a valid model reply: {error}") from None
    if not isinstance(reply, events.ModelReplied) or not reply.content:
        raise ForkRefused("the reply has no content")
    return reply


def _decoded(stored: StoredEvent) -> events.Event | events.UnknownEvent:
    try:
        return events.decode(stored.type, stored.data)
    except ValueError as error:
        raise ForkRefused(f"the log is unreadable at seq {stored.seq}: {error}") from None


def _copied(source: str, stored: StoredEvent, at: int, change: ForkChange) -> NewEvent:
    if stored.type != "TaskCreated":
        return NewEvent(stored.type, stored.data)
    created = _decoded(stored)
    assert isinstance(created, events.TaskCreated)  # the fold read it
    # A fork of a fork copies the workspace it is told to, never its source's source's.
    copied_from = source if change.workspace == "copy" else ""
    created = replace(created, forked_from=source, forked_at=at, workspace_from=copied_from)
    if change.model is not None:
        created = replace(created, model=change.model)
    return NewEvent(*events.encode(created))


def _replies(log: Sequence[StoredEvent]) -> str:
    seqs = [str(e.seq) for e in log if e.type == "ModelReplied"]
    return ", ".join(seqs) if seqs else "none"


def _nearest(log: Sequence[StoredEvent], at: int) -> str:
    """ "; valid seqs near it: …" (the closest fork points below and above `at`)."""
    valid = fork_points(log)
    below = [seq for seq in valid if seq < at][-NEAREST_SHOWN:]
    above = [seq for seq in valid if seq > at][:NEAREST_SHOWN]
    near = below + above
    return f"; fork points near it: {', '.join(map(str, near))}" if near else ""


def last_good_step(log: Sequence[StoredEvent], *, new_work: bool = False) -> int | None:
    """Where a retry of a failed or cancelled task forks: the last fork point from which
    this code would do work (call the model, run a tool, end a turn with an answer), not
    end the task or fail its turn again; None if there is none. With `new_work` (a done
    task run again): only where it calls the model or runs a tool, since ending a turn
    with the answer it gave would run nothing again."""
    good = None
    state = TaskState()
    for stored in log:
        state = fold([LoggedEvent(stored.seq, _decoded(stored))], state)
        if why_not_a_fork_point(state, log, stored.seq, ForkChange()):
            continue
        action = next_action(state)
        failing = isinstance(action, EndTurn) and action.outcome == "failed"
        if new_work and not isinstance(action, CallModel | RunTools):
            continue
        if not isinstance(action, FinishTask | Stop) and not failing:
            good = stored.seq
    return good


def fork_points(log: Sequence[StoredEvent]) -> list[int]:
    """Every seq of `log` a fork without a change may start from, in order."""
    points = []
    state = TaskState()
    for stored in log:
        state = fold([LoggedEvent(stored.seq, _decoded(stored))], state)
        if not why_not_a_fork_point(state, log, stored.seq, ForkChange()):
            points.append(stored.seq)
    return points


async def fork(
    store: Store,
    source: str,
    at: int,
    *,
    new_id: str,
    queue: str | None,
    change: ForkChange,
) -> NewTask:
    """Create the fork of task `source` at seq `at` (one create: the whole copy or
    nothing) and return it. Reads a committed prefix, so a running source may be forked."""
    record = await store.get_task(source)
    if record is None:
        raise UnknownTask(source)
    log = await store.read_log(source)
    copied = forked_events(source, log, at, change)
    task = NewTask(new_id, copied, queue=record.queue if queue is None else queue)
    await create_once(store, task)
    return task
