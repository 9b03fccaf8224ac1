"""The runner's subtask steps: launch a child with the call's wait, take handbacks, and the
deliveries every finish carries (the handback to a parent, a cancel to running children).

A child is created in the same append as the `SubtaskLaunched` that makes its Agent call
wait: a crash before leaves no child (the call is half done, `recover` cleans up), after
it the log knows the child. Its report reaches the parent in the append that finishes it,
and its git worktree is removed just before that append, by the child itself (ADR-0054).
"""

from __future__ import annotations

import logging
import os

from noeta.core import failpoints
from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import CANCEL_KEY, Delivery, InboxEntry, NewEvent, NewTask, Wait
from noeta.core.ports.tool import LaunchingTool, SubtaskRequest, ToolContext, ToolError
from noeta.core.rules import events as ev
from noeta.core.rules import model_choice, subtasks
from noeta.core.rules.next_action import AwaitSubtasks
from noeta.core.rules.task_id import workspace_folder
from noeta.core.runner import task_budget
from noeta.core.runner.context import RunContext

log = logging.getLogger(__name__)


async def launch(
    run: RunContext, call: ToolCall, request: SubtaskRequest, ctx: ToolContext, recovery: str
) -> None:
    """Create the child and record the call's wait, in one append; or an error result."""
    config = run.state.config
    assert config is not None
    problem = await _problem(run, request)
    if problem:
        tool = run.tools.get(call.name)
        if isinstance(tool, LaunchingTool):
            await tool.remove_workspace(ctx.subtask_id, ctx, keep_work=False)
        await run.append([ev.ToolFinished(call.id, problem, True, recovery)])
        return
    child = ctx.subtask_id
    created = ev.TaskCreated(
        model=request.model or config.model,
        prompt=request.prompt,
        system=config.system,
        max_tokens=config.max_tokens,
        tools=config.tools if request.tools is None else request.tools,
        **task_budget.child_budget(run.state),  # type: ignore[arg-type]
    )
    # The latest span record in the log is this call's ToolStarted's: its execute_tool span.
    link = ev.SubtaskOf(run.task_id, call.id, run.state.depth + 1, run.state.trace)
    new_task = NewTask(
        child, [NewEvent(*ev.encode(created)), NewEvent(*ev.encode(link))], queue=await run.queue()
    )
    launched = ev.SubtaskLaunched(call.id, child, request.description)
    await failpoints.hit("subtask.before_launch")
    await run.append([launched], new_tasks=[new_task])
    await failpoints.hit("subtask.after_launch")
    log.info("task %s: launched subtask %s", run.task_id, child)


async def _problem(run: RunContext, request: SubtaskRequest) -> str:
    """What is wrong with the child asked for ("" if nothing): a model the operator does
    not allow (nothing of it is opened) or this worker cannot use, or a tool the parent
    does not have."""
    config = run.state.config
    assert config is not None
    if not request.prompt.strip():
        return "Agent needs a prompt: say what the subagent should do"
    if request.model and not model_choice.is_allowed(
        request.model, config.model, run.subagent_models
    ):
        return model_choice.refusal(request.model, run.subagent_models)
    if request.model:
        trouble = await run.model_problem(request.model)
        if trouble:
            return f"Agent cannot use the model {request.model!r}: {trouble}"
    if request.tools is not None:
        mine = config.tool_names(run.tools)
        foreign = [name for name in request.tools if name not in mine]
        if foreign:
            return (
                f"a subagent gets a subset of this task's tools; it has no "
                f"{', '.join(map(repr, foreign))}"
            )
    return ""


async def take_handbacks(run: RunContext, action: AwaitSubtasks, inbox: list[InboxEntry]) -> bool:
    """Take one handback from the inbox (True), or hand the task back to wait (False)."""
    if await take_late_handback(run, inbox, waiting=dict(action.children)):
        return True
    # Only a handback (or a cancel) wakes the task: chat waits in the inbox.
    await run.append([], next_state=Wait(wake_on_prefix=subtasks.HANDBACK_PREFIX))
    return False


async def take_late_handback(
    run: RunContext, inbox: list[InboxEntry], waiting: dict[str, str] | None = None
) -> bool:
    """Take the first handback in `inbox`: the result of its Agent call if that call still
    waits for it (`waiting`: call id -> child id), else only recorded as taken."""
    for entry in inbox:
        handback = subtasks.read_handback(entry.payload)
        if handback is None:
            continue
        returned = ev.SubtaskReturned(
            handback.child_id, handback.status, entry.id, "", handback.tokens, handback.cost
        )
        new_events: list[ev.Event] = [returned]
        await _remove_workspace(run, handback)
        await failpoints.hit("subtask.before_handback_taken")
        if waiting is not None and waiting.get(handback.call_id) == handback.child_id:
            result = handback.result()
            new_events.append(ev.ToolFinished(handback.call_id, result, handback.is_error))
        await run.append(new_events, take=[entry.id])
        return True
    return False


async def _remove_workspace(run: RunContext, handback: subtasks.Handback) -> None:
    """The child finished: its worktree goes, if it is still there (the child removes its
    own before its finish; one that finished under an older noeta may not have)."""
    await remove_child_workspace(run, run.workspace, handback.call_id, handback.child_id)


async def before_finish(run: RunContext) -> None:
    """A child about to append its finish removes its own git worktree, its work committed
    to its branch: whether its parent waits for it or finished first (cancelled, failed),
    no worktree outlives the child. Idempotent: a crash before the finish lands repeats it
    at the next claim, which finishes again (the log's next step is the same finish)."""
    state = run.state
    if not state.parent:
        return
    if run.workspace:
        parent = os.path.join(os.path.dirname(run.workspace), workspace_folder(state.parent))
        await remove_child_workspace(run, parent, state.parent_call, run.task_id)
    await failpoints.hit("subtask.before_finish")


async def remove_child_workspace(
    run: RunContext, parent_workspace: str, call_id: str, child: str
) -> None:
    """Remove what the launch of `child` made (its work kept on its branch); a failure is
    logged, never the task's: a worktree left behind is for `git worktree prune`, a report
    lost would be worse."""
    ctx = ToolContext(run.task_id, call_id, parent_workspace, child)
    for tool in run.tools.values():
        if isinstance(tool, LaunchingTool):  # each removes only what it made
            try:
                await tool.remove_workspace(child, ctx, keep_work=True)
            except ToolError as error:
                log.warning("task %s: the worktree of %s stays: %s", run.task_id, child, error)


def finish_deliveries(run: RunContext, status: str, report: str) -> list[Delivery]:
    """What a task's finishing append delivers: its report to its parent, if it has one,
    and a cancel to each child still running (cancelling a parent cancels its children)."""
    state = run.state
    deliveries = [Delivery(child, {"kind": "cancel"}, CANCEL_KEY) for _, child, _ in state.subtasks]
    if state.parent:
        tokens, cost = task_budget.tree_spend(state)  # for a budget it drew on
        handback = subtasks.Handback(run.task_id, state.parent_call, status, report, tokens, cost)
        key = subtasks.handback_key(state.parent, state.parent_call)
        # A job member's worker continues with its canvas (ADR-0109): nobody else is called.
        continued = bool(state.job) and run.continues(state.parent)
        deliveries.append(Delivery(state.parent, handback.payload(), key, continued))
    return deliveries
