"""The grace and the correction (ADR-0083): a claimer that finds a call half done waits a
bounded grace for its result when the call's worker is known alive, settles at once when
it is dead, and tells the model of a result that comes after the call was settled.

Real `noeta worker` processes held at named points by `pause` failpoints (SIGSTOP of
themselves) and let go with SIGCONT: which worker runs when is decided by the test."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic, Reply

from .conftest import (
    WorkerProcess,
    add_task,
    lapse_the_lease,
    log_types,
    status_of,
    until,
    workspace_of,
)
from .test_late_results import (
    EFFECT,
    FROZEN_AFTER_TOOL,
    LONG_LEASE,
    kept,
    noeta_show,
    t_runs_its_tool_and_freezes,
)


def bash(call_id: str, command: str, **more: Any) -> dict[str, Any]:
    return {"id": call_id, "name": "Bash", "input": {"command": command, **more}}


async def log_of(store: Store, task_id: str) -> list[dict[str, Any]]:
    return [{"type": e.type, **cast(dict[str, Any], e.data)} for e in await store.read_log(task_id)]


async def busy_elsewhere_then_frozen_after_its_tool(
    store: Store, url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> tuple[WorkerProcess, Path]:
    """A worker that holds a live claim on task "other" (it wrote under it: its Bash call
    runs on), then runs task "t"'s Bash call (one side effect) and freezes before
    recording it, t's lease lapsed meanwhile."""
    long_call = bash("o1", "sleep 590", timeout_seconds=595)
    await add_task(store, tmp_path, "other", {"tool_calls": [long_call]}, {"text": "done"})
    late = workers(url, "late", lease=LONG_LEASE, failpoints=FROZEN_AFTER_TOOL)

    async def other_running() -> bool:
        return "ToolStarted" in await log_types(store, "other")

    await until(other_running, "the worker runs the other task's call")
    return late, await t_runs_its_tool_and_freezes(store, url, tmp_path, late)


async def test_a_claimer_waits_for_the_result_of_a_worker_known_alive(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    late, effect = await busy_elsewhere_then_frozen_after_its_tool(
        store, postgres_url, tmp_path, workers
    )
    # The heir takes t over; its worker lives on (its claim on "other" is live, written
    # under): the heir waits, frozen by the test inside its grace.
    heir = workers(postgres_url, "heir", lease=LONG_LEASE, failpoints="tool.grace_wait=pause")
    await until(heir.paused, "the heir waits out its grace for c1's result")
    assert (await log_types(store, "t"))[-1] == "ToolStarted"  # nothing settled yet
    late.signal(signal.SIGCONT)  # its append is refused: it keeps its result instead
    await until(lambda: kept(store), "the thawed worker keeps its result beside the log")
    heir.signal(signal.SIGCONT)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the heir records the kept result and finishes t")
    (finished,) = [e for e in await log_of(store, "t") if e["type"] == "ToolFinished"]
    assert (finished["recovery"], finished["from_epoch"]) == ("late", 1)
    assert finished["content"].startswith("the-real-result") and not finished["is_error"]
    assert effect.read_text() == "once\n"  # handed over, never run again
    assert "waiting up to" in heir.log()


async def test_a_claimer_settles_at_once_when_the_calls_worker_is_dead(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    late, effect = await busy_elsewhere_then_frozen_after_its_tool(
        store, postgres_url, tmp_path, workers
    )
    late.signal(signal.SIGKILL)
    assert await late.exit_code() == -signal.SIGKILL
    assert await lapse_the_lease(postgres_url, "other") == 1  # a dead worker's leases all lapse
    heir = workers(postgres_url, "heir", lease=LONG_LEASE, failpoints="tool.grace_wait=pause")

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the heir settles c1 as outcome unknown and finishes t")
    assert not await heir.paused()  # never entered the grace: the worker was dead
    (finished,) = [e for e in await log_of(store, "t") if e["type"] == "ToolFinished"]
    assert (finished["recovery"], finished["content"]) == ("unknown", OUTCOME_UNKNOWN)
    assert "waiting up to" not in heir.log()
    assert effect.read_text() == "once\n"


async def test_a_result_that_comes_after_the_settle_is_told_to_the_model(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    first = ToolCall("c1", "Bash", {"command": EFFECT})
    second = ToolCall("c2", "Bash", {"command": "echo second"})
    script = (Reply(tool_calls=(first,)), Reply(tool_calls=(second,)), Reply(text="all done"))
    with FakeAnthropic() as provider:
        provider.script(*script)
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": provider.base_url}
        created = events.TaskCreated(model="anthropic:fake", prompt="go", tools=("Bash",))
        await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
        # The worker holds no other claim: it is not known alive, the heir does not wait.
        late = workers(
            postgres_url,
            "late",
            lease=LONG_LEASE,
            env=env,
            failpoints="tool.before_finished=pause",
        )
        await until(late.paused, "c1 returns and its worker freezes before recording it")
        assert await lapse_the_lease(postgres_url, "t") == 1
        # The heir settles c1 "outcome unknown", asks the model, and freezes in c2.
        heir = workers(
            postgres_url, "heir", lease=LONG_LEASE, env=env, failpoints="tool.after_started=pause"
        )
        await until(heir.paused, "the heir settles c1 and starts c2")
        unknown = [e for e in await log_of(store, "t") if e["type"] == "ToolFinished"]
        assert [(e["call_id"], e["recovery"]) for e in unknown] == [("c1", "unknown")]
        late.signal(signal.SIGCONT)
        await until(lambda: kept(store), "the thawed worker keeps c1's result beside the log")
        heir.signal(signal.SIGCONT)

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the heir corrects c1 and finishes t")
        requests = [json.loads(body) for body in (r.body for r in provider.requests)]
    (corrected,) = [e for e in await log_of(store, "t") if e["type"] == "ToolResultCorrected"]
    assert (corrected["call_id"], corrected["from_epoch"]) == ("c1", 1)
    assert corrected["content"].startswith("the-real-result") and not corrected["is_error"]
    # Never silent: the unknown stays in the log, and the next request says what it was.
    assert len(requests) == 3
    told = json.dumps(requests[2]["messages"][-1])
    assert "c1" in told and "the-real-result" in told and "outcome unknown" in told
    assert "the-real-result" not in json.dumps(requests[1]["messages"][-1])  # the unknown
    assert (workspace_of(tmp_path, "t") / "effect").read_text() == "once\n"
    assert "c1  result from epoch 1 (late): " in (shown := noeta_show(postgres_url))
    assert "recorded as a correction at seq" in shown
