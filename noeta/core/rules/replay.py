"""Replaying a log against this code (`noeta replay`, issue 30 item 2): does this noeta
read every event, fold the log, and — at each step — call for what the log records next?
A log this code would have continued differently is what a deploy must not meet by
surprise (Temporal's replayer, for noeta). Pure: no I/O, like the fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from noeta.core.ports.store import StoredEvent
from noeta.core.rules import canvas, events
from noeta.core.rules import next_action as actions
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.task_state import TaskState

# What may follow whatever the log called for: a pin (a claimer's plugins), a plugin's
# record, a turn failed by an internal error, a late tool result's correction before the
# next model call. A finish too, unless it says done (a cancel, a failure: `_finish_ok`).
ANY_TIME = frozenset({"PluginsPinned", "PluginRecord", "TurnEnded", "ToolResultCorrected"})
# Written with the task's creation, after its TaskCreated (a canvas member's SubtaskOf
# after its pin, ADR-0104).
AT_CREATION = frozenset({"SubtaskOf", "CallRequested", "CanvasRequested"})
CREATION = AT_CREATION | {"TaskCreated", "PluginsPinned"}
# Written in one append right after another event (the log keeps no append boundaries):
# a wake-up or a job with the call that made it. (An Agent call's launch follows its
# start, maybe after other calls' starts: `_parts_from` checks that its call started.)
COMPANIONS: dict[str, frozenset[str]] = {
    "WakeupScheduled": frozenset({"ToolStarted", "ToolFinished"}),
    "JobStarted": frozenset({"ToolStarted", "ToolFinished"}),
}
RECORDS_NEXT: dict[type, frozenset[str]] = {
    actions.CallModel: frozenset({"ModelCalled", "ModelFailed", "BudgetExceeded"}),
    actions.FindWhyCut: frozenset({"ModelCallCut", "ModelReplied", "ModelFailed"}),
    actions.RunTools: frozenset(
        {
            "ToolStarted",
            "ToolFinished",
            "ToolWaiting",
            "SubtaskLaunched",
            "JobStarted",
            "WakeupScheduled",
            "ModelCalled",
        }
    ),
    actions.RecoverCalls: frozenset({"ToolFinished", "ToolStarted", "JobStopped", "AttemptFailed"}),
    actions.AwaitRetry: frozenset({"ToolStarted", "ToolFinished"}),
    actions.AwaitAnswer: frozenset({"ToolAnswered"}),
    actions.AwaitSubtasks: frozenset({"SubtaskReturned", "ToolFinished"}),
    actions.EndTurn: frozenset(),
    actions.FinishTask: frozenset({"JobStopped"}),
    actions.AwaitMessage: frozenset(
        {"MessageTaken", "JobFinished", "JobLost", "JobStopped", "WokenUp", "SubtaskReturned"}
    ),
    actions.Stop: frozenset(),
    # A canvas's step takes its members' ends, then launches those they let start
    # (`SubtaskLaunched` is checked against the launches due, `_parts_from`).
    canvas.LaunchMembers: frozenset({"SubtaskReturned"}),
    canvas.AwaitMembers: frozenset({"SubtaskReturned"}),
}


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where this code parts from a log: the seq and what differs."""

    seq: int
    what: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


def replay(log: Sequence[StoredEvent]) -> Divergence | None:
    """The first place this code parts from `log`, or None if it reads and folds the whole
    log and every recorded step is one this code's `next_action` could have taken."""
    if not log:
        return Divergence(0, "the log is empty")
    state = TaskState()
    forked = False
    creating = True  # every event so far was written with the task's creation
    previous = ""
    for stored in log:
        try:
            event = events.decode(stored.type, stored.data)
        except ValueError as error:
            return Divergence(stored.seq, f"this noeta cannot read it: {error}")
        if isinstance(event, events.UnknownEvent):
            return Divergence(
                stored.seq,
                f"a {event.type} event (encoding {event.version}) this noeta does not know: "
                "written by a newer one",
            )
        creating = creating and stored.type in CREATION
        if stored.seq > 1 and previous not in COMPANIONS.get(stored.type, ()):
            parted = _parts_from(state, stored, event, forked, creating)
            if parted:
                return Divergence(stored.seq, parted)
        previous = stored.type
        state = fold([LoggedEvent(stored.seq, event)], state)
        if state.unreadable:
            return Divergence(stored.seq, state.unreadable)
        forked = forked or (isinstance(event, events.TaskCreated) and bool(event.forked_from))
    return None


def _parts_from(
    state: TaskState, stored: StoredEvent, event: events.Event, forked: bool, creating: bool
) -> str:
    """Why `event` is not a step this code could have written after `state` ("" if it is);
    `creating`: it and every event before it are of the kinds a creation writes."""
    if state.config is None:
        return "the log does not start with TaskCreated"
    if stored.type in AT_CREATION and creating:
        return ""
    if forked and isinstance(event, events.MessageTaken) and event.inbox_id == 0:
        return ""  # a fork's message: the user's change, not a step (ADR-0091)
    if isinstance(event, events.SubtaskLaunched) and state.canvas is not None:
        due = canvas.next_step(state)
        if isinstance(due, canvas.LaunchMembers) and any(
            member.call_id == event.call_id for member in due.members
        ):
            return ""
        return f"member {event.call_id} is launched where this noeta would not launch it"
    if isinstance(event, events.SubtaskLaunched):
        if state.starts(event.call_id):
            return ""
        return f"subtask {event.child_id} is launched by call {event.call_id}, not started"
    action = actions.next_action(state)
    if isinstance(action, actions.Stop):
        return f"a {stored.type} after the task's finish"
    allowed = RECORDS_NEXT.get(type(action), frozenset())
    if stored.type in allowed or stored.type in ANY_TIME:
        return ""
    if isinstance(event, events.TaskFinished) and (
        event.status != "done" or isinstance(action, actions.FinishTask)
    ):
        return ""
    return f"the log records a {stored.type} where this noeta would {_described(action)}"


def _described(action: actions.Action) -> str:
    match action:
        case actions.CallModel():
            return "call the model"
        case actions.FindWhyCut(seq=seq):
            return f"find why the model call at seq {seq} was cut"
        case actions.RunTools(calls=calls):
            return "run " + (", ".join(c.name for c in calls) or "no more tools")
        case actions.RecoverCalls(calls=calls):
            return "settle the half-done " + ", ".join(c.name for c, _ in calls)
        case actions.AwaitRetry(due=due):
            return f"wait for the job's next attempt, due {due}"
        case actions.AwaitAnswer(call_id=call_id):
            return f"wait for the answer about call {call_id}"
        case actions.AwaitSubtasks():
            return "wait for its subtasks"
        case actions.EndTurn(outcome=outcome):
            return f"end the turn ({outcome})"
        case actions.FinishTask(status=status):
            return f"finish the task ({status})"
        case actions.AwaitMessage():
            return "wait for a message"
        case canvas.LaunchMembers(members=members):
            return "launch " + ", ".join(member.call_id for member in members)
        case canvas.AwaitMembers():
            return "wait for its members"
        case _:
            return type(action).__name__
