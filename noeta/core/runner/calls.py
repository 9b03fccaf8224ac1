"""The tool step, and `recover_calls`: settling calls a crash left half done (SPEC §4).

A half-done call (ToolStarted, no ToolFinished) is settled in this order: the result its
own run kept when its claim was gone (a late result, ADR-040); the tool's own `recover`,
given the same idempotency key; a re-run, if the tool is `retry_safe` and has started
fewer than `tool.MAX_ATTEMPTS` times; the result its worker keeps within a short grace,
if that worker is known alive (ADR-0083); else an error result saying its outcome is
unknown.
Recovered calls do not pass the gates again: they were allowed when they ran.
"""

from __future__ import annotations

import asyncio
import inspect
import logging

from noeta.core import failpoints
from noeta.core.errors import StoreError
from noeta.core.ports.model import ToolCall
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Finish, LateResult, TaskStatus
from noeta.core.ports.tool import (
    MAX_ATTEMPTS,
    OUTCOME_UNKNOWN,
    OutputHook,
    RecoverableTool,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    Wakeup,
)
from noeta.core.rules import subtasks, wakeups
from noeta.core.rules.events import (
    JobStarted,
    TaskFinished,
    ToolFinished,
    ToolStarted,
    ToolWaiting,
    WakeupScheduled,
)
from noeta.core.rules.gates import Ask, Deny, decide
from noeta.core.rules.tool_input import input_problem
from noeta.core.runner import attempts, cancelling, children, grace, late_results
from noeta.core.runner.cancelling import CancelledWhileRunning
from noeta.core.runner.context import RunContext
from noeta.core.runner.tool_streams import open_tool_stream
from noeta.observability.tracing import Step

log = logging.getLogger(__name__)


async def run_tools(run: RunContext, calls: tuple[ToolCall, ...]) -> None:
    """Run the reply's calls one by one, in the order the model gave them."""
    approved = {call_id: dict(items) for call_id, items in run.state.approved}
    for requested in calls:
        tool = run.tools.get(requested.name)
        refusal = _refusal(run, tool, requested)
        if tool is None or refusal:
            # Nothing runs: the start and its error result land together.
            with run.trace.tool(requested, run.state) as step:
                started = ToolStarted(requested.id, requested.name, requested.input, step.record)
                await run.append_settling([started, ToolFinished(requested.id, refusal, True)])
                step.finished(refusal, True)
            continue
        call = _gated(run, requested, approved)
        if isinstance(call, Ask):
            asked = ToolWaiting(requested.id, requested.name, call.input, call.question)
            await run.append([asked])
            return  # the runner's loop sees the call waiting for its answer
        if isinstance(call, Deny):
            with run.trace.tool(requested, run.state) as step:
                started = ToolStarted(requested.id, requested.name, requested.input, step.record)
                denied = ToolFinished(requested.id, f"Denied by a gate: {call.reason}", True)
                await run.append_settling([started, denied])
                step.finished(denied.content, True)
            continue
        # The log records the call as actually executed: after any rewrite. Its span
        # ends once the result is in the log (a crash: the next claimer emits it).
        with run.trace.tool(call, run.state) as step:
            await run.append([ToolStarted(call.id, call.name, call.input, step.record)])
            if not await _run_started(run, tool, call, step):
                return  # the task is finished: no later call of the reply runs


async def run_started_by_claim(run: RunContext, call: ToolCall) -> None:
    """A fresh job's call whose ToolStarted its claim wrote (ADR-0101): the claimer asked
    only where run_tools would have written exactly that (no gates, no hooks, no live
    trace), so what follows is run_tools' own, the start already durable."""
    tool = run.tools.get(call.name)
    refusal = _refusal(run, tool, call)
    with run.trace.tool(call, run.state) as step:
        if tool is None or refusal:
            await run.append_settling([ToolFinished(call.id, refusal, True)])
            step.finished(refusal, True)
            return
        await _run_started(run, tool, call, step)


