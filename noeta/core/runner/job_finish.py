"""A plain job's finish told from its call's result, without folding it first (ADR-0142).

A job is one turn whose only step is its call (`job_fold.py`): the call's result closes
the turn, and with no background job out, no wake-up pending and no person to talk to,
the task ends with it, `done` with the content or `failed` with it as the error. That is
what `next_action` says over the fold of the result (`FinishTask`); `append_settling`
used to fold the result to ask it, then fold the finish on top once both landed: two
folds, two `TaskState`s, a job. Told here, the append folds both events once.
`tests/core/runner/test_job_finish.py` holds it to `next_action`'s answer and compares
the logs written both ways.
"""

from __future__ import annotations

from collections.abc import Sequence

from noeta.core.rules.events import Event, TaskFinished, ToolFinished
from noeta.core.rules.task_state import TaskState


def job_end(state: TaskState, new_events: Sequence[Event]) -> TaskFinished | None:
    """The finish that `new_events` (a plain job's call's result alone) bring to the job
    whose state is `state`; None where anything else may follow, and the fold decides."""
    if len(new_events) != 1:
        return None
    result = new_events[0]
    if type(result) is not ToolFinished:
        return None
    config = state.config
    if (
        config is None
        or not state.job
        or not state.turn_open
        or state.finished
        or state.newer_event
        or state.unreadable
        or state.canvas is not None
        or config.interactive
        or state.jobs
        or state.wakeups
        or len(state.calls) != 1
        or state.calls[0].id != result.call_id
    ):
        return None
    if result.is_error:
        return TaskFinished("failed", error=result.content)
    return TaskFinished("done", result.content)
