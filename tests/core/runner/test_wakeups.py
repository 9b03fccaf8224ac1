"""ScheduleWakeup through the runner, on sqlite and PostgreSQL: the wake-up is recorded
with the call's result on the store's clock, the task waits claimable at the due time,
and once due the next claim opens exactly one turn with the prompt."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

from noeta.backends.models.registry import ProviderRegistry
from noeta.core.ports.store import Claim, Store
from noeta.core.rules.wakeups import MAX_WAKEUPS
from noeta.core.runner.task import TaskRunner
from noeta.plugins.core import ScheduleWakeup
from tests.core.runner.test_runner import LEASE, create, run_once, script, store, types

__all__ = ["store"]  # the fixture


def wake(call_id: str, **input: object) -> dict[str, object]:
    return {"tool_calls": [{"id": call_id, "name": "ScheduleWakeup", "input": input}]}


def runner(store: Store) -> TaskRunner:
    return TaskRunner(store, ProviderRegistry(), {"ScheduleWakeup": ScheduleWakeup()})


async def claim_when_due(store: Store, task_id: str) -> Claim:
    """Claim the task as soon as the store lets anyone: the condition, polled."""
    async with asyncio.timeout(10):
        while True:
            claim = await store.claim_task("worker-2", task_id, LEASE)
            if claim is not None:
                return claim
            await asyncio.sleep(0.05)


async def test_a_one_shot_task_waits_for_its_wakeup_then_runs_one_turn_and_finishes(
    store: Store, tmp_path: Path
) -> None:
    model = script(
        tmp_path,
        wake("w1", prompt="is the deploy done?", delay_seconds=1),
        {"text": "I will check back."},
        {"text": "Deployed."},
    )
    await create(store, "t", model, prompt="deploy, then check", tools=("ScheduleWakeup",))
    before = await store.clock()
    first = await run_once(runner(store), store, "t")
    assert first.outcome == "waiting" and first.state.finished == ""
    (wakeup_id, due_text, prompt) = first.state.wakeups[0]
    due = datetime.fromisoformat(due_text)
    assert (wakeup_id, prompt) == ("w1", "is the deploy done?")
    assert before + timedelta(seconds=1) <= due <= await store.clock() + timedelta(seconds=1)
    record = await store.get_task("t")
    assert record is not None and record.status.value == "waiting" and record.ready_at == due
    # Not before its time: nobody can claim it yet.
    assert await store.claim_task("worker-2", "t", LEASE) is None or await store.clock() >= due

    result = await runner(store).run(await claim_when_due(store, "t"))
    assert result.outcome == "finished" and result.state.last_answer == "Deployed."
    log = await store.read_log("t")
    assert types(log).count("WokenUp") == 1 and types(log)[-1] == "TaskFinished"
    woken_turn = next(e for e in log if e.type == "WokenUp").seq
    assert types(log)[woken_turn] == "ModelCalled"  # the prompt opened a turn at once


async def test_a_wakeup_at_a_past_time_is_due_at_once(store: Store, tmp_path: Path) -> None:
    model = script(
        tmp_path,
        wake("w1", prompt="again", at="2000-01-01T00:00:00+00:00"),
        {"text": "scheduled"},
        {"text": "woken"},
    )
    await create(store, "t", model, prompt="go", tools=("ScheduleWakeup",))
    result = await run_once(runner(store), store, "t")
    assert result.state.finished == "done" and result.state.last_answer == "woken"
    assert types(await store.read_log("t")).count("WokenUp") == 1


async def test_bad_wakeup_requests_are_told_to_the_model_and_schedule_nothing(
    store: Store, tmp_path: Path
) -> None:
    bad = [
        {"prompt": "p"},  # neither
        {"prompt": "p", "delay_seconds": 5, "at": "2030-01-01T00:00:00+00:00"},  # both
        {"prompt": "p", "at": "2030-01-01T09:00:00"},  # no offset
        {"prompt": "p", "at": "tomorrow"},
        {"prompt": "p", "delay_seconds": -1},
        {"prompt": "  ", "delay_seconds": 5},
    ]
    replies = [wake(f"b{i}", **input) for i, input in enumerate(bad)]
    model = script(tmp_path, *replies, {"text": "gave up"})
    await create(store, "t", model, prompt="go", tools=("ScheduleWakeup",))
    result = await run_once(runner(store), store, "t")
    assert result.state.finished == "done" and result.state.wakeups == ()
    finished = [e.data for e in await store.read_log("t") if e.type == "ToolFinished"]
    assert [f["is_error"] for f in finished] == [True] * len(bad)  # type: ignore[index]
    reasons = [str(f["content"]) for f in finished]  # type: ignore[index]
    assert "exactly one of" in reasons[0] and "exactly one of" in reasons[1]
    assert "UTC offset" in reasons[2] and "ISO 8601" in reasons[3]


async def test_pending_wakeups_are_capped(store: Store, tmp_path: Path) -> None:
    many = [wake(f"w{i}", prompt="later", delay_seconds=3600) for i in range(MAX_WAKEUPS + 1)]
    model = script(tmp_path, *many, {"text": "ok"})
    await create(store, "t", model, prompt="go", tools=("ScheduleWakeup",))
    result = await run_once(runner(store), store, "t")
    assert result.outcome == "waiting" and len(result.state.wakeups) == MAX_WAKEUPS
    last = [e.data for e in await store.read_log("t") if e.type == "ToolFinished"][-1]
    assert last["is_error"] and "limit" in str(last["content"])  # type: ignore[index]
    record = await store.get_task("t")
    assert record is not None
    assert record.ready_at == datetime.fromisoformat(result.state.wakeups[0][1])