async def _run_started(run: RunContext, tool: Tool, call: ToolCall, step: Step) -> bool:
    """Run a call whose start is in the log and record its result; False if a cancel
    finished the task meanwhile."""
    # Its output streams to the task's readers (ADR-0114), keyed by its ToolStarted.
    stream = open_tool_stream(run.streams, run.task_id, run.state.last_seq, call.id)
    try:
        await failpoints.hit("tool.after_started")
        ctx = _context(run, call, stream.output if stream is not None else None)
        output, cancelled = await cancelling.run_unless_cancelled(run, tool, call, ctx, _execute)
        await failpoints.hit("tool.before_finished")
        result_seq = run.state.last_seq + 1  # the first of the append that records it
        if cancelled is not None:
            await _record_cancelled(run, call, output, cancelled)
        else:
            await _record_or_keep(run, call, output)
        if stream is not None:
            stream.landed(result_seq)
    finally:
        if stream is not None:
            stream.abandon()  # a no-op once it landed: then only the claim's loss is left
    step.finished(output.content, output.is_error)
    return cancelled is None


async def _record_or_keep(
    run: RunContext, call: ToolCall, output: ToolOutput, recovery: str = ""
) -> None:
    """Record the result; if the claim is gone before it lands (refused, lost, cut off),
    keep it beside the log for the next claimer instead of throwing it away."""
    try:
        await _record(run, call, output, recovery)
    except (StoreError, asyncio.CancelledError):
        await late_results.keep(run, call, output)
        raise


async def _record_cancelled(
    run: RunContext, call: ToolCall, output: ToolOutput, cancelled: CancelledWhileRunning
) -> None:
    """The call's result (or that it was stopped) and the task's cancelled finish land
    together, taking the cancel: the log says what the cancel found."""
    finished = ToolFinished(call.id, output.content, output.is_error)
    ended = TaskFinished("cancelled", error=cancelled.outcome)
    try:
        await run.append(
            [finished, ended], take=[cancelled.entry_id], next_state=Finish(TaskStatus.CANCELLED)
        )
    except (StoreError, asyncio.CancelledError):
        await late_results.keep(run, call, output)
        raise


async def _record(run: RunContext, call: ToolCall, output: ToolOutput, recovery: str = "") -> None:
    """Append the call's result; a background job it asked for is recorded with it and
    started only once that has landed (a crash before: no job; after: the log knows)."""
    if output.failed_attempt is not None and run.state.job:
        await attempts.record_failed(run, call, output, output.failed_attempt, recovery)
        return
    if output.subtask is not None and not output.is_error:
        await children.launch(run, call, output.subtask, _context(run, call), recovery)
        return
    if output.wakeup is not None and not output.is_error:
        await _record_wakeup(run, call, output.wakeup, recovery)
        return
    job = output.background
    if job is None:
        # A job's result finishes its task in this same append (ADR-0055).
        finished = ToolFinished(call.id, output.content, output.is_error, recovery)
        await run.append_settling([finished])
        return
    if run.jobs is None:
        refusal = "run_in_background needs a noeta worker; run the command in the foreground"
        await run.append_settling([ToolFinished(call.id, refusal, True, recovery)])
        return
    finished = ToolFinished(call.id, output.content, output.is_error, recovery)
    await run.append([finished, JobStarted(call.id, job.command)])
    run.jobs.start(run.claim, call.id, job)


async def _record_wakeup(run: RunContext, call: ToolCall, wakeup: Wakeup, recovery: str) -> None:
    """The wake-up lands with the call's result, its due time on the store's clock (the
    clock claims are measured on), so any worker wakes the task at the same moment."""
    if len(run.state.wakeups) >= wakeups.MAX_WAKEUPS:
        limit = wakeups.MAX_WAKEUPS
        refusal = f"this task has {limit} wake-ups pending already; that is the limit"
        await run.append([ToolFinished(call.id, refusal, True, recovery)])
        return
    now = await run.clock()
    due = wakeups.due_time(wakeup, now)
    told = wakeups.scheduled_reply(due, now)
    scheduled = WakeupScheduled(call.id, wakeups.stamp(due), wakeup.prompt)
    await run.append([ToolFinished(call.id, told, False, recovery), scheduled])


def _gated(
    run: RunContext, call: ToolCall, approved: dict[str, dict[str, JSONValue]]
) -> ToolCall | Ask | Deny:
    """The call as the gates let it run, or why it may not (yet)."""
    if call.id in approved:  # a person allowed it: it runs as it was asked about
        return ToolCall(call.id, call.name, approved[call.id])
    decision, input = decide(run.gates, call.name, call.input, _context(run, call))
    if isinstance(decision, Ask):
        return Ask(decision.question, input)
    if isinstance(decision, Deny):
        return decision
    return ToolCall(call.id, call.name, input)


