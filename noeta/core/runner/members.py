"""The runner's canvas steps (ADR-0104): launch the members whose turn has come as subtasks
(each created in the append recording its launch), and take their ends from the inbox.

A member is a plain job made a subtask (`SubtaskOf`): its finishing append hands its result
back through the inbox under its own key, so an end is taken once however often the
canvas's worker dies; a member is created once because its launch and its creation are
one fenced append.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from noeta.core import failpoints
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import InboxEntry, NewEvent, NewTask, Wait
from noeta.core.rules import events as ev
from noeta.core.rules import subtasks
from noeta.core.rules.canvas import AwaitMembers, LaunchMembers, MemberLaunch, next_step
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import AwaitSubtasks
from noeta.core.runner import children
from noeta.core.runner.context import RunContext

log = logging.getLogger(__name__)

JOB_CALL_ID = "job"  # a job's one call (as the client's job_tasks names it)


async def advance(
    run: RunContext, action: AwaitSubtasks | LaunchMembers | AwaitMembers, inbox: list[InboxEntry]
) -> bool:
    """One step of a task waiting on subtasks: True to go on, False once it waits."""
    match action:
        case AwaitSubtasks():
            return await children.take_handbacks(run, action, inbox)
        case LaunchMembers(members=members):
            await launch(run, members)
            return True
        case AwaitMembers():
            return await take_ends(run, inbox)


async def launch(run: RunContext, members: tuple[MemberLaunch, ...]) -> None:
    """Create `members` and record their launch, in one append."""
    spec = run.state.canvas or {}
    pins = spec.get("jobs")
    queue = await run.queue()
    launched, new_tasks = [], []
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
    await failpoints.hit("canvas.before_launch")
    await run.append(launched, new_tasks=new_tasks)
    log.info("task %s: launched %d canvas members", run.task_id, len(members))


async def take_ends(run: RunContext, inbox: list[InboxEntry]) -> bool:
    """Take every member's end the inbox holds, in one append; else wait for one."""
    running = {child for _, child, _ in run.state.subtasks}
    returned, taken = [], []
    for entry in inbox:
        handback = subtasks.read_handback(entry.payload)
        if handback is None:
            continue
        status = handback.status
        if handback.child_id in running:
            returned.append(
                ev.SubtaskReturned(handback.child_id, status, entry.id, handback.report)
            )
            running.discard(handback.child_id)  # a second delivery is dropped by its key
        taken.append(entry.id)
    if taken:
        await failpoints.hit("canvas.before_ends_taken")
        if _still_waiting(run, returned):  # the wait rides on the take: two statements fewer
            wait = Wait(wake_on_prefix=subtasks.HANDBACK_PREFIX)
            await run.append(returned, take=taken, next_state=wait)
            return False
        await run.append(returned, take=taken)
        return True
    await run.append([], next_state=Wait(wake_on_prefix=subtasks.HANDBACK_PREFIX))
    return False


def _still_waiting(run: RunContext, returned: Sequence[ev.Event]) -> bool:
    """Whether, these ends taken, the canvas has nothing to launch or finish yet. An end
    delivered meanwhile wakes the task again: a wait is claimable once its inbox holds
    a matching entry, whenever it came."""
    seq = run.state.last_seq
    ahead = fold([LoggedEvent(seq + n, event) for n, event in enumerate(returned, 1)], run.state)
    return isinstance(next_step(ahead), AwaitMembers)
