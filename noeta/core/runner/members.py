"""The runner's canvas steps (ADR-0104): launch the members whose turn has come as subtasks
(each created in the append recording its launch), and take their ends from the inbox.

A member is a plain job made a subtask (`SubtaskOf`): its finishing append hands its result
back through the inbox under its own key, so an end is taken once however often the
canvas's worker dies; a member is created once because its launch and its creation are
one fenced append.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from noeta.core import failpoints
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import (
    Continue,
    InboxEntry,
    NewEvent,
    NewTask,
    NextState,
    StartedBy,
    Wait,
)
from noeta.core.rules import events as ev
from noeta.core.rules import subtasks
from noeta.core.rules.canvas import AwaitMembers, LaunchMembers, MemberLaunch, next_step
from noeta.core.rules.next_action import AwaitSubtasks
from noeta.core.runner import children
from noeta.core.runner.context import RunContext

log = logging.getLogger(__name__)

JOB_CALL_ID = "job"  # a job's one call (as the client's job_tasks names it)


async def advance(
    run: RunContext, action: AwaitSubtasks | LaunchMembers | AwaitMembers, inbox: list[InboxEntry]
) -> bool:
    """One step of a task waiting on subtasks: True to go on, False once it waits."""
    if isinstance(action, AwaitSubtasks):
        return await children.take_handbacks(run, action, inbox)
    return await step(run, inbox)


async def step(run: RunContext, inbox: list[InboxEntry]) -> bool:
    """A canvas's step in one append: take every member's end the inbox holds, launch the
    members whose turn that brings (the next link of a chain), and, when it is left with
    nothing but to wait, the wait itself. True to go on (it ends, or launches more),
    False once it waits. An end delivered meanwhile wakes it again: a wait is claimable
    once its inbox holds a matching entry, whenever it came."""
    returned, taken = _ends(run, inbox)
    written: list[ev.Event] = list(returned)
    following = next_step(run.folded(written))
    new_tasks: list[NewTask] = []
    if isinstance(following, LaunchMembers):
        launched, new_tasks = await _launches(run, following.members)
        written += launched
        # Every member due is launched unless it said more: no second walk to learn that.
        following = next_step(run.folded(written)) if following.more else AwaitMembers()
    waits = isinstance(following, AwaitMembers)
    if waits and new_tasks and run.continues(new_tasks[0].id, new_tasks[0].queue):
        # The worker runs the first launched next (ADR-0109): nobody else is called, and
        # where its claims start jobs, the append creates it started (ADR-0117).
        new_tasks[0] = replace(new_tasks[0], continued=True, started=_started(run, new_tasks[0]))
    if taken:
        await failpoints.hit("canvas.before_ends_taken")
    if new_tasks:
        await failpoints.hit("canvas.before_launch")
    then: NextState = Wait(wake_on_prefix=subtasks.HANDBACK_PREFIX) if waits else Continue()
    await run.append(written, take=taken, new_tasks=new_tasks, next_state=then)
    if new_tasks:
        log.info("task %s: launched %d canvas members", run.task_id, len(new_tasks))
    return not waits


def _ends(run: RunContext, inbox: list[InboxEntry]) -> tuple[list[ev.Event], list[int]]:
    """The members' ends in the inbox, each once (a second delivery is dropped by its
    key), and every handback entry to take."""
    running = {child for _, child, _ in run.state.subtasks}
    returned: list[ev.Event] = []
    taken = []
    for entry in inbox:
        handback = subtasks.read_handback(entry.payload)
        if handback is None:
            continue
        if handback.child_id in running:
            returned.append(
                ev.SubtaskReturned(handback.child_id, handback.status, entry.id, handback.report)
            )
            running.discard(handback.child_id)
        taken.append(entry.id)
    return returned, taken


async def _launches(
    run: RunContext, members: tuple[MemberLaunch, ...]
) -> tuple[list[ev.Event], list[NewTask]]:
    """The launch of `members` and their creation, to land in one append: a member exists
    once, whoever dies when."""
    spec = run.state.canvas or {}
    pins = spec.get("jobs")
    queue = spec.get("queue")
    if not isinstance(queue, str) or not queue:  # a canvas submitted before 0.x said none
        queue = await run.queue()
    launched: list[ev.Event] = []
    new_tasks = []
    for member in members:
        child = subtasks.child_id(run.task_id, member.call_id, 1)
        pin = pins.get(member.job) if isinstance(pins, dict) else None
        first: list[ev.Event] = [
            ev.TaskCreated(model="", tools=(member.job,)),
            ev.CallRequested(JOB_CALL_ID, member.job, member.input),
            ev.PluginsPinned((Pin(*map(str, pin)),) if isinstance(pin, list) else ()),
            ev.SubtaskOf(run.task_id, member.call_id, run.state.depth + 1),
        ]
        encoded = [NewEvent(*ev.encode(event)) for event in first]
        new_tasks.append(NewTask(child, encoded, queue=member.queue or queue))
        launched.append(ev.SubtaskLaunched(member.call_id, child, member.job))
    return launched, new_tasks


def _started(run: RunContext, member: NewTask) -> StartedBy | None:
    """What this run's worker starts `member` with as the append creates it (ADR-0117):
    what its claim would write to start it (ADR-0101: the claimer's pin where the
    member's differs, then the ToolStarted); None where that claim would not start it."""
    starts = run.starts()
    if starts is None:
        return None
    claimer, lease = starts
    pinned, call = (ev.decode(event.type, event.data) for event in member.events[2:0:-1])
    if not isinstance(pinned, ev.PluginsPinned) or not isinstance(call, ev.CallRequested):
        return None
    names = sorted({pin.name for pin in claimer.pins})
    if any(pin.name not in names for pin in pinned.pins):
        return None  # its run would leave it (plugin_missing): a claim starts nothing
    events: list[ev.Event] = []
    if pinned.pins != claimer.pins:
        events.append(ev.PluginsPinned(claimer.pins))
    events.append(ev.ToolStarted(call.call_id, call.name, call.input))
    return StartedBy(
        run.claim.worker,
        lease,
        [NewEvent(*ev.encode(event)) for event in events],
        tuple(names) if len(events) == 2 else None,
    )