async def recover_calls(run: RunContext, calls: tuple[tuple[ToolCall, int], ...]) -> None:
    kept = await late_results.found(run, calls)
    for call, starts in calls:
        late = kept.get(call.id)
        if late is not None:
            await _record_late(run, call, late)
            continue
        tool = run.tools.get(call.name)
        ctx = _context(run, call)
        if isinstance(tool, RecoverableTool):
            with run.trace.tool(call, run.state, "recover") as step:
                found = await tool.recover(call.input, ctx)
                if found is not None:
                    finished = ToolFinished(call.id, found.content, found.is_error, "recover")
                    await run.append_settling([finished])
                    step.finished(found.content, found.is_error, "recover")
                    continue
                step.finished("not found by recover", False, "recover_missed")
        if tool is not None and tool.flags.retry_safe and starts < _max_starts(tool):
            log.info("task %s: re-running %s (start %d)", run.task_id, call.id, starts + 1)
            with run.trace.tool(call, run.state, "rerun") as step:
                await run.append([ToolStarted(call.id, call.name, call.input, step.record)])
                await failpoints.hit("tool.after_started")
                output = await _execute(tool, call, _context(run, call))  # this start's
                await failpoints.hit("tool.before_finished")
                await _record_or_keep(run, call, output, "rerun")
                step.finished(output.content, output.is_error, "rerun")
            continue
        # Its worker may live on and return the result in a moment (ADR-0083).
        late = await grace.wait_for_result(run, call)
        if late is not None:
            await _record_late(run, call, late)
            continue
        with run.trace.tool(call, run.state, "unknown") as step:
            await run.append_settling([ToolFinished(call.id, OUTCOME_UNKNOWN, True, "unknown")])
            step.finished(OUTCOME_UNKNOWN, True, "unknown")


async def _record_late(run: RunContext, call: ToolCall, late: LateResult) -> None:
    """The call did run to its end: its result is recorded, marked with the epoch that
    ran it, through this claim's fence (a hint is never the log's truth)."""
    with run.trace.tool(call, run.state, "late") as step:
        handed_over = ToolFinished(call.id, late.content, late.is_error, "late", late.epoch)
        await run.append_settling([handed_over])
        step.finished(late.content, late.is_error, "late")


async def _execute(tool: Tool, call: ToolCall, ctx: ToolContext) -> ToolOutput:
    """A tool's own failure is its result, told to the model; not a runner bug."""
    try:
        if inspect.iscoroutinefunction(tool.run):
            return await tool.run(call.input, ctx)
        output: ToolOutput = await asyncio.to_thread(tool.run, call.input, ctx)  # type: ignore[arg-type]
        return output
    except ToolError as error:
        return ToolOutput(str(error), is_error=True)
    except Exception as error:
        return ToolOutput(f"{call.name} failed: {type(error).__name__}: {error}", is_error=True)


def _refusal(run: RunContext, tool: Tool | None, call: ToolCall) -> str:
    """Why a call cannot run at all ("" if it can): the model reads this, nothing crashes."""
    if tool is None or call.name not in _enabled(run):
        return f"there is no tool named {call.name!r}"
    return input_problem(tool, call.input) or _launch_refusal(run, tool, call)


def _launch_refusal(run: RunContext, tool: Tool, call: ToolCall) -> str:
    """For a tool that launches subtasks: a limit it would pass, or an id it cannot give."""
    if not tool.flags.launches_subtasks:
        return ""
    reached = subtasks.limit_reached(run.state)
    if reached:
        return f"{call.name} refused: {reached}"
    try:
        subtasks.child_id(run.task_id, call.id, run.state.children + 1)
    except ValueError as error:
        return f"{call.name} refused: {error}"
    return ""


def _context(run: RunContext, call: ToolCall, on_output: OutputHook | None = None) -> ToolContext:
    tool = run.tools.get(call.name)
    child = ""
    if tool is not None and tool.flags.launches_subtasks:
        # The same on every attempt: the next subtask's number comes from the log.
        try:
            child = subtasks.child_id(run.task_id, call.id, run.state.children + 1)
        except ValueError:
            child = ""  # refused before it runs (_launch_refusal)
    attempt = run.state.attempts if run.state.job else 0  # a job's, counted in its log
    return ToolContext(run.task_id, call.id, run.workspace, child, attempt, on_output)


def _max_starts(tool: Tool) -> int:
    """How many starts in all a retry_safe call may have (a job's own max_attempts)."""
    return tool.flags.max_attempts or MAX_ATTEMPTS


def _enabled(run: RunContext) -> tuple[str, ...]:
    config = run.state.config
    return config.tool_names(run.tools) if config is not None else ()
