"""A cancel reaches a call while it runs (issue 29 item 4): the inbox is read for one every
CANCEL_CHECK_SECONDS while the call runs. An async tool is cancelled; a function in a
thread, which nothing can stop, runs to its end. The log says which happened."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from noeta.core.errors import StoreError
from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import InboxEntry
from noeta.core.ports.tool import Tool, ToolContext, ToolOutput
from noeta.core.runner import taking
from noeta.core.runner.context import RunContext

log = logging.getLogger(__name__)

# How often a running call (and the runner, before a step) looks for a cancel: a cancel
# lands within seconds, for one inbox read per call every few seconds.
CANCEL_CHECK_SECONDS = 2.0

STOPPED = "cancelled while running: stopped"
HAD_FINISHED = "cancelled while running: it had finished"


@dataclass(frozen=True, slots=True)
class CancelledWhileRunning:
    entry_id: int  # the cancel in the inbox: taken by the append recording this
    outcome: str  # STOPPED or HAD_FINISHED


Execute = Callable[[Tool, ToolCall, ToolContext], Awaitable[ToolOutput]]


async def run_unless_cancelled(
    run: RunContext, tool: Tool, call: ToolCall, ctx: ToolContext, execute: Execute
) -> tuple[ToolOutput, CancelledWhileRunning | None]:
    """Run the call in this task (a cancellation of the run still reaches it); a cancel
    asked meanwhile stops it if it can be stopped, as `asyncio.timeout` does: by
    cancelling this task and taking back its own cancellation."""
    running = asyncio.current_task()
    assert running is not None
    watch = _Watch(run, call, None if runs_in_a_thread(tool) else running)
    # A timer, not a task, until the call has run CANCEL_CHECK_SECONDS: most calls end
    # sooner, and spare a task, its sleep and its cancellation (1-2.5 us a call).
    watching = asyncio.get_running_loop().call_later(CANCEL_CHECK_SECONDS, watch.start)
    try:
        output = await execute(tool, call, ctx)
    except asyncio.CancelledError:
        if not watch.stopped or running.uncancel() > 0:
            raise  # not ours, or the run is cancelled as well (a lost claim, a shutdown)
        log.info("task %s: %s stopped by a cancel", run.task_id, call.id)
        stopped = f"{call.name} was stopped: the task was cancelled while it ran"
        return ToolOutput(stopped, is_error=True), watch.outcome(STOPPED)
    finally:
        watching.cancel()
        watch.end()
    if watch.stopped:
        running.uncancel()  # the tool swallowed the cancellation and returned
    return output, None if watch.found is None else watch.outcome(HAD_FINISHED)


def runs_in_a_thread(tool: Tool) -> bool:
    """Whether the call runs in a thread, which a cancel cannot stop."""
    return tool.flags.runs_in_a_thread or not inspect.iscoroutinefunction(tool.run)


class _Watch:
    """Reads the inbox for a cancel while a call runs; stops `stoppable` if one came."""

    def __init__(self, run: RunContext, call: ToolCall, stoppable: asyncio.Task[Any] | None):
        self.run_context, self.call, self.stoppable = run, call, stoppable
        self.found: int | None = None  # the cancel's inbox entry
        self.stopped = False
        self._reading: asyncio.Task[None] | None = None

    def start(self) -> None:
        """The call has run a first CANCEL_CHECK_SECONDS: the inbox is read from now on."""
        self._reading = asyncio.ensure_future(self.run())

    def end(self) -> None:
        if self._reading is not None:
            self._reading.cancel()

    def outcome(self, what: str) -> CancelledWhileRunning:
        assert self.found is not None
        return CancelledWhileRunning(self.found, what)

    async def run(self) -> None:
        run = self.run_context
        while self.found is None:
            cancel = await _cancel_asked(run)
            if cancel is None:
                await asyncio.sleep(CANCEL_CHECK_SECONDS)
                continue
            self.found = cancel.id
            if self.stoppable is None:
                log.warning(
                    "task %s: cancel asked while %s runs in a thread, which cannot be"
                    " stopped; its result is recorded when it ends",
                    run.task_id,
                    self.call.id,
                )
            else:
                self.stopped = True
                self.stoppable.cancel()


async def _cancel_asked(run: RunContext) -> InboxEntry | None:
    try:
        inbox = await run.store.read_inbox(run.task_id)
    except StoreError:
        return None  # looked for again next round; the renewer decides what an outage costs
    taken = run.state.taken_inbox
    return next(
        (e for e in inbox if e.id not in taken and taking.kind_of(e.payload) == "cancel"), None
    )
