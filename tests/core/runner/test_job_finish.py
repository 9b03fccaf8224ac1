"""A plain job's finish told from its call's result without a fold (ADR-0142) writes the
log the fold's way writes: the same job run both ways, event by event, payloads
included, and at every use the finish told equals `next_action`'s over the fold. Both
stores, the real runner, real `@noeta.tool` functions claimed as a worker claims them (the
claim starts the job, ADR-0101); only an attempt's measured seconds and its retry's due
time (clocks) differ."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

import noeta
from noeta.backends.models.registry import ProviderRegistry
from noeta.client.job_tasks import job_task
from noeta.core.ports.store import Store, StoredEvent
from noeta.core.rules.events import Event, TaskFinished
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import FinishTask, next_action
from noeta.core.rules.task_state import TaskState
from noeta.core.runner import writing
from noeta.core.runner.task import RunResult, TaskRunner
from noeta.plugins.function_tools import FunctionTool
from noeta.plugins.loading import module_pin
from tests.core.runner.test_job_appends import store

__all__ = ["store"]  # the fixture, shared


@noeta.tool(retry_safe=True)
async def finish_doubled(n: int) -> dict[str, int]:
    """Its result is the job's answer."""
    return {"n": n, "doubled": 2 * n}


@noeta.tool(max_attempts=3, backoff_base=60, jitter=False)
async def finish_flaky() -> None:
    """Raises with attempts left: the attempt is logged and the job waits for the next."""
    raise ValueError("flaky: the service said no")


@noeta.tool(max_attempts=1)
async def finish_broken() -> None:
    """Raises on its last attempt: the job fails with the error."""
    raise RuntimeError("broken: for good")


@noeta.tool
def finish_sync_doubled(n: int) -> int:
    """A sync function: it runs in a thread, the finish the same."""
    return 2 * n


TOOLS: dict[str, FunctionTool] = {
    tool.name: tool  # type: ignore[attr-defined]
    for tool in (finish_doubled, finish_flaky, finish_broken, finish_sync_doubled)
}

# (the job's function, its input, how its run ends, the task's end, finishes told unfolded)
CASES = [
    pytest.param(finish_doubled, {"n": 21}, "finished", "done", 1, id="success"),
    pytest.param(finish_sync_doubled, {"n": 4}, "finished", "done", 1, id="sync-success"),
    pytest.param(finish_flaky, {}, "waiting", "", 0, id="raised-with-retries-left"),
    pytest.param(finish_broken, {}, "finished", "failed", 0, id="last-attempt-failed"),
    pytest.param(finish_doubled, {"n": "no"}, "finished", "failed", 1, id="input-refused"),
]


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> list[TaskFinished]:
    """The finishes `job_end` told, each checked against `next_action` over the fold of
    the result at the moment it was told."""
    finishes: list[TaskFinished] = []
    job_end = writing.job_end

    def checked(state: TaskState, new_events: Sequence[Event]) -> TaskFinished | None:
        ended = job_end(state, new_events)
        if ended is not None:
            logged = [LoggedEvent(state.last_seq + 1 + i, e) for i, e in enumerate(new_events)]
            assert next_action(fold(logged, state)) == FinishTask(
                ended.status, ended.answer, ended.error
            )
            finishes.append(ended)
        return ended

    monkeypatch.setattr(writing, "job_end", checked)
    return finishes


async def run_job(store: Store, task_id: str, tool: Any, input: dict[str, Any]) -> RunResult:
    """Submit the job, claim it as a worker does (its claim starts it) and run it."""
    await store.create_task(job_task(task_id, tool, input, "q", None))
    runner = TaskRunner(
        store, ProviderRegistry(), tools=dict(TOOLS), pins=(module_pin(tool.module),)
    )
    [claimed] = await store.claim_and_load(
        "w", ["q"], 600, snapshot_version=runner.snapshot_version, job_starts=runner.job_starts
    )
    assert claimed.loaded.started_by_claim
    return await runner.run(claimed.claim, claimed.loaded)


def comparable(task_id: str, event: StoredEvent) -> tuple[int, str, Any]:
    """An event as the comparison reads it: its seq, type and payload, the task's id
    written as TASK; an attempt's measured seconds and its retry's due time only as
    present or not (each run has its own clock)."""
    raw = event.data if isinstance(event.data, str) else json.dumps(event.data)
    data = json.loads(raw.replace(task_id, "TASK"))
    if event.type == "AttemptFailed":
        data["seconds"] = "measured" if "seconds" in data else None
        data["retry_at"] = "set" if data.get("retry_at") else ""
    return event.seq, event.type, data


@pytest.mark.parametrize(("tool", "input", "outcome", "finished", "unfolded"), CASES)
async def test_a_finish_told_unfolded_writes_the_folds_log(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    told: list[TaskFinished],
    tool: Any,
    input: dict[str, Any],
    outcome: str,
    finished: str,
    unfolded: int,
) -> None:
    told_unfolded = await run_job(store, "told", tool, input)
    assert len(told) == unfolded

    monkeypatch.setattr(writing, "job_end", lambda state, new_events: None)
    by_fold = await run_job(store, "folded", tool, input)

    assert (told_unfolded.outcome, told_unfolded.state.finished) == (outcome, finished)
    assert (by_fold.outcome, by_fold.state.finished) == (outcome, finished)
    told_log = [comparable("told", e) for e in await store.read_log("told")]
    fold_log = [comparable("folded", e) for e in await store.read_log("folded")]
    assert told_log == fold_log
    # The run's state is the fold of what landed, whichever way the finish was told
    # (a retry's due time aside: each run has its own clock).
    assert replace(told_unfolded.state, retry_at="") == replace(by_fold.state, retry_at="")
    told_row, fold_row = await store.get_task("told"), await store.get_task("folded")
    assert told_row is not None and fold_row is not None
    assert told_row.status == fold_row.status
