"""What the live status line of `noeta run` and `noeta tail` says: the task's log folded
as it grows, read with the worker's own `fold` and `next_action` (so the line says what a
worker would do next), plus the model retries this process itself sees."""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime

from noeta.core.retry import ModelRetry
from noeta.core.rules import events as ev
from noeta.core.rules.canvas import AwaitMembers, LaunchMembers
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import (
    Action,
    AwaitAnswer,
    AwaitMessage,
    AwaitRetry,
    AwaitSubtasks,
    CallModel,
    EndTurn,
    FindWhyCut,
    FinishTask,
    LeaveForNewerVersion,
    LeaveUnreadable,
    RecoverCalls,
    RunTools,
    Stop,
    next_action,
)
from noeta.core.rules.task_state import TaskState

SEPARATOR = " | "  # ASCII: a terminal set to LANG=C must be able to print it
# Events that start a new activity even when the words stay the same (a second model
# call, a second run of the same tool): its elapsed time starts again.
RESTARTS = (ev.ModelCalled, ev.ToolStarted)
WAITS = (
    AwaitMessage,
    AwaitAnswer,
    AwaitSubtasks,
    AwaitRetry,
)  # what a worker hands a task back for


@dataclass(frozen=True, slots=True)
class Written:
    """One event of a task's log: when it was written (None: just now), and the claim
    that wrote it (epoch 0 and no owner for the events a task was created with)."""

    seq: int
    event: ev.Event | ev.UnknownEvent
    at: datetime | None = None
    epoch: int = 0
    owner: str | None = None


class TaskProgress:
    """A task as far as its log has been read: what it is doing, and since when."""

    def __init__(self) -> None:
        self.state = TaskState()
        self.activity = "starting"
        self.timed = False  # whether the activity shows an elapsed time that ticks
        self.since = time.time()  # when the activity began (wall clock: the log's times are)
        self.turn = 0
        self.replies_before_turn = 0  # the model's replies in the log when the turn opened
        self.step = 0
        self.epoch = 0
        self.takeover = ""
        self.action: Action = Stop()
        self.retry: ModelRetry | None = None
        self.retry_at = 0.0  # monotonic: when the retry was announced, for its countdown

    def add(self, written: Written) -> None:
        """Fold the next event of the log."""
        seq, event, epoch, owner = written.seq, written.event, written.epoch, written.owner
        if seq <= self.state.last_seq:
            return  # read twice (a follow that re-reads): already folded
        self.state = fold([LoggedEvent(seq, event)], self.state)
        if self.state.turn != self.turn:
            self.turn, self.replies_before_turn = self.state.turn, self.state.replies
        if epoch:
            if self.epoch and epoch != self.epoch:
                # A task handed back while it waited is resumed; one cut off mid-work is
                # taken over (its lease lapsed, or its worker gave it up).
                how = "resumed" if isinstance(self.action, WAITS) else "taken over"
                self.takeover = f"{how} by {owner or 'another worker'} (epoch {epoch})"
            self.epoch = epoch
        action = self.action = next_action(self.state)
        # A step is one model call and the tools its reply called.
        replies = self.state.replies - self.replies_before_turn
        self.step = replies + 1 if isinstance(action, CallModel | FindWhyCut) else max(replies, 1)
        activity, timed = self._activity(action)
        if activity != self.activity or isinstance(event, RESTARTS):
            self.activity, self.timed = activity, timed
            self.since = (written.at or datetime.now(UTC)).timestamp()
            self.retry = None

    def retried(self, retry: ModelRetry) -> None:
        """The model call in flight failed an attempt and is sent again after a wait."""
        self.retry = retry
        self.retry_at = time.monotonic()

    @property
    def ticking(self) -> bool:
        """Whether the line changes with time alone (an elapsed time, a countdown)."""
        return self.timed or self.retry is not None

    def line(self) -> str:
        """The status line as it reads now (one line, printable characters only)."""
        # Most telling first: a narrow terminal cuts the end. (The task's id is the one
        # the user gave or is told at the end, so it is not repeated here.)
        parts = [f"turn {self.turn} step {self.step}"] if self.turn else []
        activity = self.activity
        if self.timed:
            activity += " " + elapsed(time.time() - self.since)
        parts.append(activity)
        if self.retry is not None:
            parts.append(self._retry_words(self.retry))
        if self.takeover:
            parts.append(self.takeover)
        return printable(SEPARATOR.join(parts))

    def _retry_words(self, retry: ModelRetry) -> str:
        following = f"attempt {retry.attempt + 1}/{retry.max_attempts}"
        left = retry.wait_seconds - (time.monotonic() - self.retry_at)
        if left >= 0.05:  # "in 0.0s" would be a wait that is over
            return f"{retry.reason}, {following} in {left:.1f}s"
        return f"{retry.reason}, {following}"

    def _activity(self, action: Action) -> tuple[str, bool]:
        """The words for what the task does now, and whether they take an elapsed time."""
        state = self.state
        match action:
            case Stop():
                return state.finished, False
            case FindWhyCut():  # sent and not yet answered, or cut off
                return "model call", True
            case CallModel() if state.model_attempts:
                return "model call", True
            case CallModel():
                return "calling the model", False
            case RecoverCalls(calls=calls):  # started, not finished: running (or cut off)
                return "tool " + ", ".join(call.name for call, _ in calls), True
            case RunTools(calls=calls) if calls:
                return "tool " + calls[0].name, True
            case RunTools():
                return "tools done", False
            case AwaitRetry(calls=calls, due=due):
                return f"{calls[0].name}: attempt {state.attempts + 1} due {due}", True
            case AwaitAnswer(call_id=call_id):
                name = next((c.name for c in state.calls if c.id == call_id), call_id)
                return f"waiting for an answer about {name} (noeta answer)", True
            case AwaitSubtasks(children=children):
                return f"waiting for {_count(len(children), 'subtask')}", True
            case LaunchMembers() | AwaitMembers():  # a canvas (ADR-0104)
                return f"waiting for {_count(len(state.subtasks), 'member')}", True
            case AwaitMessage() if state.wakeups:
                return f"waiting for a timer due {state.wakeups[0][1]}", True
            case AwaitMessage() if state.jobs:
                return f"waiting for {_count(len(state.jobs), 'job')}", True
            case AwaitMessage():
                return "waiting for a message", True
            case EndTurn() | FinishTask():
                return "finishing", False
            case LeaveForNewerVersion(event_type=event_type):
                return f"written by a newer noeta ({event_type})", False
            case LeaveUnreadable(reason=reason):
                return f"log unreadable: {reason}", False


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def elapsed(seconds: float) -> str:
    """3.4s, 1m05s, 2h03m: short, and not jumping in width every tenth."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def printable(text: str) -> str:
    """`text` without control characters: a tool name comes from the model, and an escape
    sequence in it must not reach the terminal."""
    return "".join(c if c.isprintable() else "?" for c in text)


def fit(text: str, columns: int) -> str:
    """`text` cut to `columns` terminal cells (a wide character takes two)."""
    used = 0
    for index, character in enumerate(text):
        used += 2 if unicodedata.east_asian_width(character) in "WF" else 1
        if used > columns:
            return text[:index]
    return text
