"""Late results (ADR-040): a result a tool returned after its claim was gone is kept
beside the log, and the next claimer records it through its own fenced append.

The log stays the only truth: a kept result is a hint, read only for a call the log still
shows half done, and it reaches the log only through a claimer's fenced append.
"""

from __future__ import annotations

import asyncio
import logging
import random

from noeta.core.errors import CommitUnknown, NoetaError, StoreUnavailable
from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import LateResult, Store
from noeta.core.ports.tool import ToolOutput
from noeta.core.retry import GaveUp, Sleep, backoff_seconds, with_retries
from noeta.core.runner.context import RunContext

log = logging.getLogger(__name__)

# A keep the store could not take (unreachable, or its reply lost) is tried again while
# the worker lives: the store is usually back within a second, and the next claimer may
# not have settled the call yet. Bounded: about 15 s of waits in all, then given up.
KEEP_ATTEMPTS = 6
KEEP_FIRST_BACKOFF_SECONDS = 0.5
KEEP_BACKOFF_CAP_SECONDS = 8.0

# Keeps still in flight when their run was cancelled: the loop holds tasks only weakly.
_in_flight: set[asyncio.Task[None]] = set()


async def keep(run: RunContext, call: ToolCall, output: ToolOutput) -> None:
    """Keep the call's result for the next claimer: its own run could not record it.

    Shielded: the claim's loss that made the result late also cancels this run (the
    renewer reports it), and that must not cut the keep short. Never raises a store
    error: the caller re-raises why the run ends.
    """
    if output.background is not None or output.wakeup is not None:
        # A job starts, a wake-up is scheduled, only once the result is in the log: a
        # result recorded by another claim would tell the model of one that never was.
        return
    if output.subtask is not None:
        # "launching subagent …" is true only with the launch append, which creates the
        # child: recorded by another claim it would answer the call with a child that
        # never was. The next claimer's `recover` settles it (not started, worktree gone).
        log.warning(
            "task %s: the launch of %s was cut off by the claim's loss; not kept (the next"
            " claimer's recover settles it)",
            run.task_id,
            call.id,
        )
        return
    if call.id not in dict(run.state.started):
        return  # the result did land (a later step of the append failed): nothing is late
    claim = run.claim
    result = LateResult(
        claim.task_id, call.id, output.content, output.is_error, claim.epoch, claim.worker
    )
    await keep_shielded(run.store, run.sleep, result)


async def keep_shielded(store: Store, sleep: Sleep, result: LateResult) -> None:
    """Keep `result`, retried while the store is out; a cancellation of the caller ends
    its wait, not the keep."""
    keeping = asyncio.ensure_future(_keep(store, sleep, result))
    _in_flight.add(keeping)
    keeping.add_done_callback(_in_flight.discard)
    await asyncio.shield(keeping)  # cancelled, the run ends now and the keep goes on


async def _keep(store: Store, sleep: Sleep, result: LateResult) -> None:
    def wait(attempt: int, error: NoetaError) -> float:
        log.debug("task %s: keeping the late result of %s failed (%s)", *_of(result), error)
        return backoff_seconds(
            attempt,
            None,
            random.random(),
            first=KEEP_FIRST_BACKOFF_SECONDS,
            cap=KEEP_BACKOFF_CAP_SECONDS,
        )

    try:
        # Insert-only and first-wins (ADR-040): a retry after a lost reply is harmless.
        kept = await with_retries(
            lambda: store.keep_late_result(result),
            NoetaError,
            max_attempts=KEEP_ATTEMPTS,
            wait=wait,
            sleep=sleep,
            retryable=lambda error: isinstance(error, (StoreUnavailable, CommitUnknown)),
        )
    except GaveUp as gave_up:
        log.warning(
            "task %s: the result of %s came after its claim was gone and could not be kept"
            " (%d attempts; %s)",
            *_of(result),
            gave_up.attempts,
            gave_up.error,
        )
        return
    if kept:
        log.warning(
            "task %s: the result of %s came after epoch %d's claim was gone; kept for the"
            " next claimer",
            result.task_id,
            result.call_id,
            result.epoch,
        )
    else:
        log.info("task %s: a late result of %s was kept before", result.task_id, result.call_id)


def _of(result: LateResult) -> tuple[str, str]:
    return result.task_id, result.call_id


async def found(run: RunContext, calls: tuple[tuple[ToolCall, int], ...]) -> dict[str, LateResult]:
    """The late results kept for these half-done calls, by call id."""
    wanted = {call.id for call, _ in calls}
    return {
        result.call_id: result
        for result in await run.store.late_results(run.task_id)
        if result.call_id in wanted
    }
