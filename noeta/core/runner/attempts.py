"""A plain job's failed attempt: logged with its error and duration, then either the
next attempt is scheduled through the queue (the task waits, its slot free) or, with no
attempt left, the job ends with its error in the same append (ADR-0094)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import CANCEL_KEY, Wait
from noeta.core.ports.tool import FailedAttempt, ToolOutput
from noeta.core.rules import wakeups
from noeta.core.rules.events import AttemptFailed, ToolFinished
from noeta.core.runner.context import RunContext


async def record_failed(
    run: RunContext, call: ToolCall, output: ToolOutput, failed: FailedAttempt, recovery: str
) -> None:
    """Log the attempt; the next one's due time is on the store's clock (as a wake-up's),
    so whichever worker claims the task then runs it."""
    seconds = round(failed.seconds, 3)
    if failed.retry_in is None:
        ended = AttemptFailed(call.id, run.state.attempts, failed.error, seconds)
        finished = ToolFinished(call.id, output.content, True, recovery)
        await run.append_settling([ended, finished])
        return
    due = (await run.clock() + timedelta(seconds=failed.retry_in)).astimezone(UTC)
    stamp = wakeups.stamp(due)
    # The attempt and the wait land together; only a cancel wakes the task sooner.
    await run.append(
        [AttemptFailed(call.id, run.state.attempts, failed.error, seconds, stamp)],
        next_state=Wait(until=datetime.fromisoformat(stamp), wake_on_prefix=CANCEL_KEY),
    )
