"""A tool's result that comes back after its claim was gone is handed over, not thrown
away (ADR-040): real `noeta worker` processes, held at named points by `pause`
failpoints (SIGSTOP of themselves) and let go with SIGCONT, so which worker runs when is
decided by the test, never by timing."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from noeta.core.ports.store import Store
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from noeta.testing.command_line import run_in_process

from .conftest import (
    WorkerProcess,
    add_task,
    lapse_the_lease,
    log_types,
    status_of,
    until,
    workspace_of,
)

# Longer than a test runs: no lease lapses by itself while a worker makes its way to its
# failpoint on a loaded machine; the test lapses the frozen worker's (lapse_the_lease).
LONG_LEASE = 600
FROZEN_AFTER_TOOL = "tool.before_finished=pause"
EFFECT = "echo once >> effect; echo the-real-result"  # one side effect, then the result


async def frozen_after_its_tool(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> tuple[WorkerProcess, Path]:
    """A worker that ran a Bash call (one side effect) and froze before recording it, its
    lease lapsed meanwhile: the task is anyone's to claim."""
    late = workers(postgres_url, "late", lease=LONG_LEASE, failpoints=FROZEN_AFTER_TOOL)
    return late, await t_runs_its_tool_and_freezes(store, postgres_url, tmp_path, late)


async def t_runs_its_tool_and_freezes(
    store: Store, postgres_url: str, tmp_path: Path, late: WorkerProcess
) -> Path:
    """Task "t" runs its Bash call on `late` (started with FROZEN_AFTER_TOOL), which
    freezes before recording it; t's lease is lapsed. Returns the effect's file."""
    call = {"id": "c1", "name": "Bash", "input": {"command": EFFECT}}
    await add_task(store, tmp_path, "t", {"tool_calls": [call]}, {"text": "done"})
    await until(late.paused, "t's tool returns and its worker freezes before recording it")
    effect = workspace_of(tmp_path, "t") / "effect"
    assert effect.read_text() == "once\n"  # the call took effect
    assert await lapse_the_lease(postgres_url, "t") == 1
    return effect


async def kept(store: Store, task_id: str = "t") -> bool:
    return bool(await store.late_results(task_id))


async def test_a_result_that_comes_too_late_is_handed_to_the_next_claimer(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    late, effect = await frozen_after_its_tool(store, postgres_url, tmp_path, workers)
    # The heir claims the task the frozen worker's lapsed lease left, and freezes before
    # loading it.
    failpoint = "claim.after_commit=pause@1"
    heir = workers(postgres_url, "heir", lease=LONG_LEASE, failpoints=failpoint)
    await until(heir.paused, "the heir takes the task over and freezes")
    assert (await store.get_task("t")).owner_epoch == 2  # type: ignore[union-attr]
    late.signal(signal.SIGCONT)  # its append is refused: the claim is the heir's now

    async def kept_by_the_frozen_worker() -> bool:
        return await kept(store) and "kept for the next claimer" in late.log()

    await until(kept_by_the_frozen_worker, "the woken worker keeps its result beside the log")
    assert (await log_types(store, "t"))[-1] == "ToolStarted"  # its append was refused
    heir.signal(signal.SIGCONT)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the heir records the result and finishes the task")
    finished = await finished_calls(store)
    assert len(finished) == 1
    assert finished[0]["recovery"] == "late" and finished[0]["from_epoch"] == 1
    assert finished[0]["is_error"] is False
    assert finished[0]["content"].startswith("the-real-result")
    assert (await log_types(store, "t")).count("ToolStarted") == 1
    assert effect.read_text() == "once\n"  # handed over, never run again
    shown = noeta_show(postgres_url)
    assert "c1  result from epoch 1 (late)" in shown and "recorded at seq" in shown


async def test_a_result_that_comes_after_the_call_was_settled_is_kept_for_the_operator(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    late, effect = await frozen_after_its_tool(store, postgres_url, tmp_path, workers)
    workers(postgres_url, "heir", lease=LONG_LEASE)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the heir settles the call as outcome unknown and finishes")
    settled, length = await finished_calls(store), len(await store.read_log("t"))
    late.signal(signal.SIGCONT)
    await until(lambda: kept(store), "the woken worker keeps its result beside the log")
    finished = await finished_calls(store)
    assert (finished, len(await store.read_log("t"))) == (settled, length)  # ignored by the task
    assert len(finished) == 1 and finished[0]["recovery"] == "unknown"
    assert finished[0]["content"] == OUTCOME_UNKNOWN
    (result,) = await store.late_results("t")
    assert (result.call_id, result.is_error) == ("c1", False)
    assert result.content.startswith("the-real-result")
    assert (result.epoch, result.worker) == (1, "late")
    assert effect.read_text() == "once\n"
    # The operator sees what the call really did, and that the task did not use it.
    shown = json.loads(noeta_show(postgres_url, "--json"))
    (entry,) = shown["late_results"]
    assert entry["content"] == result.content and entry["epoch"] == 1
    assert entry["fate"].startswith("not used: the call was settled at seq")
    assert "(unknown)" in entry["fate"]
    assert "not used: the call was settled" in noeta_show(postgres_url)


def noeta_show(url: str, *options: str) -> str:
    result = run_in_process(["show", "t", "--store", url, *options], os.environ)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def finished_calls(store: Store) -> list[dict[str, Any]]:
    """The data of the task's ToolFinished events."""
    return [
        cast(dict[str, Any], e.data) for e in await store.read_log("t") if e.type == "ToolFinished"
    ]
